"""Runs that stop early leave consistent logs: divergence stops at once and says where, SIGTERM
writes the logs with status interrupted, and misspelt optional groups or negative seeds fail."""

import json
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest

from fl_bench.engine.simulator import Simulator
from fl_bench.errors import DivergenceError
from fl_bench.runs.checkpoint import CHECKPOINT
from fl_bench.runs.experiment import run_experiment
from fl_bench.runs.interrupt import stop_signals_handled
from tests.conftest import compose_run_config
from tests.runs.test_cli import fl_bench

pytestmark = pytest.mark.slow  # whole runs under faults and interrupts


def test_a_nan_model_stops_the_run_at_once_and_says_where(tmp_path):
    cfg = compose_run_config("algorithm.server_optimizer.lr=1e9", "max_trips=3000", "eval_every=1000")
    with pytest.raises(DivergenceError, match=r"NaN/Inf values after server step \d+\) after \d+ trips"):
        run_experiment(cfg, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged"
    # stopped at the step that broke the model, long before the first evaluation after trip 0
    assert 1 <= summary["diverged_at_step"] < 100 and summary["diverged_at_trips"] < 1000
    assert summary["diverged_at_trips"] == summary["client_trips"]
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == 1  # the evaluation at trip 0


def test_sigterm_writes_a_checkpoint_and_the_logs_with_status_interrupted(tmp_path, monkeypatch):
    evaluations = []
    original = Simulator.evaluate_if_due

    def evaluate_then_terminate(self, force=False):
        stop = original(self, force)
        if self.trips >= 1000 and not evaluations:  # what SLURM sends before preemption
            evaluations.append(self.trips)
            os.kill(os.getpid(), signal.SIGTERM)
        return stop

    monkeypatch.setattr(Simulator, "evaluate_if_due", evaluate_then_terminate)
    cfg = compose_run_config("max_trips=3000", "eval_every=500")
    with stop_signals_handled(), pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is the run's only
    assert (tmp_path / CHECKPOINT).exists()  # written at the event boundary after the signal
    summary = json.loads((tmp_path / "summary.json").read_text())
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    trips = pd.read_csv(tmp_path / "trips.csv")
    assert summary["status"] == "interrupted" and summary["client_trips"] == evaluations[0] < 3000
    assert list(metrics.trips) == [0, 500, 1000] and len(trips) >= summary["client_trips"]
    monkeypatch.setattr(Simulator, "evaluate_if_due", original)
    resumed = run_experiment(cfg, tmp_path)  # the same run again: it goes on from the checkpoint
    assert resumed["status"] == "completed" and resumed["resumed_at_trips"] == [1000]
    assert list(pd.read_csv(tmp_path / "metrics.csv").trips) == list(range(0, 3001, 500))


def test_the_not_prepared_hint_repeats_every_data_override(tmp_path, compose_config):
    from fl_bench.data import build_dataset
    from fl_bench.data.sources import cache_dir
    from fl_bench.errors import DataMissingError

    from fl_bench.data.downloads import download_settings

    cfg = compose_config("dataset=sent140", f"data_root={tmp_path}", "dataset.fraction=0.05")
    with download_settings(f"file://{tmp_path}/empty_mirror", False), pytest.raises(DataMissingError) as error:
        build_dataset(cfg.dataset, cfg.partition)  # no cache, and its download fails
    command = str(error.value).split("`")[1]
    assert f"data_root={tmp_path}" in command and "dataset.fraction=0.05" in command
    # following the hint literally names the same cache the run looks for
    words = command.split()  # python -m fl_bench.data prepare <dataset> <overrides...>
    prepared = compose_config(f"dataset={words[4]}", *words[5:])
    assert cache_dir(prepared.dataset) == cache_dir(cfg.dataset)


def test_a_gpu_accelerator_without_a_gpu_fails_in_one_line_before_any_data_is_built(monkeypatch, tmp_path):
    import torch

    from fl_bench.errors import ConfigError
    from fl_bench.runs.experiment import run_experiment

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="^accelerator=gpu is not available: torch sees no CUDA GPU"):
        run_experiment(compose_run_config("accelerator=gpu", "devices=[1]", "dataset=cifar10"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_bad_input_leaves_no_run_directory_and_an_unwritable_one_fails_in_one_line(tmp_path, cli_in_process):
    for override in ("algorithm.client_lr=-1", "experiment=nope", "dataset=celeba"):  # schema, group, data missing
        code, out = cli_in_process(override, f"data_root={tmp_path / 'data'}", cwd=tmp_path)
        assert code == 1 and "Traceback" not in out, override
        assert not (tmp_path / "runs").exists(), override  # not even the dated parent
    (tmp_path / "file").write_text("")
    for run_dir in (tmp_path / "file" / "run", "/proc/fl_bench_run"):
        code, out = cli_in_process("max_trips=10", f"hydra.run.dir={run_dir}", cwd=tmp_path)
        assert code == 1 and out.count("\n") == 1, run_dir
        assert out.startswith("fl_bench: error: ") and "hydra.run.dir" in out, run_dir


def test_the_run_log_holds_the_run_and_wandb_without_a_key_logs_offline(tmp_path):
    # no WANDB_MODE, no key in the environment or in ~/.netrc
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")} | {"HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "fl_bench", "progress=false", "max_trips=400", "eval_every=200", "logger=wandb",
         "hydra.run.dir=run"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    warning = [line for line in result.stderr.splitlines() if "no W&B API key" in line]
    assert len(warning) == 1 and "logs offline" in warning[0] and "wandb sync" in warning[0]
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    log = (tmp_path / "run" / "cli.log").read_text()
    assert "trips 200, server step" in log and "completed: {" in log
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["trip_budget"] == "exact" and summary["wandb_run_id"]


def test_a_resumed_run_continues_its_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    calls = []
    original = Simulator.evaluate_if_due

    def evaluate_then_terminate(self, force=False):
        stop = original(self, force)
        if self.trips >= 400 and not calls:
            calls.append(self.trips)
            os.kill(os.getpid(), signal.SIGTERM)
        return stop

    monkeypatch.setattr(Simulator, "evaluate_if_due", evaluate_then_terminate)
    cfg = compose_run_config("max_trips=800", "eval_every=200", "logger=wandb", "algorithm=fedavgm")
    with stop_signals_handled(), pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path)
    first = json.loads((tmp_path / "summary.json").read_text())["wandb_run_id"]
    resumed = run_experiment(cfg, tmp_path)
    assert resumed["wandb_run_id"] == first and resumed["resumed_at_trips"] == [calls[0]]
    assert resumed["trip_budget"] == "whole rounds"
