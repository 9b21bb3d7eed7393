"""A user's LightningModule's trips batched over clients (fl_bench.clients.lightning_batched): the same
Deltas and logged values as one trip at a time, to float rounding, under the module's optimizer (with
LR-norm, FedProx, the lr schedule, several groups) and under the algorithm's rule; what cannot be
batched trains one at a time and the run's first lines say why."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from fl_bench.contracts import Broadcast
from fl_bench.runs.experiment import build_experiment, run_experiment
from tests.conftest import compose_run_config
from tests.helpers.runs import killed_and_resumed

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
MODULES = "my_fl_extensions.batched_modules"
# batch_size 8 on digits' small clients: trips of one to five steps, most with a short last batch
DIGITS = ("dataset=digits", "model=mlp", "max_trips=40", "eval_every=20", "concurrency=10", "accelerator=cpu",
          "algorithm.batch_size=8")


@pytest.fixture(autouse=True)
def user_package(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))


def built(module: str, *overrides: str):
    cfg = compose_run_config("task=lightning", f"task.module._target_={MODULES}.{module}", *DIGITS, *overrides)
    return build_experiment(cfg, on_eval=lambda progress: False)


def both_ways(exp, clients=(0, 1, 2, 3, 4, 5), versions=(0, 3, 3, 1, 0, 2)):
    """Each trip's Delta and the logged means, batched and then one at a time (trips from several versions)."""
    start = exp.server.broadcast()
    state = {k: torch.rand_like(v) + 0.5 for k, v in start.state.items()}  # (FedGBO's statistics)
    starts = [Broadcast(v, start.params, state) for v in versions]
    seeds = [100 + i for i in range(len(clients))]
    metrics = exp.task.metrics
    batched = exp.trainer.train(starts, list(clients), seeds).clone()
    batched_logs = metrics.take_training()
    alone = exp.trainer.train_one_at_a_time(starts, list(clients), seeds)
    return batched, alone, batched_logs, metrics.take_training()


SLOW = pytest.mark.slow  # (the quick subset keeps one case of each kind)


@pytest.mark.parametrize("module, knobs, padded", [
    pytest.param("MLP", (), True, id="fedbuff"),  # FedBuff's defaults (LR-norm); auto batches a Linear module on a CPU
    pytest.param("MLP", ("algorithm=fedprox", "algorithm.prox_mu=0.5", "algorithm.local_epochs=2", "vmap_clients=true"),
                 True, id="fedprox-2-epochs", marks=SLOW),
    pytest.param("MLP", ("algorithm.lr_decay=0.5", "algorithm.lr_norm=false"), True, id="lr-decay", marks=SLOW),
    # Adam over two groups; its logged accuracy would count a padded example: grouped by batch size
    pytest.param("LogsAccuracy", (), False, id="adam-groups-logged-accuracy"),
    pytest.param("MLP", ("algorithm=fedgbo", "algorithm.client_lr=0.05"), True, id="fedgbo-rule", marks=SLOW),
])
def test_batched_trips_give_the_deltas_and_logs_of_one_trip_at_a_time(module, knobs, padded):
    exp = built(module, *knobs)
    trainer = exp.trainer
    assert trainer.batched is not None, trainer.why_one_at_a_time
    assert trainer.batched.pad is padded
    assert any("trips train together" in line for line in exp.describe())
    batched, alone, batched_logs, alone_logs = both_ways(exp)
    assert alone.abs().sum() > 0 and not torch.equal(alone[1], alone[2])  # (versions 3 and 3, two clients)
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-6)
    assert batched_logs.keys() == alone_logs.keys() and batched_logs
    for name, value in alone_logs.items():
        assert batched_logs[name] == pytest.approx(value, rel=1e-5), name


@pytest.mark.parametrize("module, knobs, why", [
    ("WithDropout", (), "its training_step draws random numbers (dropout)"),
    ("CountsSteps", (), "its training_step changes the module's attribute steps_seen"),
    ("EpochHook", (), "its on_train_epoch_end hook is called per trip"),
    pytest.param("SkipsLargeLosses", (), "its training_step reads a tensor's value in Python", marks=SLOW),
    ("WithBatchNorm", ("vmap_clients=true",), "its buffers (BatchNorm's running statistics)"),
    pytest.param("FactoredOptimizer", (), "its optimizer Adafactor is not one whose update is elementwise", marks=SLOW),
    pytest.param("MLP", ("algorithm=mfl",), "the algorithm's client rule keeps state of its own through a trip",
                 marks=SLOW),
])
def test_what_cannot_be_batched_trains_one_trip_at_a_time_and_says_why(module, knobs, why):
    exp = built(module, *knobs)
    assert exp.trainer.batched is None
    lines = exp.describe()
    assert any(f"trips train one at a time: {why}" in line for line in lines), lines
    assert "with one client trip at a time" in lines[0] and "batched" not in lines[0]


def test_vmap_clients_false_trains_one_at_a_time_without_a_reason():
    exp = built("MLP", "vmap_clients=false")
    assert exp.trainer.batched is None and exp.trainer.why_one_at_a_time is None
    assert not any("one at a time:" in line for line in exp.describe())


@pytest.mark.slow
def test_a_resumed_batched_run_ends_identical_to_an_uninterrupted_one(tmp_path):
    """Killed after its checkpoint and resumed: the same metrics, logged values and model (batching keeps no
    state of its own: it depends only on which trips a server step trains)."""
    overrides = ("task=lightning", f"task.module._target_={MODULES}.MLP", *DIGITS, "max_trips=60", "eval_every=25",
                 "checkpoint_every=3", "algorithm.buffer_size=5")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    summary = run_experiment(compose_run_config(*overrides), whole)
    assert summary["vmap_clients"] is True

    killed_and_resumed(overrides, cut, after_version=6)
    for name in ("metrics.csv", "task_metrics.csv", "trips.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(cut / name), pd.read_csv(whole / name))
    assert torch.equal(*(torch.cat([t.flatten() for t in torch.load(d / "model.pt").values()]) for d in (cut, whole)))
