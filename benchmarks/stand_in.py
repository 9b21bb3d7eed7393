"""Generated stand-ins for prepared real datasets, so benchmarks run at paper scale offline.

Clients get LEAF-like heavy-tailed sizes; examples are random (content does not change speed).
The stand-in is written where ``prepare`` would put the real cache, so a run reads it through the
same code path as real data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fl_bench.data.cache import save_prepared
from fl_bench.data.federated import Examples
from fl_bench.data.sources import RealDatasetConfig, cache_dir


def heavy_tailed_sizes(users: int, examples: int, rng: np.random.Generator) -> np.ndarray:
    """Every user has >= 1 example; the rest are spread with a Zipf-like tail (as in Sent140)."""
    extra = rng.zipf(2.0, users).astype(np.float64)
    sizes = 1 + np.floor(extra / extra.sum() * (examples - users)).astype(np.int64)
    sizes[: examples - sizes.sum()] += 1
    return sizes


def lognormal_sizes(users: int, mean: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Client sizes >= 1 with a log-normal spread around ``mean`` (as LEAF's FEMNIST writers)."""
    raw = rng.lognormal(0.0, sigma, users)
    return np.maximum(1, np.round(raw / raw.mean() * mean)).astype(np.int64)


def write_stand_in(
    dataset: RealDatasetConfig,
    sizes: np.ndarray,
    example_shape: tuple[int, ...],
    num_classes: int,
    rng: np.random.Generator,
    *,
    dtype=np.uint8,
    high: int = 256,
    vocab: list[str] | None = None,
    test_examples: int = 2000,
) -> Path:
    """Write a cache of ``sum(sizes)`` random examples of ``example_shape`` (values in [0, high))."""
    low = 2 if vocab else 0  # token ids 0/1 are <pad>/<unk>
    x = rng.integers(low, high, (int(sizes.sum()), *example_shape), dtype=dtype)
    y = rng.integers(0, num_classes, len(x))
    train = Examples(x, y, user=np.repeat(np.arange(len(sizes)), sizes))
    test = Examples(x[:test_examples], y[:test_examples])
    directory = cache_dir(dataset)
    save_prepared(directory, train, test, {"source": dataset.source, "stand_in": True}, vocab)
    return directory


def rss_mb(field: str = "VmRSS") -> float:
    """Resident memory now (VmRSS) or its peak (VmHWM), in MB, from Linux /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")
