"""Datasets: build the federated data a run trains on."""

from __future__ import annotations

from pathlib import Path

from fl_bench.config import DatasetConfig, SyntheticConfig
from fl_bench.data.federated import FederatedData
from fl_bench.errors import DataMissingError
from fl_bench.data.synthetic import generate_synthetic

__all__ = ["FederatedData", "build_dataset"]


def build_dataset(cfg: DatasetConfig) -> FederatedData:
    if isinstance(cfg, SyntheticConfig):
        return generate_synthetic(cfg)
    # Real datasets (LEAF, CIFAR, ...) are read from a prepared cache under the data root.
    root = Path(getattr(cfg, "root", "~/.cache/fl_bench")).expanduser() / cfg.name
    raise DataMissingError(
        f"dataset '{cfg.name}' is not prepared: no data under {root}; "
        f"prepare it with `python -m fl_bench.data prepare {cfg.name}` "
        "(LEAF download + split; arrives with the datasets issue) or run the embedded default dataset=synthetic"
    )
