"""Client trips per second: the full fl_bench orchestrator against a bare torch loop.

Three numbers: the bare loop, fl_bench's client trainer alone on the same clients, and the full
orchestrator (event queue, server algorithm, logging, two evaluations). The bare loop does the same local training (one epoch of minibatch SGD, batch B, from the same
starting model) on the same clients in the same order, and nothing else: no event queue, no
server algorithm, no logging. Usage:

    python benchmarks/throughput.py [hydra overrides...]   # default: the default run, 20k trips
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from fl_bench.cli import CONFIG_DIR
from fl_bench.client import ClientTrainer, LocalTraining
from fl_bench.data import build_dataset
from fl_bench.experiment import run_experiment
from fl_bench.models import build_model
from fl_bench.task import ClassificationTask


def bare_loop(cfg, clients: list[int]) -> float:
    """Trips per second of plain torch local SGD over ``clients``."""
    data = build_dataset(cfg.dataset, cfg.partition)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data.input_shape, data.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.algorithm.client_lr)
    start = parameters_to_vector(model.parameters()).detach().clone()
    bsz = cfg.algorithm.batch_size
    began = time.perf_counter()
    for client in clients:
        vector_to_parameters(start, model.parameters())
        x, y = data.client(client)
        perm = torch.randperm(len(y))
        for s in range(0, len(y), bsz):
            idx = perm[s : s + bsz]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
        _delta = start - parameters_to_vector(model.parameters())
    return len(clients) / (time.perf_counter() - began)


def trainer_only(cfg, clients: list[int], batch: int = 10) -> float:
    """Trips per second of fl_bench's client trainer alone (no event queue, no server)."""
    data = build_dataset(cfg.dataset, cfg.partition)
    torch.manual_seed(cfg.seed)
    task = ClassificationTask(build_model(cfg.model, data.input_shape, data.num_classes), data.num_classes)
    trainer = ClientTrainer(task, data, LocalTraining.from_config(cfg.algorithm), vmap=cfg.vmap_clients)
    start = trainer.flat.clone()
    began = time.perf_counter()
    for s in range(0, len(clients), batch):
        trainer.train(start, clients[s : s + batch], list(range(s, s + len(clients[s : s + batch]))))
    return len(clients) / (time.perf_counter() - began)


def main(overrides: list[str]) -> None:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = OmegaConf.to_object(compose("config", overrides=["progress=false", "eval_every=1000000", *overrides]))
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_experiment(cfg, Path(tmp))
        clients = pd.read_csv(Path(tmp) / "trips.csv").client.tolist()
    fl_tps = summary["client_trips"] / summary["simulate_seconds"]
    bare_tps = bare_loop(cfg, clients)
    trainer_tps = trainer_only(cfg, clients)
    print(f"workload: {summary['algorithm']} on {summary['dataset']}, model={cfg.model.name}, "
          f"concurrency={cfg.concurrency}, {len(clients)} trips, torch threads={torch.get_num_threads()}")
    print(f"bare torch loop      : {bare_tps:8.0f} trips/s")
    print(f"fl_bench trainer only: {trainer_tps:8.0f} trips/s")
    print(f"fl_bench orchestrator: {fl_tps:8.0f} trips/s  (vs bare loop {bare_tps / fl_tps - 1:+.1%} time per trip; "
          f"vs its own trainer {trainer_tps / fl_tps - 1:+.1%})")


if __name__ == "__main__":
    main(sys.argv[1:])
