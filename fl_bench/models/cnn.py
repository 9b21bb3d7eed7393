"""The papers' CNNs, each with its config: ``cnn4`` (FedBuff), ``tutorial_cnn`` (FedLaAvg), ``cnn_fedgbo``
(FedGBO) and ``cnn_pfl`` (pfl-research's benchmark). Each sizes its first linear layer from the input
shape with one dummy forward at build time."""

from __future__ import annotations

from dataclasses import field

import torch
from torch import nn
from torch.nn import functional as F

from fl_bench.models.base import ModelConfig, exported, flat_size, image_shape
from fl_bench.schema import require, schema


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
        c_in, ch = image_shape(cfg.name, input_shape)[0], cfg.channels
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in if i == 0 else ch, ch, cfg.kernel_size, stride=1, padding=cfg.padding) for i in range(4)
        )
        self.norms = nn.ModuleList(nn.GroupNorm(cfg.norm_groups, ch) for _ in range(1 if cfg.shared_norm else 4))
        self.pool = nn.MaxPool2d(2, 2)
        self.dropout = nn.Dropout(cfg.dropout)
        self.fc = nn.Linear(flat_size(cfg.name, self.features, input_shape), num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The four conv blocks' output, flattened: the classifier's input."""
        for i, conv in enumerate(self.convs):
            x = self.pool(F.relu(self.norms[min(i, len(self.norms) - 1)](conv(x))))
        return x.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(self.features(x)))


@schema("model", "cnn4", exported(CNN4))
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


class TutorialCNN(nn.Module):
    """FedLaAvg Sec. 6: the PyTorch CIFAR-10 tutorial CNN ("Training a classifier"):
    conv5x5x6 - ReLU - pool - conv5x5x16 - ReLU - pool - FC120 - ReLU - FC84 - ReLU - linear.
    62,006 parameters on 3x32x32 with 10 classes."""

    def __init__(
        self, cfg: TutorialCNNConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        c_in = image_shape(cfg.name, input_shape)[0]
        self.features = nn.Sequential(
            nn.Conv2d(c_in, 6, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(flat_size(cfg.name, self.features, input_shape), 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


@schema("model", "tutorial_cnn", exported(TutorialCNN))
class TutorialCNNConfig(ModelConfig):
    """FedLaAvg: the PyTorch CIFAR-10 tutorial CNN (2 conv + 2 FC + linear)."""


class ConvPoolCNN(nn.Module):
    """FedGBO Sec. 5 (CIFAR-100, FEMNIST): [conv3x3 - ReLU - maxpool 2x2] per entry of ``channels``
    (32, 64), FC ``hidden`` (512) - ReLU, linear output. Padding 0 as in FedGBO's code
    (JedMills/FedGBO models.py: ``Conv2d(c_in, c_out, 3, 1)``)."""

    def __init__(
        self, cfg: ConvPoolCNNConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        c_in = image_shape(cfg.name, input_shape)[0]
        layers: list[nn.Module] = []
        for ch in cfg.channels:
            layers += [nn.Conv2d(c_in, ch, 3, stride=1, padding=cfg.padding), nn.ReLU(), nn.MaxPool2d(2, 2)]
            c_in = ch
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.classifier = nn.Sequential(
            nn.Linear(flat_size(cfg.name, self.features, input_shape), cfg.hidden), nn.ReLU(),
            nn.Linear(cfg.hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


@schema("model", "cnn_fedgbo", exported(ConvPoolCNN))
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
        c_in = image_shape(cfg.name, input_shape)[0]
        first, second = cfg.channels
        self.features = nn.Sequential(
            nn.Conv2d(c_in, first, 3), nn.ReLU(),
            nn.Conv2d(first, second, 3), nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Dropout(cfg.conv_dropout),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(flat_size(cfg.name, self.features, input_shape), cfg.hidden), nn.ReLU(),
            nn.Dropout(cfg.hidden_dropout),
            nn.Linear(cfg.hidden, num_classes),
        )
        if cfg.glorot_init:
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.xavier_uniform_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


@schema("model", "cnn_pfl", exported(PflCNN))
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
