"""algorithm=centralized on a real lightning.Trainer (fl_bench.runs.centralized): the same S-SGD as
the rounds' trips (pinned against a hand loop, and bit for bit against torch's SGD), on the federated
axes, Lightning's logs and checkpoints, an exact resume, a user's LightningModule, and one-line
refusals."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fl_bench.clients.local_update import LocalTraining
from fl_bench.clients.task import TASKS
from fl_bench.clients.trainer import minibatch_plan
from fl_bench.data import build_dataset
from fl_bench.errors import ConfigError
from fl_bench.models import build_model
from fl_bench.numerics import kernels
from fl_bench.runs.callbacks import Callback
from fl_bench.runs.experiment import run_experiment
from tests.conftest import compose_run_config

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
# Digits pooled (1,797 examples); 6 rounds of 4 steps of batch 10 with a decaying lr and LR-norm.
POOLED = ("algorithm=centralized", "dataset=digits", "model=mlp", "max_trips=6", "eval_every=2",
          "algorithm.local_steps=4", "algorithm.batch_size=10", "algorithm.client_lr=0.3", "algorithm.lr_decay=0.8",
          "accelerator=cpu", "checkpoint_minutes=null")


def pooled_task(cfg):
    """The run's model at its seed's initialisation, its task, its local training and the pooled examples."""
    torch.manual_seed(cfg.seed)
    data = build_dataset(cfg.dataset, cfg.partition).pooled()
    model = build_model(cfg.model, data.input_shape, data.num_classes, data.vocab)
    task = TASKS[cfg.model.task](model, data.num_classes, cfg.model.weight_decay, transform=data.transform)
    return model, task, LocalTraining.from_config(cfg.algorithm), data.client(0)


def planned_steps(cfg, local, num_examples: int):
    """Each step of the run: its round t, its minibatch's rows (the plan of trip seed ``seed << 32 | t``)
    and the round's generator (its augmentation draws)."""
    for t in range(cfg.max_trips):
        seed = (cfg.seed << 32) + t
        plan = minibatch_plan(np.array([num_examples]), [seed], local)
        generator = torch.Generator().manual_seed(seed)
        for step in range(int(plan.steps[0])):
            yield t, plan.rows[0, step][plan.mask[0, step]], generator


def hand_sgd(cfg) -> torch.Tensor:
    """S-SGD written out: round t's minibatches are the plan of trip seed ``seed << 32 | t``, and each
    step is w <- w - client_lr * decay^t * grad of the task's loss."""
    model, task, local, (x, y) = pooled_task(cfg)
    params = list(model.parameters())
    for t, rows, generator in planned_steps(cfg, local, len(y)):
        grads = torch.autograd.grad(task.loss(x[rows], y[rows], generator), params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(0.3 * 0.8**t * g)
    return torch.cat([p.detach().flatten() for p in params])


def final_model(run_dir: Path) -> torch.Tensor:
    return torch.cat([t.flatten() for t in torch.load(run_dir / "model.pt").values()])


def torch_sgd(cfg) -> torch.Tensor:
    """The steps Lightning's automatic optimization took when a Trainer batch was one minibatch (before
    issue 68): torch's SGD, zero_grad, loss.backward() and step at the step's ``step_lr``, with the run's
    thread count. The run's built-in module now steps through a round in one training_step."""
    model, task, local, (x, y) = pooled_task(cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=local.lr)
    with kernels(cfg.numerics, cfg.threads):
        for t, rows, generator in planned_steps(cfg, local, len(y)):
            loss = task.loss(x[rows], y[rows], generator)
            optimizer.zero_grad()
            loss.backward()
            optimizer.param_groups[0]["lr"] = local.step_lr(len(rows), t)
            optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_trainer_runs_the_rounds_sgd_on_the_pooled_data_on_the_federated_axes(tmp_path):
    cfg = compose_run_config(*POOLED)
    summary = run_experiment(cfg, tmp_path)
    torch.testing.assert_close(final_model(tmp_path), hand_sgd(cfg), rtol=0, atol=1e-6)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics["trips"].tolist() == metrics["server_step"].tolist() == [0, 2, 4, 6]  # the initial model too
    assert metrics["val_accuracy"].iloc[-1] > metrics["val_accuracy"].iloc[0]
    assert summary["client_trips"] == summary["server_steps"] == 6 and summary["trainer"] == "lightning.Trainer"
    assert summary["status"] == "completed" and len(summary["final_val_accuracy_by_class"]) == 10
    assert (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").exists()  # Lightning's own logger


def test_a_round_in_one_training_step_is_bit_for_bit_lightnings_step_per_minibatch(tmp_path):
    # whole epochs of batch 256 (a short last batch, which LR-norm scales), 1/(1+t), L2 and random
    # flips (the round's generator): the same bits as the loop Lightning's automatic optimization ran
    cfg = compose_run_config(*POOLED, "max_trips=3", "algorithm.local_steps=null", "algorithm.batch_size=256",
                             "algorithm.lr_schedule=inverse", "algorithm.lr_norm=true", "model.weight_decay=2e-4",
                             "dataset.random_flip=true")
    run_experiment(cfg, tmp_path)
    assert torch.equal(final_model(tmp_path), torch_sgd(cfg))


def test_the_final_model_is_evaluated_off_the_grid_and_the_target_stops_the_run(tmp_path):
    summary = run_experiment(compose_run_config(*POOLED, "max_trips=5", "max_rounds=5"), tmp_path / "grid")
    assert pd.read_csv(tmp_path / "grid" / "metrics.csv")["trips"].tolist() == [0, 2, 4, 5]
    assert summary["client_trips"] == summary["server_steps"] == 5
    stopped = run_experiment(compose_run_config(*POOLED, "target_accuracy=0.2", "stop_at_target=true"), tmp_path / "t")
    assert stopped["trips_to_target"] == stopped["client_trips"] == 2  # trained no further than the evaluation


class CrashAtRound(Callback):
    """A run killed at its evaluation of round ``at`` (after the checkpoint of round at - 2)."""

    def __init__(self, at: int):
        self.at = at

    def on_evaluation(self, run, progress, row):
        if progress.trips == self.at:
            raise RuntimeError("killed")
        return False


@pytest.mark.parametrize("trigger, resumed_at", [("checkpoint_every=2", 2), ("checkpoint_minutes=1e-9", 3)])
def test_a_killed_run_resumes_from_lightnings_checkpoint_and_ends_as_an_uninterrupted_one(tmp_path, trigger, resumed_at):
    # checkpoint_minutes: saved at the end of every round (the last before the crash: round 3)
    overrides = (*POOLED, trigger)
    whole = tmp_path / "whole"
    run_experiment(compose_run_config(*overrides), whole)
    cut = tmp_path / "cut"
    with pytest.raises(RuntimeError, match="killed"):
        run_experiment(compose_run_config(*overrides), cut, callbacks=[CrashAtRound(4)])
    assert (cut / "checkpoints" / "last.ckpt").exists() and not (cut / "model.pt").exists()
    summary = run_experiment(compose_run_config(*overrides), cut)
    assert summary["status"] == "completed" and summary["resumed_at_trips"] == [resumed_at]
    assert torch.equal(final_model(cut), final_model(whole))
    pd.testing.assert_frame_equal(pd.read_csv(cut / "metrics.csv"), pd.read_csv(whole / "metrics.csv"))
    last = torch.load(cut / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 6 * 4  # Lightning's step counter counts optimizer steps, a round's 4 each
    with pytest.raises(ConfigError, match="holds a checkpoint of another config"):
        (cut / "summary.json").unlink()
        run_experiment(compose_run_config(*overrides, "algorithm.client_lr=0.1"), cut)


def test_a_users_lightning_module_is_fitted_by_the_trainer(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))
    summary = run_experiment(compose_run_config(
        *POOLED, "task=lightning", "task.module._target_=my_fl_extensions.lightning_modules.DigitsClassifier",
        "+task.module.lr=0.3"), tmp_path)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics["trips"].tolist() == [0, 2, 4, 6] and metrics["val_accuracy"].iloc[-1] > 0.3
    logged = pd.read_csv(tmp_path / "lightning_logs" / "version_0" / "metrics.csv")
    assert {"train_loss", "train_acc", "val_loss", "val_acc"} <= set(logged.columns)  # its self.log calls
    assert summary["status"] == "completed"


@pytest.mark.parametrize("overrides, message", [
    (("availability=diurnal",), "availability=diurnal is not allowed with algorithm=centralized"),
    (("devices=2",), "devices=2 num_nodes=1 is not allowed with algorithm=centralized"),
    (("vmap_clients=true",), "vmap_clients=true is not allowed with algorithm=centralized"),
    (("behaviour=unreliable",), "behaviour=unreliable is not allowed with algorithm=centralized"),
    (("cuda_graphs=true",), "cuda_graphs=true is not allowed with algorithm=centralized"),
    (("algorithm.deadline=2.5",), "algorithm.deadline=2.5 is not allowed with algorithm=centralized: a round of the "
                                   "pooled reference is one trip with no clock to time it; use algorithm.deadline=null"),
    (("algorithm.late_uploads=deliver",), "algorithm.late_uploads=deliver is not allowed with algorithm=centralized"),
    (("task=lightning", "task.module._target_=my_fl_extensions.lightning_modules.WrappedNetwork"),
     "WrappedNetwork has no validation_step"),
])
def test_what_has_nothing_to_act_on_is_refused_in_one_line(tmp_path, monkeypatch, overrides, message):
    monkeypatch.syspath_prepend(str(PLUGIN))
    with pytest.raises(ConfigError, match=message):
        run_experiment(compose_run_config(*POOLED, *overrides), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def _strict_json(text: str) -> dict:
    def refuse(constant):
        raise AssertionError(f"summary.json holds {constant}, which is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("dataset", [(), ("dataset=digits",)])
def test_the_documented_command_at_its_defaults_writes_its_files_and_shows_no_nan(tmp_path, dataset):
    # docs/extending/centralized.md: python -m fl_bench algorithm=centralized [dataset=digits], here at
    # a budget of 3 rounds. It writes metrics.csv, summary.json, model.pt and Lightning's CSV log, and has no
    # clock: no simulated time is printed, summary.json's sim_time is null and metrics.csv's column empty.
    from fl_bench.runs.cli import result_line

    run = tmp_path / "run"
    summary = run_experiment(compose_run_config("algorithm=centralized", *dataset, "max_trips=3", "eval_every=2"), run)
    for name in ("metrics.csv", "summary.json", "model.pt", "lightning_logs/version_0/metrics.csv"):
        assert (run / name).is_file(), name
    written = _strict_json((run / "summary.json").read_text())
    assert written["status"] == "completed" and written["client_trips"] == written["server_steps"] == 3
    assert written["sim_time"] is None and written["sim_time_to_target"] is None
    assert "nan" not in (run / "metrics.csv").read_text().lower()
    assert pd.read_csv(run / "metrics.csv")["trips"].tolist() == [0, 2, 3]
    line = result_line(summary)
    assert line.startswith(f"[bold]centralized[/] on {'digits' if dataset else 'synthetic'}")
    assert "trips 3 | server steps 3" in line
    assert "nan" not in line.lower() and "sim time" not in line
    federated = {**summary, "algorithm": "fedbuff", "sim_time": 12.25}
    assert "sim time 12.2 |" in result_line(federated)  # a run with a clock still prints its time


def test_a_presets_federated_settings_are_refused_together_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as refused:
        run_experiment(compose_run_config("experiment=fedlaavg_table2_smoke", "algorithm=centralized"), tmp_path / "a")
    assert str(refused.value).count("\n") == 0 and str(refused.value).startswith(
        "availability=diurnal, vmap_clients=true are not allowed with algorithm=centralized")
    assert str(refused.value).endswith("add availability=always vmap_clients=null")
    assert not (tmp_path / "a").exists()
    summary = run_experiment(compose_run_config("experiment=fedlaavg_table2_smoke", "algorithm=centralized",
                                                "availability=always", "vmap_clients=null", "max_trips=2"), tmp_path / "b")
    assert summary["status"] == "completed" and summary["client_trips"] == 2


def test_hfls_round_timing_is_refused_with_the_presets_other_federated_settings(tmp_path):
    # HFL's presets time every arm's rounds (algorithm.deadline=1, fixed_rounds): S-SGD has no clock to honour them,
    # so they are named with the preset's groups and flags, not accepted and ignored
    with pytest.raises(ConfigError, match=r"^speed=stragglers, vmap_clients=true, algorithm.deadline=1.0, "
                       r"algorithm.fixed_rounds=true are not allowed .* add speed=none vmap_clients=null "
                       r"algorithm.deadline=null algorithm.fixed_rounds=false$"):
        run_experiment(compose_run_config("experiment=hfl_convex_smoke", "algorithm=centralized"), tmp_path / "a")
    assert not (tmp_path / "a").exists()


@pytest.mark.slow
def test_the_command_line_runs_it_and_prints_its_result_line(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "fl_bench", "algorithm=centralized", "max_trips=4", "eval_every=2",
                           "progress=false", f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "centralized on synthetic" in done.stdout and "trips 4 | server steps 4" in done.stdout
    assert "nan" not in done.stdout.lower() and "sim time" not in done.stdout  # no clock: no simulated time
    said = done.stdout + done.stderr  # and none of Lightning's start-up lines or its internal deprecation
    assert not any(noise in said for noise in ("TPU available", "litlogger", "LeafSpec", "max_epochs=4` reached"))


def test_a_run_killed_while_saving_its_checkpoint_keeps_the_previous_one_whole(tmp_path):
    """A save cut short (the process killed mid-write) never replaces last.ckpt: it is written beside it
    and renamed over it."""
    from types import SimpleNamespace

    from fl_bench.runs.centralized import round_checkpoint

    path = tmp_path / "last.ckpt"
    path.write_bytes(b"the previous checkpoint")

    def killed_mid_write(target):
        Path(target).write_bytes(b"half of the")
        raise KeyboardInterrupt

    trainer = SimpleNamespace(current_epoch=0, save_checkpoint=killed_mid_write)
    saving = round_checkpoint(path, every=1, minutes=None)
    saving.on_train_start(trainer, None)
    with pytest.raises(KeyboardInterrupt):
        saving.on_train_epoch_end(trainer, None)
    assert path.read_bytes() == b"the previous checkpoint"
    trainer.save_checkpoint = lambda target: Path(target).write_bytes(b"the next checkpoint")
    saving.on_train_epoch_end(trainer, None)
    assert path.read_bytes() == b"the next checkpoint" and not list(tmp_path.glob("*.partial"))
