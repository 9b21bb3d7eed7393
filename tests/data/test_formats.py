"""CIFAR pickles and IDX files, written in their real on-disk formats and read back."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fl_bench.data.formats import read_cifar, read_idx, read_mnist
from fl_bench.errors import DataMissingError


# ----------------------------------------------------------------------------- CIFAR
def _cifar_batch(rng: np.random.Generator, n: int, labels: dict[str, list[int]], str_keys: bool) -> dict:
    entry = {
        "batch_label": "training batch 1 of 5",
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        "filenames": [f"img_{i}.png" for i in range(n)],
        **labels,
    }
    if str_keys:  # what the official Python 2 pickles decode to with encoding="latin1"
        return entry
    # The official batches loaded with encoding="bytes" (and re-pickled under Python 3) have bytes keys.
    return {k.encode(): (v.encode() if isinstance(v, str) else v) for k, v in entry.items()}


def _write_pickle(path: Path, obj: dict, protocol: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)


def test_read_cifar10_batches_in_order(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    batches = []
    for i in range(1, 6):
        b = _cifar_batch(rng, 3, {"labels": [i, (i + 1) % 10, (i + 2) % 10]}, str_keys=False)
        _write_pickle(folder / f"data_batch_{i}", b, protocol=4)
        batches.append(b)
    test = _cifar_batch(rng, 2, {"labels": [7, 9]}, str_keys=True)
    _write_pickle(folder / "test_batch", test, protocol=2)  # Python-2-compatible protocol, str keys
    _write_pickle(folder / "batches.meta", {b"label_names": [b"airplane"] * 10}, protocol=2)

    train, test_ex = read_cifar(tmp_path, "cifar10")

    assert train.x.shape == (15, 3, 32, 32) and train.x.dtype == np.uint8
    assert train.y.dtype == np.int64 and train.coarse is None and train.user is None
    assert train.y.tolist() == [1, 2, 3, 2, 3, 4, 3, 4, 5, 4, 5, 6, 5, 6, 7]  # batch 1..5 order
    all_rows = np.concatenate([b[b"data"] for b in batches])
    # A row is 1024 red, 1024 green, 1024 blue values, each a row-major 32x32 plane.
    i, c, r, col = 7, 1, 5, 30
    assert train.x[i, c, r, col] == all_rows[i, c * 1024 + r * 32 + col]
    np.testing.assert_array_equal(train.x[:, 2].reshape(15, -1), all_rows[:, 2048:])
    np.testing.assert_array_equal(test_ex.x.reshape(2, -1), test["data"])
    assert test_ex.y.tolist() == [7, 9]
    assert train.x.flags["C_CONTIGUOUS"]


def test_read_cifar100_fine_and_coarse(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar-100-python"
    tr = _cifar_batch(rng, 4, {"fine_labels": [99, 0, 42, 7], "coarse_labels": [19, 4, 0, 13]}, str_keys=False)
    te = _cifar_batch(rng, 2, {"fine_labels": [5, 6], "coarse_labels": [17, 3]}, str_keys=True)
    _write_pickle(folder / "train", tr, protocol=4)
    _write_pickle(folder / "test", te, protocol=2)

    train, test = read_cifar(tmp_path, "cifar100")

    assert train.y.tolist() == [99, 0, 42, 7] and train.coarse.tolist() == [19, 4, 0, 13]
    assert test.y.tolist() == [5, 6] and test.coarse.tolist() == [17, 3]
    assert train.coarse.dtype == np.int64 and train.x.shape == (4, 3, 32, 32)
    np.testing.assert_array_equal(train.x.reshape(4, -1), tr[b"data"])


def test_read_cifar_missing_file_names_it(tmp_path):
    rng = np.random.default_rng(2)
    folder = tmp_path / "cifar-10-batches-py"
    for i in (1, 2, 4, 5):
        _write_pickle(folder / f"data_batch_{i}", _cifar_batch(rng, 1, {"labels": [0]}, False), 4)
    _write_pickle(folder / "test_batch", _cifar_batch(rng, 1, {"labels": [0]}, False), 4)
    with pytest.raises(DataMissingError, match="data_batch_3"):
        read_cifar(tmp_path, "cifar10")
    with pytest.raises(DataMissingError, match="cifar-100-python"):
        read_cifar(tmp_path, "cifar100")
    with pytest.raises(ValueError, match="variant"):
        read_cifar(tmp_path, "cifar1000")


def test_read_cifar_missing_key_is_a_clear_error(tmp_path):
    folder = tmp_path / "cifar-100-python"
    bad = {b"data": np.zeros((1, 3072), np.uint8), b"fine_labels": [1]}  # no coarse_labels
    _write_pickle(folder / "train", bad, 4)
    _write_pickle(folder / "test", bad, 4)
    with pytest.raises(ValueError, match="coarse_labels"):
        read_cifar(tmp_path, "cifar100")


# ----------------------------------------------------------------------------- IDX / MNIST
def _idx_bytes(arr: np.ndarray, type_code: int) -> bytes:
    header = bytes([0, 0, type_code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def _write_idx(path: Path, arr: np.ndarray, type_code: int, gz: bool) -> Path:
    data = _idx_bytes(arr, type_code)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_idx_magic_numbers_are_real():
    # MNIST's published magic numbers: 2051 (0x00000803) for images, 2049 (0x00000801) for labels.
    images = _idx_bytes(np.zeros((2, 28, 28), np.uint8), 0x08)
    labels = _idx_bytes(np.zeros(2, np.uint8), 0x08)
    assert struct.unpack(">I", images[:4])[0] == 2051 and struct.unpack(">I", labels[:4])[0] == 2049
    assert struct.unpack(">III", images[4:16]) == (2, 28, 28)


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_types_shapes_and_byte_order(tmp_path, gz):
    rng = np.random.default_rng(3)
    u8 = rng.integers(0, 256, (3, 4, 5), dtype=np.uint8)
    i32 = np.array([[1, -2, 70000], [2**31 - 1, -(2**31), 258]], dtype=np.int32)
    f32 = np.array([0.5, -1.25, 3.0e6], dtype=np.float32)
    i16 = np.array([-300, 300], dtype=np.int16)
    for name, arr, code in (("u8", u8, 0x08), ("i32", i32, 0x0C), ("f32", f32, 0x0D), ("i16", i16, 0x0B)):
        path = _write_idx(tmp_path / name, arr, code, gz)
        out = read_idx(path)
        assert out.shape == arr.shape and out.dtype == arr.dtype and out.dtype.isnative
        np.testing.assert_array_equal(out, arr)


def test_read_idx_rejects_bad_files(tmp_path):
    good = _idx_bytes(np.arange(6, dtype=np.uint8).reshape(2, 3), 0x08)
    (tmp_path / "badmagic").write_bytes(b"\x00\x01" + good[2:])
    (tmp_path / "badtype").write_bytes(b"\x00\x00\x0a\x02" + good[4:])
    (tmp_path / "short").write_bytes(good[:-1])
    for name, pattern in (("badmagic", "magic"), ("badtype", "magic"), ("short", "needs 18 bytes")):
        with pytest.raises(ValueError, match=pattern):
            read_idx(tmp_path / name)
    with pytest.raises(DataMissingError, match="nothere"):
        read_idx(tmp_path / "nothere")


def _write_mnist(directory: Path, rng: np.random.Generator, gz: dict[str, bool]) -> dict[str, np.ndarray]:
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": np.array([5, 0, 4, 1, 9], np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": np.array([7, 2], np.uint8),
    }
    for name, arr in arrays.items():
        _write_idx(directory / name, arr, 0x08, gz[name])
    return arrays


def test_read_mnist_plain_and_gz(tmp_path):
    rng = np.random.default_rng(5)
    gz = {"train-images-idx3-ubyte": True, "train-labels-idx1-ubyte": False,
          "t10k-images-idx3-ubyte": False, "t10k-labels-idx1-ubyte": True}
    arrays = _write_mnist(tmp_path, rng, gz)

    train, test = read_mnist(tmp_path)

    assert train.x.shape == (5, 1, 28, 28) and train.x.dtype == np.uint8
    assert test.x.shape == (2, 1, 28, 28)
    assert train.y.dtype == np.int64 and train.y.tolist() == [5, 0, 4, 1, 9] and test.y.tolist() == [7, 2]
    np.testing.assert_array_equal(train.x[:, 0], arrays["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(test.x[:, 0], arrays["t10k-images-idx3-ubyte"])


def test_read_mnist_missing_and_mismatched(tmp_path):
    rng = np.random.default_rng(6)
    arrays = _write_mnist(tmp_path, rng, dict.fromkeys(
        ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"], True))
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataMissingError, match="t10k-labels-idx1-ubyte"):
        read_mnist(tmp_path)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([1, 2, 3], np.uint8), 0x08, gz=False)
    with pytest.raises(ValueError, match="expected 2 labels"):
        read_mnist(tmp_path)
    assert arrays["t10k-images-idx3-ubyte"].shape[0] == 2
