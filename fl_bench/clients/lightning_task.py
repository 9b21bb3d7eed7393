"""A user's LightningModule as the client task (``task=lightning``).

A client trip calls the module's own ``training_step`` on each minibatch of the client's data, in
the order of the trip's minibatch plan (fl_bench.clients.trainer; ``task.drop_last`` leaves out each
epoch's short last batch, by default for a module with BatchNorm layers, which cannot train on a batch
of one), and steps:

- with the optimizer (and scheduler) its ``configure_optimizers`` returns, created afresh for every
  trip (a client starts from the model it downloaded, with no optimizer state), under algorithms
  whose client rule is plain SGD (FedBuff, FedAvg and its family, FedAsync, FedStaleWeight). Its
  schedulers step as the Trainer steps them, within the trip (interval epoch: at the end of each local
  epoch; step: after each step; every ``frequency``), and start afresh with it; one that would never
  change the lr within a trip is refused (across trips the lr moves with ``algorithm.lr_decay``).
  Around it, fl_bench applies the algorithm's client knobs: FedProx's (mu/2)||y - y_0||^2 is added to
  the module's loss, and each step's lr is the optimizer's lr times LR-norm's n/B and the lr
  schedule's factor (``lr_decay^t``, or 1/(1+t)); ``algorithm.client_lr`` is not used;
- with the algorithm's own rule at ``algorithm.client_lr``, on the module's gradients, under
  algorithms whose server math reads the client's lr or update rule (FedLaAvg, HFL, FedGBO, MFL,
  Mimelite, MimeXlite); the module's ``configure_optimizers`` is not used. The run's first line says
  which.

Lightning Fabric sets the module up (device, precision). ``self.log`` and ``self.log_dict`` take what
they take under ``lightning.Trainer`` (Fabric's own ``log`` refuses torchmetrics objects and ignores
``on_step``/``on_epoch``): numbers, scalar tensors, torchmetrics ``Metric`` and ``MetricCollection``
objects, with the Trainer's defaults (training: on_step; validation: on_epoch) and its semantics (a
Metric logged on_epoch is updated in the steps, computed at the end of the epoch, a trip's local
epoch or an evaluation's pass over the validation set, and reset; on_step logs its batch value;
both: ``<name>_step`` and ``<name>_epoch``). ``reduce_fx`` other than mean is refused in one line.
What is logged is averaged per evaluation and written to ``task_metrics.csv`` (and W&B); a Metric's
state is reset at the end of each trip's epoch, so a trip's values do not depend on the trips before
it or on the process that trained it.
The train hooks that make sense for one trip are called around it: ``on_train_start`` /
``on_train_end`` per trip, ``on_train_epoch_start`` / ``on_train_epoch_end`` per local epoch,
``on_train_batch_start`` / ``on_train_batch_end``, ``on_before_backward``, ``on_after_backward``,
``on_before_optimizer_step`` and ``on_before_zero_grad`` per step. A trip's random draws (dropout, and
the augmentation of a user's Dataset whose items differ between reads, whose batches it reads afresh:
``FederatedData.reads``) come from its seed.

Buffers (BatchNorm's running statistics), ``task.buffers``: ``federated`` (default, FedAvg as usually
run) sends the global buffers with the model (counted in their own dtypes, both ways), each trip
starts from those of the version it downloaded, and after each server step the global buffers are the
mean of the consumed trips' final buffers, weighted by each upload's share of the step where the algorithm states it (the FedBuff
family, FedStaleWeight) and by its examples otherwise; integer buffers (``num_batches_tracked``) take
the weighted mean rounded. ``local`` keeps each client's own (FedBN): a trip starts from its
client's last, and evaluation uses their examples-weighted mean. ``reset``: every trip starts from the
module's initial buffers and evaluation sees what the last trip left. The buffers are part of the
checkpoint and of ``model.pt``.

Evaluation calls ``validation_step`` (or ``test_step``) over the validation set in batches when the
module has one, and reads the logged ``task.loss_key`` and ``task.accuracy_key``; a loss the step
returns (a scalar tensor, or a dict with ``task.loss_key`` or ``loss``) is used where none is logged
under ``task.loss_key``, and the run's first lines say which; otherwise the
module's forward gives logits scored by cross-entropy and accuracy. Such modules train one trip at
a time (the batched path cannot prove that a user's step batches to the same result).

The module is tried while the run is built, before any output is written, so that what a trip cannot
run stops in one line: ``training_step`` on a batch (through the FLOP count; its loss, its ``self.log``
calls), on one example where a client's plan holds such a batch, ``configure_optimizers`` and its
schedulers (LBFGS's closure, two optimizers, an interval other than step or epoch, ``self.trainer``),
the validation step or the logits' shape. Whatever the module's code raises, there or in a trip, reaches
the user as one line naming the hook (:func:`user_code`).
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import random
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.task import LightningTaskConfig, model_inputs
from fl_bench.clients.trainer import ClientTrainer, views
from fl_bench.contracts import Broadcast
from fl_bench.data import FederatedData
from fl_bench.errors import ConfigError, FLBenchError

# Constructor arguments a module may take from the run when its config does not set them.
FROM_RUN = ("model", "num_classes", "input_shape", "vocab_size")
EVAL_BATCH = 1024  # validation examples per validation_step call


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0].rstrip('.')}" if text else type(error).__name__


@contextlib.contextmanager
def user_code(module: nn.Module, hook: str, hint: str = "") -> Iterator[None]:
    """Run the module's ``hook`` so that whatever it raises reaches the user as one line naming the hook
    and the error (``FL_BENCH_TRACEBACK=1`` keeps the traceback, chained); fl_bench's own errors pass."""
    try:
        yield
    except Exception as error:
        raised = _user_error(module, hook, error, hint)
        if raised is error:
            raise
        raise raised from error


def _user_error(module: nn.Module, hook: str, error: Exception, hint: str = "") -> Exception:
    """What :func:`user_code` raises for ``error``, raised by the module's ``hook`` (``error`` itself:
    fl_bench's own). A trip's per-step calls catch their errors with a plain ``try`` and raise this
    (``from error``): entering a context manager at every hook cost more than an empty hook."""
    if isinstance(error, FLBenchError):
        if str(error).startswith("self.log"):  # (what it logged: say where)
            return ConfigError(f"{type(module).__qualname__}.{hook}: {error}")
        return error
    if "self.trainer" in str(error) or "not attached to a `Trainer`" in str(error):
        hint = hint or ("fl_bench runs no lightning.Trainer (a client trip's length varies with its client's "
                        "examples): give what the module reads from self.trainer as its own argument")
    return ConfigError(f"{type(module).__qualname__}.{hook} raised {_first_line(error)}"
                       + ((" " if hint.startswith("(") else ": ") + hint if hint else ""))


def _overrides(module: nn.Module, hook: str) -> bool:
    """Whether the module's class defines ``hook`` itself (not LightningModule's empty default)."""
    from lightning import LightningModule

    return getattr(type(module), hook, None) is not getattr(LightningModule, hook, None)


# The hooks a trip calls (module docstring); LightningModule's own are empty, so a trip calls only those
# the module overrides (by its class or on the instance): each call of an empty one cost a few microseconds.
TRIP_HOOKS = ("on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end", "on_train_batch_start",
              "on_train_batch_end", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
              "on_before_zero_grad")


def _hooks_defined(module: nn.Module) -> frozenset[str]:
    """The trip hooks that do something: those whose method is not LightningModule's empty default."""
    from lightning import LightningModule

    return frozenset(hook for hook in TRIP_HOOKS
                     if getattr(getattr(module, hook), "__func__", None) is not getattr(LightningModule, hook))


def build_lightning_task(cfg: LightningTaskConfig, model: nn.Module, data: FederatedData) -> "LightningTask":
    """Instantiate ``cfg.module`` (Hydra's ``instantiate``), filling the run's arguments it takes and
    does not set, and wrap it as a task."""
    from hydra.utils import get_class, instantiate
    from lightning import LightningModule

    target = cfg.module["_target_"]
    try:
        cls = get_class(target)
    except Exception as error:  # Hydra wraps the ImportError
        raise ConfigError(f"task.module._target_={target} cannot be imported: {str(error).splitlines()[0]}") from None
    if not (isinstance(cls, type) and issubclass(cls, LightningModule)):
        raise ConfigError(f"task.module._target_={target} is not a LightningModule class")
    available = dict(model=model, num_classes=data.num_classes, input_shape=tuple(data.input_shape),
                     vocab_size=len(data.vocab) if data.vocab is not None else None)
    parameters = inspect.signature(cls.__init__).parameters
    extra = {name: available[name] for name in FROM_RUN
             if name in parameters and name not in cfg.module and available[name] is not None}
    try:
        module = instantiate(cfg.module, **extra)
    except Exception as error:
        cause = error.__cause__ or error
        raise ConfigError(f"task.module._target_={target} could not be built: {str(cause).splitlines()[0]}") from None
    if not any(p.requires_grad for p in module.parameters()):
        raise ConfigError(f"task.module._target_={target} has no trainable parameters: a client trip trains and "
                          f"uploads them; give the module layers with parameters (or take the run's model)")
    if not _overrides(module, "training_step"):
        raise ConfigError(f"task.module._target_={target} has no training_step: a client trip calls it on each "
                          f"minibatch for the loss; add one (as lightning.Trainer needs)")
    if not module.automatic_optimization:
        raise ConfigError(f"task.module._target_={target} sets automatic_optimization=False: fl_bench steps the "
                          f"optimizer of configure_optimizers itself; use automatic optimization")
    task = LightningTask(module, cfg, data, uses_model="model" in extra)
    if cfg.evaluation == "steps" and task.evaluator is None:
        raise ConfigError(f"task.evaluation=steps needs a validation_step or test_step, which {cls.__qualname__} "
                          f"has not: use task.evaluation=logits or training_step (or auto)")
    # Without a validation_step nothing is logged to read these keys from: set, they would be ignored.
    changed = [key for key in ("loss_key", "accuracy_key") if getattr(cfg, key) != getattr(LightningTaskConfig, key)]
    if task.evaluation != "steps" and changed:
        key = changed[0]
        raise ConfigError(f"task.{key}={getattr(cfg, key)} names a logged metric, but {cls.__qualname__} is evaluated "
                          f"by its {task.evaluation.replace('logits', 'logits (fl_bench computes its loss and accuracy)')}, "
                          f"not by a validation_step; leave task.{key} unset or add a validation_step")
    return task


class LightningTask(nn.Module):
    """A user's LightningModule with what a run needs of a task: ``loss`` of a minibatch through its
    ``training_step``, ``evaluate``, logits for the final predictions, and the batch layout."""

    entropy_weight = 0.0  # FedMAX's term is the built-in task's; a module adds its own terms itself
    features = None

    def __init__(self, module: nn.Module, cfg: LightningTaskConfig, data: FederatedData, uses_model: bool):
        super().__init__()
        self.module = module
        self.cfg = cfg
        self.transform = data.transform
        self.num_classes = data.num_classes
        self.uses_model = uses_model  # the module took the model group's network
        self.evaluator = next((hook for hook in ("validation_step", "test_step") if _overrides(module, hook)), None)
        # steps | logits | training_step (LightningTaskConfig.evaluation; auto resolved here)
        self.evaluation = cfg.evaluation if cfg.evaluation != "auto" else (
            "steps" if self.evaluator is not None else "logits" if cfg.batch == "pair" else "training_step")
        self._initial_buffers = [b.detach().clone() for b in module.buffers()]
        self.metrics = None  # TaskMetrics, once Fabric is set up (set_up)
        self.last_validation: dict[str, float] = {}  # what the last evaluation's steps logged
        self.loss_source = "logged"  # or "returned": where evaluate reads the validation loss (set_up probes it)
        self.evaluation_buffers = lambda: None  # the trainer's: the buffers the global model is evaluated with

    @property
    def predicts_classes(self) -> bool:
        """Its forward gives class logits that fl_bench scores (task.evaluation=logits)."""
        return self.evaluation == "logits"

    @property
    def model(self) -> nn.Module:
        """The module (its state_dict is the run's model.pt)."""
        return self.module

    def describe(self) -> str:
        """What trains, for the run's first line."""
        network = "the model group's network" if self.uses_model else "its own network (the model group is not used)"
        evaluation = {"logits": "; evaluated by its logits' cross-entropy and accuracy",
                      "training_step": "; evaluated by the mean of its training_step loss on the validation set"}.get(
            self.evaluation, f"; validation loss: {self.cfg.loss_key} as {self.evaluator} logs it"
            if self.loss_source == "logged" else f"; validation loss: what {self.evaluator} returns (it logs no {self.cfg.loss_key})")
        return f"task: {type(self.module).__module__}.{type(self.module).__qualname__} with {network}{evaluation}"

    def set_up(self, fabric: Any, metrics: "TaskMetrics", x_val: torch.Tensor | None = None,
               y_val: torch.Tensor | None = None) -> None:
        """Fabric moves the module to its device; its ``self.log`` and ``self.log_dict`` go to
        ``metrics`` (module docstring). With validation examples, one validation step on a few of
        them finds where the validation loss is read from (logged or returned); what it logged and
        its metrics' states are discarded; scored by logits, its forward on a few is checked."""
        fabric.setup_module(self.module)
        self.fabric, self.metrics = fabric, metrics
        self._initial_buffers = [b.to(fabric.device) for b in self._initial_buffers]
        install_logging(self.module, metrics)
        if self.evaluation in ("steps", "logits") and x_val is not None and len(y_val):
            self.evaluate(x_val[:8], y_val[:8])
            metrics.discard()

    def reset_buffers(self) -> None:
        """The module's initial buffers back (task.buffers=reset: every trip starts from them)."""
        if not self._initial_buffers:  # (none: walking the module's buffers cost 8 µs a trip)
            return
        for buffer, initial in zip(self.module.buffers(), self._initial_buffers):
            buffer.copy_(initial)

    def batch(self, x: torch.Tensor, y: torch.Tensor, train: bool, generator: torch.Generator | None = None) -> Any:
        """A minibatch as the module takes it: (inputs, targets), or a dict under ``task.batch_keys``."""
        inputs = model_inputs(self.transform, x, train, generator)
        if self.cfg.batch == "inputs":
            return inputs
        if self.cfg.batch == "next_token":
            if inputs.dim() != 2 or inputs.is_floating_point():
                raise ConfigError(f"task.batch=next_token needs token sequences (integer inputs of shape [batch, "
                                  f"length]), not {inputs.dtype} inputs of shape {list(inputs.shape)}")
            return inputs[:, :-1].contiguous(), inputs[:, 1:].contiguous()  # (a target may be .view()ed)
        if self.cfg.batch_keys is None:
            return inputs, y
        return {self.cfg.batch_keys[0]: inputs, self.cfg.batch_keys[1]: y}

    def training_loss(self, batch: Any, batch_idx: int) -> tuple[torch.Tensor | None, Any]:
        """The module's ``training_step`` output and its loss (None: the module skips this batch)."""
        try:  # (user_code's conversion, without a context manager at every step)
            output = self.module.training_step(batch, batch_idx)
        except Exception as error:
            raised = _user_error(self.module, "training_step", error)
            if raised is error:
                raise
            raise raised from error
        loss = output.get("loss") if isinstance(output, dict) else output
        name = type(self.module).__qualname__
        if loss is not None and not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
            shape = f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ConfigError(f"{name}.training_step returned {shape}: return the loss as a scalar tensor, a dict "
                              f"with 'loss', or None")
        if loss is not None and torch.is_grad_enabled() and not loss.requires_grad:
            raise ConfigError(f"{name}.training_step returned a loss that does not require grad (detached, "
                              f"computed under torch.no_grad, or from no parameter): return the loss its step "
                              f"differentiates")
        return loss, output

    def loss(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The loss of one minibatch of stored examples through ``training_step`` (the FLOP count and
        Mimelite's full-batch gradient), scored as an epoch of its own (:meth:`own_epoch`). Before
        Fabric is set up, what ``self.log`` takes is checked and dropped, and metric states touched
        are reset."""
        if self.metrics is None:
            from torchmetrics import Metric

            install_logging(self.module, task_metrics_logger())  # (checked as in a trip, then dropped)
            try:
                loss = self.own_epoch(self.batch(x, y, True, generator))
            finally:
                del self.module.log, self.module.log_dict  # LightningModule's own again, until set_up
            for metric in self.module.modules():
                if isinstance(metric, Metric):
                    metric.reset()
        else:
            loss = self.own_epoch(self.batch(x, y, True, generator))
        if loss is None:  # Lightning skips such a batch; a loss is needed here
            raise ConfigError(f"{type(self.module).__qualname__}.training_step returned None on a batch of stored "
                              f"training examples (client 0's first), where fl_bench counts a step's FLOPs: return "
                              f"the loss as a scalar tensor or a dict with 'loss'")
        return loss

    def own_epoch(self, batch: Any, batch_idx: int = 0) -> torch.Tensor | None:
        """training_step's loss on ``batch`` outside a trip, between the train-epoch hooks: state a
        module keeps across an epoch's batches (an RNN's hidden state) starts afresh and is cleared."""
        with user_code(self.module, "on_train_epoch_start"):
            self.module.on_train_epoch_start()
        loss, _ = self.training_loss(batch, batch_idx)
        with user_code(self.module, "on_train_epoch_end"):
            self.module.on_train_epoch_end()
        return loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The module's output on stored examples (evaluation inputs)."""
        with user_code(self.module, "forward"):
            return self.module(model_inputs(self.transform, x, False))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The module's forward on stored examples as class logits [n, num_classes] (float), or one line."""
        out = self(x)
        if not (isinstance(out, torch.Tensor) and out.shape == (len(x), self.num_classes)):
            got = f"a tensor of shape {list(out.shape)}" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
            raise ConfigError(f"{type(self.module).__qualname__}.forward returned {got}: task.evaluation=logits scores "
                              f"its forward's class logits, of shape [batch, {self.num_classes}]; return them, or add "
                              f"a validation_step")
        return out.float()

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, chunk: int = EVAL_BATCH) -> tuple[float, float]:
        """(loss, accuracy) on (x, y): from what the module's validation_step / test_step logs under
        ``task.loss_key`` and ``task.accuracy_key`` (NaN accuracy if it logs none), else cross-entropy
        and accuracy of its logits."""
        buffers = self.evaluation_buffers()
        if buffers is not None:
            load_buffers(self.module, buffers)
        self.module.eval()
        try:
            if self.evaluation == "training_step":
                return self._training_step_loss(x, y, chunk), float("nan")
            if self.evaluation == "logits":
                loss, correct = 0.0, 0.0
                for s in range(0, len(y), chunk):
                    logits = self.logits(x[s: s + chunk])
                    loss += F.cross_entropy(logits, y[s: s + chunk], reduction="sum").item()
                    correct += (logits.argmax(-1) == y[s: s + chunk]).sum().item()
                return loss / len(y), correct / len(y)
            step = getattr(self.module, self.evaluator)
            self.metrics.stage = "val"
            returned, total = [], 0
            for i, s in enumerate(range(0, len(y), chunk)):
                self.metrics.batch_size = n = len(y[s: s + chunk])
                with user_code(self.module, self.evaluator):
                    output = step(self.batch(x[s: s + chunk], y[s: s + chunk], False), i)
                loss = self._returned_loss(output)
                returned.append(None if loss is None else loss * n)
                total += n
            logged = self.last_validation = self.metrics.take_validation()
        finally:
            if self.metrics is not None:
                self.metrics.stage = "train"
            self.module.train()
        key = next((k for k in (self.cfg.loss_key, f"{self.cfg.loss_key}_epoch") if k in logged), None)
        accuracy = logged.get(self.cfg.accuracy_key, logged.get(f"{self.cfg.accuracy_key}_epoch", float("nan")))
        if key is not None:
            self.loss_source = "logged"
            return logged[key], accuracy
        if returned and all(loss is not None for loss in returned):
            self.loss_source = "returned"
            return sum(returned) / total, accuracy
        raise ConfigError(f"task.loss_key={self.cfg.loss_key} is not among what {type(self.module).__qualname__}."
                          f"{self.evaluator} logs ({', '.join(sorted(logged)) or 'nothing'}) and it returns no loss: "
                          f"set task.loss_key, or return the loss (a scalar tensor or a dict with 'loss')")

    def _training_step_loss(self, x: torch.Tensor, y: torch.Tensor, chunk: int) -> float:
        """The mean of training_step's loss over (x, y) in chunks, each an epoch of its own
        (:meth:`own_epoch`); what the steps log is not kept."""
        total = 0.0
        self.metrics.stage = "val"
        for i, s in enumerate(range(0, len(y), chunk)):
            loss = self.own_epoch(self.batch(x[s: s + chunk], y[s: s + chunk], False), i)
            if loss is None:
                raise ConfigError(f"{type(self.module).__qualname__}.training_step returned None on validation "
                                  f"examples, where task.evaluation=training_step reads its loss")
            total += float(loss) * len(y[s: s + chunk])
        self.metrics.take_validation()
        return total / len(y)

    def _returned_loss(self, output: Any) -> float | None:
        """The loss a validation step returned: a scalar tensor, or a dict's ``task.loss_key`` or ``loss``."""
        if isinstance(output, dict):
            output = output.get(self.cfg.loss_key, output.get("loss"))
        if isinstance(output, torch.Tensor) and output.dim() == 0:
            return float(output)
        return None


def install_logging(module: nn.Module, metrics: "TaskMetrics") -> None:
    """Route the module's ``self.log`` and ``self.log_dict`` to ``metrics`` with the Trainer's
    semantics (module docstring). They take Lightning's own keyword arguments; the ones about where a
    value is shown or synchronised (prog_bar, logger, sync_dist, ...) change nothing in a simulation
    whose every process computes the same evaluation."""
    from lightning import LightningModule

    allowed = set(inspect.signature(LightningModule.log).parameters) - {"self", "name", "value"}
    allowed_dict = set(inspect.signature(LightningModule.log_dict).parameters) - {"self", "dictionary"}

    def check(options: dict[str, Any], known: set[str], call: str) -> None:
        unknown = sorted(set(options) - known)
        if unknown:
            near = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            raise ConfigError(f"self.{call}(..., {unknown[0]}=...): {unknown[0]} is not an argument of "
                              f"LightningModule.{call}" + (f" (did you mean {near[0]}?)" if near else "")
                              + f"; it takes {', '.join(sorted(known))}")

    def record(name: str, value: Any, options: dict[str, Any]) -> None:
        metrics.record(name, value, options.get("on_step"), options.get("on_epoch"), options.get("reduce_fx", "mean"),
                       options.get("batch_size"))

    def log(name: str, value: Any, **options: Any) -> None:
        check(options, allowed, "log")
        record(name, value, options)

    def log_dict(dictionary: Any, **options: Any) -> None:
        check(options, allowed_dict, "log_dict")
        for name, value in dictionary.items():  # a MetricCollection's items are its metrics, named as it names them
            record(name, value, options)

    module.log, module.log_dict = log, log_dict


def _unsynced_compute(metric: Any) -> Any:
    """A Metric's value from this process's state: every process evaluates the same model on the same
    data (and a trip's epoch is one process's), so there is nothing to gather."""
    to_sync, metric._to_sync = metric._to_sync, False
    try:
        return metric.compute()
    finally:
        metric._to_sync = to_sync


def task_metrics_logger() -> Any:
    """A Lightning Fabric logger that averages what a module logs: per evaluation, the training steps'
    values since the last evaluation, and the validation batches' values (weighted by batch size)."""
    from lightning.fabric.loggers import Logger

    class TaskMetrics(Logger):
        """Sums and counts of logged values: training steps' per trip (``trip``: its seed, so that
        processes can pool them and sum in trip order), validation batches' weighted by batch size;
        torchmetrics objects logged on_epoch until their epoch ends (:meth:`record`)."""

        def __init__(self):
            super().__init__()
            self.stage = "train"  # train | val
            self.trip = 0  # the seed of the trip training now
            self.batch_size = 1  # of the validation batch being evaluated
            self.train: dict[int, dict[str, list[float]]] = {}
            self.val: dict[str, list[float]] = {}
            self.epoch_metrics: dict[str, dict[str, Any]] = {"train": {}, "val": {}}  # key -> Metric, on_epoch
            self.epoch_sums: dict[str, list[float]] = {}  # a training epoch's on_epoch values, by batch size
            self.logged_metrics: dict[str, list[Any]] = {"train": [], "val": []}  # reset when their epoch ends

        @property
        def name(self) -> str:
            """Lightning's logger name."""
            return "fl_bench"

        @property
        def version(self) -> str:
            """Lightning's logger version."""
            return "0"

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            """Hyperparameters are the run's config (config.yaml)."""

        def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
            """Add what ``self.log`` sent to the current trip's (or validation's) sums."""
            weight = self.batch_size if self.stage == "val" else 1
            for name, value in metrics.items():
                self._add(name, float(value), weight)

        def _add(self, name: str, value: float, weight: float) -> None:
            sums = self.val if self.stage == "val" else self.train.setdefault(self.trip, {})
            total = sums.setdefault(name, [0.0, 0])
            total[0] += value * weight
            total[1] += weight

        def record(self, name: str, value: Any, on_step: bool | None, on_epoch: bool | None, reduce_fx: Any,
                   batch_size: int | None) -> None:
            """One ``self.log(name, value, ...)`` with the Trainer's defaults and semantics (module docstring)."""
            from torchmetrics import Metric

            if reduce_fx not in ("mean", torch.mean):
                raise ConfigError(f"self.log({name!r}, ..., reduce_fx={getattr(reduce_fx, '__name__', reduce_fx)!r}): "
                                  f"fl_bench averages what a module logs; log with reduce_fx='mean', or compute the "
                                  f"value in a torchmetrics Metric and log the Metric")
            train = self.stage == "train"
            on_step = train if on_step is None else on_step
            on_epoch = (not train) if on_epoch is None else on_epoch
            step_key, epoch_key = (f"{name}_step", f"{name}_epoch") if on_step and on_epoch else (name, name)
            weight = batch_size or (1 if train else self.batch_size)
            if isinstance(value, Metric):
                if not any(metric is value for metric in self.logged_metrics[self.stage]):  # (a Metric's == composes)
                    self.logged_metrics[self.stage].append(value)
                if on_step and value._forward_cache is not None:
                    self._add(step_key, _scalar(name, value._forward_cache), 1 if train else weight)
                if on_epoch:
                    self.epoch_metrics[self.stage][epoch_key] = value
                return
            number = _scalar(name, value)
            if on_step:
                self._add(step_key, number, 1 if train else weight)
            if on_epoch and train:
                total = self.epoch_sums.setdefault(epoch_key, [0.0, 0])
                total[0] += number * weight
                total[1] += weight
            elif on_epoch:
                self._add(epoch_key, number, weight)

        def end_epoch(self) -> None:
            """A trip's local epoch ended: its on_epoch values are computed, once each, and the
            torchmetrics objects it logged are reset."""
            for key, metric in self.epoch_metrics["train"].items():
                self._add(key, _scalar(key, _unsynced_compute(metric)), 1)
            for key, (value, count) in self.epoch_sums.items():
                self._add(key, value / count, 1)
            for metric in self.logged_metrics["train"]:
                metric.reset()
            self.epoch_metrics["train"], self.epoch_sums, self.logged_metrics["train"] = {}, {}, []

        def take_validation(self) -> dict[str, float]:
            """The mean of each value the validation batches logged, and each Metric logged on_epoch
            computed over them; resets them."""
            means = {name: total / count for name, (total, count) in self.val.items()}
            for key, metric in self.epoch_metrics["val"].items():
                means[key] = _scalar(key, _unsynced_compute(metric))
            for metric in self.logged_metrics["val"]:
                metric.reset()
            self.val, self.epoch_metrics["val"], self.logged_metrics["val"] = {}, {}, []
            return means

        def discard(self) -> None:
            """Forget what was logged since the last take (a probe's values)."""
            self.take_validation()
            self.train = {}

        def take_training(self, gather=None) -> dict[str, float]:
            """The mean over the steps of the trips trained since the last take of each value logged,
            pooled over processes by ``gather`` (a list of every process's per-trip sums) and summed in
            trip order, so that the result does not depend on which process trained which trip."""
            trips, self.train = self.train, {}
            if gather is not None:
                trips = {seed: sums for part in gather(trips) for seed, sums in part.items()}
            totals: dict[str, list[float]] = {}
            for seed in sorted(trips):
                for name, (value, count) in trips[seed].items():
                    total = totals.setdefault(name, [0.0, 0])
                    total[0] += value
                    total[1] += count
            return {name: value / count for name, (value, count) in totals.items()}

        def state_dict(self) -> dict[str, Any]:
            """The sums of trips trained since the last evaluation (a checkpoint keeps them)."""
            return {"train": self.train}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            """Restore :meth:`state_dict`."""
            self.train = state["train"]

    return TaskMetrics()


def _described(value: Any) -> str:
    """A value a hook returned, in a few words."""
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))}"
    return repr(value) if value is None or isinstance(value, (int, float, str)) else f"a {type(value).__name__}"


def _scalar(name: str, value: Any) -> float:
    """A logged value as a number; one line for what ``self.log`` cannot take."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    shape = f"a tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
    raise ConfigError(f"self.log({name!r}, ...) got {shape}: log a number, a one-element tensor, or a torchmetrics "
                      f"Metric (or MetricCollection, through self.log_dict) whose value is one number")


_CLOSURE_NEEDED: dict[type, bool] = {}  # by optimizer class: inspecting a signature every trip cost 14 µs


def _needs_closure(optimizer: Any) -> bool:
    """Whether ``optimizer.step`` needs a closure (LBFGS)."""
    cls = type(optimizer)
    own = "step" in getattr(optimizer, "__dict__", {})  # (a step set on the instance is its own: not cached)
    if own or cls not in _CLOSURE_NEEDED:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
        needed = closure is not None and closure.default is inspect.Parameter.empty
        if own:
            return needed
        _CLOSURE_NEEDED[cls] = needed
    return _CLOSURE_NEEDED[cls]


def _gather_by_seed(mine: dict[int, torch.Tensor], seeds: list[int], width: int, gather: Any) -> dict[int, torch.Tensor]:
    """Every process's {seed: buffers} for the trips ``seeds`` (each trained by one process): rows in
    ``seeds`` order, zeros where this process did not train the trip, summed over processes."""
    rows = torch.zeros(len(seeds), width, dtype=torch.float64)
    for i, seed in enumerate(seeds):
        if seed in mine:
            rows[i] = mine[seed]
    total = gather(rows).sum(0)
    return dict(zip(seeds, total.unbind(0)))


def flat_buffers(module: nn.Module) -> torch.Tensor:
    """The module's buffers in one float64 vector (integer counters exact up to 2^53)."""
    buffers = [b.detach().reshape(-1).double() for b in module.buffers()]
    return torch.cat(buffers) if buffers else torch.zeros(0, dtype=torch.float64)


def load_buffers(module: nn.Module, flat: torch.Tensor) -> None:
    """Set the module's buffers from :func:`flat_buffers`' layout (integers rounded)."""
    offset = 0
    for buffer in module.buffers():
        part = flat[offset: offset + buffer.numel()].view(buffer.shape)
        buffer.copy_(part if buffer.is_floating_point() else part.round())
        offset += buffer.numel()


class LightningClientTrainer(ClientTrainer):
    """Client trips of a :class:`LightningTask`, one at a time (module docstring): the same minibatch
    plan and upload layout as :class:`ClientTrainer`, the loss from the module's ``training_step``,
    the step from its optimizer or from the algorithm's rule."""

    def __init__(self, task: LightningTask, data: FederatedData, local: LocalTraining, update: LocalUpdate,
                 fabric: Any, own_optimizer: bool, precision: str):
        super().__init__(task, data, local, vmap=False, update=update, precision=precision)
        self.fabric = fabric
        self.module = task.module
        self.own_optimizer = own_optimizer  # the module's configure_optimizers, else the algorithm's rule
        self.buffer_rule = task.cfg.buffers if any(True for _ in self.module.buffers()) else "reset"
        initial = flat_buffers(self.module)
        self.buffer_bytes = sum(b.numel() * b.element_size() for b in self.module.buffers())  # as the module holds them
        self.global_buffers = initial.clone()  # federated: the current version's
        self.client_buffers: dict[int, torch.Tensor] = {}  # local: each client's own
        self._trip_buffers: dict[int, torch.Tensor] = {}  # federated: trained trips' final buffers, by seed
        self._sizes = data.sizes
        task.evaluation_buffers = self.evaluation_buffers
        if own_optimizer and not _overrides(self.module, "configure_optimizers"):
            raise ConfigError(f"{type(self.module).__qualname__} has no configure_optimizers: under this algorithm a "
                              f"client trip steps the module's own optimizer; add one (as lightning.Trainer needs)")
        self.schedulers: list[tuple[str, str, int]] = []  # (class, interval, frequency) of the module's own
        self._host: tuple[Any, Any, Any] | None = None  # the host's generator states during trips (_local_sgd)
        self._defined: frozenset[str] = frozenset()  # the trip hooks the module has (_hook), found per trip
        if own_optimizer:
            self._check_schedulers()

    def autocast(self):
        """Fabric's precision context for the module's steps."""
        return self.fabric.autocast()

    def describe(self) -> str:
        """The task and how its trips step, for the run's first lines."""
        how = ("its configure_optimizers' optimizer (algorithm.client_lr is not used)" if self.own_optimizer else
               f"the algorithm's rule at algorithm.client_lr={self.local.lr} (configure_optimizers is not used)")
        if self.schedulers:
            kinds = " and ".join(f"{kind} (per {interval})" for kind, interval, _ in self.schedulers)
            how += (f", its lr scheduler {kinds} acting within each trip and starting afresh with every trip "
                    f"(across trips: algorithm.lr_decay)")
        return f"{self.task.describe()}; trips step with {how}"

    # ------------------------------------------------------------------ buffers (module docstring)
    def broadcast_state(self) -> dict[str, torch.Tensor]:
        """What a download carries besides the algorithm's broadcast: the global buffers, when federated."""
        return {"buffers": self.global_buffers} if self.buffer_rule == "federated" else {}

    @property
    def extra_upload_bytes(self) -> int:
        """What an upload carries besides the algorithm's: a trip's buffers, when federated, in their own
        dtypes (BatchNorm's statistics float32, its counter int64)."""
        return self.buffer_bytes if self.buffer_rule == "federated" else 0

    @property
    def extra_download_bytes(self) -> int:
        """What a download carries besides the algorithm's broadcast: the global buffers, when federated,
        in the module's own dtypes (here they are held as one float64 vector, for exact averaging)."""
        return self.buffer_bytes if self.buffer_rule == "federated" else 0

    def after_server_step(self, seeds: list[int], clients: list[int], weights: list[float] | None) -> None:
        """Federated: the global buffers become the weighted mean of the consumed trips' final buffers."""
        if self.buffer_rule == "local":
            for seed in seeds:
                self._trip_buffers.pop(seed, None)
        if self.buffer_rule != "federated" or not seeds:
            return
        finals = torch.stack([self._trip_buffers.pop(seed) for seed in seeds])
        w = torch.tensor(weights if weights else [float(self._sizes[c]) for c in clients], dtype=torch.float64)
        self.global_buffers = (w / w.sum()) @ finals

    def evaluation_buffers(self) -> torch.Tensor | None:
        """The buffers the global model is evaluated (and saved) with; None: leave the module's."""
        if self.buffer_rule == "federated":
            return self.global_buffers
        if self.buffer_rule == "local" and self.client_buffers:
            clients = sorted(self.client_buffers)
            w = torch.tensor([float(self._sizes[c]) for c in clients], dtype=torch.float64)
            return (w / w.sum()) @ torch.stack([self.client_buffers[c] for c in clients])
        return None

    def gathered_buffers(self, seeds: list[int], clients: list[int], gather: Any) -> None:
        """Every process's trained trips' final buffers, so that each process holds all of them
        (fl_bench.clients.distributed): ``gather`` stacks a tensor over processes."""
        if self.buffer_rule == "reset":
            return
        mine = {seed: self._trip_buffers[seed] for seed in seeds if seed in self._trip_buffers}
        finals = _gather_by_seed(mine, seeds, self.global_buffers.numel(), gather)
        if self.buffer_rule == "federated":
            self._trip_buffers.update(finals)
        else:
            for seed, client in zip(seeds, clients):
                self._trip_buffers.pop(seed, None)
                self.client_buffers[client] = finals[seed]

    def state_dict(self) -> dict[str, Any]:
        """The buffers a resumed run needs (a checkpoint keeps them)."""
        return {"global": self.global_buffers, "clients": self.client_buffers, "trips": self._trip_buffers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.global_buffers, self.client_buffers, self._trip_buffers = state["global"], state["clients"], state["trips"]

    def train(self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Any = None,
              steps: Sequence[int] | None = None) -> Sequence[torch.Tensor]:
        """As :meth:`ClientTrainer.train`; each trip's buffers start from its download (``_trip``)."""
        self._downloads = dict(zip(seeds, starts))
        try:
            return super().train(starts, clients, seeds, out, steps)
        finally:
            self._downloads = {}
            self._restore_host()

    def full_gradient(self, client: int, seed: int, out: torch.Tensor, chunk: int = 512) -> torch.Tensor:
        """As :meth:`ClientTrainer.full_gradient` (Mimelite's, before a trip), with the host's generators,
        as outside any trip (:meth:`_local_sgd`)."""
        self._restore_host()
        return super().full_gradient(client, seed, out, chunk)

    def _restore_host(self) -> None:
        """Python's, numpy's and (on the CPU) torch's generators back as they were before the first trip
        since the last restore."""
        if self._host is not None:
            random.setstate(self._host[0])
            np.random.set_state(self._host[1])
            if self._host[2] is not None:
                torch.set_rng_state(self._host[2])
            self._host = None

    def _start_buffers(self, client: int, start: Broadcast) -> None:
        if self.buffer_rule == "federated":
            load_buffers(self.module, start.state["buffers"])
        elif self.buffer_rule == "local" and client in self.client_buffers:
            load_buffers(self.module, self.client_buffers[client])
        else:
            self.task.reset_buffers()

    def _end_buffers(self, client: int, seed: int) -> None:
        if self.buffer_rule == "federated":
            self._trip_buffers[seed] = flat_buffers(self.module)
        elif self.buffer_rule == "local":
            self.client_buffers[client] = self._trip_buffers[seed] = flat_buffers(self.module)

    def _hook(self, name: str, *args: Any) -> None:
        """Call the module's hook ``name``, where it has one of its own (``self._defined``, found at the
        start of each trip: LightningModule's are empty)."""
        if name in self._defined:
            try:
                getattr(self.module, name)(*args)
            except Exception as error:
                raised = _user_error(self.module, name, error)
                if raised is error:
                    raise
                raise raised from error

    def _optimizer(self) -> tuple[torch.optim.Optimizer, list[Any]]:
        """A fresh optimizer and its scheduler configs (:meth:`_configured`), the optimizer set up by
        Fabric's strategy, which steps it (its precision: a GradScaler's step under 16-mixed). Not
        through ``fabric.setup_optimizers``, whose wrapper creates a class for every optimizer (every
        trip) to step it the same way (fl_bench's strategies, single device or DDP, give it no
        callbacks or DeepSpeed engine); the hooks get the optimizer itself, as lightning.Trainer's do."""
        optimizer, configs = self._configured()
        return self.fabric.strategy.setup_optimizer(optimizer), configs

    def _configured(self) -> tuple[torch.optim.Optimizer, list[Any]]:
        """A fresh optimizer and its scheduler configs from the module's configure_optimizers (every
        form Lightning accepts); what a trip cannot step is refused in one line."""
        from lightning.fabric.utilities.exceptions import MisconfigurationException
        from lightning.pytorch.core.optimizer import _configure_optimizers, _configure_schedulers_automatic_opt

        name = f"{type(self.module).__qualname__}.configure_optimizers"
        try:  # (called every trip: the hint, the module's arguments, is only written out where it raised)
            returned = self.module.configure_optimizers()
        except Exception as error:
            arguments = {k: v for k, v in self.task.cfg.module.items() if k != "_target_"}
            raised = _user_error(self.module, "configure_optimizers", error,
                                 f"(task.module's arguments: {arguments})" if arguments else "")
            if raised is error:
                raise
            raise raised from error
        forms = ("return an optimizer, a list of them, ([optimizers], [schedulers]) or a dict with 'optimizer' "
                 "(and 'lr_scheduler'), as lightning.Trainer takes")
        if isinstance(returned, torch.optim.Optimizer):  # what Lightning's parser makes of one (its Protocol check is slow)
            optimizers, schedulers, monitor = [returned], [], None
        else:
            try:
                optimizers, schedulers, monitor = _configure_optimizers(returned)
            except (MisconfigurationException, KeyError, TypeError, ValueError):
                raise ConfigError(f"{name} returned {_described(returned)}: {forms}") from None
        if len(optimizers) != 1:
            raise ConfigError(f"{name} returned {len(optimizers)} optimizers: a client trip steps one (automatic "
                              f"optimization); return one" + (f" ({forms})" if not optimizers else ""))
        if _needs_closure(optimizers[0]):
            raise ConfigError(f"{name} returned {type(optimizers[0]).__name__}, whose step needs a closure that "
                              f"re-evaluates the loss: a client trip steps once per minibatch; use an optimizer that "
                              f"steps without one (SGD, Adam, ...)")
        try:
            configs = _configure_schedulers_automatic_opt(schedulers, monitor)
        except MisconfigurationException as error:
            raise ConfigError(f"{name}: {str(error).splitlines()[0]}") from None
        if any(config.monitor is not None for config in configs):
            raise ConfigError(f"{type(self.module).__qualname__}'s lr scheduler monitors a metric "
                              f"({configs[0].monitor}): a client trip has no validation to read it from")
        return optimizers[0], configs

    def _check_schedulers(self, horizon: int = 10_000) -> None:
        """Build the module's optimizer once, before any trip (what cannot step stops here), and step its
        schedulers through the longest trip as a trip steps them: one that never moves the lr before the
        trip's last step, but would within ``horizon`` steps of its interval (a fit's), is refused, as it
        would do nothing here (each trip starts a fresh optimizer and scheduler). One that never moves it
        (StepLR with gamma 1) is left alone: it does nothing anywhere."""
        optimizer, configs = self._configured()
        self.schedulers = [(type(c.scheduler).__name__, c.interval, c.frequency) for c in configs]
        if not configs:
            return
        sizes = np.asarray(self._sizes, dtype=np.int64)
        steps = self.local.num_steps(sizes)
        epochs = -(-steps // self.local.batches_per_epoch(sizes))
        longest, most_epochs = int(steps.max()), int(epochs.max())
        ticks = {"step": longest - 1, "epoch": most_epochs - 1}  # scheduler steps before a trip's last step

        def moved() -> bool:
            return any(group["lr"] != group.get("initial_lr", group["lr"]) for group in optimizer.param_groups)

        acted = moved()  # (a warm-up's factor applies from the first step)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*before `optimizer.step\\(\\)`")
            for interval, count in ticks.items():
                for tick in range(1, count + 1):
                    with user_code(self.module, "configure_optimizers' lr scheduler"):
                        self._step_schedulers(configs, interval, tick)
                    acted = acted or moved()
            later = False
            for interval, count in ticks.items():  # beyond a trip: what a longer fit would have seen
                for tick in range(count + 1, max(count, horizon) + 1):
                    try:
                        self._step_schedulers(configs, interval, tick)
                    except Exception:  # (OneCycleLR past its total_steps: that fit would have stopped)
                        break
                    if moved():
                        later = True
                        break
        if not acted and later:
            kinds = ", ".join(f"{kind} (interval {interval}, frequency {frequency})" for kind, interval, frequency
                              in self.schedulers)
            raise ConfigError(f"{type(self.module).__qualname__}'s lr scheduler {kinds} never changes the lr within a "
                              f"trip, and each trip starts a fresh optimizer and scheduler: the longest trip has "
                              f"{longest} steps in {most_epochs} epoch(s) (algorithm.local_epochs="
                              f"{self.local.epochs}); let it act within a trip (interval step, more local epochs), or "
                              f"decay the lr across trips with algorithm.lr_decay")

    def _local_sgd(self, client: int, seed: int, start: torch.Tensor, state: dict[str, torch.Tensor],
                   rows: torch.Tensor, counts: list[int], version: int, first_gradient: torch.Tensor | None = None,
                   ) -> None:
        """One trip's local steps on the loaded model through the module (class docstring). The
        module's own random draws (dropout) and a Dataset's augmentation come from the trip's seed (torch's,
        numpy's and Python's generators, restored after the batch of trips), so that a trip's result does
        not depend on which process trains it or on the trips before it."""
        # The host's states are saved before the first trip of a train() call and restored after its last
        # (:meth:`_restore_host`; also before Mimelite's full gradient, the one host code that draws between
        # trips): saving and restoring them per trip cost 0.1 ms (numpy's state is read out number by number).
        cpu = self.device.type == "cpu"
        if self._host is None:
            self._host = random.getstate(), np.random.get_state(), torch.get_rng_state() if cpu else None
        random.seed(seed)
        np.random.seed(seed % 2**32)
        if cpu:  # torch.manual_seed's CPU part: its lazy seeding of CUDA, XPU and MTIA formats stack traces (0.18 ms)
            torch.default_generator.manual_seed(seed)
            self._trip(client, seed, start, state, rows, counts, version, first_gradient)
            return
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed)
            self._trip(client, seed, start, state, rows, counts, version, first_gradient)

    def _trip(self, client: int, seed: int, start: torch.Tensor, state: dict[str, torch.Tensor],
              rows: torch.Tensor, counts: list[int], version: int, first_gradient: torch.Tensor | None) -> None:
        local, params, task = self.local, self.params, self.task
        x, y = self.data.client(client)
        gen = torch.Generator().manual_seed(seed)  # augmentation draws
        per_epoch = int(local.batches_per_epoch(len(y)))
        # y_0's views: for FedProx's term and the algorithm's rule (not made for a plain trip: 30 µs)
        anchors = views(start, self.shapes) if self.update.prox_mu or not self.own_optimizer else None
        state_views = {k: views(v, self.shapes) for k, v in state.items()}
        self._start_buffers(client, self._downloads[seed])
        task.metrics.trip = seed
        self._defined = _hooks_defined(self.module)
        optimizer, schedulers = self._optimizer() if self.own_optimizer else (None, [])
        self._hook("on_train_start")
        for step, count in enumerate(counts):
            batch_idx = step % per_epoch
            if batch_idx == 0:
                self._hook("on_train_epoch_start")
            picked = rows[step, :count]
            if self.data.reads is not None:  # a Dataset that augments in __getitem__: this batch's own draw
                offset = int(self.data.offsets[client])
                inputs = self.data.reads(offset + picked.cpu().numpy()).to(x.device)
            else:
                inputs = x[picked]
            batch = task.batch(inputs, y[picked], True, gen)
            self._hook("on_train_batch_start", batch, batch_idx)
            with self.autocast():
                loss, output = task.training_loss(batch, batch_idx)
            if loss is not None and optimizer is not None:
                scale = local.step_lr(count, version) / local.lr  # LR-norm's n/B and the lr schedule's factor
                if self.update.prox_mu:  # FedProx: (mu/2)||y - y_0||^2 in the objective
                    loss = loss + 0.5 * self.update.prox_mu * sum((p - a).pow(2).sum() for p, a in zip(params, anchors))
                self._hook("on_before_backward", loss)
                self.fabric.backward(loss)
                self._hook("on_after_backward")
                lrs = [group["lr"] for group in optimizer.param_groups]  # the module's scheduler sets them
                for group, lr in zip(optimizer.param_groups, lrs):
                    group["lr"] = lr * scale
                self._hook("on_before_optimizer_step", optimizer)
                with user_code(self.module, "configure_optimizers' optimizer step"):
                    self.fabric.strategy.optimizer_step(optimizer)
                for group, lr in zip(optimizer.param_groups, lrs):
                    group["lr"] = lr
                self._hook("on_before_zero_grad", optimizer)
                optimizer.zero_grad()
            elif loss is not None:
                self._hook("on_before_backward", loss)
                grads = list(torch.autograd.grad(loss, params))
                self._hook("on_after_backward")
                with torch.no_grad():
                    if step == 0 and first_gradient is not None:
                        torch._foreach_copy_(views(first_gradient, self.shapes), grads)
                    self.update.step(params, grads, anchors, local.step_lr(count, version), state_views)
            self._hook("on_train_batch_end", output, batch, batch_idx)
            self._step_schedulers(schedulers, "step", step + 1)
            if batch_idx == per_epoch - 1 or step == len(counts) - 1:
                self._hook("on_train_epoch_end")
                task.metrics.end_epoch()  # (after the hook: what it logs on_epoch counts for this epoch)
                self._step_schedulers(schedulers, "epoch", step // per_epoch + 1)
        self._hook("on_train_end")
        self._end_buffers(client, seed)

    @staticmethod
    def _step_schedulers(configs: Sequence[Any], interval: str, count: int) -> None:
        """Step the schedulers of ``interval`` whose ``frequency`` divides ``count`` (Lightning's rule)."""
        for config in configs:
            if config.interval == interval and count % config.frequency == 0:
                config.scheduler.step()
