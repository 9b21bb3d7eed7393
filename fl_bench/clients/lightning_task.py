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
autoencoder). ``self.optimizers()`` gives the trip's optimizer (:meth:`LightningTask.optimizers`). Which hooks run, and
when: ``fl_bench.clients.lightning_hooks``; trips batched over clients: ``fl_bench.clients.lightning_batched``.

The module is tried while the run is built, before any output is written, so that what a trip cannot
run stops in one line: ``training_step`` on a batch (through the FLOP count; its loss, its ``self.log``
calls), on one example where a client's plan holds such a batch, ``configure_optimizers`` and its
schedulers (LBFGS's closure, two optimizers, an interval other than step or epoch, ``self.trainer``),
the validation step or the logits' shape. Whatever the module's code raises, there or in a trip, reaches
the user as one line naming the hook (:func:`user_code`).
"""

from __future__ import annotations

import difflib
import inspect
import re
import types
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from fl_bench.clients.lightning_hooks import (EVALUATION_HOOKS, TRANSFER_HOOKS, attribute_snapshot, call_hook,
                                             changed_attributes, clip_gradients, defines, first_line, overrides,
                                             prepare_module, restore_attributes, user_code, user_error)
from fl_bench.clients.lightning_metrics import TaskMetrics, install_logging
from fl_bench.clients.task import LightningTaskConfig, model_inputs
from fl_bench.data import FederatedData
from fl_bench.errors import ConfigError


# Constructor arguments a module may take from the run when its config does not set them.
FROM_RUN = ("model", "num_classes", "input_shape", "vocab_size")
EVAL_BATCH = 1024  # validation examples per validation_step call


def accuracy_like(key: str, logged: Any) -> str | None:
    """The logged name nearest ``key`` among those that look like an accuracy (``acc`` in the name), without
    Lightning's ``_step`` / ``_epoch`` suffixes; None where none does."""
    names = sorted({re.sub(r"_(step|epoch)$", "", name) for name in logged if "acc" in name.lower()})
    return (difflib.get_close_matches(key, names, n=1, cutoff=0.0) or [None])[0]


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
            return f"its forward raised {first_line(error)}"
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
        name = type(self.module).__qualname__
        if isinstance(output, dict) and "loss" not in output:  # (Lightning refuses it too; not a skipped batch)
            keys = ", ".join(repr(key) for key in output) or "none"
            raise ConfigError(f"{name}.training_step returned a dict without 'loss' (its keys: {keys}): return the "
                              f"loss as a scalar tensor, a dict with it under 'loss', or None to skip the batch")
        loss = output.get("loss") if isinstance(output, dict) else output
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
