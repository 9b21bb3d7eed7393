"""task=lightning with modules as Lightning's docs write them (issue 69,
tests/example_plugin/my_fl_extensions/docs_modules_69.py): the run's first line names what is read as
accuracy, and a run that measures none says "no accuracy logged", never "not reached"; the README's
autoencoder is evaluated by its training_step; task.lr_scheduler=off leaves the module's schedulers out;
self.optimizers() gives the optimizer a trip steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fl_bench.runs.cli import result_line
from fl_bench.runs.experiment import build_experiment, run_experiment
from tests.conftest import compose_run_config

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
MODULES = "my_fl_extensions.docs_modules_69"
DIGITS = ("dataset=digits", "max_trips=40", "eval_every=20", "concurrency=10", "accelerator=cpu",
          "vmap_clients=false")  # (trips one at a time: each of a trip's steps its own)


@pytest.fixture(autouse=True)
def user_package(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))


def lightning(module: str, *overrides: str) -> tuple[str, ...]:
    return ("task=lightning", f"task.module._target_={MODULES}.{module}", *DIGITS, *overrides)


def built(*overrides: str):
    return build_experiment(compose_run_config(*overrides), on_eval=lambda progress: False)


def trips(exp, clients=(0, 0), seeds=(1, 2)):
    start = exp.server.broadcast()
    return exp.trainer.train([start] * len(clients), list(clients), list(seeds))


@pytest.mark.parametrize("module, says", [
    ("LitClassifier", "; accuracy: val_acc as validation_step logs it;"),
    ("LogsValAccuracy", "; no accuracy: validation_step logs no val_acc (it logs val_accuracy, val_loss): set "
                        "task.accuracy_key=val_accuracy; trips to target_accuracy cannot be measured;"),
    ("LogsLossOnly", "; accuracy: the argmax of its forward's class logits, scored by fl_bench (validation_step logs "
                     "no val_acc; it logs val_loss);"),
    ("LitAutoEncoder", "; evaluated by the mean of its training_step loss on the validation set; no accuracy (its "
                       "forward raised RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x8 and 64x128): "
                       "task.evaluation=auto chose training_step)"),
])
def test_the_first_line_names_what_is_read_as_accuracy_and_what_to_set_where_none_is(module, says):
    """Each module's evaluation gives the accuracy the first line names: the logged val_acc; NaN where it
    logs its accuracy under another name (and the line names that key) or is evaluated by its
    training_step; its logits' argmax accuracy where it logs none and its forward gives class logits."""
    exp = built(*lightning(module))
    assert says in exp.describe()[1]
    task, data = exp.task, exp.data
    loss, accuracy = task.evaluate(data.x_val, data.y_val)
    assert loss == loss
    if module in ("LitClassifier", "LogsLossOnly"):  # both: the argmax accuracy of the same logits
        with torch.no_grad():
            expected = (task.module(task.batch(data.x_val, data.y_val, False)[0]).argmax(1) == data.y_val).float().mean()
        assert accuracy == pytest.approx(float(expected))
        assert task.accuracy_source is not None
    else:
        assert accuracy != accuracy and task.accuracy_source is None


def test_a_run_that_measures_no_accuracy_ends_no_accuracy_logged_not_not_reached(tmp_path):
    """LitAutoEncoder: the run completes, summary.json says no accuracy was measured (accuracy_source null,
    trips_to_target null) and the result line reads "no accuracy logged" with the validation loss."""
    summary = run_experiment(compose_run_config(*lightning("LitAutoEncoder", "algorithm=fedbuff")), tmp_path / "run")
    assert summary["status"] == "completed" and summary["accuracy_source"] is None
    assert summary["trips_to_target"] is None and summary["final_val_loss"] < 2.0
    line = result_line(summary)
    assert "trips to 45%: no accuracy logged" in line and "not reached" not in line and "val loss" in line
    measured = {**summary, "accuracy_source": "val_acc as validation_step logs it", "best_val_accuracy": 0.3,
                "final_val_accuracy": 0.3}
    assert "trips to 45%: not reached" in result_line(measured)


@pytest.mark.parametrize("module, lr", [("StepLRPerEpoch", 0.1), ("WarmUpPerStep", 0.1), ("OneCycleOverTheFit", 0.1),
                                        ("PlateauOnTrainLoss", 0.1)])
def test_lr_scheduler_off_leaves_the_module_s_schedulers_out_and_says_so(module, lr, monkeypatch):
    """task.lr_scheduler=off: every step of every trip takes the optimizer's configured lr and momentum (what
    a warm-up's or OneCycleLR's construction set, undone), modules refused with their schedulers run, and the first line
    names the schedulers left out."""
    exp = built(*lightning(module, "task.lr_scheduler=off", "algorithm.local_epochs=2", "algorithm.batch_size=8",
                               "algorithm.lr_norm=false"))  # (LR-norm would scale a short batch's lr)
    left_out = {"StepLRPerEpoch": "StepLR", "WarmUpPerStep": "LinearLR", "OneCycleOverTheFit": "OneCycleLR",
                "PlateauOnTrainLoss": "ReduceLROnPlateau"}[module]
    assert f"its lr scheduler {left_out} left out (task.lr_scheduler=off)" in exp.describe()[1]
    seen, step = [], torch.optim.SGD.step

    def recorded(optimizer, *args, **kwargs):  # (every step the trips take: the lr and momentum it steps with)
        seen.append((optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["momentum"]))
        return step(optimizer, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", recorded)
    trips(exp)
    steps = int(exp.trainer.local.num_steps(exp.data.sizes[:1])[0])
    assert steps >= 2 and seen == [(lr, 0.0)] * (2 * steps)  # (OneCycleLR sets a momentum of its own: undone)


@pytest.mark.parametrize("knobs, lr", [(("algorithm=fedavg",), 0.1),
                                       (("algorithm=fedgbo", "algorithm.client_lr=0.05"), 0.05)])
def test_self_optimizers_gives_the_optimizer_a_trip_steps(knobs, lr):
    """LogsItsLr logs self.optimizers().param_groups[0]["lr"] in its training_step: the module's own SGD
    lr under FedAvg; under FedGBO, whose trips step with the algorithm's rule, algorithm.client_lr."""
    exp = built(*lightning("LogsItsLr", *knobs))
    trips(exp)
    assert exp.task.metrics.take_training()["lr"] == pytest.approx(lr)
