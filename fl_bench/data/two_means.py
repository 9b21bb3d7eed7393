"""FedLaAvg Example 1's data (Sec. 3.1), generated: client i holds 1-D values around mu_i."""

from __future__ import annotations

import numpy as np

from fl_bench.config import TwoMeansConfig
from fl_bench.data.federated import FederatedData, split_clients


def generate_two_means(cfg: TwoMeansConfig) -> FederatedData:
    rng = np.random.default_rng(cfg.data_seed)
    n = cfg.examples_per_client
    xs = [(mean + cfg.noise * rng.standard_normal((n, 1))).astype(np.float32) for mean in cfg.means]
    ys = [np.full(n, i, dtype=np.int64) for i in range(len(cfg.means))]  # the client's index: its "label"
    means = ",".join(f"{m:g}" for m in cfg.means)
    return split_clients(f"two_means({means})", xs, ys, cfg.val_fraction, max(len(cfg.means), 2), cfg.data_seed)
