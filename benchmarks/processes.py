"""Client trips per second of one run across 1 and N processes (``devices=N``; fl_bench.clients.distributed),
through the command line as a user runs it, on throughput.py's stand-in workloads (no download).

Each process trains its contiguous share of every batch of trips; the uploads are all-gathered. On a
CPU every process gets ``cores / N`` intra-op threads (``threads``), so the rows compare the same
cores used by one process or split over N.

    python benchmarks/processes.py --workload cnn --devices 1 2                 # CPU, gloo
    python benchmarks/processes.py --workload lstm --accelerator gpu --devices 1 2 4   # GPUs, NCCL
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from throughput import WORKLOADS, prepare_stand_ins


def run(workload: str, root: str, devices: int, accelerator: str, trips: int, threads: int | None,
        extra: list[str]) -> dict:
    """One run; its summary."""
    with tempfile.TemporaryDirectory() as run_dir:
        overrides = [f"data_root={root}", *WORKLOADS[workload], f"accelerator={accelerator}", f"devices={devices}",
                     f"max_trips={trips}", f"eval_every={trips}", "progress=false", "vmap_clients=false",
                     f"hydra.run.dir={run_dir}", *([f"threads={threads}"] if threads else []), *extra]
        result = subprocess.run([sys.executable, "-m", "fl_bench", *overrides], capture_output=True, text=True)
        if result.returncode:
            raise SystemExit(f"devices={devices} failed:\n{result.stderr[-3000:]}")
        return json.loads((Path(run_dir) / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="cnn", choices=["cnn", "cnn4", "lstm"])
    parser.add_argument("--devices", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--trips", type=int, default=1000)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. algorithm=fedavg")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as root:
        prepare_stand_ins(root, [args.workload])
        rows = []
        for devices in args.devices:
            threads = max(1, cores // devices) if args.accelerator == "cpu" else None
            summary = run(args.workload, root, devices, args.accelerator, args.trips, threads, args.overrides)
            rate = summary["trips_trained"] / summary["simulate_seconds"]
            rows.append((devices, threads, rate))
            print(f"{args.workload}, {devices} process(es) x {threads or '-'} threads on {summary['device']}: "
                  f"{rate:.1f} trips/s ({summary['trips_trained']} trips in {summary['simulate_seconds']:.1f} s)",
                  flush=True)
    base = rows[0][2]
    print(", ".join(f"{d} process(es) {r:.1f} trips/s ({r / base:.2f}x)" for d, _, r in rows))


if __name__ == "__main__":
    main()
