"""Real datasets end to end: prepare from real-format files -> cache -> load -> partition, the batch
transforms, and the one-line errors for missing data."""

import pickle

import numpy as np
import pytest
import torch

from fl_bench.data import build_dataset
from fl_bench.data.cache import load_prepared, save_prepared
from fl_bench.data.federated import Examples
from fl_bench.data.sources import cache_dir, holdout, prepare
from fl_bench.data.transforms import ImageTransform
from fl_bench.errors import DataMissingError
from tests.conftest import compose_run_config


def config(*overrides):
    return compose_run_config(*overrides)


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


def test_a_missing_cache_that_cannot_be_fetched_names_the_prepare_command(tmp_path):
    from fl_bench.data.downloads import download_settings

    cfg = config("dataset=sent140", f"data_root={tmp_path}", f"data_mirror=file://{tmp_path}/empty_mirror")
    with download_settings(cfg.data_mirror, False), pytest.raises(
            DataMissingError, match=r"^dataset 'sent140' is not prepared: cannot download .* `python -m fl_bench.data prepare sent140"):
        build_dataset(cfg.dataset, cfg.partition)


def test_prepare_offline_says_what_to_download_and_where(tmp_path, capsys):
    from fl_bench.data.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", "cifar10", f"data_root={tmp_path}", f"data_mirror=file://{tmp_path}/empty_mirror"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz by hand" in err
    assert str(tmp_path / "raw" / "cifar10" / "cifar-10-python.tar.gz") in err


def test_digits_ship_offline_with_every_partitioner():
    for partition, extra in [("two_labels", []), ("iid", []), ("dirichlet", ["partition.num_clients=50"]),
                             ("one_class", ["partition.num_clients=30"]), ("label_groups", [])]:
        cfg = config("dataset=digits", f"partition={partition}", *extra)
        data = build_dataset(cfg.dataset, cfg.partition)
        assert len(data.y) + len(data.y_val) == 1797 and data.input_shape == (1, 8, 8)
        assert len(data.y_val) == pytest.approx(0.2 * 1797, abs=10)


# ----------------------------------------------------------------------------- runs on real data
def run(tmp_path, *overrides):
    from fl_bench.runs.experiment import run_experiment

    cfg = config("progress=false", "eval_every=250", *overrides)
    return run_experiment(cfg, tmp_path / "run")


def test_fedbuff_learns_digits_out_of_the_box(tmp_path):
    summary = run(tmp_path, "dataset=digits", "max_trips=1500", "concurrency=20", "target_accuracy=0.8")
    assert summary["dataset"] == "digits" and summary["trips_to_target"] is not None


@pytest.mark.slow
def test_groupnorm_cnn_trains_on_uint8_images_through_the_transform(tmp_path):
    summary = run(tmp_path, "dataset=digits", "model=cnn4", "partition=iid", "max_trips=500", "concurrency=10",
                  "algorithm.client_lr=0.05", "target_accuracy=0.3")
    assert summary["trips_to_target"] is not None  # well above chance (0.1)


SENT140_ROWS = [
    ("4", "1", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", "alice", "i love this great day"),
    ("4", "2", "Mon Apr 06 22:19:49 PDT 2009", "NO_QUERY", "alice", "great fun, love it!"),
    ("0", "3", "Mon Apr 06 22:19:53 PDT 2009", "NO_QUERY", "alice", "so sad and bad"),
    ("0", "4", "Mon Apr 06 22:19:57 PDT 2009", "NO_QUERY", "bob", "bad bad day, i hate it"),
    ("4", "5", "Mon Apr 06 22:20:00 PDT 2009", "NO_QUERY", "bob", "love love love"),
    ("0", "6", "Mon Apr 06 22:20:03 PDT 2009", "NO_QUERY", "bob", "sad news today"),
    ("4", "7", "Mon Apr 06 22:20:05 PDT 2009", "NO_QUERY", "carol", "what a great game"),
    ("0", "8", "Mon Apr 06 22:20:09 PDT 2009", "NO_QUERY", "carol", "hate the rain, so bad"),
    ("4", "9", "Mon Apr 06 22:20:12 PDT 2009", "NO_QUERY", "carol", "i love fun"),
]


def write_sent140_csv(raw, copies=6):
    import csv

    raw.mkdir(parents=True)
    with open(raw / "training.1600000.processed.noemoticon.csv", "w", encoding="latin-1", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        for copy in range(copies):  # more users: the same three timelines under new names
            for row in SENT140_ROWS:
                writer.writerow([row[0], f"{copy}{row[1]}", row[2], row[3], f"{row[4]}{copy}", row[5]])


@pytest.mark.slow
def test_sent140_prepare_from_the_raw_csv_then_fedbuff_with_the_paper_lstm(tmp_path):
    write_sent140_csv(tmp_path / "raw" / "sent140")
    from fl_bench.data.__main__ import main

    main(["prepare", "sent140", f"data_root={tmp_path}", "dataset.fraction=1.0"])
    with pytest.raises(DataMissingError, match="model.embedding=random"):  # the paper's GloVe is not there to fetch
        run(tmp_path, "dataset=sent140", f"data_root={tmp_path}", "dataset.fraction=1.0", "max_trips=20",
            f"data_mirror=file://{tmp_path}/empty_mirror")
    summary = run(tmp_path, "dataset=sent140", f"data_root={tmp_path}", "dataset.fraction=1.0", "model.embedding=random",
                  "max_trips=60", "concurrency=5", "eval_every=20", "target_accuracy=1.0")
    assert summary["client_trips"] == 60 and 0 <= summary["final_val_accuracy"] <= 1
    metrics = __import__("pandas").read_csv(tmp_path / "run" / "metrics.csv")
    assert metrics.trips.tolist() == [0, 20, 40, 60] and np.isfinite(metrics.val_loss).all()
    # The paper's frozen GloVe embedding, from a GloVe-format file (4-d vectors to stay tiny).
    glove = tmp_path / "glove.txt"
    glove.write_text("".join(f"{w} {i} 0.5 -0.5 1\n" for i, w in enumerate(["love", "great", "sad", "bad", "day"])))
    summary = run(tmp_path, "dataset=sent140", f"data_root={tmp_path}", "dataset.fraction=1.0", f"model.glove_path={glove}",
                  "model.embed_dim=4", "model.vocab_size=5", "max_trips=20", "concurrency=5", "eval_every=20")
    assert summary["client_trips"] == 20


# ----------------------------------------------------------------------------- every source's prepare path
def leaf_json(tmp_path, source, users, make_x, make_y):
    from fl_bench.data.leaf import LeafData, write_leaf_json

    data = {u: {"x": [make_x(u, i) for i in range(n)], "y": [make_y(u, i) for i in range(n)]} for u, n in users.items()}
    leaf = LeafData(list(users), list(users.values()), data)
    write_leaf_json(leaf, tmp_path / "raw" / source / "all_data" / "all_data_0.json")


def test_femnist_from_leaf_json_to_the_fedgbo_cnn(tmp_path):
    users = {f"f{i:04d}_{i}": 6 + i for i in range(8)}
    leaf_json(tmp_path, "femnist", users, lambda u, i: [((i + k) % 7) / 6 for k in range(784)], lambda u, i: (i * 7) % 62)
    args = [f"data_root={tmp_path}", "dataset.max_users=6"]
    prepare(config("dataset=femnist", *args).dataset, log=lambda _: None)
    cfg = config("dataset=femnist", *args)
    data = build_dataset(cfg.dataset, cfg.partition)
    assert data.num_clients == 6 and data.num_classes == 62 and data.input_shape == (1, 28, 28)
    assert data.x.dtype == torch.uint8 and set(data.x.unique().tolist()) <= {round(k / 6 * 255) for k in range(7)}
    assert cfg.model.name == "cnn_fedgbo"
    assert run(tmp_path, "dataset=femnist", *args, "max_trips=12", "concurrency=3")["client_trips"] == 12


@pytest.mark.slow
def test_shakespeare_from_leaf_json_sequential_split_to_the_char_gru(tmp_path):
    from fl_bench.data.leaf import SHAKESPEARE_ALPHABET

    line = "To be, or not to be: that is the question. " * 20
    users = {"HAMLET": 500, "OPHELIA": 450}  # LEAF leaves a 79-window gap before a user's test windows
    leaf_json(tmp_path, "shakespeare", users, lambda u, i: line[i : i + 80], lambda u, i: line[i + 80])
    args = [f"data_root={tmp_path}", "dataset.origin=leaf_json"]
    prepare(config("dataset=shakespeare", *args).dataset, log=lambda _: None)
    cfg = config("dataset=shakespeare", *args)
    data = build_dataset(cfg.dataset, cfg.partition)
    assert data.num_clients == 2 and data.num_classes == 80 and data.x.shape[1] == 80
    x0, y0 = data.client(0)
    assert "".join(SHAKESPEARE_ALPHABET[int(c)] for c in x0[0]) == line[:80]  # first lines train (sequential)
    assert SHAKESPEARE_ALPHABET[int(y0[0])] == line[80]
    assert run(tmp_path, "dataset=shakespeare", *args, "max_trips=4", "concurrency=2", "algorithm.buffer_size=2")["client_trips"] == 4


def test_celeba_from_raw_files_and_images(tmp_path):
    from PIL import Image

    raw = tmp_path / "raw" / "celeba"
    (raw / "img_align_celeba").mkdir(parents=True)
    names = [f"{i:06d}.jpg" for i in range(1, 13)]
    (raw / "identity_CelebA.txt").write_text("".join(f"{n} {1 + i % 2}\n" for i, n in enumerate(names)))
    attrs = ["5_o_Clock_Shadow", "Smiling"]
    (raw / "list_attr_celeba.txt").write_text(
        f"{len(names)}\n{' '.join(attrs)}\n" + "".join(f"{n} -1 {1 if i % 3 else -1}\n" for i, n in enumerate(names))
    )
    for i, n in enumerate(names):
        Image.fromarray(np.full((218, 178, 3), i * 20, np.uint8)).save(raw / "img_align_celeba" / n)
    args = [f"data_root={tmp_path}"]
    prepare(config("dataset=celeba", *args).dataset, log=lambda _: None)
    cfg = config("dataset=celeba", *args)
    data = build_dataset(cfg.dataset, cfg.partition)
    assert data.num_clients == 2 and data.input_shape == (3, 32, 32) and data.num_classes == 2
    assert len(data.y) + len(data.y_val) == 12 and cfg.model.name == "cnn4"


def test_mnist_idx_and_cifar100_archives(tmp_path, monkeypatch):
    import gzip
    import hashlib

    from fl_bench.data.downloads import REGISTRY

    raw = tmp_path / "raw" / "mnist"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 60), ("t10k", 10)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = np.arange(n, dtype=np.uint8) % 10
        (raw / f"{prefix}-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(bytes([0, 0, 8, 3]) + np.array([n, 28, 28], ">i4").tobytes() + images.tobytes()))
        (raw / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(bytes([0, 0, 8, 1]) + np.array([n], ">i4").tobytes() + labels.tobytes()))
    for path in raw.iterdir():  # files put there by hand are used if the registry's checksums match
        url = f"https://ossci-datasets.s3.amazonaws.com/mnist/{path.name}"
        monkeypatch.setitem(REGISTRY, url, "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest())
    args = [f"data_root={tmp_path}", "partition.num_clients=10"]
    prepare(config("dataset=mnist", *args).dataset, log=lambda _: None)
    cfg = config("dataset=mnist", *args)
    data = build_dataset(cfg.dataset, cfg.partition)
    assert data.num_clients == 10 and len(data.y) == 60 and len(data.y_val) == 10
    assert cfg.model.name == "logreg" and cfg.model.weight_decay == 2e-4  # HFL's L2 1e-4 (logreg_l2.yaml)
    assert all(len(set(data.client(c)[1].tolist())) <= 2 for c in range(10))  # HFL: two labels per device

    folder = tmp_path / "raw" / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    for name, n in (("train", 400), ("test", 40)):
        fine = np.arange(n) % 100
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"fine_labels": fine.tolist(),
                 b"coarse_labels": (fine // 5).tolist()}
        (folder / name).write_bytes(pickle.dumps(batch))
    args = [f"data_root={tmp_path}", "partition.num_clients=8"]
    prepare(config("dataset=cifar100", *args).dataset, log=lambda _: None)
    cfg = config("dataset=cifar100", *args)
    data = build_dataset(cfg.dataset, cfg.partition)
    assert cfg.partition.name == "pachinko" and data.num_clients == 8 and data.sizes.tolist() == [50] * 8
    assert data.input_shape == (3, 28, 28) and data.transform.random_flip  # FedGBO's crop + flip


def test_sent140_fedgbo_bag_of_words_drops_tweets_without_top_words(tmp_path):
    write_sent140_csv(tmp_path / "raw" / "sent140")
    args = [f"data_root={tmp_path}", "dataset.min_samples=0"]
    prepare(config("dataset=sent140_fedgbo", *args).dataset, log=lambda _: None)
    full = config("dataset=sent140_fedgbo", *args, "dataset.drop_without_top_words=null")
    kept = config("dataset=sent140_fedgbo", *args, "dataset.drop_without_top_words=3")
    all_data, data = build_dataset(full.dataset, full.partition), build_dataset(kept.dataset, kept.partition)
    has_top = lambda x: ((x >= 2) & (x < 5)).any(dim=1)  # noqa: E731
    assert has_top(data.x).all() and has_top(data.x_val).all()
    assert len(data.y) == int(has_top(all_data.x).sum()) < len(all_data.y)
    assert kept.model.name == "bow_linear"
    assert run(tmp_path, "dataset=sent140_fedgbo", *args, "max_trips=10", "concurrency=2")["client_trips"] == 10
