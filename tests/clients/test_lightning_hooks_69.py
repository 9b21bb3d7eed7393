"""task=lightning as lightning.Trainer runs a module (issue 69, items 1 and 2): every hook a module may override
is decided (lightning_hooks.HOOKS, from Lightning's own classes); those a trip or an evaluation calls run where
and in the order the Trainer calls them, with current_epoch and global_step counting within the trip; a
module's Python attributes changed in a trip are restored after it. Each module of
my_fl_extensions.hook_modules_69 is compared with a real lightning.Trainer run of the same module."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fl_bench.errors import ConfigError
from fl_bench.runs.experiment import build_experiment
from tests.conftest import compose_run_config

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "extending" / "lightning-modules.md"
HOOKED = "my_fl_extensions.hook_modules_69"
# client 0 of digits' default partition holds 20 examples: in batches of 8 with drop_last, 2 steps an epoch;
# one trip at a time (the trainer this tests)
COMMON = ("dataset=digits", "model=mlp", "max_trips=40", "eval_every=20", "concurrency=10", "accelerator=cpu",
          "algorithm.batch_size=8", "task.drop_last=true", "algorithm.lr_norm=false", "vmap_clients=false")


@pytest.fixture(autouse=True)
def user_package(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))


def built(module: str, *overrides: str):
    cfg = compose_run_config("task=lightning", f"task.module._target_={HOOKED}.{module}", *COMMON, *overrides)
    return build_experiment(cfg, on_eval=lambda progress: False)


def trip(exp, client: int = 0, seed: int = 1) -> torch.Tensor:
    return exp.trainer.train([exp.server.broadcast()], [client], [seed])[0]


def client_batches(exp, client: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The client's examples as its module takes them (the dataset's transform applied)."""
    x, y = exp.data.client(client)
    return exp.task.layout(x, y, False)


def fit(module, x, y, batch_size: int = 8, epochs: int = 1, **settings):
    """lightning.Trainer's fit of ``module`` on (x, y) in batches of ``batch_size`` (drop_last, in order)."""
    import lightning as L

    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, DataLoader(TensorDataset(x, y), batch_size=batch_size, drop_last=len(y) >= batch_size))
    return trainer


def validate(module, x, y) -> dict:
    """lightning.Trainer's validate of ``module`` on (x, y) in one batch of 1,024: what it logged."""
    import lightning as L

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (logged,) = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                              enable_model_summary=False).validate(
            module, DataLoader(TensorDataset(x, y), batch_size=1024), verbose=False)
    return logged


def module_like(exp, name: str, **arguments):
    """A fresh instance of the run's module class, with the run's initial parameters."""
    import importlib

    cls = getattr(importlib.import_module(HOOKED), name)
    module = cls(tuple(exp.data.input_shape), exp.data.num_classes, **arguments)
    module.load_state_dict({k: v.clone() for k, v in exp.task.module.state_dict().items()})
    return module


def test_every_hook_of_lightnings_classes_is_decided_and_the_docs_show_the_table():
    """The names Lightning's ModelHooks, DataHooks, CheckpointHooks and LightningModule define (a release that
    adds one fails here until it is decided); the trip's and evaluation's hooks are among them as such; the
    docs hold the table as the code writes it."""
    from lightning import LightningModule
    from lightning.pytorch.core.hooks import CheckpointHooks, DataHooks, ModelHooks

    from fl_bench.clients.lightning_hooks import EVALUATION, EVALUATION_HOOKS, HOOKS, TRANSFER_HOOKS, TRIP, hook_table
    from fl_bench.clients.lightning_trainer import OPTIMIZER_HOOKS, TRIP_HOOKS

    found = set()
    for cls in (ModelHooks, DataHooks, CheckpointHooks, LightningModule):
        found |= {name for name, value in vars(cls).items() if not name.startswith("_") and callable(value)}
    assert found - set(HOOKS) == set(), "hooks of Lightning's nobody has decided about: add them to HOOKS"
    assert all(HOOKS[hook][0] == TRIP for hook in (*TRIP_HOOKS, *TRANSFER_HOOKS, *OPTIMIZER_HOOKS))
    assert all(HOOKS[f"on_validation_{place}"][0] == EVALUATION for place in EVALUATION_HOOKS)
    assert hook_table() in DOCS.read_text()


@pytest.mark.parametrize("hook", ["training_epoch_end", "validation_epoch_end", "test_epoch_end"])
def test_a_hook_no_run_calls_is_refused_in_one_line_naming_it(hook):
    from lightning import LightningModule

    from fl_bench.clients.lightning_hooks import prepare_module

    module = type("Module", (LightningModule,), {hook: lambda self, *args: None})()
    with pytest.raises(ConfigError, match=rf"^Module overrides {hook}, which fl_bench does not call: ") as error:
        prepare_module(module)
    assert "\n" not in str(error.value)


def test_build_hooks_run_once_and_callbacks_are_refused():
    """setup('fit') and configure_model run when the module is built (here: layers made in configure_model),
    before its parameters are read; callbacks from configure_callbacks are refused where trips train it, none
    are fine."""
    import lightning as L
    from lightning.pytorch.callbacks import EarlyStopping

    from fl_bench.clients.lightning_hooks import prepare_module, refuse_callbacks

    class Lazy(L.LightningModule):
        def setup(self, stage):
            self.stages = [*getattr(self, "stages", []), stage]

        def configure_model(self):
            self.layer = torch.nn.Linear(2, 2)

        def configure_callbacks(self):
            return []

    module = Lazy()
    prepare_module(module)
    refuse_callbacks(module)
    assert module.stages == ["fit"] and sum(p.numel() for p in module.parameters()) == 6
    Lazy.configure_callbacks = lambda self: EarlyStopping("val_loss")
    with pytest.raises(ConfigError, match=r"Lazy.configure_callbacks returned EarlyStopping: fl_bench runs no "):
        refuse_callbacks(Lazy())


def test_a_trip_calls_the_hooks_in_the_trainers_order_with_its_counters():
    """RecordsHooks overrides every hook a trip calls (the batch-transfer ones, optimizer_step, the zero_grad,
    backward, clipping and lr_scheduler_step hooks included) and records (hook, current_epoch, global_step):
    a trip of two local epochs of two steps records what lightning.Trainer's fit of two epochs over the same
    two batches records; an evaluation what Trainer.validate does (and on_validation_model_zero_grad first)."""
    exp = built("RecordsHooks", "algorithm.local_epochs=2")
    module = exp.task.module
    module.calls.clear()  # (the set-up's probe of its validation step)
    calls = module.calls
    trip(exp)
    assert module.calls == []  # (restored after the trip: a client keeps nothing)
    x, y = client_batches(exp)
    assert len(y) // 8 == 2
    reference = module_like(exp, "RecordsHooks")
    fit(reference, x, y, epochs=2)
    assert calls == reference.calls
    assert ("on_train_end", 2, 4) in calls and calls.count(("lr_scheduler_step", 0, 2)) == 1

    calls = module.calls
    exp.task.evaluate(exp.data.x_val, exp.data.y_val)
    reference = module_like(exp, "RecordsHooks")
    validate(reference, *exp.task.layout(exp.data.x_val, exp.data.y_val, False))
    assert calls[0] == ("on_validation_model_zero_grad", 0, 0)  # (the Trainer's fit calls it before validating)
    assert calls[1:] == reference.calls and ("on_validation_epoch_end", 0, 0) in calls


def test_the_documented_warm_up_in_optimizer_step_gives_the_trainers_lrs():
    """WarmUpClassifier (optimizer_step's docs: step, then set the lr from self.trainer.global_step) over three
    local epochs of two steps: the lr of every step is lightning.Trainer's over the same batches."""
    exp = built("WarmUpClassifier", "algorithm.local_epochs=3", "+task.module.learning_rate=0.4")
    seen = exp.task.module.seen_lrs
    trip(exp)
    reference = module_like(exp, "WarmUpClassifier", learning_rate=0.4)
    fit(reference, *client_batches(exp), epochs=3)
    assert seen == pytest.approx([0.4, 0.1, 0.2, 0.3, 0.4, 0.4]) and seen == pytest.approx(reference.seen_lrs)


@pytest.mark.parametrize("knobs", [
    ("algorithm.lr_norm=true", "task.drop_last=false", "algorithm.batch_size=16"),  # a short last batch: lr * n / B
    # (the quick subset keeps one: the others are the full suite's)
    pytest.param(("algorithm=fedprox", "algorithm.prox_mu=0.5"), marks=pytest.mark.slow),  # the proximal term in the loss
    pytest.param(("algorithm.lr_decay=0.5", "algorithm.local_epochs=2"), marks=pytest.mark.slow),  # lr * decay^t, 2 epochs
])
def test_an_optimizer_step_override_keeps_fedprox_lr_norm_and_the_lr_schedule(knobs):
    """optimizer_step with LightningModule's own body (PlainOptimizerStep): the closure path gives the trips of
    the module without it, LR-norm's scaling, FedProx's term and the lr schedule's factor included."""
    plain, overridden = built("LinearClassifier", *knobs), built("PlainOptimizerStep", *knobs)
    for exp in (plain, overridden):
        exp.server.version = 3  # the lr schedule's t
    assert torch.equal(plain.server.params, overridden.server.params)
    expected = trip(plain)
    assert expected.abs().sum() > 0
    assert torch.equal(trip(overridden), expected)


def test_gradient_clipping_by_the_module_or_by_task_gradient_clip_val_keeps_the_model_from_learning_as_the_trainer():
    """ClippedClassifier's configure_gradient_clipping (self.clip_gradients at a norm of 1e-9 by default: in
    float32 its model does not move at all), and a plain module under task.gradient_clip_val: each step moves
    the model by lr times the clip value, as under lightning.Trainer (one step over the client's one batch:
    the same Delta); unclipped it learns. A clip value of the module's that contradicts task.gradient_clip_val
    is refused, as the Trainer refuses it."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    one_step = ("algorithm.batch_size=32", "task.drop_last=false")  # client 0's 20 examples in one batch
    runs = {"frozen": built("ClippedClassifier", *one_step),
            "module": built("ClippedClassifier", *one_step, "+task.module.clip=1e-4"),
            "knob": built("LinearClassifier", *one_step, "task.gradient_clip_val=1e-4"),
            "none": built("LinearClassifier", *one_step)}
    deltas = {name: trip(exp) for name, exp in runs.items()}
    x, y = client_batches(runs["none"])
    for name, reference in (("module", module_like(runs["module"], "ClippedClassifier", clip=1e-4)),
                            ("knob", module_like(runs["knob"], "LinearClassifier"))):
        before = torch.cat([p.detach().flatten().clone() for p in reference.parameters()])
        fit(reference, x, y, batch_size=32, **({"gradient_clip_val": 1e-4} if name == "knob" else {}))
        moved = torch.cat([p.detach().flatten() for p in reference.parameters()]) - before
        assert deltas[name].norm() == pytest.approx(0.1 * 1e-4, rel=0.05)
        torch.testing.assert_close(deltas[name].abs(), moved.abs(), rtol=0, atol=3e-8)  # (Delta's sign: the server's)
    assert deltas["frozen"].abs().max() == 0 and deltas["none"].norm() > 1e-2

    clashing = built("ClippedClassifier", "task.gradient_clip_val=0.5")
    with pytest.raises(ConfigError, match=r"^ClippedClassifier.clip_gradients\(gradient_clip_val=1e-09\) contradicts "
                                          r"task.gradient_clip_val=0.5: use only one of them"):
        trip(clashing)
    with pytest.raises(MisconfigurationException, match="Please use only one of them"):
        fit(module_like(clashing, "ClippedClassifier"), x, y, gradient_clip_val=0.5)


def test_on_validation_epoch_end_computes_the_metric_read_as_accuracy_from_the_outputs_it_kept():
    """EpochMetricClassifier logs val_acc in on_validation_epoch_end over the outputs validation_step kept, then
    clears them: the evaluation's accuracy is that of its logits (Trainer.validate's val_acc), and the list
    is empty after every evaluation."""
    exp = built("EpochMetricClassifier")
    module = exp.task.module
    loss, accuracy = exp.task.evaluate(exp.data.x_val, exp.data.y_val)
    x_val, y_val = exp.task.layout(exp.data.x_val, exp.data.y_val, False)
    with torch.no_grad():
        assert accuracy == pytest.approx((module(x_val).argmax(-1) == y_val).float().mean().item())
    assert module.validation_step_outputs == []
    logged = validate(module_like(exp, "EpochMetricClassifier"), x_val, y_val)
    assert logged["val_acc"] == pytest.approx(accuracy) and logged["val_loss"] == pytest.approx(loss)


def test_current_epoch_and_global_step_count_within_each_trip_as_under_the_trainer():
    """EpochScheduled weights its loss by self.current_epoch and records (current_epoch, global_step, batch_idx):
    over two local epochs, each trip records what lightning.Trainer's fit of two epochs records, restarting at
    0 every trip; its loss weight acts (anneal_epochs=1 trains otherwise)."""
    exp = built("EpochScheduled", "algorithm.local_epochs=2")
    first, second = exp.task.module.seen, None
    trip(exp, seed=1)
    second = exp.task.module.seen
    trip(exp, seed=2)
    expected = [(epoch, epoch * 2 + b, b) for epoch in (0, 1) for b in range(2)]
    assert first == second == expected
    reference = module_like(exp, "EpochScheduled")
    fit(reference, *client_batches(exp), epochs=2)
    assert reference.seen == expected
    assert not torch.equal(trip(exp), trip(built("EpochScheduled", "algorithm.local_epochs=2",
                                                 "+task.module.anneal_epochs=1")))


def test_a_module_s_attributes_changed_in_a_trip_do_not_reach_the_next_trip():
    """CountsEpochs increments epochs_trained in on_train_epoch_end: every trip sees the count from 0, and no
    trip's result depends on the trips trained before it."""
    exp = built("CountsEpochs", "algorithm.local_epochs=2", "+task.module.learning_rate=0.5")
    module = exp.task.module
    for client, seed in ((0, 5), (1, 6), (0, 7)):
        seen = module.counts_seen
        trip(exp, client, seed)
        steps = len(seen) // 2
        assert seen == [0] * steps + [1] * steps and module.epochs_trained == 0 and module.counts_seen == []
    start = exp.server.broadcast()
    together = exp.trainer.train([start] * 3, [0, 1, 0], [5, 6, 7])
    assert torch.equal(together[2], exp.trainer.train([start], [0], [7])[0])


def test_attribute_snapshots_see_every_change_and_restore_what_the_trip_changed():
    """attribute_snapshot / changed_attributes / restore_attributes (for another trainer's reuse): appends,
    rebinding, nested changes, new and deleted attributes, hparams, in-place changes of a tensor attribute
    (refused: not a buffer); no change seen where there is none, and none where a trip's step moved the
    parameters a tensor attribute views."""
    from lightning import LightningModule

    from fl_bench.clients.lightning_hooks import attribute_snapshot, changed_attributes, restore_attributes

    class Module(LightningModule):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters({"lr": 0.1})
            self.layer = torch.nn.Linear(2, 2)
            self.outputs, self.nested, self.count, self.scale = [], {"a": [1, {"b": 2.0}]}, 0, torch.ones(2)
            self.weight_view = self.layer.weight.detach()

    module = Module()
    kept = attribute_snapshot(module)
    assert changed_attributes(module, kept) == []
    module.outputs.append(torch.zeros(1))
    module.nested["a"][1]["b"] = 3.0
    module.count += 1
    module.hparams.lr = 0.2
    module.new = "x"
    del module.scale
    with torch.no_grad():
        module.layer.weight.add_(1.0)  # (a step: not an attribute's change)
    changed = changed_attributes(module, kept)
    assert sorted(changed) == ["_hparams", "count", "nested", "new", "outputs", "scale"]
    restore_attributes(module, kept, changed)
    assert changed_attributes(module, kept) == [] and module.outputs == [] and module.count == 0
    assert module.hparams.lr == 0.1 and module.nested == {"a": [1, {"b": 2.0}]} and not hasattr(module, "new")
    module.scale.mul_(2)
    with pytest.raises(ConfigError, match=r"Module.scale, a tensor attribute \(not a buffer\), was changed in place"):
        restore_attributes(module, kept, changed_attributes(module, kept))


def test_on_save_checkpoint_s_additions_are_kept_in_the_run_s_checkpoint_and_given_back_on_resume():
    """KeepsBest saves its best validation accuracy in on_save_checkpoint and reads it back in
    on_load_checkpoint: the trainer's checkpoint state holds it, and loading that state restores it."""
    exp = built("KeepsBest")
    module = exp.task.module
    exp.task.evaluate(exp.data.x_val, exp.data.y_val)
    best = module.best_val_acc
    assert best > 0
    state = exp.trainer.state_dict()
    assert state["module"] == {"best_val_acc": best}
    module.best_val_acc = 0.0
    exp.trainer.load_state_dict(state)
    assert module.best_val_acc == best
    assert "module" not in built("LinearClassifier").trainer.state_dict()


@pytest.mark.parametrize("module, overrides, words", [
    ("SkipsEpochTails", ("algorithm.batch_size=4",), "SkipsEpochTails.on_train_batch_start returned -1, with which "
                                                      "lightning.Trainer skips the rest of the epoch: a client trip "
                                                      "trains the steps its plan gives"),
    ("WarmUpClassifier", ("algorithm=fedgbo",), "WarmUpClassifier overrides optimizer_step, which fl_bench cannot "
                                                "call under this algorithm: its client trips step with the "
                                                "algorithm's rule"),
])
def test_what_a_trip_cannot_honour_is_refused_in_one_line(module, overrides, words):
    with pytest.raises(ConfigError) as error:
        trip(built(module, *overrides))
    assert str(error.value).startswith(words) and "\n" not in str(error.value)
