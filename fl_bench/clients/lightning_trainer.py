"""The trainer of a LightningModule task's client trips (``task=lightning``): each trip calls the
module's own ``training_step`` on each minibatch of the client's data, in the order of the trip's
minibatch plan (fl_bench.clients.trainer; ``task.drop_last`` leaves out each epoch's short last batch,
by default for a module with BatchNorm layers, which cannot train on a batch of one), and steps:

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

Lightning Fabric sets the module up (device, precision). The train hooks that make sense for one trip
are called around it: ``on_train_start`` / ``on_train_end`` per trip, ``on_train_epoch_start`` /
``on_train_epoch_end`` per local epoch, ``on_train_batch_start`` / ``on_train_batch_end``,
``on_before_backward``, ``on_after_backward``, ``on_before_optimizer_step`` and ``on_before_zero_grad``
per step. A trip's random draws (dropout, and the augmentation of a user's Dataset whose items differ
between reads, whose batches it reads afresh: ``FederatedData.reads``) come from its seed.

Buffers (BatchNorm's running statistics), ``task.buffers``: ``federated`` (default, FedAvg as usually
run) sends the global buffers with the model (counted in their own dtypes, both ways), each trip
starts from those of the version it downloaded, and after each server step the global buffers are the
mean of the consumed trips' final buffers, weighted by each upload's share of the step where the algorithm states it (the FedBuff
family, FedStaleWeight) and by its examples otherwise; integer buffers (``num_batches_tracked``) take
the weighted mean rounded. ``local`` keeps each client's own (FedBN): a trip starts from its
client's last, and evaluation uses their examples-weighted mean. ``reset``: every trip starts from the
module's initial buffers and evaluation sees what the last trip left. The buffers are part of the
checkpoint and of ``model.pt``. They travel through the trainer's hooks of fl_bench.contracts.Trainer.
"""

from __future__ import annotations

import inspect
import random
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fl_bench.clients.lightning_task import LightningTask, flat_buffers, load_buffers, overrides, user_code, user_error
from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.trainer import ClientTrainer, views
from fl_bench.contracts import Broadcast
from fl_bench.data import FederatedData
from fl_bench.errors import ConfigError


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


def _gather_by_seed(mine: dict[int, torch.Tensor], seeds: list[int], width: int, gather: Any) -> dict[int, torch.Tensor]:
    """Every process's {seed: buffers} for the trips ``seeds`` (each trained by one process): rows in
    ``seeds`` order, zeros where this process did not train the trip, summed over processes."""
    rows = torch.zeros(len(seeds), width, dtype=torch.float64)
    for i, seed in enumerate(seeds):
        if seed in mine:
            rows[i] = mine[seed]
    total = gather(rows).sum(0)
    return dict(zip(seeds, total.unbind(0)))


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
        if own_optimizer and not overrides(self.module, "configure_optimizers"):
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
                raised = user_error(self.module, name, error)
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
            raised = user_error(self.module, "configure_optimizers", error,
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
