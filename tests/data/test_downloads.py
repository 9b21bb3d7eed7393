"""Data on first use, without the internet: every download goes to a loopback mirror
(tests/helpers/mirror.py) serving small archives in each source's real format, through the
``data_mirror`` setting; the registry's checksums are the fixtures' for the test."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fl_bench.data import build_dataset
from fl_bench.data.downloads import REGISTRY, download_settings, fetch, mirrored
from fl_bench.data.sources import SOURCES, cache_dir, prepare
from fl_bench.errors import DataMissingError
from fl_bench.models.glove import GLOVE_URL
from tests.conftest import compose_run_config
from tests.helpers.mirror import SENT140_URL, cifar10_tarball, glove_zip, mnist_files, sent140_zip

MNIST_HOST = "https://ossci-datasets.s3.amazonaws.com/mnist/"
FMNIST_HOST = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
TRAIN_IMAGES, TEST_LABELS = MNIST_HOST + "train-images-idx3-ubyte.gz", MNIST_HOST + "t10k-labels-idx1-ubyte.gz"


def publish_mnist(mirror, host=MNIST_HOST) -> dict[str, bytes]:
    files = mnist_files(host)
    for url, content in files.items():
        mirror.publish(url, content)
    return files


def prepare_command(*args: str) -> None:
    from fl_bench.data.__main__ import main

    main(["prepare", *args, "progress=false"])


def test_the_registry_holds_every_download_once_with_its_sha256():
    downloads = [item.url for source in SOURCES.values() for item in source.downloads] + [GLOVE_URL]
    assert sorted(downloads) == sorted(REGISTRY)  # nothing fetched outside it, no entry unused
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", checksum) for checksum in REGISTRY.values())


def test_a_mirror_holds_each_file_under_its_host_and_path():
    assert mirrored(CIFAR10_URL, "file:///srv/mirror/") == "file:///srv/mirror/www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert mirrored(SENT140_URL, "http://10.0.0.1:8080/data") == (
        "http://10.0.0.1:8080/data/cs.stanford.edu/people/alecmgo/trainingandtestdata.zip")
    assert mirrored(SENT140_URL, None) == SENT140_URL
    # MNIST and Fashion-MNIST name their files alike: their hosts keep them apart
    assert mirrored(TRAIN_IMAGES, "http://m") != mirrored(FMNIST_HOST + "train-images-idx3-ubyte.gz", "http://m")


def test_the_mirror_is_not_part_of_a_result():
    from fl_bench.runs.checkpoint import config_differences
    from fl_bench.runs.config import config_digest, result_config

    hosts, mirror = (result_config(compose_run_config(*o)) for o in ((), ("data_mirror=file:///srv/mirror",)))
    assert mirror["data_mirror"] == "file:///srv/mirror"  # recorded, but a run with either is the same run
    assert config_digest(hosts) == config_digest(mirror) and config_differences(hosts, mirror) == []


def test_a_first_run_fetches_prepares_and_trains_and_a_second_fetches_nothing(data_mirror, tmp_path):
    from fl_bench.runs.experiment import run_experiment

    data_mirror.publish(SENT140_URL, sent140_zip())
    data_mirror.publish(GLOVE_URL, glove_zip())
    root = tmp_path / "data"
    overrides = ("dataset=sent140", f"data_root={root}", f"data_mirror={data_mirror.url}", "dataset.fraction=1.0",
                 "model.vocab_size=20", "max_trips=6", "concurrency=3", "algorithm.buffer_size=3", "eval_every=6")
    first = run_experiment(compose_run_config(*overrides), tmp_path / "first")
    assert first["status"] == "completed" and first["client_trips"] == 6
    assert data_mirror.requests(SENT140_URL) == 1 and data_mirror.requests(GLOVE_URL) == 1
    assert (root / "raw" / "sent140" / "training.1600000.processed.noemoticon.csv").is_file()
    assert (root / "glove" / "glove.6B.300d.txt").is_file()
    assert not (root / "glove" / "glove.6B.50d.txt").exists()  # only the member the model names
    second = run_experiment(compose_run_config(*overrides), tmp_path / "second")
    assert data_mirror.total_requests() == 2  # the cache and the GloVe file are there: nothing fetched
    assert second["final_val_accuracy"] == first["final_val_accuracy"]


@pytest.mark.parametrize("dataset", ["mnist", "fmnist", "cifar10"])
def test_prepare_fetches_each_source_in_its_real_format_through_the_mirror(dataset, data_mirror, tmp_path):
    if dataset == "cifar10":
        data_mirror.publish(CIFAR10_URL, cifar10_tarball(per_batch=10))
    else:
        publish_mnist(data_mirror, MNIST_HOST if dataset == "mnist" else FMNIST_HOST)
    args = (f"data_root={tmp_path / 'data'}", f"data_mirror={data_mirror.url}", "partition=iid", "partition.num_clients=5")
    prepare_command(dataset, *args)
    assert data_mirror.total_requests() == len(SOURCES[dataset].downloads)  # each file once
    cfg = compose_run_config(f"dataset={dataset}", *args)
    data = build_dataset(cfg.dataset, cfg.partition)
    assert (len(data.y), len(data.y_val)) == ((50, 10) if dataset == "cifar10" else (60, 10))


def test_a_file_mirror_is_read_in_place(data_mirror, tmp_path):
    files = publish_mnist(data_mirror)
    raw = tmp_path / "data" / "raw" / "mnist"
    prepare_command("mnist", f"data_root={tmp_path / 'data'}", f"data_mirror=file://{data_mirror.root}")
    assert data_mirror.total_requests() == 0
    assert all((raw / url.rsplit("/", 1)[1]).read_bytes() == content for url, content in files.items())


def test_a_truncated_or_changed_raw_file_is_refused_naming_it_and_fetched_again(data_mirror, tmp_path, caplog):
    files = publish_mnist(data_mirror)
    args = ("mnist", f"data_root={tmp_path / 'data'}", f"data_mirror={data_mirror.url}")
    prepare_command(*args)
    raw = tmp_path / "data" / "raw" / "mnist"
    images, labels = raw / "train-images-idx3-ubyte.gz", raw / "t10k-labels-idx1-ubyte.gz"
    images.write_bytes(files[TRAIN_IMAGES][:100])  # cut short
    changed = bytearray(files[TEST_LABELS])
    changed[20] ^= 0xFF
    labels.write_bytes(changed)  # same size, one byte changed
    prepare_command(*args)
    warned = [r.getMessage() for r in caplog.records if "does not match its checksum" in r.getMessage()]
    assert len(warned) == 2 and str(images) in warned[0] and str(labels) in warned[1]
    assert data_mirror.requests(TRAIN_IMAGES) == 2 and data_mirror.requests(TEST_LABELS) == 2
    assert data_mirror.total_requests() == 6  # the two whole files were not fetched again
    assert images.read_bytes() == files[TRAIN_IMAGES] and labels.read_bytes() == files[TEST_LABELS]


def test_a_corrupt_download_is_refused_in_one_line_and_leaves_no_file(data_mirror, tmp_path, capsys):
    publish_mnist(data_mirror)
    data_mirror.file(TEST_LABELS).write_bytes(b"not what the registry says")
    with pytest.raises(SystemExit) as stop:
        prepare_command("mnist", f"data_root={tmp_path / 'data'}", f"data_mirror={data_mirror.url}")
    err = capsys.readouterr().err.strip()
    raw = tmp_path / "data" / "raw" / "mnist"
    assert stop.value.code == 1 and len(err.splitlines()) == 1
    assert err.startswith(f"fl_bench: error: cannot download {data_mirror.url}/ossci-datasets.s3.amazonaws.com/mnist/"
                          "t10k-labels-idx1-ubyte.gz (its checksum does not match the registry's")
    assert f"download {TEST_LABELS} by hand to {raw / 't10k-labels-idx1-ubyte.gz'}" in err
    assert data_mirror.requests(TEST_LABELS) == 3 and data_mirror.waits == [1, 2]  # tried again twice
    assert sorted(p.name for p in raw.iterdir()) == [".lock", "t10k-images-idx3-ubyte.gz", "train-images-idx3-ubyte.gz",
                                                     "train-labels-idx1-ubyte.gz"]  # no partial or temporary file


def test_a_connection_dropped_mid_file_is_tried_again_and_never_leaves_a_partial_file(data_mirror, tmp_path):
    files = publish_mnist(data_mirror)
    cfg = compose_run_config("dataset=mnist", f"data_root={tmp_path / 'data'}", f"data_mirror={data_mirror.url}")
    raw = tmp_path / "data" / "raw" / "mnist"
    data_mirror.drop(TRAIN_IMAGES, after=1000, times=3)  # every try of this prepare
    with download_settings(cfg.data_mirror, False), pytest.raises(DataMissingError, match="the connection dropped mid-file"):
        prepare(cfg.dataset, log=lambda _: None)
    assert not (raw / "train-images-idx3-ubyte.gz").exists() and not cache_dir(cfg.dataset).exists()
    assert not [p for p in raw.iterdir() if p.name.startswith("tmp")]  # pooch's temporary file went too
    data_mirror.drop(TRAIN_IMAGES, after=1000, times=1)  # once: the retry gets it whole
    with download_settings(cfg.data_mirror, False):
        prepare(cfg.dataset, log=lambda _: None)
    assert data_mirror.requests(TRAIN_IMAGES) == 5 and data_mirror.waits == [1, 2, 1]
    assert (raw / "train-images-idx3-ubyte.gz").read_bytes() == files[TRAIN_IMAGES]


def test_offline_a_run_stops_in_one_line_saying_what_to_fetch_and_where(data_mirror, tmp_path, cli_in_process):
    root, offline = tmp_path / "data", data_mirror.unreachable_url()
    code, out = cli_in_process("dataset=cifar10", f"data_root={root}", f"data_mirror={offline}", "progress=false",
                               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert code == 1 and len(out.strip().splitlines()) == 1, out
    assert out.startswith(f"fl_bench: error: dataset 'cifar10' is not prepared: cannot download "
                          f"{offline}/www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz (Connection refused): "
                          f"download {CIFAR10_URL} by hand to {root / 'raw' / 'cifar10' / 'cifar-10-python.tar.gz'} "
                          f"and run again, or run `python -m fl_bench.data prepare cifar10 data_root={root}` "
                          "where the network is reachable"), out
    assert not (tmp_path / "run").exists()


def test_the_progress_bar_shows_only_with_progress(data_mirror, tmp_path, capsys):
    publish_mnist(data_mirror)
    for progress in (False, True):
        with download_settings(data_mirror.url, progress):
            fetch(TEST_LABELS, tmp_path / str(progress), "run again")
        shown = capsys.readouterr().err
        assert ("100%" in shown) is progress, shown


def test_parallel_runs_missing_the_same_data_fetch_and_prepare_it_once(data_mirror, tmp_path):
    publish_mnist(data_mirror)
    cfg = compose_run_config("dataset=mnist", f"data_root={tmp_path / 'data'}", f"data_mirror={data_mirror.url}",
                             "partition=iid", "partition.num_clients=5")

    def run_builds_its_data(_):
        with download_settings(cfg.data_mirror, False):
            return build_dataset(cfg.dataset, cfg.partition)

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(run_builds_its_data, range(2))
    assert data_mirror.total_requests() == 4  # each file once: the second run waited, then found the cache
    assert np.array_equal(first.y, second.y) and cache_dir(cfg.dataset).is_dir()
