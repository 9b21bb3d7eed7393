"""Memory and load time at Sent140 scale (a generated stand-in, no download).

Writes a prepared cache shaped like LEAF's full Sent140 (660,120 users, 1.6M tweets of up to 48
token ids, heavy-tailed tweets per user) under a temporary data root, then measures what a run
does: open the cache and build the natural partition (``build_dataset``), read random clients,
and a FedBuff run over all 660k registered clients at concurrency 1000 (FedBuff Table 1's
setting) with its peak resident memory.

    python benchmarks/data_scale.py [--users 660120] [--examples 1600000] [--trips 5000] [overrides...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from stand_in import heavy_tailed_sizes, rss_mb, write_stand_in

from fl_bench.data import build_dataset
from fl_bench.runs.cli import CONFIG_DIR
from fl_bench.runs.experiment import run_experiment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=660_120)
    parser.add_argument("--examples", type=int, default=1_600_000)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--trips", type=int, default=5000, help="client trips of the concurrency-1000 run")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the run (default: sent140's LSTM on frozen "
                        "stand-in GloVe vectors, as FedBuff Table 1; model.embedding=random trains a 3M-parameter embedding)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        glove = Path(root) / "glove.txt"  # random vectors for the stand-in's words: FedBuff's frozen-GloVe model
        overrides = ["dataset=sent140", f"data_root={root}", f"model.glove_path={glove}", "concurrency=1000",
                     f"max_trips={args.trips}", f"eval_every={args.trips}", "progress=false", *args.overrides]
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = OmegaConf.to_object(compose("config", overrides=overrides))
        rng = np.random.default_rng(0)
        started = time.perf_counter()
        vocab = ["<pad>", "<unk>"] + [f"w{i}" for i in range(20_000)]
        vectors = rng.standard_normal((cfg.model.vocab_size, cfg.model.embed_dim)).astype(np.float32)
        glove.write_text("".join(f"w{i} " + " ".join(f"{v:.4f}" for v in row) + "\n" for i, row in enumerate(vectors)))
        directory = write_stand_in(cfg.dataset, heavy_tailed_sizes(args.users, args.examples, rng), (args.tokens,), 2,
                                   rng, dtype=np.int32, high=len(vocab), vocab=vocab, test_examples=20_000)
        write_s = time.perf_counter() - started
        size_mb = sum(f.stat().st_size for f in Path(directory).iterdir()) / 2**20
        rss_before = rss_mb()
        started = time.perf_counter()
        data = build_dataset(cfg.dataset, cfg.partition)
        load_s = time.perf_counter() - started
        rss_loaded = rss_mb()
        picks = rng.integers(0, data.num_clients, 10_000)
        started = time.perf_counter()
        rows = sum(len(data.client(int(c))[1]) for c in picks)
        client_us = (time.perf_counter() - started) / len(picks) * 1e6
        print(f"clients {data.num_clients:,} | train examples {len(data.y):,} | cache {size_mb:,.0f} MB (written in {write_s:.1f} s)")
        print(f"build_dataset (open cache + natural partition): {load_s:.2f} s, RSS +{rss_loaded - rss_before:,.0f} MB")
        print(f"random client access: {client_us:.1f} us per client ({rows / len(picks):.1f} examples on average)")
        num_clients = data.num_clients
        del data
        torch.set_num_threads(cfg.threads or torch.get_num_threads())
        rss_before = rss_mb()
        summary = run_experiment(cfg, Path(root) / "run")
        print(f"run: {cfg.algorithm.name}, model={cfg.model.name}, vmap_clients={cfg.vmap_clients}, "
              f"{summary['client_trips']:,} trips over {num_clients:,} registered clients "
              f"at concurrency {cfg.concurrency}: {summary['client_trips'] / summary['simulate_seconds']:,.0f} trips/s, "
              f"RSS {rss_before:,.0f} MB before the run, {rss_mb():,.0f} MB after; "
              f"peak RSS of the process {rss_mb('VmHWM'):,.0f} MB (includes generating the stand-in)")
        print(f"engine population arrays for {num_clients:,} clients: {summary['population_bytes'] / 2**20:.1f} MB "
              f"(idle pool, availability, busy flags, last selection); server per-client state "
              f"{summary['client_state_bytes'] / 2**20:.1f} MB")


if __name__ == "__main__":
    main()
