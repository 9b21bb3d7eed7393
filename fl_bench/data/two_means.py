"""FedLaAvg Example 1's data (Sec. 3.1), generated: client i holds 1-D values around mu_i."""

from __future__ import annotations

from dataclasses import field

import numpy as np

from fl_bench.data.federated import DatasetConfig, FederatedData, split_clients
from fl_bench.data.partition import PartitionConfig, require_natural
from fl_bench.schema import require, schema


def generate_two_means(cfg: TwoMeansConfig, partition: PartitionConfig | None = None) -> FederatedData:
    """Generated clients, each its own distribution: ``partition`` (if given) must be natural."""
    require_natural(cfg, partition)
    rng = np.random.default_rng(cfg.data_seed)
    n = cfg.examples_per_client
    xs = [(mean + cfg.noise * rng.standard_normal((n, 1))).astype(np.float32) for mean in cfg.means]
    ys = [np.full(n, i, dtype=np.int64) for i in range(len(cfg.means))]  # the client's index: its "label"
    means = ",".join(f"{m:g}" for m in cfg.means)
    return split_clients(f"two_means({means})", xs, ys, cfg.val_fraction, max(len(cfg.means), 2), cfg.data_seed)


@schema("dataset", "two_means", generate_two_means)
class TwoMeansConfig(DatasetConfig):
    """FedLaAvg Example 1 (Sec. 3.1): learn the mean of 1-D data held by clients with different
    means; client i holds examples_per_client values mu_i (+ N(0, noise^2)), labelled i so that
    availability groups can name it. noise 0 gives the exact gradients of Thm. 1-2."""

    means: list[float] = field(default_factory=lambda: [0.0, 1.0])
    examples_per_client: int = 10
    noise: float = 0.0
    data_seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.means) >= 1, "dataset.means", self.means, "need one mean per client")
        require(self.examples_per_client >= 2, "dataset.examples_per_client", self.examples_per_client, "must be >= 2")
        require(self.noise >= 0, "dataset.noise", self.noise, "must be >= 0")
