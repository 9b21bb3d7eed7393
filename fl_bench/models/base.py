"""What every model option shares: :class:`ModelConfig` (the loss's L2 term, the task that scores the
output, the zero start), :func:`build_model`, and the checks of the input a network is built for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from omegaconf import MISSING
from torch import nn

from fl_bench.errors import ConfigError
from fl_bench.schema import build, choice, require


def exported(component: Callable) -> str:
    """A built-in model's ``_target_``: its name in the package, ``fl_bench.models.<name>``, as every
    run's config has recorded it since the models were one module. A finished run is found again by
    its config's digest, which must not depend on the module a class lives in."""
    return f"fl_bench.models.{component.__qualname__}"


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


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters; shared parameters count once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def image_shape(name: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``input_shape`` as an image's [C, H, W]; one line for any other input."""
    if len(input_shape) != 3:
        raise ConfigError(f"model={name} needs image input [C, H, W], got input shape {tuple(input_shape)}")
    return input_shape  # type: ignore[return-value]


def flat_size(name: str, features: Callable[[torch.Tensor], torch.Tensor], input_shape: tuple[int, ...]) -> int:
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


def token_input(name: str, input_shape: tuple[int, ...]) -> None:
    """One line unless the input is a sequence of token ids [L]."""
    if len(input_shape) != 1:
        raise ConfigError(f"model={name} needs token-id input [L], got input shape {tuple(input_shape)}")
