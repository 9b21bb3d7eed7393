"""A user's LightningModule as the client task (``task=lightning``): built from ``task.module`` with the
run's arguments it takes, and wrapped as a task (:class:`LightningTask`): the loss of a minibatch
through the module's own ``training_step``, evaluation, logits, and the batch layout. Its trips are
stepped by ``fl_bench.clients.lightning_trainer``; what its ``self.log`` records, by
``fl_bench.clients.lightning_metrics``.

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
import inspect
from collections.abc import Iterator
from typing import Any

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
    if "self.trainer" in str(error) or "not attached to a `Trainer`" in str(error):
        hint = hint or ("fl_bench runs no lightning.Trainer (a client trip's length varies with its client's "
                        "examples): give what the module reads from self.trainer as its own argument")
    return ConfigError(f"{type(module).__qualname__}.{hook} raised {_first_line(error)}"
                       + ((" " if hint.startswith("(") else ": ") + hint if hint else ""))


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
        self.evaluator = next((hook for hook in ("validation_step", "test_step") if overrides(module, hook)), None)
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

    def set_up(self, fabric: Any, metrics: TaskMetrics, x_val: torch.Tensor | None = None,
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
