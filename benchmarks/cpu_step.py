"""What a CNN / LSTM client trip's step can gain on a CPU (issue 31, item 6): one trip as fl_bench's
sequential trainer runs it (forward, cross-entropy, ``torch.autograd.grad``, a foreach SGD step), timed
against the same trip with channels-last memory, ``torch.compile`` (inductor) of the model, and both.

Every variant starts from the same model, trains on the same minibatches with dropout off (a compiled
or channels-last model draws its dropout masks in another order: same distribution, other draws), and
its Delta is compared with eager's (max abs difference, relative L2). Trips/s is the median over
``--repeats`` timed blocks of ``--trips`` trips each, the variants' blocks interleaved after every
variant's warm-up (a variant timed first alone ran 4x slower here than in its second minute);
compilation is excluded and reported apart, as a run pays it once. These are the raw steps: a run's
trips/s also pays data transforms, the event loop and aggregation (benchmarks/pfl_baseline.py).

    .venv/bin/python benchmarks/cpu_step.py --workload cnn_pfl --threads 2 [--json out.json]
    .venv/bin/python benchmarks/cpu_step.py --workload lstm --threads 2

Workloads: ``cnn_pfl`` is pfl-research's CIFAR-10 benchmark trip (benchmarks/pfl_baseline.py: 50
images 3x32x32, batch 10, 5 steps, lr 0.1, model=cnn_pfl); ``lstm`` is Sent140's (25-token sequences,
batch 10, 5 steps; model=sent140_lstm with a trained random embedding).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.nn import functional as F

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from fl_bench.models import build_model
from fl_bench.runs.cli import CONFIG_DIR

WORKLOADS = {
    # model overrides, input shape, number of classes, token ids drawn below (token models)
    "cnn_pfl": (("model=cnn_pfl",), (3, 32, 32), 10, None),
    "lstm": (("model=sent140_lstm", "model.embedding=random"), (25,), 2, 10002),
}


def build(workload: str, channels_last: bool, compiled: bool, seed: int = 0):
    overrides, shape, classes, _ = WORKLOADS[workload]
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = OmegaConf.to_object(compose("config", overrides=list(overrides)))
    torch.manual_seed(seed)
    model = build_model(cfg.model, shape, classes, None)
    model.eval()  # dropout off: every variant draws the same (no) masks
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    forward = torch.compile(model) if compiled else model
    return model, forward


def batches(workload: str, steps: int = 5, batch: int = 10, seed: int = 1):
    _, shape, classes, vocab = WORKLOADS[workload]
    g = torch.Generator().manual_seed(seed)
    if vocab:
        x = torch.randint(0, vocab, (steps, batch, *shape), generator=g)
    else:
        x = torch.randn(steps, batch, *shape, generator=g)
    return x, torch.randint(0, classes, (steps, batch), generator=g)


def trip(model, forward, x, y, channels_last: bool, lr: float = 0.1) -> torch.Tensor:
    """One client trip from the model's current weights; returns Delta and restores the weights."""
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    for step in range(len(x)):
        inputs = x[step].contiguous(memory_format=torch.channels_last) if channels_last and x.dim() == 5 else x[step]
        loss = F.cross_entropy(forward(inputs), y[step])
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            torch._foreach_add_(params, grads, alpha=-lr)
    with torch.no_grad():
        delta = torch.cat([(s - p).flatten() for s, p in zip(start, params)])
        torch._foreach_copy_(params, start)
    return delta


def measure(workload: str, variants: list[tuple[bool, bool]], trips: int, repeats: int) -> list[dict]:
    """Every variant warmed up first (compiled, 3 trips), then timed in interleaved blocks, so that no
    variant gains or loses from running first or from what else the machine did meanwhile."""
    x, y = batches(workload)
    rows = []
    for channels_last, compiled in variants:
        model, forward = build(workload, channels_last, compiled)
        started = time.perf_counter()
        delta = trip(model, forward, x, y, channels_last)  # compiles on the first trip
        first = time.perf_counter() - started
        for _ in range(3):
            trip(model, forward, x, y, channels_last)
        rows.append(dict(channels_last=channels_last, compiled=compiled, first_trip_s=first, delta=delta,
                         model=model, forward=forward, rates=[]))
    for _ in range(repeats):
        for row in rows:
            started = time.perf_counter()
            for _ in range(trips):
                trip(row["model"], row["forward"], x, y, row["channels_last"])
            row["rates"].append(trips / (time.perf_counter() - started))
    for row in rows:
        row["trips_per_s"] = statistics.median(row.pop("rates"))
        del row["model"], row["forward"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="cnn_pfl")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trips", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = [(False, False), (True, False), (False, True), (True, True)]
    if args.workload == "lstm":
        variants = [(False, False), (False, True)]  # no image memory format
    rows = measure(args.workload, variants, args.trips, args.repeats)
    eager = rows[0]
    print(f"{args.workload}, {args.threads} threads, torch {torch.__version__}")
    print("| variant | trips/s | vs eager | first trip (s) | max abs diff of Delta | rel. L2 |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        name = " + ".join([n for n, on in (("channels-last", row["channels_last"]), ("compile", row["compiled"])) if on]) or "eager"
        diff = (row["delta"] - eager["delta"]).abs().max().item()
        rel = ((row["delta"] - eager["delta"]).norm() / eager["delta"].norm()).item()
        row.update(variant=name, speedup=row["trips_per_s"] / eager["trips_per_s"], max_abs_diff=diff, rel_l2=rel)
        print(f"| {name} | {row['trips_per_s']:.1f} | {row['speedup']:.2f} | {row['first_trip_s']:.1f} | {diff:.2e} | {rel:.2e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in row.items() if k != "delta"} for row in rows], f, indent=2)


if __name__ == "__main__":
    main()
