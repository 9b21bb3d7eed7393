"""Model architectures (plain nn.Modules); fl_bench.clients.task wraps them with loss and metrics.

``build_model`` turns a model config into an ``nn.Module`` that maps a batch to logits
``[B, num_classes]``: it calls the class or function the config's ``_target_`` names with
``(cfg, input_shape, num_classes, vocab)``; ``vocab`` is the Sent140 word list, unused by the
other models. Input conventions (guaranteed by fl_bench.data):

- images: float32 ``[B, C, H, W]``, already normalised; CNNs size their first linear layer from
  ``input_shape`` with one dummy forward at build time;
- Sent140 text: int64 token ids ``[B, L]``; id 0 = padding, 1 = unknown word, ids 2.. = training
  words by descending frequency, ``vocab[i]`` the word of id i;
- Shakespeare: int64 ``[B, 80]`` indices into LEAF's 80-character alphabet.

Parameters with ``requires_grad=False`` (the frozen GloVe embedding) and buffers are not trained
and not federated: fl_bench.clients.trainer flattens only trainable parameters.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from omegaconf import MISSING
from torch import nn
from torch.nn import functional as F

from fl_bench.data.downloads import fetch, locked, unpack
from fl_bench.errors import ConfigError, DataMissingError
from fl_bench.schema import build, choice, require, schema

PAD_ID, UNK_ID = 0, 1  # Sent140 token ids fixed by the data layer; data words start at id 2
GLOVE_URL = "https://nlp.stanford.edu/data/glove.6B.zip"
GLOVE_FILES = tuple(f"glove.6B.{dim}d.txt" for dim in (50, 100, 200, 300))  # what glove.6B.zip holds


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters; shared parameters count once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


# ----------------------------------------------------------------------------- helpers
def _image_shape(name: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ConfigError(f"model={name} needs image input [C, H, W], got input shape {tuple(input_shape)}")
    return input_shape  # type: ignore[return-value]


def _flat_size(name: str, features: Callable[[torch.Tensor], torch.Tensor], input_shape: tuple[int, ...]) -> int:
    """Size of the flattened feature map for one input, by a dummy forward (no grad)."""
    try:
        with torch.no_grad():
            out = features(torch.zeros(1, *input_shape))
    except (RuntimeError, ValueError):  # kernel larger than the map, empty pooled map, 1-value GroupNorm group
        out = None
    if out is None or out.numel() == 0:
        raise ConfigError(
            f"model={name} cannot take input shape {tuple(input_shape)}: the image is too small for its conv/pool layers"
        )
    return out.numel()


def _token_input(name: str, input_shape: tuple[int, ...]) -> None:
    if len(input_shape) != 1:
        raise ConfigError(f"model={name} needs token-id input [L], got input shape {tuple(input_shape)}")


# ----------------------------------------------------------------------------- CNNs
class CNN4(nn.Module):
    """FedBuff App. B.1 (CelebA, CIFAR-10): LEAF's CelebA CNN with GroupNorm for BatchNorm.

    4 x [conv kxk (stride 1, padding 2) - GroupNorm - ReLU - maxpool 2x2], then dropout and one
    linear layer, as FLSim's SimpleConvNet (facebookresearch/FLSim): 32 channels, GroupNorm(32, 32),
    dropout before the classifier. FLSim reuses one GroupNorm module after all four convs
    (``shared_norm=True``); by default each conv gets its own, as LEAF has one BatchNorm per conv.
    """

    def __init__(
        self, cfg: CNN4Config, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        c_in, ch = _image_shape(cfg.name, input_shape)[0], cfg.channels
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in if i == 0 else ch, ch, cfg.kernel_size, stride=1, padding=cfg.padding) for i in range(4)
        )
        self.norms = nn.ModuleList(nn.GroupNorm(cfg.norm_groups, ch) for _ in range(1 if cfg.shared_norm else 4))
        self.pool = nn.MaxPool2d(2, 2)
        self.dropout = nn.Dropout(cfg.dropout)
        self.fc = nn.Linear(_flat_size(cfg.name, self.features, input_shape), num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The four conv blocks' output, flattened: the classifier's input."""
        for i, conv in enumerate(self.convs):
            x = self.pool(F.relu(self.norms[min(i, len(self.norms) - 1)](conv(x))))
        return x.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(self.features(x)))


class TutorialCNN(nn.Module):
    """FedLaAvg Sec. 6: the PyTorch CIFAR-10 tutorial CNN ("Training a classifier"):
    conv5x5x6 - ReLU - pool - conv5x5x16 - ReLU - pool - FC120 - ReLU - FC84 - ReLU - linear.
    62,006 parameters on 3x32x32 with 10 classes."""

    def __init__(
        self, cfg: TutorialCNNConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        c_in = _image_shape(cfg.name, input_shape)[0]
        self.features = nn.Sequential(
            nn.Conv2d(c_in, 6, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(_flat_size(cfg.name, self.features, input_shape), 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class ConvPoolCNN(nn.Module):
    """FedGBO Sec. 5 (CIFAR-100, FEMNIST): [conv3x3 - ReLU - maxpool 2x2] per entry of ``channels``
    (32, 64), FC ``hidden`` (512) - ReLU, linear output. Padding 0 as in FedGBO's code
    (JedMills/FedGBO models.py: ``Conv2d(c_in, c_out, 3, 1)``)."""

    def __init__(
        self, cfg: ConvPoolCNNConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        c_in = _image_shape(cfg.name, input_shape)[0]
        layers: list[nn.Module] = []
        for ch in cfg.channels:
            layers += [nn.Conv2d(c_in, ch, 3, stride=1, padding=cfg.padding), nn.ReLU(), nn.MaxPool2d(2, 2)]
            c_in = ch
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.classifier = nn.Sequential(
            nn.Linear(_flat_size(cfg.name, self.features, input_shape), cfg.hidden), nn.ReLU(),
            nn.Linear(cfg.hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class PflCNN(nn.Module):
    """pfl-research's CIFAR-10 benchmark CNN, ``simple_cnn`` in apple/pfl-research
    ``benchmarks/model/pytorch/cnn.py`` (the model of ``benchmarks/image_classification/configs/
    baseline.yaml``, ``model_name: simple_cnn``): conv3x3x32 - ReLU - conv3x3x64 - ReLU - maxpool
    2x2 - dropout 0.25 - FC128 - ReLU - dropout 0.5 - linear; no padding, and Glorot (Xavier)
    uniform weights with PyTorch's default biases, as pfl initialises it to match its TF2 twin.
    pfl's version takes channels-last (TF-style) images and permutes them first; fl_bench's images
    are already [B, C, H, W], so that permute is left out.
    1,626,442 parameters on 3x32x32 with 10 classes (the 12,544 -> 128 layer holds 1,605,760)."""

    def __init__(
        self, cfg: PflCNNConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        c_in = _image_shape(cfg.name, input_shape)[0]
        first, second = cfg.channels
        self.features = nn.Sequential(
            nn.Conv2d(c_in, first, 3), nn.ReLU(),
            nn.Conv2d(first, second, 3), nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Dropout(cfg.conv_dropout),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(_flat_size(cfg.name, self.features, input_shape), cfg.hidden), nn.ReLU(),
            nn.Dropout(cfg.hidden_dropout),
            nn.Linear(cfg.hidden, num_classes),
        )
        if cfg.glorot_init:
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.xavier_uniform_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


# ----------------------------------------------------------------------------- sequence models
class _UnrollableRNN:
    """An nn.LSTM / nn.GRU that can also run as explicit per-time-step cell math, a loop of
    linear ops that ``torch.func.vmap`` can batch (aten::lstm / aten::gru have no batching rule).
    The fused kernel stays the default; ``unrolled_rnns`` switches to the loop while fl_bench.clients.trainer
    trains a batch of clients with vmap. Same parameters, same gate equations (torch.nn docs)."""

    unrolled = False

    def forward(self, x, hx=None):
        if not self.unrolled:
            return super().forward(x, hx)
        if hx is not None or not self.batch_first or self.bidirectional or self.proj_size:
            raise NotImplementedError("unrolled RNN: batch_first, one direction, zero initial state only")
        for layer in range(self.num_layers):
            w_ih, w_hh, b_ih, b_hh = (getattr(self, f"{n}_l{layer}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            inputs = F.linear(x, w_ih, b_ih)  # [B, T, gates * H], all time steps at once
            h = inputs.new_zeros(x.shape[0], self.hidden_size)
            c = torch.zeros_like(h)
            outputs = []
            for t in range(x.shape[1]):
                h, c = self._cell(inputs[:, t], F.linear(h, w_hh, b_hh), h, c)
                outputs.append(h)
            x = torch.stack(outputs, dim=1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
        return x, None


class UnrollableLSTM(_UnrollableRNN, nn.LSTM):
    """nn.LSTM that :func:`unrolled_rnns` can switch to explicit cell math (vmap-able)."""

    @staticmethod
    def _cell(gi, gh, h, c):
        i, f, g, o = (gi + gh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class UnrollableGRU(_UnrollableRNN, nn.GRU):
    """nn.GRU that :func:`unrolled_rnns` can switch to explicit cell math (vmap-able)."""

    @staticmethod
    def _cell(gi, gh, h, c):
        (ir, iz, inew), (hr, hz, hnew) = gi.chunk(3, dim=-1), gh.chunk(3, dim=-1)
        r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        n = torch.tanh(inew + r * hnew)
        return (1 - z) * n + z * h, c


@contextmanager
def unrolled_rnns(model: nn.Module):
    """Run the model's RNNs as explicit cell loops (vmap-able) inside the block."""
    rnns = [m for m in model.modules() if isinstance(m, _UnrollableRNN)]
    for m in rnns:
        m.unrolled = True
    try:
        yield
    finally:
        for m in rnns:
            m.unrolled = False


class CharRNN(nn.Module):
    """Next-character prediction (Shakespeare): embedding - stacked GRU/LSTM - linear over the
    alphabet, from the last time step. FedGBO Sec. 5: embedding 8, 2 x GRU 128; LEAF's
    shakespeare/stacked_lstm.py (HFL's model): embedding 8, 2 x LSTM 256. The input alphabet is
    the output alphabet, so the embedding has ``num_classes`` rows (as in LEAF)."""

    def __init__(
        self, cfg: CharRNNConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        _token_input(cfg.name, input_shape)
        self.embedding = nn.Embedding(num_classes, cfg.embed_dim)
        rnn = UnrollableGRU if cfg.cell == "gru" else UnrollableLSTM
        self.rnn = rnn(cfg.embed_dim, cfg.hidden, num_layers=cfg.layers, batch_first=True)
        self.out = nn.Linear(cfg.hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embedding(x.long()))
        return self.out(h[:, -1])


def load_glove(path: str, vocab_size: int, dim: int) -> tuple[list[str], torch.Tensor]:
    """The first ``vocab_size`` words of a GloVe text file ("word v1 ... v_dim" per line, most
    frequent first) and their vectors [vocab_size, dim]; stops reading after vocab_size lines. A
    missing file named as one of glove.6B.zip's is fetched on first use (:func:`fetch_glove`)."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path) and os.path.basename(path) in GLOVE_FILES:
        fetch_glove(Path(path))
    if not os.path.isfile(path):
        raise DataMissingError(
            f"GloVe vectors not found at {path}: set model.glove_path to a GloVe text file, or to a path ending in "
            f"{' or '.join(GLOVE_FILES)} (fetched from {GLOVE_URL} on first use), or train the embedding with "
            "model.embedding=random"
        )
    words: list[str] = []
    vectors = np.empty((vocab_size, dim), dtype=np.float32)
    with open(path, encoding="utf-8") as f:
        for line in f:
            if len(words) == vocab_size:
                break
            parts = line.rstrip().split(" ")
            if len(parts) != dim + 1:
                raise ConfigError(
                    f"{path} line {len(words) + 1} has {len(parts) - 1} values, expected model.embed_dim={dim}"
                )
            vectors[len(words)] = np.asarray(parts[1:], dtype=np.float32)
            words.append(parts[0])
    if len(words) < vocab_size:
        raise DataMissingError(
            f"{path} has only {len(words)} words, expected at least model.vocab_size={vocab_size}: "
            f"download it again from {GLOVE_URL} or lower model.vocab_size"
        )
    return words, torch.from_numpy(vectors)


def fetch_glove(path: Path) -> None:
    """glove.6B.zip (822 MB) downloaded into ``path``'s directory, and the member ``path`` names
    unpacked beside it (the archive is kept: another dimension needs no new download)."""
    with locked(path.parent):
        if not path.is_file():  # (or another run fetched it while this one waited)
            what_next = "run again, or train the embedding with model.embedding=random"
            unpack(fetch(GLOVE_URL, path.parent, what_next), path.parent, members=(path.name,))


class Sent140LSTM(nn.Module):
    """FedBuff App. B.1 Sent140 (also HFL's Sent140 LSTM): 300-d word embedding, 2-layer LSTM with
    100 hidden units, a 128-unit linear layer, 2 outputs; max sequence length 25; dropout 0.1.

    Follows LEAF's sent140/stacked_lstm.py: the 128-unit layer is linear (no activation) and the
    first ``max_len`` tokens are used. The classifier reads the LSTM output at the last non-padding
    token (FLSim's LSTM example does the same; with right padding this equals running the LSTM
    on the unpadded sequence). Dropout: between the LSTM layers and on the LSTM output.

    ``embedding=glove``: the model vocabulary is GloVe's ``vocab_size`` most frequent words plus a
    padding row and an unknown row (both zero, like LEAF's get_embs.py); the embedding is frozen
    (requires_grad False: not trained, not federated). A data word maps to its GloVe row (exact
    match, else lower-cased), else to unknown; the data-id -> model-id table is a buffer.
    ``embedding=random``: a trainable embedding over the data's ``vocab_size`` most frequent
    words (ids >= vocab_size + 2 map to unknown)."""

    def __init__(
        self, cfg: Sent140LSTMConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        _token_input(cfg.name, input_shape)
        self.max_len = cfg.max_len
        self.num_ids = cfg.vocab_size + 2  # ids at or above this are unknown words
        if cfg.embedding == "glove":
            if vocab is None:
                raise ConfigError(
                    "model=sent140_lstm with model.embedding=glove needs the dataset's vocabulary (a text dataset such as sent140)"
                )
            words, vectors = load_glove(cfg.glove_path, cfg.vocab_size, cfg.embed_dim)
            table = torch.cat([torch.zeros(2, cfg.embed_dim), vectors])
            self.embedding = nn.Embedding.from_pretrained(table, freeze=True, padding_idx=PAD_ID)
            row = {w: i + 2 for i, w in enumerate(words)}
            lookup = [PAD_ID, UNK_ID] + [row.get(w, row.get(w.lower(), UNK_ID)) for w in vocab[2:]]
            self.register_buffer("lookup", torch.tensor(lookup, dtype=torch.long))
        else:
            self.embedding = nn.Embedding(self.num_ids, cfg.embed_dim, padding_idx=PAD_ID)
            self.lookup = None
        self.lstm = UnrollableLSTM(
            cfg.embed_dim, cfg.hidden, num_layers=cfg.layers, batch_first=True,
            dropout=cfg.dropout if cfg.layers > 1 else 0.0,
        )
        self.dropout = nn.Dropout(cfg.dropout)
        self.fc = nn.Linear(cfg.hidden, cfg.fc)
        self.out = nn.Linear(cfg.fc, num_classes)

    def model_ids(self, x: torch.Tensor) -> torch.Tensor:
        """Data token ids -> rows of the embedding."""
        if self.lookup is None:
            return torch.where(x < self.num_ids, x, UNK_ID)
        return self.lookup[torch.where(x < len(self.lookup), x, UNK_ID)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, : self.max_len].long()
        h, _ = self.lstm(self.embedding(self.model_ids(x)))
        positions = torch.arange(x.shape[1], device=x.device)
        last = (positions * (x != PAD_ID)).amax(dim=1)  # last non-padding token (0 if none)
        h = h[torch.arange(x.shape[0], device=x.device), last]
        return self.out(self.fc(self.dropout(h)))


class BagOfWordsLinear(nn.Module):
    """FedGBO Sec. 5 Sent140: a linear model on a normalised bag-of-words vector of length
    ``vocab_size`` (5k) over the most common training tokens (data ids 2 .. vocab_size + 1).

    Entries: presence (1 per distinct top-k token, the paper's "presence") or counts (FedGBO's
    gen_sent140_vecs.py), divided by their sum (L1; the script divides by the number of in-vocab
    tokens). A text with no top-k token gives the zero vector, i.e. logits = bias (FedGBO drops
    such samples from the data). The forward pass gathers the weight columns of the tokens in
    the batch instead of building the dense [B, vocab_size] vector."""

    def __init__(
        self, cfg: BagOfWordsConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        _token_input(cfg.name, input_shape)
        self.vocab_size = cfg.vocab_size
        self.presence = cfg.values == "presence"
        self.linear = nn.Linear(cfg.vocab_size, num_classes)

    def _columns(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per token: its bag-of-words column (0 where unused) and its weight in the normalised vector."""
        col = x.long() - 2
        col = torch.where((col >= 0) & (col < self.vocab_size), col, -1)
        if self.presence:  # keep the first of each repeated token
            col = col.sort(dim=1).values
            repeat = torch.zeros_like(col, dtype=torch.bool)
            repeat[:, 1:] = col[:, 1:] == col[:, :-1]
            col = torch.where(repeat, -1, col)
        w = (col >= 0).to(self.linear.weight.dtype)
        return col.clamp_min(0), w / w.sum(dim=1, keepdim=True).clamp_min(1)

    def bag(self, x: torch.Tensor) -> torch.Tensor:
        """The dense normalised bag-of-words vectors [B, vocab_size] (for inspection and tests)."""
        col, w = self._columns(x)
        return torch.zeros(x.shape[0], self.vocab_size, dtype=w.dtype, device=x.device).scatter_add_(1, col, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        col, w = self._columns(x)
        return torch.einsum("bl,blc->bc", w, F.embedding(col, self.linear.weight.t())) + self.linear.bias


# ----------------------------------------------------------------------------- linear and MLP
class ScalarMean(nn.Module):
    """One scalar w (FedLaAvg Example 1); the output w - x is the residual the
    mean_squared_error task scores."""

    def __init__(self, cfg, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None):
        super().__init__()
        self.w = nn.Parameter(torch.full((1,), float(cfg.init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w - x.reshape(*x.shape[:-1])  # x: [..., 1] values -> [...] residuals


def logreg(
    cfg: LogRegConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
) -> nn.Module:
    """Multinomial logistic regression (HFL's convex model): one linear layer, softmax in the loss."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def mlp(
    cfg: MLPConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
) -> nn.Module:
    """Flatten, one hidden layer of ``hidden`` ReLU units, a linear layer to the classes."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(math.prod(input_shape), cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, num_classes)
    )


# ----------------------------------------------------------------------------- build
def build_model(
    cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
) -> nn.Module:
    """The model for ``cfg``: a plain nn.Module mapping an input batch to logits [B, num_classes]."""
    model = build(cfg, tuple(input_shape), num_classes, vocab)
    if cfg.zero_init:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.zero_()
    return model


TASKS = ("classification", "mean_squared_error")


@dataclass
class ModelConfig:
    """A model option (fl_bench.models): ``_target_`` builds the network from (cfg, input_shape,
    num_classes, vocab); every option has the loss's L2 term, the task that scores the output and
    the zero start."""

    name: str = MISSING
    # fl_bench.models class or function (cfg, input_shape, num_classes, vocab) -> nn.Module; see build()
    _target_: str = MISSING
    # L2 regularisation (weight_decay / 2) * ||w||^2 added to the loss (HFL: eps ||w||^2, eps = 1e-4).
    weight_decay: float = 0.0
    # What the model's output is scored by (fl_bench.clients.task.TASKS): classification (cross-entropy,
    # accuracy) or mean_squared_error (no accuracy: val_accuracy is NaN).
    task: str = "classification"
    zero_init: bool = False  # every parameter 0 at the start (HFL: w_0 = 0)

    def __post_init__(self) -> None:
        require(self.weight_decay >= 0, "model.weight_decay", self.weight_decay, "must be >= 0")
        choice("model.task", self.task, TASKS)


@schema("model", "scalar_mean", ScalarMean)
class ScalarMeanConfig(ModelConfig):
    """One scalar parameter w estimating the data mean (FedLaAvg Example 1): the task is
    mean_squared_error, 1/2 (w - x)^2 averaged over the batch; ``init`` is w_0."""

    task: str = "mean_squared_error"
    init: float = 0.0


@schema("model", "logreg", logreg)
class LogRegConfig(ModelConfig):
    """model=logreg: multinomial logistic regression (HFL's convex model)."""


@schema("model", "mlp", mlp)
class MLPConfig(ModelConfig):
    """model=mlp: one hidden layer of ``hidden`` ReLU units."""

    hidden: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.hidden >= 1, "model.hidden", self.hidden, "must be >= 1")


@schema("model", "cnn4", CNN4)
class CNN4Config(ModelConfig):
    """FedBuff's CelebA / CIFAR-10 CNN (App. B.1): LEAF's 4-layer CNN with GroupNorm in place of
    BatchNorm; 4 x [conv kxk stride 1 - GroupNorm - ReLU - maxpool 2], dropout, linear."""

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
        require(self.channels >= 1, m + "channels", self.channels, "must be >= 1")
        require(self.kernel_size >= 1, m + "kernel_size", self.kernel_size, "must be >= 1")
        require(self.padding >= 0, m + "padding", self.padding, "must be >= 0")
        require(0 <= self.dropout < 1, m + "dropout", self.dropout, "must be in [0, 1)")
        require(
            self.norm_groups >= 1 and self.channels % self.norm_groups == 0,
            m + "norm_groups", self.norm_groups, f"must be >= 1 and divide model.channels={self.channels}",
        )


@schema("model", "tutorial_cnn", TutorialCNN)
class TutorialCNNConfig(ModelConfig):
    """FedLaAvg: the PyTorch CIFAR-10 tutorial CNN (2 conv + 2 FC + linear)."""


@schema("model", "cnn_fedgbo", ConvPoolCNN)
class ConvPoolCNNConfig(ModelConfig):
    """FedGBO CIFAR-100 / FEMNIST: conv3x3x32 - pool - conv3x3x64 - pool - FC512 - output."""

    channels: list[int] = field(default_factory=lambda: [32, 64])
    hidden: int = 512
    padding: int = 0  # FedGBO's code (JedMills/FedGBO models.py): Conv2d(c_in, c_out, 3, 1), no padding

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.channels) >= 1 and min(self.channels) >= 1, "model.channels", self.channels, "need >= 1 entries, each >= 1")
        require(self.hidden >= 1, "model.hidden", self.hidden, "must be >= 1")
        require(self.padding >= 0, "model.padding", self.padding, "must be >= 0")


@schema("model", "cnn_pfl", PflCNN)
class PflCNNConfig(ModelConfig):
    """pfl-research's CIFAR-10 benchmark CNN (simple_cnn): conv3x3x32 - conv3x3x64 - pool -
    dropout - FC128 - dropout - output, Glorot-uniform weights."""

    channels: list[int] = field(default_factory=lambda: [32, 64])
    hidden: int = 128
    conv_dropout: float = 0.25  # after the max-pool
    hidden_dropout: float = 0.5  # after FC128's ReLU
    glorot_init: bool = True  # xavier_uniform_ conv / linear weights (pfl); false: PyTorch's default init

    def __post_init__(self) -> None:
        super().__post_init__()
        m = "model."
        require(len(self.channels) == 2 and min(self.channels) >= 1, m + "channels", self.channels,
                 "needs 2 entries, each >= 1")
        require(self.hidden >= 1, m + "hidden", self.hidden, "must be >= 1")
        require(0 <= self.conv_dropout < 1, m + "conv_dropout", self.conv_dropout, "must be in [0, 1)")
        require(0 <= self.hidden_dropout < 1, m + "hidden_dropout", self.hidden_dropout, "must be in [0, 1)")


SENT140_EMBEDDINGS = ("glove", "random")
RNN_CELLS = ("gru", "lstm")


@schema("model", "char_rnn", CharRNN)
class CharRNNConfig(ModelConfig):
    """Next-character model (Shakespeare): embedding, stacked GRU/LSTM, linear over the vocabulary."""

    cell: str = "gru"  # gru (FedGBO) | lstm (LEAF / HFL)
    embed_dim: int = 8
    hidden: int = 128
    layers: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("model.cell", self.cell, RNN_CELLS)
        require(self.embed_dim >= 1, "model.embed_dim", self.embed_dim, "must be >= 1")
        require(self.hidden >= 1, "model.hidden", self.hidden, "must be >= 1")
        require(self.layers >= 1, "model.layers", self.layers, "must be >= 1")


@schema("model", "sent140_lstm", Sent140LSTM)
class Sent140LSTMConfig(ModelConfig):
    """FedBuff App. B.1 Sent140: frozen GloVe 300-d (top 10k words), 2-layer LSTM 100, FC 128, 2 outputs."""

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
        choice(m + "embedding", self.embedding, SENT140_EMBEDDINGS)
        for key in ("vocab_size", "embed_dim", "hidden", "layers", "fc", "max_len"):
            require(getattr(self, key) >= 1, m + key, getattr(self, key), "must be >= 1")
        require(0 <= self.dropout < 1, m + "dropout", self.dropout, "must be in [0, 1)")


BOW_VALUES = ("presence", "counts")


@schema("model", "bow_linear", BagOfWordsLinear)
class BagOfWordsConfig(ModelConfig):
    """FedGBO Sent140: a linear model on the normalised presence vector of the vocab_size most
    frequent training tokens."""

    vocab_size: int = 5000
    # presence: 1 per distinct top-vocab_size token in the text (FedGBO Sec. 5 text); counts: token
    # counts (FedGBO's gen_sent140_vecs.py). Either way the vector is divided by its sum (L1).
    values: str = "presence"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.vocab_size >= 1, "model.vocab_size", self.vocab_size, "must be >= 1")
        choice("model.values", self.values, BOW_VALUES)
