"""One run: build data, task, client trainer, server algorithm and orchestrator from a Config,
simulate, evaluate, log, and return the summary."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from fl_bench.algorithms import build_algorithm
from fl_bench.client import ClientTrainer, LocalTraining
from fl_bench.config import Config, SyncConfig
from fl_bench.data import build_dataset
from fl_bench.delays import build_delay
from fl_bench.errors import DivergenceError
from fl_bench.models import build_model
from fl_bench.orchestrator import Orchestrator, Progress
from fl_bench.run_log import RunLog
from fl_bench.task import ClassificationTask


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def run_experiment(cfg: Config, run_dir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)  # model initialisation
    device = resolve_device(cfg.device)
    data = build_dataset(cfg.dataset, cfg.partition).to(device)
    model = build_model(cfg.model, data.input_shape, data.num_classes, data.vocab)
    task = ClassificationTask(model, data.num_classes, cfg.model.weight_decay, transform=data.transform).to(device)
    trainer = ClientTrainer(task, data, LocalTraining.from_config(cfg.algorithm), vmap=cfg.vmap_clients, chunk=cfg.vmap_chunk)
    over_selection = cfg.algorithm.over_selection if isinstance(cfg.algorithm, SyncConfig) else 0.0
    cohort = (cfg.algorithm.cohort or cfg.concurrency) if isinstance(cfg.algorithm, SyncConfig) else cfg.concurrency
    server = build_algorithm(cfg.algorithm, trainer.flat.clone(), cohort)

    reached: dict[str, float] = {}

    def on_eval(p: Progress) -> bool:
        trainer.load(server.params)
        loss, acc = task.evaluate(data.x_val, data.y_val)
        if not (math.isfinite(loss) and math.isfinite(acc)):
            raise DivergenceError(
                f"training diverged (validation loss {loss}) after {p.trips} trips, server step {p.server_step}: "
                f"lower algorithm.client_lr ({cfg.algorithm.client_lr}) or algorithm.server_lr ({cfg.algorithm.server_lr})"
            )
        log.metrics(dict(trips=p.trips, server_step=p.server_step, sim_time=p.sim_time, val_accuracy=acc, val_loss=loss))
        if acc >= cfg.target_accuracy and not reached:
            reached.update(trips=p.trips, sim_time=p.sim_time)
        bar.update(min(p.trips, cfg.max_trips) - bar.n)
        bar.set_postfix(acc=f"{acc:.3f}", step=p.server_step)
        return bool(reached) and cfg.stop_at_target

    # Built before the log and the bar: an impossible concurrency fails before any output.
    orchestrator = Orchestrator(
        server=server,
        trainer=trainer,
        client_sizes=data.sizes,
        delay=build_delay(cfg.delay),
        concurrency=cohort,
        rng=np.random.default_rng(cfg.seed),
        max_trips=cfg.max_trips,
        eval_every=cfg.eval_every,
        on_eval=on_eval,
        seed=cfg.seed,
        arrival_rate=cfg.arrival_rate,
        over_selection=over_selection,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    log = RunLog(run_dir, OmegaConf.to_container(OmegaConf.structured(cfg)), cfg.logger, cfg.wandb)
    bar = tqdm(total=cfg.max_trips, unit="trip", disable=not cfg.progress, dynamic_ncols=True)
    simulate_start = time.perf_counter()
    try:
        trips = orchestrator.run()
    finally:
        bar.close()
    simulate_seconds = time.perf_counter() - simulate_start
    final = log.rows[-1]
    summary = {
        "algorithm": cfg.algorithm.name,
        "dataset": data.name,
        "seed": cfg.seed,
        "concurrency": cfg.concurrency,
        "final_val_accuracy": final["val_accuracy"],
        "final_val_loss": final["val_loss"],
        "best_val_accuracy": max(row["val_accuracy"] for row in log.rows),  # FedGBO Table IV's max accuracy
        "client_trips": orchestrator.trips,
        "trips_trained": orchestrator.trained,  # more than client_trips when trips in flight at the end were trained
        "server_steps": server.version,
        "target_accuracy": cfg.target_accuracy,
        "max_trips": cfg.max_trips,
        # Search objective (Optuna, W&B sweeps): trips to target, or the whole budget when missed.
        "trips_to_target_or_budget": reached.get("trips", cfg.max_trips),
        "trips_to_target": reached.get("trips"),
        "sim_time_to_target": reached.get("sim_time"),
        "sim_time": orchestrator.now,
        "mean_staleness": float(np.mean(trips.columns()["staleness"])) if len(trips) else 0.0,
        "wall_seconds": time.perf_counter() - started,
        "simulate_seconds": simulate_seconds,  # the orchestrator loop: training, aggregation, evaluation
        "run_dir": str(run_dir),
    }
    log.finish(trips.columns(), summary)
    return summary
