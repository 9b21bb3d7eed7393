"""What a user's LightningModule costs as the client task (issue 56, item 4): the same MLP on
``dataset=digits``, the same trips, through

  (a) the built-in task one trip at a time (``vmap_clients=false``),
  (b) the built-in batched path (``vmap_clients=true``),
  (c) ``task=lightning`` with :class:`PlainMLP`, a LightningModule in Lightning's documented style
      (``training_step`` returning the loss, ``configure_optimizers`` returning SGD), which takes the
      model group's network, so that its trips compute what (a)'s do, batched over clients
      (fl_bench.clients.lightning_batched, ``vmap_clients=true``; auto chooses it for this module too),
  (e) the same module one trip at a time (``vmap_clients=false``);

and, with ``--logged``, (d) the module of (c) with ``self.log("train_loss", loss)`` in its step.
Each run is a whole ``run_experiment`` (event loop, server, per-trip log, evaluations) in its own
process; trips/s is trips trained per second of simulation (summary.json's ``simulate_seconds``).
The paths run interleaved, ``--repeats`` times; the table gives the median of each, and ``time x (a)``,
``time x (b)``: how many times (a)'s, (b)'s time per trip a path takes (ratios of the medians).

    python benchmarks/lightning_cost.py --trips 1000 --repeats 5
    python benchmarks/lightning_cost.py --profile 300   # cProfile of (c)'s trips, top 25 by own time

Run it on a machine with nothing else heavy running (or say what ran beside it); the figures go to
results/benchmarks.md.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent
sys.path[1:1] = [str(HERE.parent)]  # this checkout's fl_bench (not an installed one); this folder stays first
COMMON = ["dataset=digits", "model=mlp", "accelerator=cpu", "progress=false", "logger=csv"]


class PlainMLP(L.LightningModule):
    """A LightningModule as Lightning's docs write one: the network as a constructor argument (here
    the model group's MLP), the loss returned by ``training_step``, SGD from ``configure_optimizers``."""

    def __init__(self, model: nn.Module, lr: float = 0.05, log: bool = False):
        super().__init__()
        self.save_hyperparameters(ignore=["model"])
        self.model = model

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        if self.hparams.log:
            self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


PATHS = {
    "a": ("built-in, one trip at a time", ["vmap_clients=false"]),
    "b": ("built-in, batched", ["vmap_clients=true"]),
    "c": ("task=lightning, PlainMLP, batched", ["task=lightning", "task.module._target_=lightning_cost.PlainMLP",
                                                 "vmap_clients=true"]),
    "d": ("task=lightning, PlainMLP with self.log, batched", ["task=lightning",
                                                              "task.module._target_=lightning_cost.PlainMLP",
                                                              "+task.module.log=true", "vmap_clients=true"]),
    "e": ("task=lightning, PlainMLP, one trip at a time", ["task=lightning",
                                                           "task.module._target_=lightning_cost.PlainMLP",
                                                           "vmap_clients=false"]),
}


def config(path: str, trips: int, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from fl_bench.runs.cli import CONFIG_DIR

    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        base = compose("config", overrides=[*COMMON, *overrides])
        lr = base.algorithm.client_lr  # the module's SGD at the built-in task's lr: the same trips
        extra = [f"+task.module.lr={lr}"] if path in ("c", "d", "e") else []
        return OmegaConf.to_object(compose("config", overrides=[
            *COMMON, *PATHS[path][1], *extra, f"max_trips={trips}", f"eval_every={trips}", *overrides]))


def measure(path: str, trips: int, overrides: list[str]) -> dict:
    """One run of ``path`` in this process: trips/s and the final validation accuracy."""
    from fl_bench.runs.experiment import run_experiment

    cfg = config(path, trips, overrides)
    with tempfile.TemporaryDirectory() as run_dir:
        summary = run_experiment(cfg, Path(run_dir))
    return {"trips_per_s": summary["trips_trained"] / summary["simulate_seconds"],
            "trips": summary["trips_trained"], "accuracy": summary["final_val_accuracy"]}


def profile(trips: int, overrides: list[str], top: int = 25) -> None:
    """cProfile of (c)'s trips alone (the trainer's ``train``), sorted by own time."""
    from fl_bench.numerics import kernels
    from fl_bench.runs.experiment import build_experiment

    cfg = config("c", trips, overrides)
    with kernels(cfg.numerics, cfg.threads):  # (as a run: threads=1 by default)
        exp = build_experiment(cfg, on_eval=lambda progress: False)
        trainer, start = exp.trainer, exp.server.broadcast()
        clients = [i % exp.data.num_clients for i in range(trips)]
        trainer.train([start] * 20, clients[:20], list(range(20)))  # warm up
        profiler = cProfile.Profile()
        began = time.perf_counter()
        profiler.enable()
        for i in range(0, trips, 10):
            trainer.train([start] * 10, clients[i: i + 10], list(range(1000 + i, 1010 + i)))
        profiler.disable()
    print(f"{trips} trips in {time.perf_counter() - began:.2f} s (under cProfile)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    parser.add_argument("--trips", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--logged", action="store_true", help="also (d): the module with self.log in its step")
    parser.add_argument("--paths", nargs="+", default=["a", "b", "c", "e"], choices=list(PATHS), help="paths to run")
    parser.add_argument("--profile", type=int, metavar="TRIPS", help="cProfile (c)'s trips instead")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. algorithm=fedavg")
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(measure(args.cell, args.trips, args.overrides)))
        return
    if args.profile:
        profile(args.profile, args.overrides)
        return
    paths = args.paths + (["d"] if args.logged and "d" not in args.paths else [])
    results: dict[str, list[dict]] = {path: [] for path in paths}
    began = time.perf_counter()
    for repeat in range(args.repeats):
        for path in paths:  # interleaved, so that a change in load falls on every path alike
            out = subprocess.run([sys.executable, __file__, "--cell", path, "--trips", str(args.trips), *args.overrides],
                                 capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(f"path {path} failed:\n{out.stderr[-3000:]}")
            results[path].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"repeat {repeat}: ({path}) {results[path][-1]['trips_per_s']:.0f} trips/s", file=sys.stderr, flush=True)
    median = {path: statistics.median(r["trips_per_s"] for r in results[path]) for path in paths}
    from fl_bench.analysis.report import machine

    print(f"Machine: {machine()}; {datetime.date.today()}, {time.perf_counter() - began:.0f} s in all, load average "
          f"{os.getloadavg()[0]:.1f} at the end.\nCommand: `python benchmarks/lightning_cost.py {' '.join(sys.argv[1:])}`"
          f" ({args.trips} trips a run, median of {args.repeats}, paths interleaved)\n")
    # the ratios as costs: how many times (a)'s and (b)'s time per trip a path's takes
    ratios = [path for path in ("a", "b") if path in paths]
    print("| path | trips/s (median) | runs' trips/s | final val accuracy |" + "".join(f" time x ({p}) |" for p in ratios))
    print("|---|---:|---:|---:|" + "---:|" * len(ratios))
    for path in paths:
        runs = ", ".join(f"{r['trips_per_s']:.0f}" for r in results[path])
        accuracy = ", ".join(sorted({f"{r['accuracy']:.4f}" for r in results[path]}))
        print(f"| ({path}) {PATHS[path][0]} | {median[path]:.0f} | {runs} | {accuracy} |"
              + "".join(f" {median[p] / median[path]:.2f} |" for p in ratios))


if __name__ == "__main__":
    main()
