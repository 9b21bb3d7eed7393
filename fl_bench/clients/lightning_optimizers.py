"""A user's LightningModule's ``configure_optimizers`` as client trips step it (``task=lightning``): a
fresh optimizer (and its lr schedulers) every trip, in every form Lightning accepts; what a trip cannot
step refused in one line (two optimizers, LBFGS's closure, a scheduler that monitors a metric or that
would never change the lr within a trip, ``self.trainer`` reads), with the working option
(``task.lr_scheduler=off`` leaves the schedulers out: trips step the optimizer at its configured lr).
Used by ``fl_bench.clients.lightning_trainer`` (one trip at a time) and
``fl_bench.clients.lightning_batched`` (trips together).
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fl_bench.clients.lightning_hooks import trainer_read, user_code, user_error
from fl_bench.clients.local_update import LocalTraining
from fl_bench.errors import ConfigError

# What configure_optimizers may read of self.trainer to size a scheduler: under task.lr_scheduler=off (the scheduler
# left out), the longest trip's (_SizedFit)
SIZED_FIT = ("estimated_stepping_batches", "max_steps", "max_epochs")


class _SizedFit:
    """What ``self.trainer`` gives configure_optimizers under task.lr_scheduler=off (Lightning's shim reads
    it as it reads Fabric): SIZED_FIT from the longest trip, only so that a scheduler sized by them can be
    built and left out; anything else, Fabric's."""

    def __init__(self, fabric: Any, steps: int, epochs: int):
        self._fabric, self.estimated_stepping_batches, self.max_steps, self.max_epochs = fabric, steps, steps, epochs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fabric, name)


def _unscheduled(optimizer: torch.optim.Optimizer, schedulers: list[Any]) -> None:
    """The optimizer's hyperparameters as its arguments set them, before the schedulers built on it changed them
    (task.lr_scheduler=off): a scheduler keeps the lr it found as ``initial_lr`` (a warm-up scales the lr at
    once); OneCycleLR and CyclicLR set an lr and momentum of their own, so the optimizer's arguments
    (``defaults``) come back."""
    from torch.optim.lr_scheduler import CyclicLR, OneCycleLR

    cyclic = any(isinstance(scheduler, (CyclicLR, OneCycleLR)) for scheduler in schedulers)
    for group in optimizer.param_groups:
        if cyclic:
            group.update({key: optimizer.defaults[key] for key in ("lr", "momentum", "betas")
                          if key in group and key in optimizer.defaults})
        else:
            group["lr"] = group.get("initial_lr", group["lr"])


def _described(value: Any) -> str:
    """A value a hook returned, in a few words."""
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))}"
    return repr(value) if value is None or isinstance(value, (int, float, str)) else f"a {type(value).__name__}"


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


class ModuleOptimizer:
    """The module's ``configure_optimizers`` for client trips of ``local``'s length on clients of ``sizes``
    examples (module docstring): :meth:`configured` every trip, :meth:`check_schedulers` once before any."""

    def __init__(self, module: nn.Module, task: Any, local: LocalTraining, sizes: np.ndarray):
        self.module, self.task, self.local, self._sizes = module, task, local, sizes
        self.schedulers: list[tuple[str, str, int]] = []  # (class, interval, frequency) of the module's own
        self.left_out: list[str] = []  # the module's lr schedulers left out by task.lr_scheduler=off (configured)

    def configured(self) -> tuple[torch.optim.Optimizer, list[Any]]:
        """A fresh optimizer and its scheduler configs from the module's configure_optimizers (every
        form Lightning accepts); what a trip cannot step is refused in one line."""
        from lightning.fabric.utilities.exceptions import MisconfigurationException
        from lightning.pytorch.core.optimizer import _configure_optimizers, _configure_schedulers_automatic_opt

        name = f"{type(self.module).__qualname__}.configure_optimizers"
        off = self.task.cfg.lr_scheduler == "off"
        fabric = self.module._fabric
        try:  # (called every trip: the hint, the module's arguments, is only written out where it raised)
            if off:  # what it reads of self.trainer to size a scheduler left out (_SizedFit)
                self.module._fabric = _SizedFit(fabric, *self.longest_trip())
            returned = self.module.configure_optimizers()
        except Exception as error:
            read = trainer_read(error)
            arguments = {k: v for k, v in self.task.cfg.module.items() if k != "_target_"}
            raised = user_error(self.module, "configure_optimizers", error,
                                self._trainer_advice(read, off) if read is not None else
                                f"(task.module's arguments: {arguments})" if arguments else "")
            if raised is error:
                raise
            raise raised from error
        finally:
            self.module._fabric = fabric
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
        if off:  # left out: the optimizer as configured (_unscheduled)
            schedulers = [s.get("scheduler") if isinstance(s, dict) else s for s in schedulers]
            self.left_out = list(dict.fromkeys(type(s).__name__ for s in schedulers))
            _unscheduled(optimizers[0], schedulers)
            return optimizers[0], []
        try:
            configs = _configure_schedulers_automatic_opt(schedulers, monitor)
        except MisconfigurationException as error:
            raise ConfigError(f"{name}: {str(error).splitlines()[0]}") from None
        monitored = next((config for config in configs if config.monitor is not None), None)
        if monitored is not None:
            raise ConfigError(self._monitored(monitored))
        return optimizers[0], configs

    def longest_trip(self) -> tuple[int, int]:
        """The longest trip's steps and local epochs, over the clients."""
        sizes = np.asarray(self._sizes, dtype=np.int64)
        steps = self.local.num_steps(sizes)
        return int(steps.max()), int((-(-steps // self.local.batches_per_epoch(sizes))).max())

    def _trainer_advice(self, read: str, off: bool) -> str:
        """What to do where configure_optimizers reads ``read`` of self.trainer (:func:`user_error` says why not)."""
        steps, epochs = self.longest_trip()
        fewest = int(self.local.num_steps(np.asarray(self._sizes, dtype=np.int64)).min())
        sized = not off and read.rsplit(".", 1)[-1] in SIZED_FIT
        return (f"here a trip has {fewest} to {steps} steps in at most {epochs} epoch(s); give what it sizes as an "
                f"argument of the module's (for OneCycleLR, total_steps of at least {steps})"
                + (", or run the module without its lr scheduler with task.lr_scheduler=off" if sized else ""))

    def _monitored(self, config: Any) -> str:
        """The refusal of a scheduler that monitors a metric (ReduceLROnPlateau): why it cannot act in a trip,
        and the working option."""
        metric, kind = config.monitor, type(config.scheduler).__name__
        validation = {re.sub(r"_(step|epoch)$", "", key) for key in self.task.last_validation}
        if re.sub(r"_(step|epoch)$", "", metric) in validation or metric.startswith(("val", "valid", "test")):
            why = ("a validation metric, which no client trip computes (fl_bench validates the global model on the "
                   "server, between trips)")
        else:
            epochs, patience = self.longest_trip()[1], getattr(config.scheduler, "patience", None)
            never = patience is not None and epochs <= patience
            why = (f"to act when it stops improving over epochs, but each trip starts a fresh scheduler and trains "
                   f"{epochs} local epoch(s) (algorithm.local_epochs={self.local.epochs})"
                   + (f", no more than its patience of {patience}, so it could never act" if never else "")
                   + ", and fl_bench steps no lr scheduler on a metric")
        return (f"{type(self.module).__qualname__}'s lr scheduler {kind} monitors {metric!r}, {why}: run the module "
                f"without it with task.lr_scheduler=off (trips step its optimizer at its configured lr; for an lr that "
                f"decays across trips, algorithm.lr_decay)")

    def check_schedulers(self, horizon: int = 10_000) -> None:
        """Build the module's optimizer once, before any trip (what cannot step stops here), and step its
        schedulers through the longest trip as a trip steps them: one that never moves the lr before the
        trip's last step, but would within ``horizon`` steps of its interval (a fit's), is refused, as it
        would do nothing here (each trip starts a fresh optimizer and scheduler). One that never moves it
        (StepLR with gamma 1) is left alone: it does nothing anywhere."""
        optimizer, configs = self.configured()
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
                        step_schedulers(configs, interval, tick)
                    acted = acted or moved()
            later = False
            for interval, count in ticks.items():  # beyond a trip: what a longer fit would have seen
                for tick in range(count + 1, max(count, horizon) + 1):
                    try:
                        step_schedulers(configs, interval, tick)
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
                              f"{self.local.epochs}); let it act within a trip (interval step, more local epochs), run "
                              f"the module without it with task.lr_scheduler=off (its optimizer at its configured lr), "
                              f"or decay the lr across trips with algorithm.lr_decay")


def step_schedulers(configs: Sequence[Any], interval: str, count: int, step: Any = None) -> None:
    """Step the schedulers of ``interval`` whose ``frequency`` divides ``count`` (Lightning's rule), or
    give them to ``step`` (the module's lr_scheduler_step)."""
    for config in configs:
        if config.interval == interval and count % config.frequency == 0:
            if step is None:
                config.scheduler.step()
            else:
                step(config.scheduler, None)
