"""The reproduction driver and the paper comparison: one point of every FedBuff table runs from the
sweep file (what CI can afford), and the direction column says what the ratios say."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from fl_bench.report import compare_with_paper
from fl_bench.reproduce import Arm, Reproduction

SPEC = Path(__file__).parents[1] / "sweeps" / "fedbuff_smoke.yaml"


def test_one_point_of_every_table_runs_from_the_sweep_file(tmp_path):
    out, runs = tmp_path / "results", tmp_path / "runs"
    # logged to W&B offline, and every table published as a W&B Report specification (--dry-run)
    done = subprocess.run([sys.executable, "-m", "fl_bench.reproduce", str(SPEC), "--smoke", "--jobs", "2",
                           "--out", str(out), "--runs-dir", str(runs), "--publish", "my-team/fl_bench", "--dry-run",
                           "--override", f"data_root={tmp_path / 'data'}", "logger=wandb"],
                          capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr
    spec = OmegaConf.load(SPEC)
    assert len(spec.tables) == 7
    for name, table in spec.tables.items():
        text = (out / f"{name}.md").read_text()
        assert table.title in text and f"| {table.reference} " in text
        csv = pd.read_csv(out / f"{name}.csv")
        assert {"method", "algorithm", "concurrency", "seeds", "trips_to_target", "resolution", "paper", "direction"} <= set(csv.columns)
        assert csv.loc[0, "seeds"] == 1 and csv.loc[0, "concurrency"] == 20  # the smoke workload, one seed
        for plot in ("curves", "staleness", "examples"):
            assert (out / f"{name}_{plot}.png").stat().st_size > 0
        report = json.loads((out / f"{name}_wandb_report.json").read_text())
        assert report["displayName"] == name and table.title in json.dumps(report)
    # every run was started with the sweep file's workload and the table's arm overrides
    logs = "\n".join(p.read_text() for p in runs.glob("*/reproduce.log"))
    assert "experiment=fedbuff_smoke" in logs and f"data_root={tmp_path / 'data'}" in logs and "algorithm.buffer_size=1000 algorithm.staleness_exponent=10" in logs


def test_arms_that_run_the_same_share_a_directory_and_unknown_tables_fail():
    a = Arm("fedbuff", "fedbuff", ())
    assert a.key == Arm("K=10", "fedbuff", ()).key != Arm("K=1", "fedbuff", ("algorithm.buffer_size=1",)).key
    assert "=" not in Arm("x", "fedbuff", ("delay=uniform",)).key  # Hydra's override grammar forbids it
    with pytest.raises(ValueError, match="unknown table fedbuff_table9: choose from fedbuff_fig3_smoke"):
        Reproduction(SPEC, smoke=True, runs_dir=None, jobs=1).tables(["fedbuff_table9"])


def test_direction_against_the_paper():
    table = pd.DataFrame({
        "method": ["ref", "slower", "faster", "missed", "level", "mixed", "other_ref", "vs_other"],
        "budget": [1000] * 8,
        "trips_to_target": [100.0, 250.0, 80.0, float("nan"), 103.0, 120.0, 50.0, 100.0],
        "client_times_to_target": [10.0, 40.0, 8.0, float("nan"), 10.0, 10.0, 5.0, 5.0],
    })
    arms = {
        "slower": {"paper": {"trips": [3.3, 1.7], "time": [3.6]}},  # 2.5x: same side of 1 as the paper
        "faster": {"paper": {"trips": [1.2]}},                      # 0.8x where the paper has 1.2x
        "missed": {"paper": {"trips": [">1"]}},                     # >10x (budget / 100) vs "larger"
        "level": {"paper": {"trips": [1.0, 1.04, 0.96]}},          # paper within 5% of 1: '='
        "mixed": {"paper": {"trips": [0.94, 1.67]}},               # paper on both sides of 1
        "vs_other": {"vs": "other_ref", "paper": {"trips": [2.0]}},
    }
    got = compare_with_paper(table, arms, "ref").set_index("method")
    assert got.loc["slower", "ratio"] == "2.50×" and got.loc["slower", "paper"] == "3.3× / 1.7×"
    assert got.loc["slower", "direction"] == "matches" and got.loc["slower", "direction (time)"] == "matches"
    assert got.loc["slower", "ratio (time)"] == "4.00×"
    assert got.loc["faster", "direction"] == "differs"
    assert got.loc["missed", "ratio"] == ">10.00×" and got.loc["missed", "direction"] == "matches"
    assert got.loc["level", "direction"] == "matches"  # 1.03x is '=' as every paper value
    assert got.loc["mixed", "direction"] == "within the paper's range"  # 1.2x in [0.94, 1.67]
    assert got.loc["vs_other", "ratio"] == "2.00×" and got.loc["vs_other", "direction"] == "matches"
    assert got.loc["ref", "ratio"] == "" and got.loc["ref", "direction"] == ""


def test_an_arm_reruns_only_when_its_command_changed(tmp_path, monkeypatch):
    repro = Reproduction(SPEC, smoke=True, runs_dir=tmp_path, jobs=1)
    calls = []

    def fake_run(command, log_dir, check=True):  # what a finished multirun leaves
        calls.append(command)
        (log_dir / "0_fedbuff_seed1").mkdir(parents=True)
        (log_dir / "0_fedbuff_seed1" / "summary.json").write_text("{}")
        (log_dir / "reproduce.log").write_text(" ".join(command) + "\n")
        return True

    monkeypatch.setattr(repro, "_run", fake_run)
    arm = Arm("K=10", "fedbuff", ())
    repro.run_arm(arm)
    repro.run_arm(arm)
    assert len(calls) == 1  # the second call found the runs of the same command
    monkeypatch.setattr(repro, "tuned", lambda study: {"best_params": {"algorithm.client_lr": 0.5}})
    repro.run_arm(arm)
    assert len(calls) == 2 and "algorithm.client_lr=0.5" in calls[1]  # a new setting reruns
