"""Synthetic(gamma, xi) (Shamir et al. 2014; Li et al. 2020), generated, so it needs no download.

Per device i (SPEC.md section 3): u_i ~ N(0, gamma), W_i ~ N(u_i, 1) (dim x classes),
b_i ~ N(u_i, 1); B_i ~ N(0, xi), v_i ~ N(B_i, 1); x ~ N(v_i, Sigma) with Sigma_jj = j^-1.2;
y = argmax softmax(W_i^T x + b_i). gamma and xi are used as standard deviations, as in Li et al.'s
generator (identical at the default gamma = xi = 1). With ``shared_labelling`` one W, b labels every
device (Li et al.'s Synthetic-IID labelling) and only the inputs differ between devices (xi).
"""

from __future__ import annotations

import numpy as np

from fl_bench.config import SyntheticConfig
from fl_bench.data.federated import FederatedData, split_clients


def client_sizes(cfg: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    """Heavy-tailed sizes: min_examples + LogNormal(size_mu, size_sigma)."""
    return cfg.min_examples + rng.lognormal(cfg.size_mu, cfg.size_sigma, cfg.num_clients).astype(np.int64)


def shared_labelling(cfg: SyntheticConfig) -> tuple[np.ndarray, np.ndarray]:
    """The one W ~ N(0, 1), b ~ N(0, 1) of every device, drawn from the data seed on a stream of its
    own. No u: a mean u shifts every class's score alike (u (sum x + 1)), so argmax ignores it."""
    rng = np.random.default_rng([cfg.data_seed, 1])
    return rng.normal(0.0, 1.0, (cfg.dim, cfg.num_classes)), rng.normal(0.0, 1.0, cfg.num_classes)


def generate_synthetic(cfg: SyntheticConfig) -> FederatedData:
    rng = np.random.default_rng(cfg.data_seed)
    sizes = client_sizes(cfg, rng)
    u = rng.normal(0.0, cfg.gamma, cfg.num_clients)
    v_center = rng.normal(0.0, cfg.xi, cfg.num_clients)
    std_x = np.arange(1, cfg.dim + 1, dtype=np.float64) ** (-1.2 / 2)
    shared = shared_labelling(cfg) if cfg.shared_labelling else None
    xs, ys = [], []
    for i, n in enumerate(sizes):
        if shared is None:  # the device's own labelling
            w = rng.normal(u[i], 1.0, (cfg.dim, cfg.num_classes))
            b = rng.normal(u[i], 1.0, cfg.num_classes)
        else:
            w, b = shared
        v = rng.normal(v_center[i], 1.0, cfg.dim)
        x = v + std_x * rng.standard_normal((n, cfg.dim))
        xs.append(x.astype(np.float32))
        ys.append(np.argmax(x @ w + b, axis=1).astype(np.int64))  # softmax is monotone
    name = f"synthetic({cfg.gamma:g},{cfg.xi:g})" + (" shared labelling" if cfg.shared_labelling else "")
    return split_clients(name, xs, ys, cfg.val_fraction, cfg.num_classes, cfg.data_seed)
