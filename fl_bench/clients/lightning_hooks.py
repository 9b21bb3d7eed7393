"""Which of a user's LightningModule's hooks a run calls, and when (``task=lightning``), and what a module
keeps between client trips.

:data:`HOOKS` decides every hook Lightning's classes define (``ModelHooks``, ``DataHooks``,
``CheckpointHooks`` and the ``LightningModule`` methods the Trainer calls): honoured where the Trainer
would call it within a trip (a fit of its own), an evaluation, when the run builds the module or at its
checkpoints; irrelevant, with the reason; or refused in one line where the module overrides it.
:func:`user_code` turns whatever a hook raises into one line naming it. A module's Python attributes are
restored at the end of every trip (:func:`attribute_snapshot`, :func:`changed_attributes`,
:func:`restore_attributes`): a client keeps nothing between trips but the parameters and buffers the
server federates. Used by ``fl_bench.clients.lightning_task`` and the trainers of its trips.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from fl_bench.errors import ConfigError, FLBenchError


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0].rstrip('.')}" if text else type(error).__name__


@contextlib.contextmanager
def user_code(module: nn.Module, hook: str, hint: str = "") -> Iterator[None]:
    """Run the module's ``hook`` so that whatever it raises reaches the user as one line naming the hook
    and the error (``FL_BENCH_TRACEBACK=1`` keeps the traceback, chained); fl_bench's own errors pass."""
    try:
        yield
    except Exception as error:
        raised = user_error(module, hook, error, hint)
        if raised is error:
            raise
        raise raised from error


def user_error(module: nn.Module, hook: str, error: Exception, hint: str = "") -> Exception:
    """What :func:`user_code` raises for ``error``, raised by the module's ``hook`` (``error`` itself:
    fl_bench's own). A trip's per-step calls catch their errors with a plain ``try`` and raise this
    (``from error``): entering a context manager at every hook cost more than an empty hook."""
    if isinstance(error, FLBenchError):
        if str(error).startswith("self.log"):  # (what it logged: say where)
            return ConfigError(f"{type(module).__qualname__}.{hook}: {error}")
        return error
    read = trainer_read(error)
    if read is not None:  # (not Lightning's words, which are about a Fabric the user never set up)
        return ConfigError(f"{type(module).__qualname__}.{hook} reads {read}, which fl_bench cannot give: it runs no "
                           f"lightning.Trainer, and a client trip is a fit of its own whose length varies by client: "
                           + (hint or "give the value as an argument of the module's (+task.module.<name>=...)"))
    return ConfigError(f"{type(module).__qualname__}.{hook} raised {first_line(error)}"
                       + ((" " if hint.startswith("(") else ": ") + hint if hint else ""))


def trainer_read(error: BaseException) -> str | None:
    """What of ``self.trainer`` the module read where ``error`` is Lightning's about it (``self.trainer.<name>``,
    or ``self.trainer`` before Fabric set the module up); None for any other error."""
    text = str(error)
    found = re.search(r"self\.trainer\.(\w+)", text)
    if found:
        return f"self.trainer.{found.group(1)}"
    return "self.trainer" if "self.trainer" in text or "not attached to a `Trainer`" in text else None


def overrides(module: nn.Module, hook: str) -> bool:
    """Whether the module's class defines ``hook`` itself (not LightningModule's empty default)."""
    from lightning import LightningModule

    return getattr(type(module), hook, None) is not getattr(LightningModule, hook, None)


# ------------------------------------------------------------------ hooks: which a run calls, and when (issue 69)
# Every hook a LightningModule may override (lightning.pytorch.core.hooks' ModelHooks, DataHooks and
# CheckpointHooks, and LightningModule's own methods), decided: honoured (when, in a trip, an evaluation, when
# the run builds the module, at its checkpoints), irrelevant (why), or refused in one line where the module
# overrides it (why). tests/clients/test_lightning_hooks_69.py fails when a Lightning release adds one that is
# not here; docs/extending/lightning-modules.md shows this table (hook_table()).
BUILD, TRIP, EVALUATION, CHECKPOINT, IRRELEVANT, REFUSED = (
    "build", "trip", "evaluation", "checkpoint", "irrelevant", "refused")
_PREDICT = "a federated run never predicts (lightning.Trainer.predict)"
_OWN = "not a hook: a method the module calls itself, which the Trainer does not call"
_TEST = "as its on_validation_ counterpart, where test_step evaluates the module (it has no validation_step)"
_REMOVED = ("removed in Lightning 2.0, and lightning.Trainer refuses it too: override on_{stage}_epoch_end, keeping "
            "what the steps return in an attribute (a list it clears)")
HOOKS: dict[str, tuple[str, str]] = {
    "setup": (BUILD, "once, as setup('fit')"),
    "configure_model": (BUILD, "once, after setup, before the run reads (and federates) its parameters"),
    "configure_sharded_model": (BUILD, "as configure_model (Lightning's deprecated name), where that is not overridden"),
    "configure_callbacks": (BUILD, "once, where trips train it: callbacks it returns are refused in one line, as "
                                   "no lightning.Trainer would run them (returning none is fine; under "
                                   "algorithm=centralized a Trainer runs them)"),
    "configure_optimizers": (TRIP, "at the start of every trip (a trip is a fit of its own: a fresh optimizer and "
                                   "lr schedulers, the counters from 0), where trips step the module's optimizer"),
    "on_fit_start": (TRIP, "then"),
    "on_train_start": (TRIP, "then"),
    "on_train_epoch_start": (TRIP, "at the start of every local epoch"),
    "on_before_batch_transfer": (TRIP, "on every minibatch, with dataloader_idx 0 (in evaluations too, on every "
                                       "validation batch)"),
    "transfer_batch_to_device": (TRIP, "then, with the module's device (where the batch already is)"),
    "on_after_batch_transfer": (TRIP, "then"),
    "on_train_batch_start": (TRIP, "before every step, with (batch, batch_idx); returning -1 (under the Trainer: "
                                   "skip the rest of the epoch) is refused in one line, as a trip trains the steps "
                                   "its plan gives"),
    "optimizer_step": (TRIP, "every step, as optimizer_step(epoch, batch_idx, optimizer, optimizer_closure): the "
                             "closure runs the next six; optimizer.step(closure=...) runs it, the next two, and the "
                             "optimizer's step at the algorithm's lr factor (LR-norm's n/B, the lr schedule's), "
                             "for that step alone"),
    "training_step": (TRIP, "in the closure, first, on the minibatch"),
    "on_before_zero_grad": (TRIP, "in the closure, then"),
    "optimizer_zero_grad": (TRIP, "in the closure, as optimizer_zero_grad(epoch, batch_idx, optimizer)"),
    "on_before_backward": (TRIP, "in the closure, with the loss (FedProx's term added)"),
    "backward": (TRIP, "in the closure, in place of Fabric's backward"),
    "on_after_backward": (TRIP, "in the closure, last"),
    "on_before_optimizer_step": (TRIP, "after the closure (also where training_step returned None), at the step's lr"),
    "configure_gradient_clipping": (TRIP, "then, as configure_gradient_clipping(optimizer, gradient_clip_val, "
                                          "gradient_clip_algorithm) with task.gradient_clip_val and "
                                          "task.gradient_clip_algorithm (None where unset), as the Trainer passes "
                                          "its settings; LightningModule's own clips with them"),
    "lr_scheduler_step": (TRIP, "at every scheduler step, as lr_scheduler_step(scheduler, None): a step "
                                "scheduler's after every step, an epoch scheduler's after an epoch's last step"),
    "on_train_batch_end": (TRIP, "after every step and its scheduler steps, with (outputs, batch, batch_idx), "
                                 "outputs as the Trainer's: {'loss': the loss detached, and the other keys the "
                                 "step returned} ({} where it returned None)"),
    "on_train_epoch_end": (TRIP, "at the end of every local epoch; what it logs counts for that epoch"),
    "on_train_end": (TRIP, "at the end of every trip"),
    "on_fit_end": (TRIP, "then, last"),
    "on_validation_model_zero_grad": (EVALUATION, "at the start of every evaluation by validation_step"),
    "on_validation_model_eval": (EVALUATION, "then, in place of module.eval()"),
    "on_validation_start": (EVALUATION, "then"),
    "on_validation_epoch_start": (EVALUATION, "then"),
    "on_validation_batch_start": (EVALUATION, "before every validation batch (1,024 examples), with (batch, "
                                              "batch_idx)"),
    "validation_step": (EVALUATION, "on every validation batch; what it logs under task.loss_key and "
                                    "task.accuracy_key is read"),
    "on_validation_batch_end": (EVALUATION, "after every validation batch, with (outputs, batch, batch_idx)"),
    "on_validation_epoch_end": (EVALUATION, "after the last batch; what it logs is read as validation_step's (an "
                                            "epoch metric computed from the outputs it kept)"),
    "on_validation_end": (EVALUATION, "after that is read (self.log there is refused, as the Trainer refuses it)"),
    "on_validation_model_train": (EVALUATION, "last, in place of module.train()"),
    "test_step": (EVALUATION, "in place of validation_step, where the module has none"),
    **{f"on_test_{name}": (EVALUATION, _TEST) for name in (
        "model_eval", "start", "epoch_start", "batch_start", "batch_end", "epoch_end", "end", "model_train")},
    "on_save_checkpoint": (CHECKPOINT, "at every run checkpoint, with a dict holding the module's state_dict: what "
                                       "it adds to the dict is kept in fl_bench's checkpoint"),
    "on_load_checkpoint": (CHECKPOINT, "when the run resumes from that checkpoint, with that dict"),
    **{name: (IRRELEVANT, _PREDICT) for name in (
        "predict_step", "predict_dataloader", "on_predict_start", "on_predict_epoch_start", "on_predict_batch_start",
        "on_predict_batch_end", "on_predict_epoch_end", "on_predict_end", "on_predict_model_eval")},
    "test_dataloader": (IRRELEVANT, "a run never calls Trainer.test: evaluations read the run's validation set"),
    "teardown": (IRRELEVANT, "nothing tears the module down: it is the run's model until the process ends "
                             "(model.pt is saved from it)"),
    "forward": (IRRELEVANT, "not a hook: the module's steps call it, and task.evaluation=logits scores it"),
    "clip_gradients": (IRRELEVANT, "not a hook: the module calls it (configure_gradient_clipping's default does); it "
                                   "clips as under the Trainer, with task.gradient_clip_val and "
                                   "task.gradient_clip_algorithm for the Trainer's settings"),
    **{name: (IRRELEVANT, _OWN) for name in (
        "all_gather", "freeze", "unfreeze", "log", "log_dict", "lr_schedulers", "manual_backward", "optimizers",
        "print", "to_onnx", "to_tensorrt", "to_torchscript", "toggle_optimizer", "untoggle_optimizer",
        "toggled_optimizer")},
    **{name: (IRRELEVANT, "the run's dataset is the data (dataset=..., or a LightningDataModule of yours as "
                          "dataset=datamodule), as a DataModule given to Trainer.fit takes the place of the "
                          "module's own loaders") for name in ("train_dataloader", "val_dataloader")},
    "prepare_data": (IRRELEVANT, "it prepares the data of the module's own loaders, which the run's dataset "
                                 "replaces (a DataModule's prepare_data runs, under dataset=datamodule)"),
    "training_epoch_end": (REFUSED, _REMOVED.format(stage="train")),
    "validation_epoch_end": (REFUSED, _REMOVED.format(stage="validation")),
    "test_epoch_end": (REFUSED, _REMOVED.format(stage="test")),
}
# The hooks a trip calls where the module has them (LightningModule's are empty, or what the trip does itself).
TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")
# The evaluation hooks, by their place in an evaluation (on_validation_<name>, or on_test_<name> under test_step)
EVALUATION_HOOKS = ("model_zero_grad", "model_eval", "start", "epoch_start", "batch_start", "batch_end", "epoch_end",
                    "end", "model_train")


def hook_table() -> str:
    """:data:`HOOKS` as the Markdown table of docs/extending/lightning-modules.md."""
    kinds = {BUILD: "once, when the run builds the module", TRIP: "in every trip", EVALUATION: "in every evaluation",
             CHECKPOINT: "at the run's checkpoints", IRRELEVANT: "not by the run (irrelevant)",
             REFUSED: "refused in one line"}
    rows = ["| hook | called | when, or why not |", "|---|---|---|"]
    for kind in kinds:
        rows += [f"| `{name}` | {kinds[kind]} | {text} |" for name, (k, text) in HOOKS.items() if k == kind]
    return "\n".join(rows)


def defines(module: nn.Module, hook: str) -> bool:
    """Whether the module has ``hook`` of its own: set on the instance, or its class's (not LightningModule's)."""
    from lightning import LightningModule

    if hook in vars(module):
        return True
    own = getattr(type(module), hook, None)
    return own is not None and own is not getattr(LightningModule, hook, None)


def call_hook(module: nn.Module, hook: str, *args: Any, **kwargs: Any) -> Any:
    """The module's ``hook`` called, whatever it raises reaching the user as one line (:func:`user_error`)."""
    try:
        return getattr(module, hook)(*args, **kwargs)
    except Exception as error:
        raised = user_error(module, hook, error)
        if raised is error:
            raise
        raise raised from error


def prepare_module(module: nn.Module) -> None:
    """What a run does with a module as it builds it, before reading its parameters (:data:`HOOKS`' build
    rows): the hooks it overrides that no run can honour are refused in one line; then setup('fit') and
    configure_model (or configure_sharded_model), where overridden (both idempotent, as Lightning asks: under
    algorithm=centralized its Trainer calls them again). Its configure_callbacks: :func:`refuse_callbacks`."""
    name = type(module).__qualname__
    for hook, (kind, why) in HOOKS.items():
        if kind == REFUSED and defines(module, hook):
            raise ConfigError(f"{name} overrides {hook}, which fl_bench does not call: {why}")
    if defines(module, "setup"):
        call_hook(module, "setup", "fit")
    if defines(module, "configure_model"):
        call_hook(module, "configure_model")
    elif defines(module, "configure_sharded_model"):
        call_hook(module, "configure_sharded_model")


def refuse_callbacks(module: nn.Module) -> None:
    """Callbacks the module's configure_callbacks returns, refused in one line where trips train it (no
    lightning.Trainer runs them)."""
    name = type(module).__qualname__
    if defines(module, "configure_callbacks"):
        callbacks = call_hook(module, "configure_callbacks")
        if callbacks is not None and not isinstance(callbacks, (list, tuple)):
            callbacks = [callbacks]
        if callbacks:
            names = ", ".join(type(callback).__name__ for callback in callbacks)
            raise ConfigError(f"{name}.configure_callbacks returned {names}: fl_bench runs no lightning.Trainer, so no "
                              f"callbacks would run; return none (or leave configure_callbacks out)")


def clip_gradients(module: nn.Module, optimizer: Any, gradient_clip_val: float | None = None,
                   gradient_clip_algorithm: str | None = None) -> None:
    """``LightningModule.clip_gradients`` as lightning.Trainer runs it (LightningTask sets it on the module:
    Lightning's own, under Fabric, takes no None and clips at a value of 0), task.gradient_clip_val and
    task.gradient_clip_algorithm standing for the Trainer's settings (:meth:`LightningTask.trainer_view`): an
    unset value is theirs (else no clipping), one that contradicts them is refused as the Trainer refuses it;
    by norm (default) or value, through Fabric's clipping (which unscales a 16-mixed loss's gradients). Where
    a lightning.Trainer runs the module (algorithm=centralized: no Fabric), Lightning's own."""
    view, name = module._fabric, type(module).__qualname__
    if view is None:  # (no Fabric: a lightning.Trainer runs the module, algorithm=centralized)
        from lightning import LightningModule

        return LightningModule.clip_gradients(module, optimizer, gradient_clip_val, gradient_clip_algorithm)
    value_set, algorithm_set = getattr(view, "gradient_clip_val", None), getattr(view, "gradient_clip_algorithm", None)
    if gradient_clip_val is None:
        gradient_clip_val = value_set or 0.0
    elif value_set is not None and value_set != gradient_clip_val:
        raise ConfigError(f"{name}.clip_gradients(gradient_clip_val={gradient_clip_val!r}) contradicts "
                          f"task.gradient_clip_val={value_set}: use only one of them (lightning.Trainer refuses both)")
    algorithm = str(getattr(gradient_clip_algorithm, "value", gradient_clip_algorithm) or
                    getattr(algorithm_set, "value", algorithm_set) or "norm").lower()
    if gradient_clip_algorithm is not None and algorithm_set is not None and algorithm_set != algorithm:
        raise ConfigError(f"{name}.clip_gradients(gradient_clip_algorithm={algorithm!r}) contradicts "
                          f"task.gradient_clip_algorithm={algorithm_set.value}: use only one of them (lightning.Trainer "
                          f"refuses both)")
    if not isinstance(gradient_clip_val, (int, float)) or isinstance(gradient_clip_val, bool):
        raise ConfigError(f"{name}.clip_gradients(gradient_clip_val={gradient_clip_val!r}): a number, as "
                          f"lightning.Trainer takes")
    if algorithm not in ("norm", "value"):
        raise ConfigError(f"{name}.clip_gradients(gradient_clip_algorithm={algorithm!r}): norm or value, as "
                          f"lightning.Trainer takes")
    if gradient_clip_val <= 0:
        return
    if algorithm == "value":
        view.clip_gradients(module, optimizer, clip_val=gradient_clip_val)
    else:  # (as the Trainer's: a non-finite norm is no error)
        view.clip_gradients(module, optimizer, max_norm=gradient_clip_val, error_if_nonfinite=False)


def clip_gradient_list(grads: list[torch.Tensor], value: float, algorithm: str | None) -> None:
    """``grads`` clipped in place as torch.nn.utils' clip_grad_norm_ (or clip_grad_value_) clips gradients:
    task.gradient_clip_val where trips step with the algorithm's rule (no optimizer of the module's)."""
    if algorithm == "value":
        torch._foreach_clamp_min_(grads, -value)
        torch._foreach_clamp_max_(grads, value)
        return
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (value / (norm + 1e-6)).clamp(max=1.0))


# ------------------------------------------------------------------ a module's Python attributes (issue 69)
# A client keeps nothing between trips but the parameters and buffers the server federates: what a trip
# changes of the module's own Python attributes (a counter, a list of outputs) is restored after it, so that
# no trip sees another's (attribute_snapshot, changed_attributes, restore_attributes; LightningClientTrainer).
# Not the module's: nn.Module's and LightningModule's bookkeeping, and what fl_bench sets on it.
_FL_BENCH_SETS = frozenset({"log", "log_dict", "optimizers", "clip_gradients",
                            "_hparams_name", "_hparams_initial"})  # (and save_hyperparameters' records: hparams counts)
_NOT_ATTRIBUTES: frozenset[str] | None = None  # (+ a bare LightningModule's, found once)
_SCALARS = (type(None), bool, int, float, complex, str, bytes, range, type, torch.dtype, torch.device, enum.Enum)


class _TensorAttribute:
    """A tensor held as a plain attribute (not a buffer), kept by reference with its in-place version."""

    __slots__ = ("tensor", "version")

    def __init__(self, tensor: torch.Tensor):
        self.tensor, self.version = tensor, _version(tensor)


def _version(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:  # (an inference tensor has none: it cannot be changed in place either)
        return -1


def _not_attributes() -> frozenset[str]:
    global _NOT_ATTRIBUTES
    if _NOT_ATTRIBUTES is None:
        from lightning import LightningModule

        _NOT_ATTRIBUTES = frozenset(vars(LightningModule())) | _FL_BENCH_SETS
    return _NOT_ATTRIBUTES


def _copied(value: Any) -> Any:
    """``value`` as a snapshot keeps it: containers copied (recursively), numbers, strings, callables, tensors
    and modules by reference, other objects deep-copied (by reference where they cannot be copied: then only
    their rebinding is restored)."""
    if isinstance(value, _SCALARS) or isinstance(value, (torch.Tensor, nn.Module)):
        return value
    kind = type(value)
    if kind is list:
        return [_copied(v) for v in value]
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is tuple:
        return tuple(_copied(v) for v in value)
    if kind is set:
        return set(value)
    if kind is frozenset or callable(value):
        return value
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` (now) holds what ``b`` (a snapshot's copy) held: containers element by element, tensors
    and modules by identity, other objects by ``==`` or else their attributes."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple, dict)):
        try:  # (in C: a container compares its items by identity first, and a snapshot keeps them by reference)
            if (a == b) is True:
                return True
        except Exception:
            pass
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (torch.Tensor, nn.Module)):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    try:
        equal = a == b
    except Exception:
        equal = None
    if isinstance(equal, bool) and (equal or not hasattr(a, "__dict__")):
        return equal or (isinstance(a, float) and a != a and b != b)  # (NaN is NaN)
    return hasattr(a, "__dict__") and _same(vars(a), vars(b))


class _Snapshot(dict):
    """:func:`attribute_snapshot`'s: {name: copy}, and the instance's attribute names then (all of them: a
    trip that adds or removes none is compared name by name without set arithmetic)."""

    names_then: frozenset[str] = frozenset()


def attribute_snapshot(module: nn.Module) -> dict[str, Any]:
    """The module's own Python attributes (its instance ``__dict__`` less nn.Module's and LightningModule's
    bookkeeping and what fl_bench sets on it), copied so that a later change shows, rebinding or in place
    (:func:`changed_attributes`): containers and plain objects copied, tensors by reference (with their
    in-place version), submodules by reference (theirs are parameters and buffers)."""
    skip, own = _not_attributes(), vars(module)
    snapshot = _Snapshot((name, _TensorAttribute(value) if isinstance(value, torch.Tensor) else _copied(value))
                         for name, value in own.items() if name not in skip)
    snapshot.names_then = frozenset(own)
    return snapshot


def _shared(module: nn.Module, tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` shares its memory with one of the module's parameters or buffers (a view of one:
    what changes it in place is the trip's step, not a leak)."""
    try:
        pointer = tensor.untyped_storage().data_ptr()
        return any(t.untyped_storage().data_ptr() == pointer for t in (*module.parameters(), *module.buffers()))
    except RuntimeError:
        return False


def changed_attributes(module: nn.Module, snapshot: dict[str, Any]) -> list[str]:
    """The names of the module's attributes that differ from ``snapshot`` (:func:`attribute_snapshot`):
    added, removed, rebound, or changed in place. Costs a few microseconds for a module with a few."""
    own = vars(module)
    if own.keys() == getattr(snapshot, "names_then", None):  # (no attribute added or removed: in C, 0.4 µs)
        names, changed = snapshot.keys(), []
    else:
        names = own.keys() - _not_attributes()
        changed = list(names ^ snapshot.keys())
        names = names & snapshot.keys()
    for name in names:
        value, kept = own[name], snapshot[name]
        if value is kept:  # (numbers, strings, callables: kept by reference)
            continue
        if isinstance(kept, _TensorAttribute):
            if value is not kept.tensor or (_version(value) != kept.version and not _shared(module, value)):
                changed.append(name)
        elif not _same(value, kept):
            changed.append(name)
    return changed


def restore_attributes(module: nn.Module, snapshot: dict[str, Any], names: list[str]) -> None:
    """The attributes ``names`` (:func:`changed_attributes`) back as ``snapshot`` holds them (fresh copies,
    so that the snapshot stays as it is); a tensor attribute changed in place is refused in one line (it is
    not a buffer: nothing federates it, and restoring it would copy it every trip)."""
    own = vars(module)
    for name in names:
        kept = snapshot.get(name, _MISSING)
        if kept is _MISSING:
            del own[name]
        elif isinstance(kept, _TensorAttribute):
            if own.get(name) is kept.tensor:
                raise ConfigError(f"{type(module).__qualname__}.{name}, a tensor attribute (not a buffer), was changed "
                                  f"in place in a client trip: a client keeps nothing between trips but the parameters "
                                  f"and buffers the server federates; register it as a buffer "
                                  f"(self.register_buffer({name!r}, ...)) or make it afresh within the trip")
            own[name] = kept.tensor
        else:
            own[name] = _copied(kept)


_MISSING = object()
