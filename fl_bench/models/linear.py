"""Linear models and the MLP: ``scalar_mean`` (FedLaAvg Example 1), ``logreg`` (HFL's convex model) and
``mlp``, each with its config."""

from __future__ import annotations

import math

import torch
from torch import nn

from fl_bench.models.base import ModelConfig, exported
from fl_bench.schema import require, schema


class ScalarMean(nn.Module):
    """One scalar w (FedLaAvg Example 1); the output w - x is the residual the
    mean_squared_error task scores."""

    def __init__(self, cfg, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None):
        super().__init__()
        self.w = nn.Parameter(torch.full((1,), float(cfg.init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w - x.reshape(*x.shape[:-1])  # x: [..., 1] values -> [...] residuals


@schema("model", "scalar_mean", exported(ScalarMean))
class ScalarMeanConfig(ModelConfig):
    """One scalar parameter w estimating the data mean (FedLaAvg Example 1): the task is
    mean_squared_error, 1/2 (w - x)^2 averaged over the batch; ``init`` is w_0."""

    task: str = "mean_squared_error"
    init: float = 0.0


def logreg(
    cfg: LogRegConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
) -> nn.Module:
    """Multinomial logistic regression (HFL's convex model): one linear layer, softmax in the loss."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


@schema("model", "logreg", exported(logreg))
class LogRegConfig(ModelConfig):
    """model=logreg: multinomial logistic regression (HFL's convex model)."""


def mlp(
    cfg: MLPConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
) -> nn.Module:
    """Flatten, one hidden layer of ``hidden`` ReLU units, a linear layer to the classes."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(math.prod(input_shape), cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, num_classes)
    )


@schema("model", "mlp", exported(mlp))
class MLPConfig(ModelConfig):
    """model=mlp: one hidden layer of ``hidden`` ReLU units."""

    hidden: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.hidden >= 1, "model.hidden", self.hidden, "must be >= 1")
