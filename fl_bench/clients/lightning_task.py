"""A user's LightningModule as the client task (``task=lightning``).

A client trip calls the module's own ``training_step`` on each minibatch of the client's data, in
the order of the trip's minibatch plan (fl_bench.clients.trainer), and steps:

- with the optimizer (and scheduler) its ``configure_optimizers`` returns, created afresh for every
  trip (a client starts from the model it downloaded, with no optimizer state), under algorithms
  whose client rule is plain SGD (FedBuff, FedAvg and its family, FedAsync, FedStaleWeight).
  Around it, fl_bench applies the algorithm's client knobs: FedProx's (mu/2)||y - y_0||^2 is added to
  the module's loss, and each step's lr is the optimizer's lr times LR-norm's n/B and the lr
  schedule's factor (``lr_decay^t``, or 1/(1+t)); ``algorithm.client_lr`` is not used;
- with the algorithm's own rule at ``algorithm.client_lr``, on the module's gradients, under
  algorithms whose server math reads the client's lr or update rule (FedLaAvg, HFL, FedGBO, MFL,
  Mimelite, MimeXlite); the module's ``configure_optimizers`` is not used. The run's first line says
  which.

Lightning Fabric sets the module up (device, precision, ``self.log``): what ``training_step`` and
``validation_step`` log is averaged per evaluation and written to ``task_metrics.csv`` (and W&B).
The train hooks that make sense for one trip are called around it: ``on_train_start`` /
``on_train_end`` per trip, ``on_train_epoch_start`` / ``on_train_epoch_end`` per local epoch,
``on_train_batch_start`` / ``on_train_batch_end``, ``on_before_backward``, ``on_after_backward``,
``on_before_optimizer_step`` and ``on_before_zero_grad`` per step. Buffers (e.g. BatchNorm's running
statistics) are not federated: every trip starts from the module's initial buffers.

Evaluation calls ``validation_step`` (or ``test_step``) over the validation set in batches when the
module has one, and reads the logged ``task.loss_key`` and ``task.accuracy_key``; otherwise the
module's forward gives logits scored by cross-entropy and accuracy. Such modules train one trip at
a time (the batched path cannot prove that a user's step batches to the same result).
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.task import LightningTaskConfig, model_inputs
from fl_bench.clients.trainer import ClientTrainer, views
from fl_bench.data import FederatedData
from fl_bench.errors import ConfigError

# Constructor arguments a module may take from the run when its config does not set them.
FROM_RUN = ("model", "num_classes", "input_shape", "vocab_size")
EVAL_BATCH = 1024  # validation examples per validation_step call


def _overrides(module: nn.Module, hook: str) -> bool:
    """Whether the module's class defines ``hook`` itself (not LightningModule's empty default)."""
    from lightning import LightningModule

    return getattr(type(module), hook, None) is not getattr(LightningModule, hook, None)


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
    extra = {name: available[name] for name in FROM_RUN if name in parameters and name not in cfg.module}
    try:
        module = instantiate(cfg.module, **extra)
    except Exception as error:
        cause = error.__cause__ or error
        raise ConfigError(f"task.module._target_={target} could not be built: {str(cause).splitlines()[0]}") from None
    if not _overrides(module, "training_step"):
        raise ConfigError(f"task.module._target_={target} has no training_step: a client trip calls it on each "
                          f"minibatch for the loss; add one (as lightning.Trainer needs)")
    if not module.automatic_optimization:
        raise ConfigError(f"task.module._target_={target} sets automatic_optimization=False: fl_bench steps the "
                          f"optimizer of configure_optimizers itself; use automatic optimization")
    task = LightningTask(module, cfg, data, uses_model="model" in extra)
    # Without a validation_step nothing is logged to read these keys from: set, they would be ignored.
    changed = [key for key in ("loss_key", "accuracy_key") if getattr(cfg, key) != getattr(LightningTaskConfig, key)]
    if task.evaluator is None and changed:
        key = changed[0]
        raise ConfigError(f"task.{key}={getattr(cfg, key)} names a logged metric, but {cls.__qualname__} has no "
                          f"validation_step or test_step: fl_bench computes its loss and accuracy itself; "
                          f"leave task.{key} unset or add a validation_step")
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
        self._initial_buffers = [b.detach().clone() for b in module.buffers()]
        self.metrics = None  # TaskMetrics, once Fabric is set up (set_up)
        self.last_validation: dict[str, float] = {}  # what the last evaluation's steps logged

    @property
    def predicts_classes(self) -> bool:
        """Its forward gives class logits when fl_bench evaluates it (no validation_step of its own)."""
        return self.evaluator is None

    @property
    def model(self) -> nn.Module:
        """The module (its state_dict is the run's model.pt)."""
        return self.module

    def describe(self) -> str:
        """What trains, for the run's first line."""
        network = "the model group's network" if self.uses_model else "its own network (the model group is not used)"
        return f"task: {type(self.module).__module__}.{type(self.module).__qualname__} with {network}"

    def set_up(self, fabric: Any, metrics: "TaskMetrics") -> None:
        """Fabric moves the module to its device and routes its ``self.log`` to ``metrics``."""
        fabric.setup_module(self.module)
        self.fabric, self.metrics = fabric, metrics
        self._initial_buffers = [b.to(fabric.device) for b in self._initial_buffers]

    def reset_buffers(self) -> None:
        """Every trip starts from the module's initial buffers (they are not federated)."""
        for buffer, initial in zip(self.module.buffers(), self._initial_buffers):
            buffer.copy_(initial)

    def batch(self, x: torch.Tensor, y: torch.Tensor, train: bool, generator: torch.Generator | None = None) -> Any:
        """A minibatch as the module takes it: (inputs, targets), or a dict under ``task.batch_keys``."""
        inputs = model_inputs(self.transform, x, train, generator)
        if self.cfg.batch_keys is None:
            return inputs, y
        return {self.cfg.batch_keys[0]: inputs, self.cfg.batch_keys[1]: y}

    def training_loss(self, batch: Any, batch_idx: int) -> tuple[torch.Tensor | None, Any]:
        """The module's ``training_step`` output and its loss (None: the module skips this batch)."""
        output = self.module.training_step(batch, batch_idx)
        loss = output.get("loss") if isinstance(output, dict) else output
        if loss is not None and not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
            raise ConfigError(f"{type(self.module).__qualname__}.training_step returned {type(loss).__name__}: "
                              f"return the loss as a scalar tensor, a dict with 'loss', or None")
        return loss, output

    def loss(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The loss of one minibatch of stored examples through ``training_step`` (the FLOP count and
        Mimelite's full-batch gradient). Before Fabric is set up, ``self.log`` has nowhere to go: its
        warning is silenced and metric states touched are reset."""
        if self.metrics is None:
            from torchmetrics import Metric

            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*self.log.*")
                loss, _ = self.training_loss(self.batch(x, y, True, generator), 0)
            for metric in self.module.modules():
                if isinstance(metric, Metric):
                    metric.reset()
        else:
            loss, _ = self.training_loss(self.batch(x, y, True, generator), 0)
        if loss is None:  # Lightning skips such a batch; a loss is needed here
            raise ConfigError(f"{type(self.module).__qualname__}.training_step returned None on a batch of stored "
                              f"training examples (client 0's first), where fl_bench counts a step's FLOPs: return "
                              f"the loss as a scalar tensor or a dict with 'loss'")
        return loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The module's output on stored examples (evaluation inputs)."""
        return self.module(model_inputs(self.transform, x, False))

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, chunk: int = EVAL_BATCH) -> tuple[float, float]:
        """(loss, accuracy) on (x, y): from what the module's validation_step / test_step logs under
        ``task.loss_key`` and ``task.accuracy_key`` (NaN accuracy if it logs none), else cross-entropy
        and accuracy of its logits."""
        self.module.eval()
        try:
            if self.evaluator is None:
                loss, correct = 0.0, 0.0
                for s in range(0, len(y), chunk):
                    logits = self(x[s: s + chunk]).float()
                    loss += F.cross_entropy(logits, y[s: s + chunk], reduction="sum").item()
                    correct += (logits.argmax(-1) == y[s: s + chunk]).sum().item()
                return loss / len(y), correct / len(y)
            step = getattr(self.module, self.evaluator)
            self.metrics.stage = "val"
            for i, s in enumerate(range(0, len(y), chunk)):
                self.metrics.batch_size = len(y[s: s + chunk])
                step(self.batch(x[s: s + chunk], y[s: s + chunk], False), i)
            logged = self.last_validation = self.metrics.take_validation()
        finally:
            if self.metrics is not None:
                self.metrics.stage = "train"
            self.module.train()
        if self.cfg.loss_key not in logged:
            raise ConfigError(f"task.loss_key={self.cfg.loss_key} is not among what {type(self.module).__qualname__}."
                              f"{self.evaluator} logs ({', '.join(sorted(logged)) or 'nothing'}): set task.loss_key")
        accuracy = logged.get(self.cfg.accuracy_key, float("nan"))
        return logged[self.cfg.loss_key], accuracy


def task_metrics_logger() -> Any:
    """A Lightning Fabric logger that averages what a module logs: per evaluation, the training steps'
    values since the last evaluation, and the validation batches' values (weighted by batch size)."""
    from lightning.fabric.loggers import Logger

    class TaskMetrics(Logger):
        """Sums and counts of logged values: training steps' per trip (``trip``: its seed, so that
        processes can pool them and sum in trip order), validation batches' weighted by batch size."""

        def __init__(self):
            super().__init__()
            self.stage = "train"  # train | val
            self.trip = 0  # the seed of the trip training now
            self.batch_size = 1  # of the validation batch being evaluated
            self.train: dict[int, dict[str, list[float]]] = {}
            self.val: dict[str, list[float]] = {}

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
            sums = self.val if self.stage == "val" else self.train.setdefault(self.trip, {})
            for name, value in metrics.items():
                total = sums.setdefault(name, [0.0, 0])
                total[0] += float(value) * weight
                total[1] += weight

        def take_validation(self) -> dict[str, float]:
            """The mean of each value the validation batches logged; resets them."""
            means = {name: total / count for name, (total, count) in self.val.items()}
            self.val = {}
            return means

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
        if own_optimizer and not _overrides(self.module, "configure_optimizers"):
            raise ConfigError(f"{type(self.module).__qualname__} has no configure_optimizers: under this algorithm a "
                              f"client trip steps the module's own optimizer; add one (as lightning.Trainer needs)")

    def autocast(self):
        """Fabric's precision context for the module's steps."""
        return self.fabric.autocast()

    def describe(self) -> str:
        """The task and how its trips step, for the run's first lines."""
        how = ("its configure_optimizers' optimizer (algorithm.client_lr is not used)" if self.own_optimizer else
               f"the algorithm's rule at algorithm.client_lr={self.local.lr} (configure_optimizers is not used)")
        return f"{self.task.describe()}; trips step with {how}"

    def _hook(self, name: str, *args: Any) -> None:
        getattr(self.module, name)(*args)

    def _optimizer(self) -> tuple[torch.optim.Optimizer, list[Any]]:
        """A fresh optimizer and its scheduler configs from the module's configure_optimizers (every
        form Lightning accepts), the optimizer set up by Fabric."""
        from lightning.pytorch.core.optimizer import _configure_optimizers, _configure_schedulers_automatic_opt

        optimizers, schedulers, monitor = _configure_optimizers(self.module.configure_optimizers())
        if len(optimizers) != 1:
            raise ConfigError(f"{type(self.module).__qualname__}.configure_optimizers returned {len(optimizers)} "
                              f"optimizers: a client trip steps one (automatic optimization)")
        configs = _configure_schedulers_automatic_opt(schedulers, monitor)
        if any(config.monitor is not None for config in configs):
            raise ConfigError(f"{type(self.module).__qualname__}'s lr scheduler monitors a metric "
                              f"({configs[0].monitor}): a client trip has no validation to read it from")
        return self.fabric.setup_optimizers(optimizers[0]), configs

    def _local_sgd(self, client: int, seed: int, start: torch.Tensor, state: dict[str, torch.Tensor],
                   rows: torch.Tensor, counts: list[int], version: int, first_gradient: torch.Tensor | None = None,
                   ) -> None:
        """One trip's local steps on the loaded model through the module (class docstring). The
        module's own random draws (dropout) come from the trip's seed, so that a trip's result does not
        depend on which process trains it or on the trips before it."""
        cuda = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            self._trip(client, seed, start, state, rows, counts, version, first_gradient)

    def _trip(self, client: int, seed: int, start: torch.Tensor, state: dict[str, torch.Tensor],
              rows: torch.Tensor, counts: list[int], version: int, first_gradient: torch.Tensor | None) -> None:
        local, params, task = self.local, self.params, self.task
        x, y = self.data.client(client)
        gen = torch.Generator().manual_seed(seed)  # augmentation draws
        per_epoch = math.ceil(len(y) / local.batch_size)
        anchors = views(start, self.shapes)
        state_views = {k: views(v, self.shapes) for k, v in state.items()}
        task.reset_buffers()
        task.metrics.trip = seed
        optimizer, schedulers = self._optimizer() if self.own_optimizer else (None, [])
        self._hook("on_train_start")
        for step, count in enumerate(counts):
            batch_idx = step % per_epoch
            if batch_idx == 0:
                self._hook("on_train_epoch_start")
            batch = task.batch(*(t[rows[step, :count]] for t in (x, y)), True, gen)
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
                optimizer.step()
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
                self._step_schedulers(schedulers, "epoch", step // per_epoch + 1)
        self._hook("on_train_end")

    @staticmethod
    def _step_schedulers(configs: Sequence[Any], interval: str, count: int) -> None:
        """Step the schedulers of ``interval`` whose ``frequency`` divides ``count`` (Lightning's rule)."""
        for config in configs:
            if config.interval == interval and count % config.frequency == 0:
                config.scheduler.step()
