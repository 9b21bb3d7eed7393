"""What the pooled-data reference costs against a bare PyTorch loop (issue 68, item 3):
``algorithm=centralized`` on HFL's convex workload at paper scale (Fashion-MNIST's 60,000 examples,
logistic regression 784->10 with L2 1e-4, batch 64, one pass a round, eta_t = 0.1/(1+t); prepare the
dataset first), or with ``--synthetic`` on Synthetic(1,1) (101,528 examples of 60 features, no data
to prepare), each in a process of its own:

  (a) the run: ``python -m fl_bench experiment=hfl_convex algorithm=centralized speed=none
      algorithm.local_epochs=1 vmap_clients=null max_rounds=P`` (the command line, in the process,
      with a Lightning callback that times each round's pass);
  (b) a bare loop over the same tensors: the same model, minibatches (the run's trip plans), lr,
      thread count (one) and torch SGD step, ``for idx in batches: loss = F.cross_entropy(model(x[idx]),
      y[idx]) + l2; opt.zero_grad(); loss.backward(); opt.step()``, on the model's inputs (the
      dataset's normalisation applied once, beforehand: the run applies it to every minibatch).

Each repeat runs two processes. In the first, (a) alone: its fixed cost is its wall time (process
start to exit) minus all its passes, minus its imports (torch, Lightning, fl_bench, timed at its top).
In the second, (b)'s pass follows each of (a)'s in the same process, so that both see the same load:
(a)/(b) is the median of the passes' ratios after the first pass (a warm-up), and at the end (b)'s
weights are compared with (a)'s: the same work gives the same bits. (a)'s pass includes building its
minibatches (the trip plan, and the gathers); (b) is handed them. The table gives medians over repeats.

    python benchmarks/centralized_cost.py --passes 6 --repeats 3
    python benchmarks/centralized_cost.py --synthetic

Run it on a machine with nothing else heavy running (or say what ran beside it); the figures go to
results/benchmarks.md.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path[1:1] = [str(HERE.parent)]  # this checkout's fl_bench (not an installed one)
HFL = ["experiment=hfl_convex", "algorithm=centralized", "speed=none", "algorithm.local_epochs=1", "vmap_clients=null"]
SYNTHETIC = ["dataset=synthetic", "partition=natural"]  # Synthetic(1,1): generated, no download


def overrides(synthetic: bool, passes: int) -> list[str]:
    return [*HFL, *(SYNTHETIC if synthetic else []), f"max_rounds={passes}"]


def run_cell(args, out: Path) -> dict:
    """The command line in this process, each round's pass timed by a Lightning callback; in the
    ``paired`` cell, (b)'s pass after each of them and, at the end, whether (b)'s weights are (a)'s."""
    import lightning  # noqa: F401  (the run imports these later: counted with the imports, not the fixed cost)
    import torch
    from lightning import Callback
    from lightning.pytorch.loggers import CSVLogger  # noqa: F401

    from fl_bench.runs import centralized
    from fl_bench.runs.cli import main

    result = dict(imports=time.perf_counter() - STARTED, passes={"run": [], "bare": []})

    class Passes(Callback):
        def __init__(self, run):
            self.run, self.bare = run, BareLoop(run) if args.cell == "paired" else None

        def on_train_epoch_start(self, trainer, module):
            self.began = time.perf_counter()

        def on_train_epoch_end(self, trainer, module):
            result["passes"]["run"].append(time.perf_counter() - self.began)
            if self.bare:
                result["passes"]["bare"].append(self.bare.run_pass(trainer.current_epoch))

        def on_train_end(self, trainer, module):
            if self.bare:  # the same work: the same bits
                ran, bare = self.run.task.model.state_dict(), self.bare.model.state_dict()
                result["same_weights"] = all(torch.equal(ran[key], bare[key]) for key in ran)

    round_callbacks = centralized.round_callbacks
    centralized.round_callbacks = lambda run: [*round_callbacks(run), Passes(run)]
    sys.argv = ["fl_bench", *overrides(args.synthetic, args.passes), f"hydra.run.dir={out / args.cell}"]
    main()
    gc.freeze()  # as python -m fl_bench: no collection of torch's and Lightning's objects at exit
    summary = json.loads((out / args.cell / "summary.json").read_text())
    return dict(result, accuracy=summary["final_val_accuracy"])


class BareLoop:
    """(b): the run's initial model, examples (preprocessed once), minibatches and lr in a bare loop."""

    def __init__(self, run):
        import copy

        import torch

        self.run, self.model = run, copy.deepcopy(run.task.model)  # built before the run's first step
        stored, self.y = run.data.client(0)
        self.x = run.task.inputs(stored, train=True)  # what the model reads (no augmentation in these workloads)
        self.params = list(self.model.parameters())
        self.opt = torch.optim.SGD(self.params, lr=run.local.lr)

    def run_pass(self, round_: int) -> float:
        import numpy as np
        from torch.nn import functional as F

        from fl_bench.clients.trainer import minibatch_plan

        local, weight_decay, model, x, y, opt = (self.run.local, self.run.task.weight_decay, self.model, self.x,
                                                 self.y, self.opt)
        plan = minibatch_plan(np.array([len(y)]), [(self.run.cfg.seed << 32) + round_], local)
        batches = [plan.rows[0, step, :count] for step, count in enumerate(plan.mask[0].sum(-1).tolist())]
        opt.param_groups[0]["lr"] = local.step_lr(local.batch_size, round_)  # no LR-norm here: one lr a round
        began = time.perf_counter()
        for idx in batches:
            loss = F.cross_entropy(model(x[idx]), y[idx]) + 0.5 * weight_decay * sum(p.pow(2).sum() for p in self.params)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - began


def cell(kind: str, args, out: Path) -> dict:
    """One process of ``kind``: its JSON line, and its wall time from start to exit."""
    command = [sys.executable, __file__, "--cell", kind, "--out", str(out), "--passes", str(args.passes)]
    began = time.perf_counter()
    done = subprocess.run(command + (["--synthetic"] if args.synthetic else []), capture_output=True, text=True)
    wall = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"({kind}) failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]), wall=wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=6, help="rounds (passes) a process, the first a warm-up")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--synthetic", action="store_true", help="Synthetic(1,1), which needs no prepared data")
    parser.add_argument("--cell", choices=["alone", "paired"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(run_cell(args, args.out)))
        return
    alone, paired = [], []
    began = time.perf_counter()
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as out:
            alone.append(cell("alone", args, Path(out)))
            paired.append(cell("paired", args, Path(out)))
        run, bare = (paired[-1]["passes"][kind][1:] for kind in ("run", "bare"))
        paired[-1].update(run=statistics.median(run), bare=statistics.median(bare),
                          ratio=statistics.median(a / b for a, b in zip(run, bare)))
        alone[-1].update(run=statistics.median(alone[-1]["passes"]["run"][1:]),
                         fixed=alone[-1]["wall"] - sum(alone[-1]["passes"]["run"]) - alone[-1]["imports"])
        print(f"repeat {repeat}: paired {paired[-1]['run']:.3f} / {paired[-1]['bare']:.3f} s a pass (x{paired[-1]['ratio']:.2f}), "
              f"same weights: {paired[-1]['same_weights']}; alone {alone[-1]['run']:.3f} s a pass, fixed cost "
              f"{alone[-1]['fixed']:.1f} s", file=sys.stderr, flush=True)
    from fl_bench.analysis.report import machine

    def median(rows, key):
        return statistics.median(row[key] for row in rows)

    def each(rows, key, digits):
        return ", ".join(f"{row[key]:.{digits}f}" for row in rows)

    workload = "Synthetic(1,1)" if args.synthetic else "HFL Fashion-MNIST"
    print(f"Machine: {machine()}; {datetime.date.today()}, {time.perf_counter() - began:.0f} s in all, load average "
          f"{os.getloadavg()[0]:.1f} at the end.\nCommand: `python benchmarks/centralized_cost.py {' '.join(sys.argv[1:])}` "
          f"({workload}, {args.passes} passes a process, the first a warm-up; medians of {args.repeats})\n")
    print("| per pass, paired in one process | s/pass (median) | processes' medians |")
    print("|---|---:|---:|")
    print(f"| (a) algorithm=centralized | {median(paired, 'run'):.3f} | {each(paired, 'run', 3)} |")
    print(f"| (b) bare torch loop | {median(paired, 'bare'):.3f} | {each(paired, 'bare', 3)} |")
    print(f"| (a) / (b), pass by pass | **{median(paired, 'ratio'):.2f}** | {each(paired, 'ratio', 2)} |")
    print(f"\nThe bare loop ends on the run's weights bit for bit: {all(row['same_weights'] for row in paired)}; "
          f"final val accuracy {paired[-1]['accuracy']:.4f}.\n")
    print("| (a) alone in its process | wall (s) | imports (s) | passes (s) | fixed cost (s) | s/pass |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| medians | {median(alone, 'wall'):.1f} | {median(alone, 'imports'):.1f} | "
          f"{statistics.median(sum(row['passes']['run']) for row in alone):.1f} | **{median(alone, 'fixed'):.1f}** "
          f"({each(alone, 'fixed', 1)}) | {median(alone, 'run'):.3f} |")


if __name__ == "__main__":
    main()
