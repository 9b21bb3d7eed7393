"""One run across processes (devices=N; fl_bench.clients.distributed), through the command line as a
user launches it: every process runs the same simulation and trains its share of each batch of
trips; rank 0 alone writes the run directory; a lost process stops the run in one line, and the
same command resumes it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
# The sequential path on CPU, one intra-op thread per process: bitwise-equal trips whatever the process count.
WORKLOAD = ("dataset=digits", "model=mlp", "vmap_clients=false", "threads=1", "accelerator=cpu", "max_trips=120",
            "eval_every=40", "concurrency=10", "algorithm.buffer_size=5", "progress=false")


def fl_bench(*overrides, cwd, env=None):
    return subprocess.run(
        [sys.executable, "-m", "fl_bench", *overrides], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": f"{PLUGIN}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(env or {})},
        timeout=600,
    )


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory):
    """The built-in task in one process: the run every multi-process run of WORKLOAD below must equal."""
    run_dir = tmp_path_factory.mktemp("one_process") / "run"
    result = fl_bench(*WORKLOAD, "devices=1", f"hydra.run.dir={run_dir}", cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr
    return run_dir


def outputs(run_dir: Path):
    model = torch.load(run_dir / "model.pt")
    return (pd.read_csv(run_dir / "trips.csv"), pd.read_csv(run_dir / "metrics.csv"),
            torch.cat([t.flatten() for t in model.values()]))


def rank_zero_alone_wrote(run_dir: Path) -> bool:
    written = {p.name for p in run_dir.iterdir()}
    return "summary.json" in written and not any("rank" in name for name in written if name.endswith(".csv"))


# The built-in task's 2-process run is the lost-process test's below (killed, resumed, and equal to one process).
@pytest.mark.slow
def test_two_processes_give_the_same_run_as_one(tmp_path):
    """A LightningModule: 1 process and 2 (gloo) write the same trips.csv, metrics.csv and
    task_metrics.csv, and the same final model bit for bit, buffers included; only rank 0 writes the
    run directory."""
    task = ("task=lightning",
            # torchmetrics objects logged, the validation loss returned, BatchNorm's buffers federated: each
            # process holds every trip's final buffers
            "task.module._target_=my_fl_extensions.lightning_modules.DocsClassifier",
            # partial work: each trip's step count reaches the process that trains it
            "behaviour=unreliable", "behaviour.failure_rate=0", "behaviour.work_deadline=0.6")
    runs = {}
    for devices in (1, 2):
        run_dir = tmp_path / f"devices{devices}"
        result = fl_bench(*WORKLOAD, *task, f"devices={devices}", f"hydra.run.dir={run_dir}", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        runs[devices] = outputs(run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["processes"] == devices
    one, two = runs[1], runs[2]
    # what the module logged, computed alike in each process
    pd.testing.assert_frame_equal(*(pd.read_csv(tmp_path / f"devices{d}" / "task_metrics.csv") for d in (1, 2)))
    pd.testing.assert_frame_equal(one[0], two[0])
    pd.testing.assert_frame_equal(one[1], two[1])
    assert torch.equal(one[2], two[2])
    assert rank_zero_alone_wrote(tmp_path / "devices2")


@pytest.mark.slow
def test_a_lost_process_stops_the_run_in_one_line_and_the_same_command_resumes_it(tmp_path, one_process_run):
    """Rank 1 dies at its 8th batch of trips (after checkpoints at server steps 3 and 6) while rank 0
    trains that batch for 6 s more than Lightning's watch over its processes waits (it kills them all
    within 5 s): rank 0 stops with one line naming the lost process; the same command goes on from the
    last checkpoint and ends as the one-process run: every trip, evaluation and the final model bit for
    bit, rank 0 alone writing the run directory."""
    run_dir = tmp_path / "run"
    command = (*WORKLOAD, "devices=2", "checkpoint_every=3", f"hydra.run.dir={run_dir}")
    killed = fl_bench(*command, cwd=tmp_path, env={"FL_BENCH_PLUGINS": "kill_rank", "KILL_RANK": "1",
                                                    "KILL_AT_TRAIN": "8", "STALL_SECONDS": "6"})
    assert killed.returncode == 1
    errors = [line for line in killed.stderr.splitlines() if line.startswith("fl_bench: error:")]
    assert len(errors) == 1 and "another process of this run stopped" in errors[0], killed.stderr
    assert (run_dir / "checkpoint.pt").exists()
    resumed = fl_bench(*command, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    whole = one_process_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_at_trips"] and summary["status"] == "completed" and summary["processes"] == 2
    assert rank_zero_alone_wrote(run_dir)
    for a, b in zip(outputs(run_dir), outputs(whole)):
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b)
        else:
            assert torch.equal(a, b)
