"""Client trips per second: a bare torch loop against fl_bench, sequential and batched.

For each workload and concurrency it measures
  - bare loop: plain torch local SGD (one epoch, batch B, torch.optim.SGD) over random clients,
    from one starting model, and nothing else: no event queue, no server, no logging;
  - fl_bench sequential / batched: the full run (event loop, server algorithm, per-trip log, an
    evaluation at the start and the end) with ``vmap_clients=false`` / ``true``, as trips trained
    per second of simulation;
each in its own process, so the peak resident memory (VmHWM) is the cell's own.

and fl_bench auto: ``vmap_clients`` left to fl_bench.clients.hardware (what a run does by default), so
the table shows that auto never picks the slower path.

Workloads: ``logreg`` is the default synthetic dataset with logistic regression (60 features, 10
classes, about 109 examples per client); ``cnn`` is a FEMNIST-shaped stand-in (28x28 grey images,
62 classes, log-normal client sizes around 24 examples, no download) with FEMNIST's CNN
(``cnn_fedgbo``, 870k parameters); ``cnn4`` is a CelebA-shaped stand-in (LEAF's 9,343 celebrities,
3x32x32 images, 2 classes, about 21 images each) with FedBuff's 4-layer GroupNorm CNN (``cnn4``).

    python benchmarks/throughput.py                       # the matrix; --markdown FILE writes it
    python benchmarks/throughput.py --workloads logreg --concurrency 100 --algorithms fedbuff
    python benchmarks/throughput.py --accelerator cuda --workloads cnn cnn4   # on a GPU machine
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from stand_in import lognormal_sizes, rss_mb, write_stand_in

from fl_bench.analysis.report import machine
from fl_bench.clients.task import ClassificationTask
from fl_bench.data import build_dataset
from fl_bench.models import build_model
from fl_bench.runs.cli import CONFIG_DIR
from fl_bench.clients.hardware import resolve_accelerator
from fl_bench.runs.experiment import run_experiment

WORKLOADS = {
    "logreg": ["model=logreg"],
    "cnn": ["dataset=femnist", "dataset.max_users=null"],  # femnist's default model: cnn_fedgbo
    "cnn4": ["dataset=celeba"],  # celeba's default model: cnn4
    # Sent140's LSTM on frozen stand-in GloVe vectors (FedBuff Table 1's model)
    "lstm": ["dataset=sent140", "model.glove_path=${data_root}/glove.txt", "model.vocab_size=5000"],  # the stand-in GloVe: LSTM_WORDS
}
# FEMNIST's 3,000 writers, but about 24 examples each (FEMNIST has ~226) so CPU trips stay short.
CNN_USERS, CNN_MEAN_EXAMPLES, CNN_TEST_EXAMPLES = 3000, 24, 256
CELEBA_USERS, CELEBA_MEAN_EXAMPLES = 9343, 21  # LEAF CelebA: 200,288 images of 9,343 celebrities
LSTM_USERS, LSTM_MEAN_EXAMPLES, LSTM_TOKENS, LSTM_WORDS = 3000, 20, 25, 5000  # tweets of 25 tokens


def compose_config(workload: str, root: str, overrides: list[str]):
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=[
            "progress=false", f"data_root={root}", *WORKLOADS[workload], *overrides,
        ]))


def bare_loop(cfg, trips: int) -> float:
    """Trips per second of plain torch local SGD over uniformly drawn clients."""
    device = torch.device(resolve_accelerator(cfg.accelerator, cfg.devices, math.inf)[0])  # as a run's, auto: a GPU if any
    data = build_dataset(cfg.dataset, cfg.partition).to(device)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data.input_shape, data.num_classes, data.vocab).to(device)
    prep = ClassificationTask(model, data.num_classes, transform=data.transform).inputs  # uint8 -> float images
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=cfg.algorithm.client_lr)
    start = [p.detach().clone() for p in model.parameters()]
    clients = np.random.default_rng(cfg.seed).integers(0, data.num_clients, trips)
    bsz = cfg.algorithm.batch_size
    began = time.perf_counter()
    for client in clients:
        with torch.no_grad():
            for p, p0 in zip(model.parameters(), start):
                p.copy_(p0)
        x, y = data.client(int(client))
        perm = torch.randperm(len(y), device=device)
        for s in range(0, len(y), bsz):
            idx = perm[s : s + bsz]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(prep(x[idx], True)), y[idx]).backward()
            opt.step()
        _delta = [p0 - p.detach() for p, p0 in zip(model.parameters(), start)]
    if device.type == "cuda":
        torch.cuda.synchronize()
    return trips / (time.perf_counter() - began)


def measure(cell: dict) -> dict:
    """One cell, in this process: {'trips_per_s', 'peak_rss_mb'}."""
    cfg = compose_config(cell["workload"], cell["root"], cell["overrides"])
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    batched, device = None, resolve_accelerator(cfg.accelerator, cfg.devices, math.inf)[0]
    if cell["path"] == "bare":
        tps = bare_loop(cfg, cell["trips"])
    else:
        with tempfile.TemporaryDirectory() as run_dir:
            summary = run_experiment(cfg, Path(run_dir))
        # Trips trained per second: a run trains every trip started before the last upload it
        # needs, so at concurrency 1000 a short run also trains up to 1000 trips it never uses.
        tps = summary["trips_trained"] / summary["simulate_seconds"]
        batched, device = summary["vmap_clients"], summary["device"]
    return {"trips_per_s": tps, "peak_rss_mb": rss_mb("VmHWM"), "threads": torch.get_num_threads(),
            "device": str(device), "batched": batched}


def run_cell(cell: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--cell", json.dumps(cell)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"cell {cell} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def prepare_stand_ins(root: str, workloads: list[str]) -> None:
    if "cnn" in workloads:
        cfg = compose_config("cnn", root, [])
        rng = np.random.default_rng(0)
        sizes = lognormal_sizes(CNN_USERS, CNN_MEAN_EXAMPLES, 0.5, rng)
        write_stand_in(cfg.dataset, sizes, (1, 28, 28), 62, rng, test_examples=CNN_TEST_EXAMPLES)
    if "cnn4" in workloads:
        cfg = compose_config("cnn4", root, [])
        rng = np.random.default_rng(0)
        sizes = lognormal_sizes(CELEBA_USERS, CELEBA_MEAN_EXAMPLES, 0.5, rng)
        write_stand_in(cfg.dataset, sizes, (3, 32, 32), 2, rng, test_examples=CNN_TEST_EXAMPLES)
    if "lstm" in workloads:
        cfg = compose_config("lstm", root, [])
        rng = np.random.default_rng(0)
        words = [f"w{i}" for i in range(LSTM_WORDS)]
        vectors = rng.standard_normal((LSTM_WORDS, cfg.model.embed_dim)).astype(np.float32)
        Path(cfg.model.glove_path).write_text("".join(f"{w} " + " ".join(f"{v:.3f}" for v in row) + "\n"
                                                      for w, row in zip(words, vectors)))
        sizes = lognormal_sizes(LSTM_USERS, LSTM_MEAN_EXAMPLES, 0.5, rng)
        write_stand_in(cfg.dataset, sizes, (LSTM_TOKENS,), 2, rng, dtype=np.int32, high=LSTM_WORDS + 2,
                       vocab=["<pad>", "<unk>", *words], test_examples=CNN_TEST_EXAMPLES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    parser.add_argument("--workloads", nargs="+", default=["logreg", "cnn", "cnn4"], choices=list(WORKLOADS))
    parser.add_argument("--concurrency", nargs="+", type=int, default=[10, 100, 1000])
    parser.add_argument("--algorithms", nargs="+", default=["fedbuff", "fedavg"])
    parser.add_argument("--trips", type=json.loads, default={"logreg": 20_000, "cnn": 3_000, "cnn4": 3_000, "lstm": 3_000},
                        help='client trips per run, per workload (JSON), default {"logreg": 20000, "cnn": 3000, '
                             '"cnn4": 3000, "lstm": 3000}')
    parser.add_argument("--accelerator", default="cpu", help="accelerator of every run: cpu (default), cuda or auto")
    parser.add_argument("--markdown", type=Path, help="also write the table (and the machine) to this file")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. accelerator=cuda threads=2")
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(measure(json.loads(args.cell))))
        return
    args.overrides = [f"accelerator={args.accelerator}", *args.overrides]
    rows, began = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        prepare_stand_ins(root, args.workloads)
        for workload in args.workloads:
            trips = args.trips[workload]
            base = {"workload": workload, "root": root, "trips": trips}
            bare = run_cell({**base, "path": "bare", "trips": min(trips, 2000), "overrides": args.overrides})
            for algorithm in args.algorithms:
                for m in args.concurrency:
                    row = {"workload": workload, "algorithm": algorithm, "concurrency": m,
                           "bare loop trips/s": bare["trips_per_s"]}
                    for path, vmap in (("sequential", "false"), ("batched", "true"), ("auto", "null")):
                        overrides = [f"algorithm={algorithm}", f"concurrency={m}", f"max_trips={trips}",
                                     f"eval_every={trips}", f"vmap_clients={vmap}", *args.overrides]
                        result = run_cell({**base, "path": path, "overrides": overrides})
                        row[f"{path} trips/s"] = result["trips_per_s"]
                        if path != "auto":
                            row[f"{path} peak MB"] = result["peak_rss_mb"]
                    row["auto picks"] = "batched" if result["batched"] else "sequential"
                    row["sequential / bare"] = row["sequential trips/s"] / bare["trips_per_s"]
                    row["batched / bare"] = row["batched trips/s"] / bare["trips_per_s"]
                    rows.append(row)
                    print(pd.DataFrame([row]).to_string(index=False, header=len(rows) == 1, float_format="%.2f"), flush=True)
    table = pd.DataFrame(rows)
    header = (f"Machine: {machine()}; torch threads {bare['threads']}, device {bare['device']}. "
              f"{datetime.date.today()}, {time.perf_counter() - began:.0f} s in all.\n"
              f"Command: `python benchmarks/throughput.py {' '.join(sys.argv[1:])}`")
    print(header)
    print(table.to_markdown(index=False, floatfmt=".2f"))
    if args.markdown:
        args.markdown.write_text(f"{header}\n\n{table.to_markdown(index=False, floatfmt='.2f')}\n")


if __name__ == "__main__":
    main()
