"""Data on first use, without the internet: every download goes to a loopback mirror
(tests/helpers/mirror.py) serving small archives in each source's real format, through the
``data_mirror`` setting; the registry's checksums are the fixtures' for the test. Fashion-MNIST's
system copy is a directory of the test's own (``system_copy``), never the machine's."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from fl_bench.data import build_dataset
from fl_bench.data.downloads import CONTENT_REGISTRY, REGISTRY, SystemCopy, download_settings, fetch, mirrored
from fl_bench.data.sources import SOURCES, cache_dir, prepare
from fl_bench.errors import DataMissingError
from fl_bench.models.glove import GLOVE_URL
from tests.conftest import compose_run_config
from tests.helpers.mirror import SENT140_URL, cifar10_tarball, glove_zip, mnist_files, pin, sent140_zip

MNIST_HOST = "https://ossci-datasets.s3.amazonaws.com/mnist/"
FMNIST_HOST = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
TRAIN_IMAGES, TEST_LABELS = MNIST_HOST + "train-images-idx3-ubyte.gz", MNIST_HOST + "t10k-labels-idx1-ubyte.gz"


@pytest.fixture(autouse=True)
def system_copy(tmp_path, monkeypatch):
    """Fashion-MNIST's system copy for this test: an empty directory of its own, where a test puts the
    files a package would install (the machine's dataset-fashion-mnist, if installed, plays no part)."""
    directory = tmp_path / "system"
    directory.mkdir()
    copies = (SystemCopy(directory, "the test's package"),)
    monkeypatch.setitem(SOURCES, "fmnist", dataclasses.replace(SOURCES["fmnist"], system_copies=copies))
    return directory


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
    assert sorted(downloads) == sorted([*REGISTRY, *CONTENT_REGISTRY])  # nothing fetched outside them, no entry unused
    assert not set(REGISTRY) & set(CONTENT_REGISTRY)  # each file checked one way
    assert all(url.endswith(".gz") and not url.endswith(".tar.gz") for url in CONTENT_REGISTRY)  # gzipped files
    checksums = [*REGISTRY.values(), *CONTENT_REGISTRY.values()]
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", checksum) for checksum in checksums)


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
    warned = [r.getMessage() for r in caplog.records if " is refused (its bytes have SHA-256 " in r.getMessage()]
    assert len(warned) == 2 and warned[0].startswith(f"{images} is refused") and warned[1].startswith(f"{labels} is refused")
    assert all(m.endswith(f"replaced by a download from {data_mirror.url}/{url.split('://')[1]}")
               for m, url in zip(warned, (TRAIN_IMAGES, TEST_LABELS)))
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
                          "t10k-labels-idx1-ubyte.gz (its bytes have SHA-256 "
                          f"{hashlib.sha256(b'not what the registry says').hexdigest()}, not {REGISTRY[TEST_LABELS][7:]}: "
                          "a corrupt or changed file)")
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


# ----------------------------------------------------------------------------- files checked by their content
FMNIST_IMAGES, FMNIST_LABELS = FMNIST_HOST + "train-images-idx3-ubyte.gz", FMNIST_HOST + "train-labels-idx1-ubyte.gz"


def fmnist_files(monkeypatch) -> dict[str, bytes]:
    """Fashion-MNIST's four files, small, their content's digests the registry's for the test."""
    files = mnist_files(FMNIST_HOST)
    for url, content in files.items():
        pin(monkeypatch, url, content)
    return files


def recompressed(gzipped: bytes) -> bytes:
    """The same content compressed again otherwise (another level, no time stamp), as Debian's package did."""
    again = gzip.compress(gzip.decompress(gzipped), compresslevel=1, mtime=0)
    assert again != gzipped
    return again


def one_byte_changed(gzipped: bytes) -> bytes:
    content = bytearray(gzip.decompress(gzipped))
    content[-1] ^= 0xFF
    return gzip.compress(bytes(content))


def sha256_gunzipped(gzipped: bytes) -> str:
    return hashlib.sha256(gzip.decompress(gzipped)).hexdigest()


def fmnist_args(tmp_path, mirror: str) -> tuple[str, ...]:
    return ("fmnist", f"data_root={tmp_path / 'data'}", f"data_mirror={mirror}", "partition=iid", "partition.num_clients=5")


def test_a_recompressed_or_gunzipped_copy_is_accepted_as_it_is(data_mirror, tmp_path, monkeypatch):
    files = fmnist_files(monkeypatch)
    raw = tmp_path / "data" / "raw" / "fmnist"
    raw.mkdir(parents=True)
    for url, content in files.items():
        name = url.rsplit("/", 1)[1]
        if url == FMNIST_IMAGES:
            (raw / name).write_bytes(recompressed(content))  # other bytes, the same content
        elif url == FMNIST_LABELS:
            (raw / name.removesuffix(".gz")).write_bytes(gzip.decompress(content))  # gunzipped, no .gz beside it
        else:
            (raw / name).write_bytes(content)
    prepare_command(*fmnist_args(tmp_path, data_mirror.url))
    assert data_mirror.total_requests() == 0  # nothing downloaded: every file was accepted
    assert not (raw / "train-labels-idx1-ubyte.gz").exists()
    cfg = compose_run_config(*(f"dataset={a}" if a == "fmnist" else a for a in fmnist_args(tmp_path, data_mirror.url)))
    data = build_dataset(cfg.dataset, cfg.partition)
    assert (len(data.y), len(data.y_val)) == (60, 10)


def test_a_download_is_checked_by_its_content_not_its_compressed_bytes(data_mirror, tmp_path):
    files = publish_mnist(data_mirror, FMNIST_HOST)
    data_mirror.file(FMNIST_IMAGES).write_bytes(recompressed(files[FMNIST_IMAGES]))
    prepare_command(*fmnist_args(tmp_path, data_mirror.url))
    assert data_mirror.requests(FMNIST_IMAGES) == 1  # accepted at the first try
    assert (tmp_path / "data" / "raw" / "fmnist" / "train-images-idx3-ubyte.gz").read_bytes() != files[FMNIST_IMAGES]


@pytest.mark.parametrize("where", ["gz", "gunzipped"])
def test_a_copy_with_one_byte_changed_is_refused_in_one_line_naming_it_and_both_digests(
        where, data_mirror, tmp_path, monkeypatch, capsys):
    files = fmnist_files(monkeypatch)
    raw = tmp_path / "data" / "raw" / "fmnist"
    raw.mkdir(parents=True)
    changed = one_byte_changed(files[FMNIST_IMAGES])
    path = raw / ("train-images-idx3-ubyte.gz" if where == "gz" else "train-images-idx3-ubyte")
    path.write_bytes(changed if where == "gz" else gzip.decompress(changed))
    offline = data_mirror.unreachable_url()
    with pytest.raises(SystemExit):
        prepare_command(*fmnist_args(tmp_path, offline))
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    found, expected = sha256_gunzipped(changed), sha256_gunzipped(files[FMNIST_IMAGES])
    shown = "its content gunzipped has" if where == "gz" else "its content has"
    assert err.startswith(f"fl_bench: error: {path} is refused ({shown} SHA-256 {found}, not {expected})"), err
    if where == "gz":  # replaced by a download if there were one: this one fails, and the line says why too
        assert f" and cannot download {offline}/fashion-mnist.s3-website" in err and "(Connection refused)" in err
        assert "delete it or replace it with a faithful copy of " + FMNIST_IMAGES in err
    else:  # read before any .gz, so no download could replace it: refused before one is tried
        assert "and it is read before train-images-idx3-ubyte.gz: delete it or replace it with" in err
        assert "cannot download" not in err
    assert path.exists()  # the user's file is named, not deleted


def test_a_gz_file_that_does_not_gunzip_is_refused_naming_its_bytes_digest_and_the_expected_content(
        data_mirror, tmp_path, monkeypatch):
    files = fmnist_files(monkeypatch)
    raw = tmp_path / "data" / "raw" / "fmnist"
    raw.mkdir(parents=True)
    cut = files[FMNIST_IMAGES][:-10]  # its end (the CRC and size) cut off
    (raw / "train-images-idx3-ubyte.gz").write_bytes(cut)
    with download_settings(data_mirror.unreachable_url(), False), pytest.raises(DataMissingError) as refused:
        fetch(FMNIST_IMAGES, raw, "run again")
    assert str(refused.value).startswith(f"{raw / 'train-images-idx3-ubyte.gz'} is refused (it does not gunzip (")
    assert f"its bytes have SHA-256 {hashlib.sha256(cut).hexdigest()}; the original's content has SHA-256 " \
           f"{sha256_gunzipped(files[FMNIST_IMAGES])})" in str(refused.value)


def test_the_system_copy_is_used_first_and_the_log_says_so(data_mirror, tmp_path, system_copy):
    files = publish_mnist(data_mirror, FMNIST_HOST)
    for url, content in files.items():
        (system_copy / url.rsplit("/", 1)[1]).write_bytes(recompressed(content))
    cfg = compose_run_config(*(f"dataset={a}" if a == "fmnist" else a for a in fmnist_args(tmp_path, data_mirror.url)))
    lines: list[str] = []
    with download_settings(cfg.data_mirror, False):
        prepare(cfg.dataset, log=lines.append)
    assert data_mirror.total_requests() == 0  # the mirror was there, and not asked
    used = [line for line in lines if line.startswith("using the system copy ")]
    assert used == [f"using the system copy {system_copy / url.rsplit('/', 1)[1]} (the test's package)" for url in files]
    raw = tmp_path / "data" / "raw" / "fmnist"
    assert all((raw / p.name).read_bytes() == p.read_bytes() for p in system_copy.iterdir())  # copied whole


def test_a_wrong_system_copy_is_skipped_with_a_warning_naming_it_then_the_mirror_is_used(
        data_mirror, tmp_path, system_copy, caplog):
    files = publish_mnist(data_mirror, FMNIST_HOST)
    for url, content in files.items():
        (system_copy / url.rsplit("/", 1)[1]).write_bytes(content)
    wrong = system_copy / "train-images-idx3-ubyte.gz"
    wrong.write_bytes(one_byte_changed(files[FMNIST_IMAGES]))
    with caplog.at_level(logging.WARNING, logger="fl_bench.data.downloads"):
        prepare_command(*fmnist_args(tmp_path, data_mirror.url))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"the system copy {wrong} (the test's package) is skipped: its content gunzipped has SHA-256 "
                      f"{sha256_gunzipped(wrong.read_bytes())}, not {sha256_gunzipped(files[FMNIST_IMAGES])}: "
                      "a corrupt or changed file"]
    assert data_mirror.requests(FMNIST_IMAGES) == 1 and data_mirror.total_requests() == 1  # the others: system copies
    assert (tmp_path / "data" / "raw" / "fmnist" / "train-images-idx3-ubyte.gz").read_bytes() == files[FMNIST_IMAGES]


def test_a_file_is_taken_from_the_raw_directory_then_the_system_copy_then_the_mirror(
        data_mirror, tmp_path, system_copy):
    files = publish_mnist(data_mirror, FMNIST_HOST)
    names = [url.rsplit("/", 1)[1] for url in files]  # train images, train labels, test images, test labels
    raw = tmp_path / "data" / "raw" / "fmnist"
    raw.mkdir(parents=True)
    (raw / names[0]).write_bytes(files[FMNIST_HOST + names[0]])  # in both other places too: this one is used
    for name in names[:2]:
        (system_copy / name).write_bytes(files[FMNIST_HOST + name])  # the test images: only on the mirror
    (raw / names[3]).write_bytes(b"a changed file")  # refused: replaced by the first faithful copy
    (system_copy / names[3]).write_bytes(files[FMNIST_HOST + names[3]])
    cfg = compose_run_config(*(f"dataset={a}" if a == "fmnist" else a for a in fmnist_args(tmp_path, data_mirror.url)))
    lines: list[str] = []
    with download_settings(cfg.data_mirror, False):
        prepare(cfg.dataset, log=lines.append)
    fetched = [line.split(" (")[0] for line in lines if line.startswith(("using", "downloading"))]
    assert fetched == [f"using the system copy {system_copy / names[1]}",
                       f"downloading {data_mirror.url}/{(FMNIST_HOST + names[2]).split('://')[1]} to {raw / names[2]}",
                       f"using the system copy {system_copy / names[3]}"]
    assert data_mirror.total_requests() == 1
    assert all((raw / name).read_bytes() == files[FMNIST_HOST + name] for name in names)


def test_files_put_by_hand_where_the_line_says_gunzipped_and_gzipped_again_are_accepted(
        data_mirror, tmp_path, monkeypatch):
    """Issue 71: offline, the line names each file to download by hand and where to put it; the four, gunzipped
    and gzipped again by hand (other bytes, the same content) and put there, are what the next run takes."""
    files = fmnist_files(monkeypatch)
    offline, raw = data_mirror.unreachable_url(), tmp_path / "data" / "raw" / "fmnist"
    for url, content in files.items():
        with download_settings(offline, False), pytest.raises(DataMissingError) as missing:
            fetch(url, raw, "run again", log=lambda _: None)
        asked = re.search(r": download (\S+) by hand to (\S+) and run again$", str(missing.value))
        assert asked and asked.group(1) == url, missing.value
        again = gzip.compress(gzip.decompress(content), compresslevel=6)  # `gzip -d FILE; gzip FILE`
        assert again != content
        Path(asked.group(2)).write_bytes(again)
    prepare_command(*fmnist_args(tmp_path, offline))  # no download: every file accepted by its content
    assert data_mirror.total_requests() == 0
    assert sorted(p.name for p in raw.glob("*.gz")) == sorted(url.rsplit("/", 1)[1] for url in files)


def test_a_file_checked_by_its_bytes_and_gzipped_again_is_refused_saying_only_the_published_bytes_pass(
        data_mirror, tmp_path, capsys):
    files = publish_mnist(data_mirror)
    raw = tmp_path / "data" / "raw" / "mnist"
    raw.mkdir(parents=True)
    again = gzip.compress(gzip.decompress(files[TRAIN_IMAGES]), compresslevel=1)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(again)  # (the first fetched)
    with pytest.raises(SystemExit):
        prepare_command("mnist", f"data_root={tmp_path / 'data'}", f"data_mirror={data_mirror.unreachable_url()}")
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"fl_bench: error: {raw / 'train-images-idx3-ubyte.gz'} is refused (its bytes have SHA-256 "
                          f"{hashlib.sha256(again).hexdigest()}, not {REGISTRY[TRAIN_IMAGES][7:]}) and cannot download ")
    assert err.endswith("(train-images-idx3-ubyte.gz is checked by its bytes: only the file as published passes, not its "
                        "content compressed again)"), err
