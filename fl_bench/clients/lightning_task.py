"""A user's LightningModule as the client task (``task=lightning``): built from ``task.module`` with the
run's arguments it takes, and wrapped as a task (:class:`LightningTask`): the loss of a minibatch
through the module's own ``training_step``, evaluation, logits, and the batch layout. Its trips are
stepped by ``fl_bench.clients.lightning_trainer``; what its ``self.log`` records, by
``fl_bench.clients.lightning_metrics``.

Evaluation calls ``validation_step`` (or ``test_step``) over the validation set in batches when the
module has one, and reads the logged ``task.loss_key`` and ``task.accuracy_key``; a loss the step
returns (a scalar tensor, or a dict with ``task.loss_key`` or ``loss``) is used where none is logged
under ``task.loss_key``, and the run's first lines say which. They also name what is read as
accuracy: where the step logs no ``task.accuracy_key``, a logged name that looks like an accuracy
(which they name for ``task.accuracy_key``), else the argmax accuracy of the module's forward where
it gives class logits, else none (:meth:`LightningTask.find_accuracy`). Without a validation step the
module's forward gives logits scored by cross-entropy and accuracy; under ``task.evaluation=auto``
only where it gives class logits, else the module is evaluated by its ``training_step`` loss (an
autoencoder). ``self.optimizers()`` gives the trip's optimizer (:meth:`LightningTask.optimizers`). Such modules train one trip at
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
import copy
import difflib
import enum
import inspect
import re
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fl_bench.clients.lightning_metrics import TaskMetrics, install_logging
from fl_bench.clients.task import LightningTaskConfig, model_inputs
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
    return ConfigError(f"{type(module).__qualname__}.{hook} raised {_first_line(error)}"
                       + ((" " if hint.startswith("(") else ": ") + hint if hint else ""))


def trainer_read(error: BaseException) -> str | None:
    """What of ``self.trainer`` the module read where ``error`` is Lightning's about it (``self.trainer.<name>``,
    or ``self.trainer`` before Fabric set the module up); None for any other error."""
    text = str(error)
    found = re.search(r"self\.trainer\.(\w+)", text)
    if found:
        return f"self.trainer.{found.group(1)}"
    return "self.trainer" if "self.trainer" in text or "not attached to a `Trainer`" in text else None


def accuracy_like(key: str, logged: Any) -> str | None:
    """The logged name nearest ``key`` among those that look like an accuracy (``acc`` in the name), without
    Lightning's ``_step`` / ``_epoch`` suffixes; None where none does."""
    names = sorted({re.sub(r"_(step|epoch)$", "", name) for name in logged if "acc" in name.lower()})
    return (difflib.get_close_matches(key, names, n=1, cutoff=0.0) or [None])[0]


def overrides(module: nn.Module, hook: str) -> bool:
    """Whether the module's class defines ``hook`` itself (not LightningModule's empty default)."""
    from lightning import LightningModule

    return getattr(type(module), hook, None) is not getattr(LightningModule, hook, None)


def build_lightning_task(cfg: LightningTaskConfig, model: nn.Module, data: FederatedData) -> LightningTask:
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
    prepare_module(module)  # (its build hooks: setup, configure_model, ...; what no run calls is refused: HOOKS)
    if not any(p.requires_grad for p in module.parameters()):
        raise ConfigError(f"task.module._target_={target} has no trainable parameters: a client trip trains and "
                          f"uploads them; give the module layers with parameters (or take the run's model)")
    if not overrides(module, "training_step"):
        raise ConfigError(f"task.module._target_={target} has no training_step: a client trip calls it on each "
                          f"minibatch for the loss; add one (as lightning.Trainer needs)")
    if not module.automatic_optimization:
        raise ConfigError(f"task.module._target_={target} sets automatic_optimization=False: fl_bench steps the "
                          f"optimizer of configure_optimizers itself; use automatic optimization")
    task = LightningTask(module, cfg, data, uses_model="model" in extra)
    if not overrides(module, "optimizers"):  # self.optimizers(): Lightning's reads a Trainer (LightningTask.optimizers)
        module.optimizers = task.optimizers
    if cfg.evaluation == "steps" and task.evaluator is None:
        raise ConfigError(f"task.evaluation=steps needs a validation_step or test_step, which {cls.__qualname__} "
                          f"has not: use task.evaluation=logits or training_step (or auto)")
    # Without a validation_step nothing is logged to read these keys from: set, they would be ignored.
    changed = [key for key in ("loss_key", "accuracy_key") if getattr(cfg, key) != getattr(LightningTaskConfig, key)]
    if task.evaluation != "steps" and changed:
        key = changed[0]
        by = task.evaluation.replace("logits", "logits (fl_bench computes its loss and accuracy)" + (
            ", or its training_step loss where they are not class logits" if cfg.evaluation == "auto" else ""))
        raise ConfigError(f"task.{key}={getattr(cfg, key)} names a logged metric, but {cls.__qualname__} is evaluated "
                          f"by its {by}, "
                          f"not by a validation_step; leave task.{key} unset or add a validation_step")
    return task


class LightningTask(nn.Module):
    """A user's LightningModule with what a run needs of a task: ``loss`` of a minibatch through its
    ``training_step``, ``evaluate``, logits for the final predictions, and the batch layout."""

    entropy_weight = 0.0  # FedMAX's term is the built-in task's; a module adds its own terms itself
    features = None
    optimizer = None  # what the module's self.optimizers() gives: the trainer sets the trip's (optimizers)
    not_logits: str | None = None  # why its forward gives no class logits, where task.evaluation=auto found it (set_up)
    accuracy_logged = True  # its validation step logs task.accuracy_key (set_up's probe finds out)
    scores_logits = False  # it logs no accuracy and its forward gives class logits: fl_bench scores them (set_up)
    accuracy_note = ""  # where no accuracy is read: why, and what to set (the run's first lines)

    def __init__(self, module: nn.Module, cfg: LightningTaskConfig, data: FederatedData, uses_model: bool):
        super().__init__()
        self.module = module
        self.cfg = cfg
        self.transform = data.transform
        self.num_classes = data.num_classes
        self.uses_model = uses_model  # the module took the model group's network
        self.evaluator = next((hook for hook in ("validation_step", "test_step") if overrides(module, hook)), None)
        # steps | logits | training_step (LightningTaskConfig.evaluation; auto resolved here)
        self.evaluation = cfg.evaluation if cfg.evaluation != "auto" else (
            "steps" if self.evaluator is not None else "logits" if cfg.batch == "pair" else "training_step")
        self._initial_buffers = [b.detach().clone() for b in module.buffers()]
        self.metrics = None  # TaskMetrics, once Fabric is set up (set_up)
        self.last_validation: dict[str, float] = {}  # what the last evaluation's steps logged
        self.loss_source = "logged"  # or "returned": where evaluate reads the validation loss (set_up probes it)
        self.evaluation_buffers = lambda: None  # the trainer's: the buffers the global model is evaluated with
        # Lightning's hooks (HOOKS): the batch-transfer ones it has, the Trainer's settings and counters its code
        # reads (trainer_view), its clip_gradients as under the Trainer, its attributes outside trips (trips_begin)
        self.transfers = tuple(hook for hook in TRANSFER_HOOKS if defines(module, hook))
        self._viewed: Any = None
        if not defines(module, "clip_gradients"):
            module.clip_gradients = types.MethodType(clip_gradients, module)
        self.attributes: dict[str, Any] | None = None

    @property
    def predicts_classes(self) -> bool:
        """Its forward gives class logits that fl_bench scores (task.evaluation=logits, or a validation step
        that logs no accuracy: :meth:`find_accuracy`)."""
        return self.evaluation == "logits" or self.scores_logits

    @property
    def accuracy_source(self) -> str | None:
        """What metrics.csv's val_accuracy is (summary.json's accuracy_source); None: no accuracy is measured."""
        if self.predicts_classes:
            return "the argmax of its forward's class logits, scored by fl_bench"
        if self.evaluation == "steps" and self.accuracy_logged:
            return f"{self.cfg.accuracy_key} as {self.evaluator} logs it"
        return None

    def optimizers(self, use_pl_optimizer: bool = True) -> torch.optim.Optimizer:
        """The module's ``self.optimizers()`` (build_lightning_task sets it on the module: Lightning's reads a
        Trainer's): in a trip, the optimizer the trip steps (the trainer sets it); under an algorithm whose trips
        step with its own rule, an SGD at algorithm.client_lr that nothing steps; before the first trip
        (fl_bench's probes of the module), one from its configure_optimizers. Where a lightning.Trainer fits
        the module (algorithm=centralized), Lightning's."""
        from lightning import Trainer

        if isinstance(getattr(self.module, "_trainer", None), Trainer):
            return type(self.module).optimizers(self.module, use_pl_optimizer)
        if self.optimizer is None:
            from lightning.pytorch.core.optimizer import _configure_optimizers

            with user_code(self.module, "configure_optimizers"):
                returned = self.module.configure_optimizers()
                self.optimizer = (returned if isinstance(returned, torch.optim.Optimizer) else
                                  _configure_optimizers(returned)[0][0])
        return self.optimizer

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
        if self.evaluation == "training_step":
            why = f" ({self.not_logits}: task.evaluation=auto chose training_step)" if self.not_logits else ""
            accuracy = (f"; no accuracy{why}: trips to target_accuracy cannot be measured (a validation_step that logs "
                        f"{self.cfg.accuracy_key} gives one)")
        elif self.evaluation == "steps":
            source = self.accuracy_source
            accuracy = (f"; accuracy: {source}" + (f" ({self.accuracy_note})" if self.accuracy_note else "") if source
                        else f"; no accuracy: {self.accuracy_note}; trips to target_accuracy cannot be measured")
        else:
            accuracy = ""  # (logits: said above)
        return f"task: {type(self.module).__module__}.{type(self.module).__qualname__} with {network}{evaluation}{accuracy}"

    def set_up(self, fabric: Any, metrics: TaskMetrics, x_val: torch.Tensor | None = None,
               y_val: torch.Tensor | None = None) -> None:
        """Fabric moves the module to its device; its ``self.log`` and ``self.log_dict`` go to
        ``metrics`` (module docstring). With validation examples, one validation step on a few of
        them finds where the validation loss is read from (logged or returned) and whether the accuracy
        is logged (:meth:`find_accuracy`); what it logged and its metrics' states are discarded; scored
        by logits, its forward on a few is checked. Under task.evaluation=auto, a module without a
        validation step whose forward gives no class logits there (an autoencoder's embedding) is
        evaluated by its training_step loss."""
        fabric.setup_module(self.module)
        self.fabric, self.metrics = fabric, metrics
        self._initial_buffers = [b.to(fabric.device) for b in self._initial_buffers]
        install_logging(self.module, metrics)
        probe = x_val is not None and len(y_val)
        if probe and self.cfg.evaluation == "auto" and self.evaluation == "logits":
            self.not_logits = self.why_not_logits(x_val[:8])
            if self.not_logits is not None:
                self.evaluation = "training_step"
        if self.evaluation in ("steps", "logits") and probe:
            self.evaluate(x_val[:8], y_val[:8])
            metrics.discard()
            if self.evaluation == "steps":
                self.find_accuracy(x_val[:8])

    def why_not_logits(self, x: torch.Tensor) -> str | None:
        """Why the module's forward on stored examples ``x`` gives no class logits [len(x), num_classes]
        (None: it does): what it returns, or what it raised."""
        self.module.eval()
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                out = self.module(model_inputs(self.transform, x, False))
        except Exception as error:
            return f"its forward raised {_first_line(error)}"
        finally:
            self.module.train()
        if isinstance(out, torch.Tensor) and out.shape == (len(x), self.num_classes):
            return None
        got = f"a tensor of shape {list(out.shape)}" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
        return f"its forward returns {got}, not class logits of shape [batch, {self.num_classes}]"

    def find_accuracy(self, x: torch.Tensor) -> None:
        """Whether the validation step logged ``task.accuracy_key`` in the probe (``last_validation``); where
        not, the run's first lines say so and what to set: a logged name that looks like an accuracy for
        task.accuracy_key, else, where its forward gives class logits, fl_bench scores their argmax. A
        task.accuracy_key set on the command line that it does not log is refused in one line."""
        key, logged, name = self.cfg.accuracy_key, self.last_validation, type(self.module).__qualname__
        self.accuracy_logged = key in logged or f"{key}_epoch" in logged
        if self.accuracy_logged:
            return
        nearest = accuracy_like(key, logged)
        keys = ", ".join(sorted(logged)) or "nothing"
        if key != LightningTaskConfig.accuracy_key:
            raise ConfigError(f"task.accuracy_key={key} is not among what {name}.{self.evaluator} logs ({keys}): "
                              + (f"set task.accuracy_key={nearest}" if nearest else
                                 "log the accuracy under that name, or leave task.accuracy_key unset"))
        if nearest is not None:
            self.accuracy_note = f"{self.evaluator} logs no {key} (it logs {keys}): set task.accuracy_key={nearest}"
            return
        self.scores_logits = self.cfg.batch == "pair" and self.why_not_logits(x) is None
        self.accuracy_note = (f"{self.evaluator} logs no {key}; it logs {keys}" if self.scores_logits else
                              f"{self.evaluator} logs no {key} (it logs {keys}) and its forward gives no class "
                              f"logits: log the accuracy as {key} (or name it with task.accuracy_key)")

    def trainer_view(self) -> None:
        """Give the module's code what it reads of the Trainer that fl_bench can give (once Fabric has set the
        module up, which makes ``self.trainer`` read the Fabric object): ``current_epoch`` and ``global_step``
        (:meth:`set_counters`; LightningModule's own read them only where a trainer is attached),
        ``gradient_clip_val`` and ``gradient_clip_algorithm`` (task.gradient_clip_val, task.gradient_clip_algorithm),
        and ``model`` (the module, as the evaluation hooks' defaults read it). Called where trips and
        evaluations begin; does something once."""
        if self._viewed is not None:
            return
        fabric = self.module._fabric
        if fabric is None:
            return
        from lightning.pytorch.utilities import GradClipAlgorithmType

        algorithm = self.cfg.gradient_clip_algorithm
        fabric.current_epoch = fabric.global_step = 0
        fabric.gradient_clip_val = self.cfg.gradient_clip_val
        fabric.gradient_clip_algorithm = GradClipAlgorithmType(algorithm) if algorithm is not None else None
        fabric.model = self.module
        self.module._trainer = fabric  # (what LightningModule.current_epoch asks: is a trainer attached)
        self._viewed = fabric

    def set_counters(self, epoch: int, global_step: int) -> None:
        """What the module's ``self.current_epoch`` and ``self.global_step`` (and ``self.trainer``'s) read:
        the trip's local epoch and the optimizer steps taken so far in the trip (both restart at 0 every trip;
        0 outside trips). Needs :meth:`trainer_view` first (where a trip begins)."""
        view = self._viewed
        if view is not None:
            view.current_epoch = epoch
            view.global_step = global_step

    def trips_begin(self) -> dict[str, Any]:
        """The module's Python attributes as trips find them (:func:`attribute_snapshot`), which each trip's end
        restores (:func:`changed_attributes`): as the run's last evaluation left them (it sets ``attributes``
        to None, as does a checkpoint's on_load_checkpoint), or as before the first trip. (Taken afresh only
        then: comparing them before every trip cost 3 µs.)"""
        if self.attributes is None:
            self.attributes = attribute_snapshot(self.module)
        return self.attributes

    def reset_buffers(self) -> None:
        """The module's initial buffers back (task.buffers=reset: every trip starts from them)."""
        if not self._initial_buffers:  # (none: walking the module's buffers cost 8 µs a trip)
            return
        for buffer, initial in zip(self.module.buffers(), self._initial_buffers):
            buffer.copy_(initial)

    def batch(self, x: torch.Tensor, y: torch.Tensor, train: bool, generator: torch.Generator | None = None) -> Any:
        """A minibatch as the module takes it (:meth:`layout`), through the module's batch-transfer hooks
        where it has them (dataloader_idx 0, as the Trainer's on a single loader)."""
        batch = self.layout(x, y, train, generator)
        if self.transfers:
            module = self.module
            for hook in self.transfers:
                batch = (call_hook(module, hook, batch, module.device, 0) if hook == "transfer_batch_to_device" else
                         call_hook(module, hook, batch, 0))
        return batch

    def layout(self, x: torch.Tensor, y: torch.Tensor, train: bool, generator: torch.Generator | None = None) -> Any:
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
            raised = user_error(self.module, "training_step", error)
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

            install_logging(self.module, TaskMetrics())  # (checked as in a trip, then dropped)
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
        with user_code(self.module, "forward", "task.evaluation=logits scores its forward's class logits; set "
                       "task.evaluation=training_step (the mean of its training_step loss, no accuracy) or add a validation_step"):
            out = self.module(model_inputs(self.transform, x, False))
        if not (isinstance(out, torch.Tensor) and out.shape == (len(x), self.num_classes)):
            got = f"a tensor of shape {list(out.shape)}" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
            raise ConfigError(f"{type(self.module).__qualname__}.forward returned {got}: task.evaluation=logits scores "
                              f"its forward's class logits, of shape [batch, {self.num_classes}]; return them, add "
                              f"a validation_step, or set task.evaluation=training_step (the mean of its training_step "
                              f"loss on the validation set, no accuracy)")
        return out.float()

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, chunk: int = EVAL_BATCH) -> tuple[float, float]:
        """(loss, accuracy) on (x, y): from what the module's validation_step / test_step logs under
        ``task.loss_key`` and ``task.accuracy_key`` (where it logs no accuracy: its logits' argmax accuracy
        where :meth:`find_accuracy` found class logits, else NaN), else cross-entropy and accuracy of its
        logits."""
        buffers = self.evaluation_buffers()
        if buffers is not None:
            load_buffers(self.module, buffers)
        self.trainer_view()
        hooks = self._evaluation_hooks()  # {place: hook}: those the module has, called as the Trainer's loop calls them
        if "model_zero_grad" in hooks:
            call_hook(self.module, hooks["model_zero_grad"])
        if "model_eval" in hooks:
            call_hook(self.module, hooks["model_eval"])
        else:
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
            for place in ("start", "epoch_start"):
                if place in hooks:
                    call_hook(self.module, hooks[place])
            returned, total, correct = [], 0, 0.0
            for i, s in enumerate(range(0, len(y), chunk)):
                self.metrics.batch_size = n = len(y[s: s + chunk])
                batch = self.batch(x[s: s + chunk], y[s: s + chunk], False)
                if "batch_start" in hooks:
                    call_hook(self.module, hooks["batch_start"], batch, i)
                with user_code(self.module, self.evaluator):
                    output = step(batch, i)
                if "batch_end" in hooks:
                    call_hook(self.module, hooks["batch_end"], output, batch, i)
                if self.scores_logits:  # (it logs no accuracy: find_accuracy)
                    correct += (self.logits(x[s: s + chunk]).argmax(-1) == y[s: s + chunk]).sum().item()
                loss = self._returned_loss(output)
                returned.append(None if loss is None else loss * n)
                total += n
            if "epoch_end" in hooks:  # (what it logs is read with the steps': an epoch metric of kept outputs)
                call_hook(self.module, hooks["epoch_end"])
            logged = self.last_validation = self.metrics.take_validation()
            if "end" in hooks:
                call_hook(self.module, hooks["end"])
                if self.metrics.val or self.metrics.epoch_metrics["val"]:
                    self.metrics.take_validation()
                    raise ConfigError(f"{type(self.module).__qualname__}.{hooks['end']} calls self.log, which "
                                      f"lightning.Trainer refuses there: log in {hooks['end'].replace('_end', '_epoch_end')}")
        finally:
            if self.metrics is not None:
                self.metrics.stage = "train"
            if "model_train" in hooks:
                call_hook(self.module, hooks["model_train"])
            else:
                self.module.train()
            self.attributes = None  # (what the evaluation changed of them, trips find: trips_begin)
        key = next((k for k in (self.cfg.loss_key, f"{self.cfg.loss_key}_epoch") if k in logged), None)
        accuracy = logged.get(self.cfg.accuracy_key, logged.get(f"{self.cfg.accuracy_key}_epoch", float("nan")))
        if self.scores_logits:
            accuracy = correct / total
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
        kept = attribute_snapshot(self.module)  # (its train hooks' changes are not kept: they are no trip's)
        for i, s in enumerate(range(0, len(y), chunk)):
            loss = self.own_epoch(self.batch(x[s: s + chunk], y[s: s + chunk], False), i)
            if loss is None:
                raise ConfigError(f"{type(self.module).__qualname__}.training_step returned None on validation "
                                  f"examples, where task.evaluation=training_step reads its loss")
            total += float(loss) * len(y[s: s + chunk])
        self.metrics.take_validation()
        changed = changed_attributes(self.module, kept)
        if changed:
            restore_attributes(self.module, kept, changed)
        return total / len(y)

    def _evaluation_hooks(self) -> dict[str, str]:
        """The evaluation hooks the module has, by place (EVALUATION_HOOKS), where its steps evaluate it:
        on_validation_<place>, or on_test_<place> where test_step evaluates it (HOOKS)."""
        if self.evaluation != "steps":
            return {}
        stage = "validation" if self.evaluator == "validation_step" else "test"
        return {place: f"on_{stage}_{place}" for place in EVALUATION_HOOKS if defines(self.module, f"on_{stage}_{place}")}

    def _returned_loss(self, output: Any) -> float | None:
        """The loss a validation step returned: a scalar tensor, or a dict's ``task.loss_key`` or ``loss``."""
        if isinstance(output, dict):
            output = output.get(self.cfg.loss_key, output.get("loss"))
        if isinstance(output, torch.Tensor) and output.dim() == 0:
            return float(output)
        return None


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
