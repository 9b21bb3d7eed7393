"""A prepared cache is checked when it opens: a damaged one fails with one line naming the file and
the prepare command that rebuilds it, instead of training on garbage or raising a traceback."""

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fl_bench.data import build_dataset, cache
from fl_bench.data.cache import load_prepared, save_prepared
from fl_bench.data.federated import Examples
from fl_bench.data.sources import cache_dir, prepare, prepare_command
from fl_bench.errors import DataMissingError
from tests.conftest import compose_run_config

RUN = ("dataset=mnist1d", "dataset.num_samples=100", "partition=iid", "partition.num_clients=4")  # 80 train, 20 test


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A small cache written by the real prepare, once for the module; tests damage copies of it."""
    root = tmp_path_factory.mktemp("data")
    cfg = compose_run_config(*RUN, f"data_root={root}")
    prepare(cfg.dataset, log=lambda _: None)
    return cfg


@pytest.fixture
def copy(pristine, tmp_path):
    """A private copy of the pristine cache, at the same place under its own data root."""
    original = cache_dir(pristine.dataset)
    directory = tmp_path / original.relative_to(pristine.dataset.root)
    shutil.copytree(original, directory)
    return directory


def load(directory, pristine):
    return load_prepared(directory, 10, prepare_command(pristine.dataset))


def check_error(error, file, *words):
    message = str(error.value)
    assert "\n" not in message and str(file) in message, message
    assert "python -m fl_bench.data prepare mnist1d" in message, message
    for word in words:
        assert word in message, message


def test_a_prepared_cache_has_a_manifest_and_opens_without_hashing(pristine, monkeypatch):
    directory = cache_dir(pristine.dataset)
    manifest = json.loads((directory / "meta.json").read_text())["manifest"]
    assert set(manifest) == {"train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy"}
    assert manifest["train_x.npy"]["shape"] == [80, 40] and manifest["train_y.npy"]["dtype"] == "<i8"
    assert manifest["test_y.npy"]["bytes"] == (directory / "test_y.npy").stat().st_size
    assert len(manifest["train_x.npy"]["blake2b"]) == 32

    def no_hashing(path):
        raise AssertionError(f"hashed {path}: prepare's stamp should have vouched for it")

    monkeypatch.setattr(cache, "_checksum", no_hashing)
    data = build_dataset(pristine.dataset, pristine.partition)  # through sources.load_real
    assert len(data.y) == 80 and data.num_classes == 10
    assert "manifest" not in load(directory, pristine)[2]  # the run sees the dataset's meta only


@pytest.mark.slow
def test_out_of_range_labels_fail_the_run_with_one_line(pristine, tmp_path):
    root = tmp_path / "data"
    directory = root / cache_dir(pristine.dataset).relative_to(pristine.dataset.root)
    train, test, meta, _ = load_prepared(cache_dir(pristine.dataset))
    # A consistent manifest over wrong labels: only the label range check can catch it.
    save_prepared(directory, Examples(train.x, np.arange(80) % 10 + 10), test, meta)
    result = subprocess.run(
        [sys.executable, "-m", "fl_bench", *RUN, f"data_root={root}", "progress=false", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "offline"}, timeout=300,
    )
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fl_bench: error: "), result.stderr
    assert str(directory / "train_y.npy") in lines[0] and "labels 10..19 outside [0, 10)" in lines[0]
    assert f"python -m fl_bench.data prepare mnist1d data_root={root}" in lines[0]


def test_same_shape_content_swap_fails_its_checksum(copy, pristine):
    load(copy, pristine)  # verified once: the stamp now vouches for every file
    path = copy / "train_x.npy"
    before = path.stat()
    np.save(path, np.zeros((80, 40), np.float32))  # same shape, dtype and byte size
    assert path.stat().st_size == before.st_size
    # A write within the filesystem's timestamp tick of the check would go unseen; a real swap comes later.
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    with pytest.raises(DataMissingError) as error:
        load(copy, pristine)
    check_error(error, path, "checksum")


@pytest.mark.parametrize("text, problem", [("{not json", "is not valid JSON"), ('{"train_examples": 80}', "lacks the key 'source'")])
def test_garbage_meta_json_names_the_file(copy, pristine, text, problem):
    (copy / "meta.json").write_text(text)
    with pytest.raises(DataMissingError) as error:
        load(copy, pristine)
    check_error(error, copy / "meta.json", problem)


def test_pickled_npy_is_refused_not_unpickled(copy, pristine):
    np.save(copy / "train_y.npy", np.array([{"label": 1}] * 80, dtype=object), allow_pickle=True)
    with pytest.raises(DataMissingError) as error:
        load(copy, pristine)
    check_error(error, copy / "train_y.npy", "pickled")


def test_truncated_npy_names_the_file(copy, pristine):
    path = copy / "train_x.npy"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataMissingError) as error:
        load(copy, pristine)
    check_error(error, path, "cut short")


def test_old_cache_without_manifest_warns_and_still_checks_shapes_and_dtypes(copy, pristine, caplog):
    meta = json.loads((copy / "meta.json").read_text())
    del meta["manifest"]
    (copy / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="fl_bench.data.cache"):
        train, _, _, _ = load(copy, pristine)
    assert len(train) == 80
    [warning] = caplog.messages
    assert "no manifest" in warning and "python -m fl_bench.data prepare mnist1d" in warning and "\n" not in warning

    np.save(copy / "train_y.npy", np.zeros(77, np.int64))
    with pytest.raises(DataMissingError) as error:
        load(copy, pristine)
    check_error(error, copy / "train_y.npy", "has shape (77,), train_x.npy has 80 rows")

    np.save(copy / "train_y.npy", np.zeros(80, np.float64))
    with pytest.raises(DataMissingError) as error:
        load(copy, pristine)
    check_error(error, copy / "train_y.npy", "float64", "not integers")
