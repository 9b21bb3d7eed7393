"""Real datasets end to end: prepare from real-format files -> cache -> load -> partition, the batch
transforms, and the one-line errors for missing data."""

import pickle
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from fl_bench.cli import CONFIG_DIR
from fl_bench.data import build_dataset
from fl_bench.data.cache import load_prepared, save_prepared
from fl_bench.data.federated import Examples
from fl_bench.data.sources import cache_dir, holdout, prepare
from fl_bench.data.transforms import ImageTransform
from fl_bench.errors import DataMissingError


def config(*overrides):
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=list(overrides)))


def write_cifar10(raw, per_batch=20, seed=0):
    """Tiny CIFAR-10 python archive contents, real key names."""
    rng = np.random.default_rng(seed)
    folder = raw / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8), b"labels": list(rng.integers(0, 10, per_batch))}
        (folder / name).write_bytes(pickle.dumps(batch))
        batches[name] = batch
    return batches


# ----------------------------------------------------------------------------- transforms
def test_image_transform_scales_normalises_and_centre_crops():
    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.uint8).view(2, 1, 4, 4)
    t = ImageTransform((0.5,), (0.25,), crop_size=2)
    out = t(x, train=False)
    assert out.shape == (2, 1, 2, 2)
    expected = (x[:, :, 1:3, 1:3].float() / 255 - 0.5) / 0.25
    assert torch.allclose(out, expected)
    assert t.output_shape((1, 4, 4)) == (1, 2, 2)


def test_random_crop_takes_an_independent_window_per_image_and_flip_mirrors():
    x = torch.arange(64 * 3 * 6 * 6, dtype=torch.float32).view(64, 3, 6, 6)
    crop = ImageTransform((0.0,) * 3, (1.0,) * 3, crop_size=4)
    out = crop(x, train=True, generator=torch.Generator().manual_seed(0))
    offsets = set()
    for img, src in zip(out, x):
        found = [(i, j) for i in range(3) for j in range(3) if torch.equal(img, src[:, i : i + 4, j : j + 4])]
        assert len(found) == 1
        offsets.add(found[0])
    assert len(offsets) > 3  # not one offset for the whole batch
    flip = ImageTransform((0.0,) * 3, (1.0,) * 3, random_flip=True)
    out = flip(x, train=True, generator=torch.Generator().manual_seed(0))
    flipped = [torch.equal(o, s.flip(-1)) for o, s in zip(out, x)]
    assert all(f or torch.equal(o, s) for f, o, s in zip(flipped, out, x)) and 10 < sum(flipped) < 54
    assert torch.equal(flip(x, train=False), x)  # no augmentation in evaluation


# ----------------------------------------------------------------------------- cache
def test_cache_round_trip_is_memory_mapped(tmp_path):
    train = Examples(np.arange(12, dtype=np.int32).reshape(6, 2), np.array([0, 1, 0, 1, 1, 0]), user=np.array([0, 0, 1, 1, 2, 2]))
    test = Examples(np.ones((2, 2), np.int32), np.array([1, 0]))
    save_prepared(tmp_path, train, test, {"source": "x"}, vocab=["<pad>", "<unk>", "hello"])
    tr, te, meta, vocab = load_prepared(tmp_path)
    assert isinstance(tr.x, np.memmap) and np.array_equal(tr.x, train.x) and np.array_equal(tr.user, train.user)
    assert te.user is None and np.array_equal(te.y, test.y)
    assert meta == {"source": "x"} and vocab == ["<pad>", "<unk>", "hello"]


def test_holdout_is_stratified_and_disjoint():
    y = np.repeat(np.arange(4), 10)
    train, test = holdout(Examples(np.arange(40)[:, None], y), Examples(np.zeros((0, 1), int), y[:0]), 0.2, seed=0)
    assert np.bincount(test.y).tolist() == [2, 2, 2, 2]
    assert sorted(train.x[:, 0].tolist() + test.x[:, 0].tolist()) == list(range(40))


# ----------------------------------------------------------------------------- prepare + load
def test_prepare_cifar10_from_the_python_archive_then_load_partitioned(tmp_path):
    batches = write_cifar10(tmp_path / "raw" / "cifar10")
    cfg = config("dataset=cifar10", f"data_root={tmp_path}", "partition.num_clients=10")
    prepare(cfg.dataset, log=lambda _: None)
    assert (cache_dir(cfg.dataset) / "meta.json").exists()
    data = build_dataset(cfg.dataset, cfg.partition)
    assert data.num_clients == 10 and data.num_classes == 10 and len(data.y) == 100
    assert data.x.dtype == torch.uint8 and data.input_shape == (3, 32, 32) and data.transform is not None
    first = batches["test_batch"][b"data"][0].reshape(3, 32, 32)
    assert np.array_equal(data.x_val[0].numpy(), first)  # CHW layout kept
    assert sorted(data.y.tolist()) == sorted(sum((batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), []))


def test_missing_cache_names_the_prepare_command(tmp_path):
    cfg = config("dataset=sent140", f"data_root={tmp_path}")
    with pytest.raises(DataMissingError, match=r"python -m fl_bench.data prepare sent140"):
        build_dataset(cfg.dataset, cfg.partition)


def test_prepare_offline_says_what_to_download_and_where(tmp_path, monkeypatch, capsys):
    from fl_bench.data.__main__ import main

    def offline(*args, **kwargs):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", "cifar10", f"data_root={tmp_path}"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "cifar-10-python.tar.gz" in err and str(tmp_path / "raw" / "cifar10") in err and "by hand" in err


def test_digits_ship_offline_with_every_partitioner():
    for partition, extra in [("two_labels", []), ("iid", []), ("dirichlet", ["partition.num_clients=50"]),
                             ("one_class", ["partition.num_clients=30"]), ("label_groups", [])]:
        cfg = config("dataset=digits", f"partition={partition}", *extra)
        data = build_dataset(cfg.dataset, cfg.partition)
        assert len(data.y) + len(data.y_val) == 1797 and data.input_shape == (1, 8, 8)
        assert len(data.y_val) == pytest.approx(0.2 * 1797, abs=10)
