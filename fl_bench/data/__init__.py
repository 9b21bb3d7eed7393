"""Datasets: build the federated data a run trains on."""

from __future__ import annotations

from fl_bench.config import (DatasetConfig, NaturalPartitionConfig, PartitionConfig, RealDatasetConfig, SyntheticConfig,
                             TwoMeansConfig)
from fl_bench.data.federated import Examples, FederatedData
from fl_bench.data.sources import load_real
from fl_bench.data.synthetic import generate_synthetic
from fl_bench.data.two_means import generate_two_means
from fl_bench.errors import ConfigError

__all__ = ["Examples", "FederatedData", "build_dataset"]


def build_dataset(cfg: DatasetConfig, partition: PartitionConfig) -> FederatedData:
    if isinstance(cfg, (SyntheticConfig, TwoMeansConfig)):
        if not isinstance(partition, NaturalPartitionConfig):
            raise ConfigError(
                f"partition={partition.name!r} is not allowed with dataset={cfg.name}: its clients are generated "
                "with their own distributions (partition=natural)"
            )
        return generate_synthetic(cfg) if isinstance(cfg, SyntheticConfig) else generate_two_means(cfg)
    if isinstance(cfg, RealDatasetConfig):
        return load_real(cfg, partition)
    raise ConfigError(f"dataset={cfg.name!r} has no loader")
