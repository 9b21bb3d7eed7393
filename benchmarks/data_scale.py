"""Load time and memory of a Sent140-sized federated dataset (a generated stand-in, no download).

Writes a prepared cache shaped like LEAF's full Sent140 (660,120 users, 1.6M tweets of up to 48
token ids, heavy-tailed tweets per user) under a temporary data root, then times what a run does:
open the cache and build the natural partition (``build_dataset``), and read random clients.

    python benchmarks/data_scale.py [--users 660120] [--examples 1600000]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from fl_bench.cli import CONFIG_DIR
from fl_bench.data import build_dataset
from fl_bench.data.cache import save_prepared
from fl_bench.data.federated import Examples
from fl_bench.data.sources import cache_dir


def rss_mb() -> float:
    """Resident set size now (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stand_in(users: int, examples: int, tokens: int, rng: np.random.Generator) -> tuple[Examples, Examples]:
    # Every user has >= 1 tweet; the rest are spread with a Zipf-like tail, as in Sent140.
    extra = rng.zipf(2.0, users).astype(np.float64)
    sizes = 1 + np.floor(extra / extra.sum() * (examples - users)).astype(np.int64)
    sizes[: examples - sizes.sum()] += 1
    user = np.repeat(np.arange(users), sizes)
    x = rng.integers(2, 50_000, (len(user), tokens), dtype=np.int32)
    y = rng.integers(0, 2, len(user))
    test = Examples(x[: examples // 10], y[: examples // 10])
    return Examples(x, y, user=user), test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=660_120)
    parser.add_argument("--examples", type=int, default=1_600_000)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = OmegaConf.to_object(compose("config", overrides=["dataset=sent140", f"data_root={root}"]))
        train, test = stand_in(args.users, args.examples, args.tokens, np.random.default_rng(0))
        started = time.perf_counter()
        save_prepared(cache_dir(cfg.dataset), train, test, {"source": "sent140", "stand_in": True}, ["<pad>", "<unk>"])
        write_s = time.perf_counter() - started
        size_mb = sum(f.stat().st_size for f in Path(cache_dir(cfg.dataset)).iterdir()) / 2**20
        del train, test
        rss_before = rss_mb()
        started = time.perf_counter()
        data = build_dataset(cfg.dataset, cfg.partition)
        load_s = time.perf_counter() - started
        rss_loaded = rss_mb()
        rng = np.random.default_rng(1)
        picks = rng.integers(0, data.num_clients, 10_000)
        started = time.perf_counter()
        rows = sum(len(data.client(int(c))[1]) for c in picks)
        client_us = (time.perf_counter() - started) / len(picks) * 1e6
        print(f"clients {data.num_clients:,} | train examples {len(data.y):,} | cache {size_mb:,.0f} MB (written in {write_s:.1f} s)")
        print(f"build_dataset (open cache + natural partition): {load_s:.2f} s, RSS +{rss_loaded - rss_before:,.0f} MB")
        print(f"random client access: {client_us:.1f} us per client ({rows / len(picks):.1f} examples on average)")
        print(f"peak RSS of this process (includes generating the stand-in): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:,.0f} MB")


if __name__ == "__main__":
    main()
