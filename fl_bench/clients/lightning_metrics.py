"""What a LightningModule task's ``self.log`` and ``self.log_dict`` record (``task=lightning``).

They take what they take under ``lightning.Trainer`` (Fabric's own ``log`` refuses torchmetrics objects
and ignores ``on_step``/``on_epoch``): numbers, scalar tensors, torchmetrics ``Metric`` and
``MetricCollection`` objects, with the Trainer's defaults (training: on_step; validation: on_epoch) and
its semantics (a Metric logged on_epoch is updated in the steps, computed at the end of the epoch, a
trip's local epoch or an evaluation's pass over the validation set, and reset; on_step logs its batch
value; both: ``<name>_step`` and ``<name>_epoch``). ``reduce_fx`` other than mean is refused in one
line. What is logged is averaged per evaluation (:class:`TaskMetrics`) and written to
``task_metrics.csv`` (and W&B); a Metric's state is reset at the end of each trip's epoch, so a trip's
values do not depend on the trips before it or on the process that trained it.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

import torch
from lightning.fabric.loggers import Logger
from torch import nn

from fl_bench.errors import ConfigError


class TaskMetrics(Logger):
    """A Lightning Fabric logger that averages what a module logs: per evaluation, the training steps'
    values since the last evaluation, and the validation batches' values (weighted by batch size).
    It keeps sums and counts: training steps' per trip (``trip``: its seed, so that processes can pool
    them and sum in trip order), validation batches' weighted by batch size; torchmetrics objects
    logged on_epoch until their epoch ends (:meth:`record`)."""

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


def install_logging(module: nn.Module, metrics: TaskMetrics) -> None:
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


def _scalar(name: str, value: Any) -> float:
    """A logged value as a number; one line for what ``self.log`` cannot take."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    shape = f"a tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
    raise ConfigError(f"self.log({name!r}, ...) got {shape}: log a number, a one-element tensor, or a torchmetrics "
                      f"Metric (or MetricCollection, through self.log_dict) whose value is one number")
