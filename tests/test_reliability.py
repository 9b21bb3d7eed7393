"""Runs that stop early leave consistent logs: divergence stops at once and says where, SIGTERM
writes the logs with status interrupted, and misspelt optional groups or negative seeds fail."""

import json
import os
import signal

import pandas as pd
import pytest

from fl_bench.cli import sigterm_as_interrupt
from fl_bench.engine.simulator import Simulator
from fl_bench.errors import DivergenceError
from fl_bench.experiment import run_experiment
from tests.conftest import compose_run_config
from tests.test_cli import fl_bench


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


def test_sigterm_writes_the_logs_with_status_interrupted(tmp_path, monkeypatch):
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
    with sigterm_as_interrupt(), pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is the run's only
    summary = json.loads((tmp_path / "summary.json").read_text())
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    trips = pd.read_csv(tmp_path / "trips.csv")
    assert summary["status"] == "interrupted" and summary["client_trips"] == evaluations[0] < 3000
    assert list(metrics.trips) == [0, 500, 1000] and len(trips) >= summary["client_trips"]


def test_misspelt_optional_groups_and_negative_seeds_fail_in_one_line(tmp_path):
    for override, message in [
        ("experiment=nope", "unknown experiment 'nope': choose one of fedbuff_smoke"),
        ("hparams_search=nah", "unknown hparams_search 'nah': choose one of"),
        ("seed=-1", "seed=-1 is not allowed: must be >= 0"),
        ("partition.seed=-1", "partition.seed=-1 is not allowed: must be >= 0"),
    ]:
        result = fl_bench(override, "max_trips=10", cwd=tmp_path)
        assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, override


def test_the_not_prepared_hint_repeats_every_data_override(tmp_path, compose_config):
    from fl_bench.data import build_dataset
    from fl_bench.data.sources import cache_dir
    from fl_bench.errors import DataMissingError

    cfg = compose_config("dataset=sent140", f"data_root={tmp_path}", "dataset.fraction=0.05")
    with pytest.raises(DataMissingError) as error:
        build_dataset(cfg.dataset, cfg.partition)
    command = str(error.value).split("`")[1]
    assert f"data_root={tmp_path}" in command and "dataset.fraction=0.05" in command
    # following the hint literally names the same cache the run looks for
    words = command.split()  # python -m fl_bench.data prepare <dataset> <overrides...>
    prepared = compose_config(f"dataset={words[4]}", *words[5:])
    assert cache_dir(prepared.dataset) == cache_dir(cfg.dataset)


def test_a_gpu_device_without_a_gpu_fails_in_one_line(monkeypatch):
    import torch

    from fl_bench.errors import ConfigError
    from fl_bench.experiment import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="device=cuda:1 is not available: torch sees no CUDA GPU"):
        resolve_device("cuda:1")
    assert resolve_device("auto") == torch.device("cpu")
