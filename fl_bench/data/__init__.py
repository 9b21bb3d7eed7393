"""Datasets: build the federated data a run trains on."""

from __future__ import annotations

from fl_bench.data.federated import DatasetConfig, Examples, FederatedData
from fl_bench.data.partition import PartitionConfig
from fl_bench.schema import build

__all__ = ["Examples", "FederatedData", "build_dataset"]


def build_dataset(cfg: DatasetConfig, partition: PartitionConfig) -> FederatedData:
    """The federated data of a dataset option: what its ``_target_`` builds with the partition."""
    return build(cfg, partition)
