"""Model architectures (plain nn.Modules); fl_bench.task wraps them with loss and metrics."""

from __future__ import annotations

import math

from torch import nn

from fl_bench.config import LogRegConfig, MLPConfig, ModelConfig
from fl_bench.errors import ConfigError


def build_model(cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    in_features = math.prod(input_shape)
    if isinstance(cfg, LogRegConfig):
        # Multinomial logistic regression: one linear layer, softmax in the loss.
        return nn.Sequential(nn.Flatten(), nn.Linear(in_features, num_classes))
    if isinstance(cfg, MLPConfig):
        return nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, num_classes)
        )
    raise ConfigError(f"model={cfg.name!r} has no builder: choose logreg or mlp")
