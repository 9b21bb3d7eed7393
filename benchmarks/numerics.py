"""What ``numerics=portable`` costs, and whether it keeps its promise on this machine.

For each workload it runs, each in its own ``python -m fl_bench`` process:
  - native: the default kernels and threads (what a run does unless told otherwise);
  - native, 1 thread: the same with ``threads=1``, to separate the thread count from the kernels;
  - portable: ``numerics=portable``;
  - portable on an emulated AVX2 machine: ``numerics=portable`` started with the environment another
    CPU would give (ATen and OpenBLAS kernels for AVX2, MKL limited to AVX2, two OpenMP threads);
and reports the simulation's seconds (summary.json's ``simulate_seconds``: training, aggregation,
evaluation), trips per second and a hash of metrics.csv + trips.csv: the two portable rows must
have the same hash; the native ones differ from them, and from each other, in the last bits.

    python benchmarks/numerics.py --markdown results/numerics.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from fl_bench.analysis.report import machine

WORKLOADS = {
    "mlp, batched (the default run)": ["max_trips=10000"],
    "mlp, one trip at a time": ["max_trips=10000", "vmap_clients=false"],
    "cnn4 on digits (convolutions)": ["model=cnn4", "dataset=digits", "partition=iid", "partition.num_clients=100",
                                      "concurrency=10", "max_trips=600", "eval_every=100"],
}
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
                "OMP_NUM_THREADS": "2"}
MODES = {
    "native": ([], {}),
    "native, threads=1": (["threads=1"], {}),
    "portable": (["numerics=portable"], {}),
    "portable, emulated AVX2 machine": (["numerics=portable"], AVX2_MACHINE),
}


def run(overrides: list[str], env: dict[str, str], run_dir: Path) -> dict:
    command = [sys.executable, "-m", "fl_bench", "progress=false", f"hydra.run.dir={run_dir}", *overrides]
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "WANDB_MODE": "disabled", **env})
    summary = json.loads((run_dir / "summary.json").read_text())
    outputs = hashlib.sha256((run_dir / "metrics.csv").read_bytes() + (run_dir / "trips.csv").read_bytes())
    return {"simulate s": summary["simulate_seconds"], "trips/s": summary["client_trips"] / summary["simulate_seconds"],
            "final accuracy": summary["final_val_accuracy"], "kernels": summary["cpu_capability"],
            "outputs (sha256)": outputs.hexdigest()[:12]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--markdown", type=Path, help="write the table to this file")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workloads:
            for mode, (extra, env) in MODES.items():
                row = run([*WORKLOADS[workload], *extra], env, Path(tmp) / f"{len(rows)}")
                rows.append({"workload": workload, "numerics": mode, **row})
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    native = table[table.numerics == "native"].set_index("workload")["simulate s"]
    table["time vs native"] = [f"{s / native[w]:.2f}x" for w, s in zip(table.workload, table["simulate s"])]
    table["simulate s"] = table["simulate s"].map("{:.1f}".format)
    table["trips/s"] = table["trips/s"].map("{:,.0f}".format)
    table["final accuracy"] = table["final accuracy"].map("{:.5f}".format)
    text = f"Machine: {machine()}\n\n{table.to_markdown(index=False)}\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
