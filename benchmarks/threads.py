"""The README's main command at each intra-op thread count, on an idle machine and beside busy
processes (issue 53): wall time of ``python -m fl_bench progress=false threads=T`` with B CPU-bound
processes running beside it (each a Python busy loop, as another user's job would be).

    python benchmarks/threads.py --threads default 1 2 --busy 0 2 --max-trips 20000

Prints one markdown row per (busy, threads): seconds, the final validation accuracy, and the ratio to
threads=1 at the same load. ``default`` leaves ``threads`` at its default (what the run's first line says
it chose). Run it on a machine with nothing else heavy running; the figures go to results/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _busy(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def run_once(threads: str, max_trips: int, out: Path, limit: float) -> tuple[float, float | None]:
    """Seconds for one run of the main command, and its final validation accuracy (None: stopped at
    ``limit`` seconds)."""
    command = [sys.executable, "-m", "fl_bench", "progress=false", f"max_trips={max_trips}", f"hydra.run.dir={out}"]
    if threads != "default":
        command.append(f"threads={threads}")
    start = time.perf_counter()
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return limit, None
    seconds = time.perf_counter() - start
    summary = json.loads((out / "summary.json").read_text())
    return seconds, summary["final_val_accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", nargs="+", default=["1", "2", "default"])
    parser.add_argument("--busy", nargs="+", type=int, default=[0, 2])
    parser.add_argument("--max-trips", type=int, default=20000)
    parser.add_argument("--limit", type=float, default=120.0, help="stop a run after this many seconds")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, max_trips {args.max_trips}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    print("| busy processes | threads | seconds | val accuracy | x threads=1 |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for busy in args.busy:
            stop = multiprocessing.Event()
            workers = [multiprocessing.Process(target=_busy, args=(stop,)) for _ in range(busy)]
            for worker in workers:
                worker.start()
            try:
                base = None
                for index, threads in enumerate(args.threads):
                    seconds, accuracy = run_once(threads, args.max_trips, Path(scratch) / f"{busy}_{index}", args.limit)
                    base = seconds if threads == "1" else base
                    ratio = ("> " if accuracy is None else "") + (f"{seconds / base:.2f}" if base else "-")
                    shown = f"> {seconds:.0f} (stopped)" if accuracy is None else f"{seconds:.1f}"
                    print(f"| {busy} | {threads} | {shown} | {'-' if accuracy is None else f'{accuracy:.4f}'} | {ratio} |",
                          flush=True)
            finally:
                stop.set()
                for worker in workers:
                    worker.join()


if __name__ == "__main__":
    main()
