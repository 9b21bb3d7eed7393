"""Synthetic(gamma, xi) (Shamir et al. 2014; Li et al. 2020), generated, so it needs no download.

Per device i (SPEC.md section 3): u_i ~ N(0, gamma), W_i ~ N(u_i, 1) (dim x classes),
b_i ~ N(u_i, 1); B_i ~ N(0, xi), v_i ~ N(B_i, 1); x ~ N(v_i, Sigma) with Sigma_jj = j^-1.2;
y = argmax softmax(W_i^T x + b_i). gamma and xi are used as standard deviations, as in Li et al.'s
generator (identical at the default gamma = xi = 1). With ``shared_labelling`` one W, b labels every
device (Li et al.'s Synthetic-IID labelling) and only the inputs differ between devices (xi). With
``num_centres`` = k the devices share k input centres, device i drawing around centre i mod k (each
centre v_c ~ N(B_c, 1), B_c ~ N(0, xi), on a stream of its own): every centre is then several devices'
data, as every label of FashionMNIST split two labels a device over 100 devices is (HFL Sec. 5), so a
straggler's data is also normal devices' data.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from fl_bench.data.federated import DatasetConfig, FederatedData, split_clients
from fl_bench.data.partition import PartitionConfig, require_natural
from fl_bench.schema import require, schema


def client_sizes(cfg: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    """Heavy-tailed sizes: min_examples + LogNormal(size_mu, size_sigma)."""
    return cfg.min_examples + rng.lognormal(cfg.size_mu, cfg.size_sigma, cfg.num_clients).astype(np.int64)


def shared_labelling(cfg: SyntheticConfig) -> tuple[np.ndarray, np.ndarray]:
    """The one W ~ N(0, 1), b ~ N(0, 1) of every device, drawn from the data seed on a stream of its
    own. No u: a mean u shifts every class's score alike (u (sum x + 1)), so argmax ignores it."""
    rng = np.random.default_rng([cfg.data_seed, 1])
    return rng.normal(0.0, 1.0, (cfg.dim, cfg.num_classes)), rng.normal(0.0, 1.0, cfg.num_classes)


def shared_centres(cfg: SyntheticConfig) -> np.ndarray:
    """The ``num_centres`` input centres v_c ~ N(B_c, 1), B_c ~ N(0, xi) that devices share, drawn from
    the data seed on a stream of their own."""
    rng = np.random.default_rng([cfg.data_seed, 2])
    return rng.normal(rng.normal(0.0, cfg.xi, cfg.num_centres)[:, None], 1.0, (cfg.num_centres, cfg.dim))


def generate_synthetic(cfg: SyntheticConfig, partition: PartitionConfig | None = None) -> FederatedData:
    """Generated clients, each its own distribution: ``partition`` (if given) must be natural."""
    require_natural(cfg, partition)
    rng = np.random.default_rng(cfg.data_seed)
    sizes = client_sizes(cfg, rng)
    u = rng.normal(0.0, cfg.gamma, cfg.num_clients)
    v_center = rng.normal(0.0, cfg.xi, cfg.num_clients)
    std_x = np.arange(1, cfg.dim + 1, dtype=np.float64) ** (-1.2 / 2)
    shared = shared_labelling(cfg) if cfg.shared_labelling else None
    centres = shared_centres(cfg) if cfg.num_centres is not None else None
    xs, ys = [], []
    for i, n in enumerate(sizes):
        if shared is None:  # the device's own labelling
            w = rng.normal(u[i], 1.0, (cfg.dim, cfg.num_classes))
            b = rng.normal(u[i], 1.0, cfg.num_classes)
        else:
            w, b = shared
        v = rng.normal(v_center[i], 1.0, cfg.dim)
        if centres is not None:  # (v is still drawn: the devices' sizes and noise stay those of the default)
            v = centres[i % cfg.num_centres]
        x = v + std_x * rng.standard_normal((n, cfg.dim))
        xs.append(x.astype(np.float32))
        ys.append(np.argmax(x @ w + b, axis=1).astype(np.int64))  # softmax is monotone
    name = (f"synthetic({cfg.gamma:g},{cfg.xi:g})" + (" shared labelling" if cfg.shared_labelling else "")
            + (f" {cfg.num_centres} shared centres" if cfg.num_centres is not None else ""))
    return split_clients(name, xs, ys, cfg.val_fraction, cfg.num_classes, cfg.data_seed)


@schema("dataset", "synthetic", generate_synthetic)
class SyntheticConfig(DatasetConfig):
    """Synthetic(gamma, xi) of Shamir et al. / Li et al. (SPEC.md section 3)."""

    gamma: float = 1.0
    xi: float = 1.0
    num_clients: int = 1000
    dim: int = 60
    num_classes: int = 10
    # Client sizes: min_examples + LogNormal(size_mu, size_sigma), a heavy (power-law-like) tail;
    # the defaults give ~109 training examples per client on average.
    min_examples: int = 20
    size_mu: float = 4.25
    size_sigma: float = 1.0
    data_seed: int = 0
    # One labelling W, b for every device (Li et al.'s Synthetic-IID labels; the inputs keep xi's
    # heterogeneity): labels are then a shared function of x, as in FashionMNIST. false: W_i, b_i per device.
    shared_labelling: bool = False
    # Input centres the devices share (device i draws around centre i mod num_centres); null: each device
    # its own centre v_i, as Li et al.'s generator
    num_centres: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.gamma >= 0, "dataset.gamma", self.gamma, "must be >= 0")
        require(self.xi >= 0, "dataset.xi", self.xi, "must be >= 0")
        require(self.num_clients >= 1, "dataset.num_clients", self.num_clients, "must be >= 1")
        require(self.dim >= 1, "dataset.dim", self.dim, "must be >= 1")
        require(self.num_classes >= 2, "dataset.num_classes", self.num_classes, "must be >= 2")
        require(self.num_centres is None or 1 <= self.num_centres <= self.num_clients, "dataset.num_centres",
                self.num_centres, f"must be null (a centre per device) or an integer in [1, num_clients = {self.num_clients}]")
        require(self.min_examples >= 2, "dataset.min_examples", self.min_examples, "must be >= 2")
        # gamma spreads the per-device labellings, which shared_labelling replaces by one: a gamma
        # other than 0 would be ignored and the run mislabelled Synthetic(gamma, xi).
        require(not self.shared_labelling or self.gamma == 0, "dataset.gamma", self.gamma,
                 "must be 0 with dataset.shared_labelling=true (one labelling for every device)")
