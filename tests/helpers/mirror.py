"""Downloads without the internet: a data mirror on the loopback interface and small archives in each
source's real format.

:class:`Mirror` is an ``http.server.ThreadingHTTPServer`` on 127.0.0.1 (port 0), in a thread, serving a
directory laid out as ``fl_bench.data.downloads`` maps URLs (``MIRROR/HOST/PATH``). It counts the
requests for each file, and can drop the connection partway through a file. :meth:`Mirror.publish`
puts a file there and makes its SHA-256 the registry's for the real URL (monkeypatched for the test; the
SHA-256 of its content, gunzipped, for a URL in ``CONTENT_REGISTRY``): production's registries keep their
URLs, only the checksums are the fixtures'. pooch's waits between
retries are recorded (``waits``) instead of slept.

The ``data_mirror`` fixture (exposed by tests/conftest.py) is a Mirror for one test.
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import io
import pickle
import socket
import tarfile
import threading
import types
import zipfile
from collections import Counter
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pooch.core
import pytest

from fl_bench.data import downloads


class _Handler(SimpleHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = unquote(urlparse(self.path).path)
        self.server.requests[path] += 1
        cut = self.server.cuts.get(path)
        if cut is not None and cut[1] > 0:  # announce the whole file, send the start, close the connection
            body = (Path(self.directory) / path.lstrip("/")).read_bytes()
            self.server.cuts[path] = (cut[0], cut[1] - 1)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: cut[0]])
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, format, *args) -> None:  # noqa: A002 - no request lines on stderr
        pass


class _Server(ThreadingHTTPServer):
    requests: Counter
    cuts: dict[str, tuple[int, int]]  # path -> (bytes sent, times left)


class Mirror:
    """A mirror directory served on 127.0.0.1; ``url`` is what ``data_mirror`` is set to."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch):
        self.root, self.monkeypatch = root, monkeypatch
        root.mkdir(parents=True, exist_ok=True)
        self.server = _Server(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
        self.server.requests, self.server.cuts = Counter(), {}
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.waits: list[float] = []  # pooch's waits before a retry, recorded instead of slept
        monkeypatch.setattr(pooch.core, "time", types.SimpleNamespace(sleep=self.waits.append))

    def path(self, url: str) -> str:
        """The path a request for ``url``'s file asks this mirror for: ``/HOST/PATH``."""
        return "/" + url.split("://", 1)[1]

    def file(self, url: str) -> Path:
        return self.root / self.path(url).lstrip("/")

    def publish(self, url: str, content: bytes) -> None:
        """``content`` as ``url``'s file on the mirror, its SHA-256 the registry's for this test."""
        self.file(url).parent.mkdir(parents=True, exist_ok=True)
        self.file(url).write_bytes(content)
        pin(self.monkeypatch, url, content)

    def requests(self, url: str) -> int:
        return self.server.requests[self.path(url)]

    def total_requests(self) -> int:
        return sum(self.server.requests.values())

    def drop(self, url: str, after: int, times: int) -> None:
        """The next ``times`` requests for ``url`` get ``after`` bytes of it, then the connection closes."""
        self.server.cuts[self.path(url)] = (after, times)

    def unreachable_url(self) -> str:
        """A loopback URL where nothing listens (a port just released): a connection is refused."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def pin(monkeypatch: pytest.MonkeyPatch, url: str, content: bytes) -> None:
    """``content`` made ``url``'s file for this test: its SHA-256 the registry's, or, for a URL checked by its
    content, the SHA-256 of ``content`` gunzipped."""
    if url in downloads.CONTENT_REGISTRY:
        digest = hashlib.sha256(gzip.decompress(content)).hexdigest()
        monkeypatch.setitem(downloads.CONTENT_REGISTRY, url, f"sha256:{digest}")
    else:
        assert url in downloads.REGISTRY, url  # only the project's real URLs
        monkeypatch.setitem(downloads.REGISTRY, url, "sha256:" + hashlib.sha256(content).hexdigest())


@pytest.fixture
def data_mirror(tmp_path, monkeypatch):
    """A loopback mirror for this test (see :class:`Mirror`)."""
    mirror = Mirror(tmp_path / "mirror", monkeypatch)
    yield mirror
    mirror.close()


# ----------------------------------------------------------------------------- archives in the real formats
SENT140_URL = "http://cs.stanford.edu/people/alecmgo/trainingandtestdata.zip"
SENT140_TRAINING = "training.1600000.processed.noemoticon.csv"
SENT140_TEST = "testdata.manual.2009.06.14.csv"
# (polarity, user, text): three timelines, copied under new names for more users
SENT140_TWEETS = [
    ("4", "alice", "i love this great day"), ("4", "alice", "great fun, love it!"), ("0", "alice", "so sad and bad"),
    ("0", "bob", "bad bad day, i hate it"), ("4", "bob", "love love love"), ("0", "bob", "sad news today"),
    ("4", "carol", "what a great game"), ("0", "carol", "hate the rain, so bad"), ("4", "carol", "i love fun"),
]


def _sent140_csv(rows: list[tuple[str, str, str]]) -> bytes:
    """Sentiment140's CSV: polarity, id, date, query, user, text; every field quoted; latin-1."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    for i, (polarity, user, text) in enumerate(rows):
        writer.writerow([polarity, str(1467810369 + i), "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", user, text])
    return out.getvalue().encode("latin-1")


def sent140_zip(copies: int = 6) -> bytes:
    """trainingandtestdata.zip: the training CSV (the tweets under ``copies`` sets of names) and the
    manual test CSV, as the archive holds them."""
    training = [(p, f"{user}{c}", text) for c in range(copies) for p, user, text in SENT140_TWEETS]
    test = [("4", "dave", "love the café"), ("2", "dave", "a day"), ("0", "alice0", "bad game")]
    return _zip({SENT140_TRAINING: _sent140_csv(training), SENT140_TEST: _sent140_csv(test)})


GLOVE_WORDS = ["the", "i", "love", "great", "day", "bad", "sad", "hate", "fun", "it", "so", "a", "game",
               "rain", "news", "today", "what", "this", "and", "!"]


def glove_zip(dims: tuple[int, ...] = (50, 300)) -> bytes:
    """glove.6B.zip with a glove.6B.<dim>d.txt per dim: "word v1 ... v_dim" lines, most frequent first."""
    rng = np.random.default_rng(0)
    members = {}
    for dim in dims:
        lines = (f"{w} {' '.join(f'{v:.5f}' for v in rng.normal(size=dim))}\n" for w in GLOVE_WORDS)
        members[f"glove.6B.{dim}d.txt"] = "".join(lines).encode()
    return _zip(members)


def mnist_files(host_url: str, train: int = 60, test: int = 10, seed: int = 0) -> dict[str, bytes]:
    """The four gzipped IDX files under ``host_url`` (a URL ending in /): images (n, 28, 28) uint8,
    labels n uint8, with IDX's big-endian header."""
    rng = np.random.default_rng(seed)
    files = {}
    for prefix, n in (("train", train), ("t10k", test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        files[f"{host_url}{prefix}-images-idx3-ubyte.gz"] = gzip.compress(
            bytes([0, 0, 8, 3]) + np.array([n, 28, 28], ">i4").tobytes() + images.tobytes())
        files[f"{host_url}{prefix}-labels-idx1-ubyte.gz"] = gzip.compress(
            bytes([0, 0, 8, 1]) + np.array([n], ">i4").tobytes() + labels.tobytes())
    return files


def cifar10_tarball(per_batch: int = 10, seed: int = 0) -> bytes:
    """cifar-10-python.tar.gz: cifar-10-batches-py/data_batch_1..5 and test_batch, pickled dicts of
    uint8 data [n, 3072] and int labels."""
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                     b"labels": [int(v) for v in rng.integers(0, 10, per_batch)]}
            content = pickle.dumps(batch)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()
