"""task=lightning (fl_bench.clients.lightning_task): a user's LightningModule trains client trips
through its own training_step, optimizer, scheduler and hooks; its self.log reaches
task_metrics.csv; it is evaluated by its validation_step; the algorithm's client knobs apply around it."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

from fl_bench.engine.messages import Broadcast
from fl_bench.runs.experiment import Run, build_experiment, result_config, run_experiment
from tests.conftest import compose_run_config

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
MODULES = "my_fl_extensions.lightning_modules"
DIGITS = ("dataset=digits", "model=mlp", "max_trips=40", "eval_every=20", "concurrency=10", "accelerator=cpu")


@pytest.fixture(autouse=True)
def user_package(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))


def lightning(module: str, *overrides: str) -> tuple[str, ...]:
    return ("task=lightning", f"task.module._target_={MODULES}.{module}", *DIGITS, *overrides)


def built(*overrides: str):
    cfg = compose_run_config(*overrides)
    return build_experiment(cfg, on_eval=lambda progress: False)


def trip_deltas(exp, clients=(0, 1, 2), seeds=(11, 12, 13)):
    start = exp.server.broadcast()
    return exp.trainer.train([start] * len(clients), list(clients), list(seeds))


@pytest.mark.parametrize("knobs", [
    (),
    ("algorithm.lr_norm=true", "algorithm.batch_size=16"),  # a short last batch: lr * n / B
    ("algorithm=fedprox", "algorithm.prox_mu=0.5"),  # the proximal term added to the module's loss
    ("algorithm.lr_decay=0.5", "algorithm.local_epochs=2"),  # lr * decay^t, two local epochs
])
def test_a_module_that_wraps_the_network_trains_as_the_builtin_task(knobs):
    """WrappedNetwork: fl_bench's own network, cross-entropy and SGD at the same lr. Its trips (the
    module's training_step and its optimizer, with LR-norm, FedProx and the lr schedule applied around
    them) give the built-in trainer's Deltas."""
    common = (*DIGITS, "algorithm.client_lr=0.2", "vmap_clients=false", *knobs)
    builtin = built(*common)
    wrapped = built("task=lightning", f"task.module._target_={MODULES}.WrappedNetwork", "+task.module.lr=0.2", *common)
    assert wrapped.trainer.own_optimizer
    for exp in (builtin, wrapped):
        exp.server.version = 3  # the lr schedule's t
    assert torch.equal(builtin.server.params, wrapped.server.params)  # the same initial model
    expected, got = trip_deltas(builtin), trip_deltas(wrapped)
    assert expected.abs().sum() > 0
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_under_an_algorithm_whose_server_reads_the_client_rule_trips_step_with_that_rule():
    """FedGBO's clients step with U(eta, g, s) at client_lr: a module's trips do the same on its
    gradients (its configure_optimizers is not used), so they equal the built-in task's."""
    common = (*DIGITS, "algorithm=fedgbo", "algorithm.client_lr=0.05", "vmap_clients=false")
    builtin = built(*common)
    wrapped = built("task=lightning", f"task.module._target_={MODULES}.WrappedNetwork", "+task.module.lr=9.0", *common)
    assert not wrapped.trainer.own_optimizer
    assert "the algorithm's rule" in wrapped.describe()[1]
    state = {k: torch.rand_like(v) + 0.5 for k, v in builtin.server.broadcast().state.items()}
    assert state  # the global statistics s the rule reads
    start = Broadcast(0, builtin.server.params, state)
    expected = builtin.trainer.train([start] * 2, [0, 1], [5, 6])
    got = wrapped.trainer.train([start] * 2, [0, 1], [5, 6])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_the_scheduler_steps_per_step_and_each_trip_starts_a_fresh_optimizer():
    """StepLR(gamma=0.5) with interval "step": the lr halves at every step of a trip and starts again
    at the module's lr on the next trip (a client has no optimizer state from earlier trips)."""
    exp = built(*lightning("DigitsClassifier", "+task.module.lr=0.4", "+task.module.gamma=0.5",
                           "algorithm.batch_size=64", "algorithm.lr_norm=false"))  # LR-norm would scale a short batch
    module = exp.task.module
    steps = int(-(-exp.data.sizes[0] // 64))
    trip_deltas(exp, clients=(0, 0), seeds=(1, 2))
    per_trip = [0.4 * 0.5 ** k for k in range(steps)]
    assert module.seen_lrs == pytest.approx(per_trip * 2)
    assert module.hooks == ["train_start", "epoch_start", "epoch_end", "train_end"] * 2


def test_a_run_logs_what_the_module_logs_without_warnings_and_scores_it_by_its_validation_step(tmp_path):
    """A whole FedAvg run: training_step's self.log values reach task_metrics.csv (the mean over the
    steps since the last evaluation), validation_step's val_loss / val_acc are metrics.csv's
    val_loss / val_accuracy, and no warning is raised (self.log goes through Fabric)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = run_experiment(compose_run_config(*lightning("DigitsClassifier", "algorithm=fedavg")), tmp_path / "run")
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    logged = pd.read_csv(tmp_path / "run" / "task_metrics.csv")
    assert summary["status"] == "completed" and len(metrics) == 3
    assert set(logged.name) == {"train_loss", "train_acc", "val_loss", "val_acc"}
    val = logged[logged.stage == "val"].pivot(index="trips", columns="name", values="value")
    assert val["val_acc"].tolist() == pytest.approx(metrics.set_index("trips")["val_accuracy"].tolist())
    assert val["val_loss"].tolist() == pytest.approx(metrics.set_index("trips")["val_loss"].tolist())
    train = logged[logged.stage == "train"]
    assert set(train.trips) == {20, 40} and train.value.notna().all()  # trips trained before each evaluation
    assert (tmp_path / "run" / "model.pt").exists() and summary["final_val_accuracy_by_class"] == []


def test_dict_batches_adam_an_epoch_scheduler_and_fl_benchs_own_evaluation(tmp_path):
    """A module reading {"image", "label"} batches (task.batch_keys), Adam with an epoch-interval
    scheduler in Lightning's ([optimizers], [schedulers]) form, no validation_step: the run scores
    its logits with cross-entropy and accuracy and reports accuracy per class."""
    summary = run_experiment(compose_run_config(*lightning("DictBatchClassifier", "task.batch_keys=[image,label]",
                                                           "algorithm=fedbuff")), tmp_path / "run")
    assert summary["status"] == "completed" and 0.1 < summary["final_val_accuracy"] <= 1
    assert len(summary["final_val_accuracy_by_class"]) == 10
    logged = pd.read_csv(tmp_path / "run" / "task_metrics.csv")
    assert set(logged.name) == {"loss", "batch_size"} and set(logged.stage) == {"train"}


def test_a_resumed_lightning_run_ends_identical_to_an_uninterrupted_one(tmp_path):
    """Killed after its checkpoint (server step 2) and resumed: metrics.csv, task_metrics.csv (with the
    training sums of the trips since the last evaluation kept in the checkpoint) and the model are
    those of an uninterrupted run."""
    overrides = lightning("DigitsClassifier", "algorithm=fedbuff", "algorithm.buffer_size=5", "max_trips=60",
                          "eval_every=25", "checkpoint_every=3")
    whole = tmp_path / "whole"
    run_experiment(compose_run_config(*overrides), whole)
    cut = tmp_path / "cut"
    cfg = compose_run_config(*overrides)

    class Stop(Exception):
        pass

    def stop_after_checkpoint(run):
        raise Stop

    run = Run(cfg, cut, result_config(cfg))
    cut.mkdir()
    run.build()
    original = run.checkpoint

    def checkpoint_then_die():
        original()
        if run.exp.server.version >= 6:
            stop_after_checkpoint(run)

    run.checkpoint = checkpoint_then_die
    with pytest.raises(Stop):
        run.execute(None)
    run_experiment(compose_run_config(*overrides), cut)  # resumes from the checkpoint
    for name in ("metrics.csv", "task_metrics.csv", "trips.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(cut / name), pd.read_csv(whole / name))
    assert torch.equal(*(torch.cat([t.flatten() for t in torch.load(d / "model.pt").values()]) for d in (cut, whole)))


@pytest.mark.parametrize("overrides, message", [
    (lightning("DigitsClassifier", "vmap_clients=true"), r"^vmap_clients=true is not allowed with task=lightning"),
    (lightning("NotALightningModule"), r"NotALightningModule is not a LightningModule class"),
    (lightning("Missing"), r"^task.module._target_=my_fl_extensions.lightning_modules.Missing cannot be imported"),
    (("task=lightning", *DIGITS), r"^task.module._target_=None is not allowed: name your LightningModule"),
    (lightning("DigitsClassifier", "task.batch_keys=[x]"), r"^task.batch_keys=\['x'\] is not allowed"),
    (lightning("DigitsClassifier", "precision=16-mixed"), r"precision=16-mixed"),
    (lightning("WrappedNetwork", "task.accuracy_key=acc"),
     r"^task.accuracy_key=acc names a logged metric, but WrappedNetwork has no validation_step or test_step"),
    (lightning("WrappedNetwork", "algorithm=fedgbo", "precision=bf16-mixed", "precision=16-mixed"), r"precision=16-mixed"),
])
def test_what_cannot_work_is_refused_in_one_line(overrides, message):
    from fl_bench.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as error:
        built(*overrides)
    assert "\n" not in str(error.value)
