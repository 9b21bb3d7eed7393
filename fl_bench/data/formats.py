"""Readers for the on-disk formats of the image datasets: CIFAR python pickles and IDX (MNIST).

Semantics follow torchvision's readers (``torchvision.datasets.CIFAR10/100`` and
``torchvision.datasets.mnist.read_sn3_pascalvincent_tensor``), but images stay NCHW uint8 as the
batches store them (torchvision transposes CIFAR to HWC for PIL), and nothing is downloaded here:
a missing file raises :class:`~fl_bench.errors.DataMissingError` naming the path.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np

from fl_bench.data.federated import Examples
from fl_bench.errors import DataMissingError

__all__ = ["read_cifar", "read_idx", "read_mnist", "IDX_DTYPES", "MNIST_FILES"]

_PREPARE_HINT = "prepare the dataset with `python -m fl_bench.data prepare <dataset>`"

# IDX type codes (third byte of the magic number) -> big-endian numpy dtype. Same table as
# torchvision's SN3_PASCALVINCENT_TYPEMAP and the format description on Yann LeCun's MNIST page.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

_CIFAR = {
    # variant: (folder, train files, test files, fine-label key, coarse-label key)
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], "labels", None),
    "cifar100": ("cifar-100-python", ["train"], ["test"], "fine_labels", "coarse_labels"),
}


def _missing(path: Path, what: str) -> DataMissingError:
    return DataMissingError(f"{what} {path} is missing: {_PREPARE_HINT}")


# ----------------------------------------------------------------------------- CIFAR
def _load_cifar_batch(path: Path) -> dict[str, object]:
    """One pickled CIFAR batch as a dict with str keys.

    The official batches are Python 2 pickles; like torchvision we load them with
    ``encoding="latin1"`` (str keys). Batches re-pickled under Python 3 with bytes keys
    (b"data", b"labels", ...) are accepted too: keys are decoded to str either way.
    """
    if not path.is_file():
        raise _missing(path, "CIFAR batch")
    with open(path, "rb") as f:
        try:
            entry = pickle.load(f, encoding="latin1")
        except Exception as e:  # noqa: BLE001 - any unpickling failure means a corrupt file
            raise ValueError(f"{path}: not a CIFAR python batch ({type(e).__name__}: {e})") from None
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: not a CIFAR python batch (unpickled a {type(entry).__name__}, expected a dict)")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in entry.items()}


def _cifar_split(folder: Path, files: list[str], label_key: str, coarse_key: str | None) -> Examples:
    xs, ys, coarse = [], [], []
    for name in files:
        path = folder / name
        entry = _load_cifar_batch(path)
        for key in ("data", label_key) + ((coarse_key,) if coarse_key else ()):
            if key not in entry:
                raise ValueError(f"{path}: missing key {key!r} (has {sorted(entry)})")
        data = np.asarray(entry["data"])
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise ValueError(f"{path}: 'data' must be uint8 [N, 3072], got {data.dtype} {list(data.shape)}")
        labels = np.asarray(entry[label_key], dtype=np.int64)
        if labels.shape != (len(data),):
            raise ValueError(f"{path}: {label_key!r} has {labels.size} entries for {len(data)} images")
        xs.append(data.reshape(-1, 3, 32, 32))  # rows are 1024 R, then 1024 G, then 1024 B, row-major
        ys.append(labels)
        if coarse_key:
            c = np.asarray(entry[coarse_key], dtype=np.int64)
            if c.shape != (len(data),):
                raise ValueError(f"{path}: {coarse_key!r} has {c.size} entries for {len(data)} images")
            coarse.append(c)
    return Examples(
        x=np.ascontiguousarray(np.concatenate(xs)),
        y=np.concatenate(ys),
        coarse=np.concatenate(coarse) if coarse_key else None,
    )


def read_cifar(directory: Path, variant: str) -> tuple[Examples, Examples]:
    """CIFAR-10/100 python batches under ``directory`` -> (train, test).

    cifar10: ``directory/cifar-10-batches-py/data_batch_1..5`` (train, in that order) and
    ``test_batch``; cifar100: ``directory/cifar-100-python/train`` and ``test``, whose fine labels
    become ``y`` and coarse labels ``coarse``. ``x`` is uint8 [N, 3, 32, 32], ``y`` int64.
    """
    if variant not in _CIFAR:
        raise ValueError(f"CIFAR variant {variant!r} is not known: choose one of {', '.join(_CIFAR)}")
    folder_name, train_files, test_files, label_key, coarse_key = _CIFAR[variant]
    folder = Path(directory) / folder_name
    # Check every file before reading any, so the error names the first missing one cheaply.
    for name in train_files + test_files:
        if not (folder / name).is_file():
            raise _missing(folder / name, f"{variant} file")
    return (
        _cifar_split(folder, train_files, label_key, coarse_key),
        _cifar_split(folder, test_files, label_key, coarse_key),
    )


# ----------------------------------------------------------------------------- IDX / MNIST
def read_idx(path: Path) -> np.ndarray:
    """An IDX file (plain, or gzip-compressed: detected from its content, not its name).

    Magic number: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64) and the rank; then one big-endian uint32 per dimension; then the
    big-endian data. Returns a native-byte-order array of that shape.
    """
    path = Path(path)
    if not path.is_file():
        raise _missing(path, "IDX file")
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":  # gzip magic
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise ValueError(f"{path}: corrupt gzip data ({e})") from None
    if len(raw) < 4:
        raise ValueError(f"{path}: too short for an IDX header ({len(raw)} bytes)")
    zero, type_code, ndim = int.from_bytes(raw[0:2], "big"), raw[2], raw[3]
    if zero != 0 or type_code not in IDX_DTYPES or ndim < 1:
        raise ValueError(
            f"{path}: bad IDX magic number 0x{raw[:4].hex()} (expected 0x0000TTNN with type TT in "
            f"{', '.join(f'{t:02x}' for t in IDX_DTYPES)} and rank NN >= 1)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = IDX_DTYPES[type_code]
    count = int(np.prod(shape, dtype=np.int64))
    expected = header + count * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(f"{path}: IDX shape {list(shape)} needs {expected} bytes, file has {len(raw)}")
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=True)  # native order, writable, owns its memory


def _find_idx(directory: Path, stem: str) -> Path:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise DataMissingError(f"MNIST-format file {directory / stem} (or {stem}.gz) is missing: {_PREPARE_HINT}")


def _mnist_split(directory: Path, images_stem: str, labels_stem: str) -> Examples:
    images_path, labels_path = _find_idx(directory, images_stem), _find_idx(directory, labels_stem)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(f"{images_path}: expected uint8 images [N, 28, 28], got {images.dtype} {list(images.shape)}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise ValueError(f"{labels_path}: expected {len(images)} labels, got shape {list(labels.shape)}")
    return Examples(x=images[:, None, :, :], y=labels.astype(np.int64))


def read_mnist(directory: Path) -> tuple[Examples, Examples]:
    """MNIST or FashionMNIST (same file names) -> (train, test); x uint8 [N, 1, 28, 28], y int64.

    Each of train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
    t10k-labels-idx1-ubyte may be plain or ``.gz`` (the plain file wins if both exist).
    """
    directory = Path(directory)
    return tuple(_mnist_split(directory, *MNIST_FILES[split]) for split in ("train", "test"))  # type: ignore[return-value]
