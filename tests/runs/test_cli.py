"""End to end through the command line, as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]


def fl_bench(*overrides, cwd, env=None):
    return subprocess.run(
        [sys.executable, "-m", "fl_bench", *overrides], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, "WANDB_MODE": "offline", **(env or {})}, timeout=600,
    )


@pytest.mark.slow
def test_default_run_reaches_its_target_and_writes_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    result = fl_bench("progress=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algorithm"] == "fedbuff" and summary["trips_to_target"] is not None
    assert summary["eval_every"] == 500  # what fl_bench.analysis.guards' saturated test reads
    assert f"trips to {summary['target_accuracy']:.0%}: {summary['trips_to_target']}" in result.stdout
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert list(metrics.columns) == ["trips", "server_step", "sim_time", "val_accuracy", "val_loss", "bytes_down",
                                     "bytes_up", "flops"]
    assert metrics.bytes_up.iloc[-1] == summary["bytes_up"] and metrics.flops.iloc[-1] == summary["flops"] > 0
    assert metrics.trips.iloc[-1] == summary["client_trips"] == 20000
    assert metrics.val_accuracy.iloc[-1] > metrics.val_accuracy.iloc[0]
    trips = pd.read_csv(run_dir / "trips.csv")
    assert len(trips) == 20000
    assert {"client", "download_version", "start_time", "end_time", "staleness"} <= set(trips.columns)
    assert (trips.end_time >= trips.start_time).all() and trips.staleness.max() > 0
    assert (run_dir / ".hydra" / "config.yaml").exists()


@pytest.mark.slow
def test_multirun_over_algorithms_and_seeds(tmp_path):
    result = fl_bench(
        "--multirun", "algorithm=fedbuff,fedavgm", "seed=0,1", "max_trips=600", "eval_every=300",
        "progress=false", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    summaries = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/summary.json"))]
    assert sorted((s["algorithm"], s["seed"]) for s in summaries) == [
        ("fedavgm", 0), ("fedavgm", 1), ("fedbuff", 0), ("fedbuff", 1)
    ]


@pytest.mark.slow
def test_ca2fl_and_fadas_run_from_the_command_line_and_state_their_server_memory(tmp_path):
    result = fl_bench("--multirun", "algorithm=ca2fl,fadas", "max_trips=600", "eval_every=300", "progress=false",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    runs = {json.loads(path.read_text())["algorithm"]: path.parent for path in (tmp_path / "sweep").glob("*/summary.json")}
    assert sorted(runs) == ["ca2fl", "fadas"]
    for algorithm, run in runs.items():
        summary = json.loads((run / "summary.json").read_text())
        model = summary["bytes_up"] // summary["client_trips"]  # one upload: Delta, the model's size
        assert summary["server_steps"] == 60  # a step every M = 10 uploads
        if algorithm == "ca2fl":  # a cached update per client seen; h_t
            clients = pd.read_csv(run / "trips.csv").client.nunique()
            assert (summary["client_state_bytes"], summary["server_state_bytes"]) == (clients * model, model)
        else:  # AMSGrad's m, v, vhat
            assert (summary["client_state_bytes"], summary["server_state_bytes"]) == (0, 3 * model)
        accuracy = pd.read_csv(run / "metrics.csv").val_accuracy
        assert accuracy.iloc[-1] > accuracy.iloc[0] + 0.03, (algorithm, accuracy.tolist())


@pytest.mark.slow
@pytest.mark.parametrize("override, env, expected", [
    ("algorithm.bufer_size=3", {}, "bufer_size"),
    ("progress=false", {"FL_BENCH_PLUGINS": "no_such_module"}, "plugin module 'no_such_module'"),
])
def test_bad_input_exits_with_one_line_from_a_new_process(tmp_path, override, env, expected):
    """As a user's shell runs it (warnings and import-time errors included); tests/test_refusals.py holds
    the table of every refusal, run in-process."""
    result = fl_bench(override, "progress=false", cwd=tmp_path, env=env)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fl_bench: error: ") and expected in lines[0]


@pytest.mark.slow
def test_wandb_logger_works_offline(tmp_path):
    run_dir = tmp_path / "run"
    result = fl_bench("logger=wandb", "max_trips=300", "eval_every=100", "progress=false", f"hydra.run.dir={run_dir}",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    offline_runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1 and list(offline_runs[0].glob("*.wandb"))
    assert (run_dir / "metrics.csv").exists()


EXPERIMENTS = sorted(path.stem for path in (REPO / "conf" / "experiment").glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_takes_another_partition_and_dataset_from_the_command_line(compose_config, experiment):
    """An experiment's own split and dataset settings are presets of their groups (conf/partition,
    conf/dataset), so partition=... or dataset=... replaces them whole instead of meeting keys its
    schema does not have."""
    for choice in ("partition=iid", "partition=dirichlet", "dataset=digits", "dataset=synthetic"):
        cfg = compose_config(f"experiment={experiment}", choice)
        group, option = choice.split("=")
        assert getattr(cfg, group).name == option


def test_a_protocols_workload_varies_from_the_command_line_and_what_cannot_work_fails_in_one_line(run_config, tmp_path):
    from fl_bench.errors import FLBenchError

    small = ("dataset.num_samples=3000", "partition.num_clients=200", "concurrency=20", "max_trips=200", "eval_every=100",
             f"data_root={tmp_path / 'data'}")
    summary, _, _ = run_config("experiment=fedbuff_smoke", "partition=iid", *small)
    assert summary["status"] == "completed" and summary["client_trips"] == 200
    with pytest.raises(FLBenchError, match="partition=pachinko needs coarse labels"):
        run_config("experiment=fedlaavg_table2_smoke", "partition=pachinko", "max_trips=100", name="pachinko")


def test_help_is_fl_bench_s_own_and_lists_the_groups_a_user_chooses(tmp_path, cli_in_process):
    """``--help`` (conf/hydra/help/fl_bench.yaml): what fl_bench runs, the groups a user chooses from with their
    options (generated: fl_bench.runs.help), the other commands and the docs; not Hydra's internal schema/*."""
    code, out = cli_in_process("--help", cwd=tmp_path)
    assert code == 0, out
    assert out.startswith("fl_bench: ") and "powered by Hydra" not in out and "schema/" not in out
    listed = out.split("== Config groups")[1].split("\n\n")[0].replace("\n      ", " ")  # (wrapped lines joined)
    groups = dict(line.strip().split(": ", 1) for line in listed.splitlines()[1:])
    assert {"algorithm [fedbuff]", "dataset [synthetic]", "experiment", "algorithm/server_optimizer [sgd]"} <= set(groups)
    assert "fedbuff" in groups["algorithm [fedbuff]"].split(", ")
    assert "python -m fl_bench.analysis.reproduce   Reproduce a paper's tables from one sweep file" in out
    assert "docs/getting-started.md" in out
    assert not list(tmp_path.iterdir())  # no run directory
