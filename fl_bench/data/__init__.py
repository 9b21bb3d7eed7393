"""Datasets and partitions: the federated data a run trains on.

A dataset option's ``_target_`` builds it: ``synthetic`` and ``two_means`` generate their clients;
``sources`` loads the real datasets (from a cache prepared on first use or by ``python -m fl_bench.data
prepare``; ``downloads`` fetches their files) and
``partition`` splits their examples into clients, as it does a user's LightningDataModule or Dataset
(``datamodule``). ``federated`` holds the data types, ``formats``,
``leaf`` and ``plays`` read the raw files, ``cache`` stores prepared arrays, ``transforms`` augments
images, ``label_groups`` groups clients by their main label.
"""

from __future__ import annotations

from fl_bench.data.federated import DatasetConfig, Examples, FederatedData
from fl_bench.data.partition import PartitionConfig
from fl_bench.schema import build

__all__ = ["Examples", "FederatedData", "build_dataset"]


def build_dataset(cfg: DatasetConfig, partition: PartitionConfig) -> FederatedData:
    """The federated data of a dataset option: what its ``_target_`` builds with the partition."""
    return build(cfg, partition)
