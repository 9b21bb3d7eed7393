"""The trainer of a LightningModule task's client trips (``task=lightning``): each trip calls the
module's own ``training_step`` on each minibatch of the client's data, in the order of the trip's
minibatch plan (fl_bench.clients.trainer; ``task.drop_last`` leaves out each epoch's short last batch,
by default for a module with BatchNorm layers, which cannot train on a batch of one), and steps:

- with the optimizer (and scheduler) its ``configure_optimizers`` returns, created afresh for every
  trip (a client starts from the model it downloaded, with no optimizer state), under algorithms
  whose client rule is plain SGD (FedBuff, FedAvg and its family, FedAsync, FedStaleWeight). Its
  schedulers step as the Trainer steps them, within the trip (interval epoch: at the end of each local
  epoch; step: after each step; every ``frequency``), and start afresh with it; one that would never
  change the lr within a trip is refused (across trips the lr moves with ``algorithm.lr_decay``), as is
  one that monitors a metric (fl_bench steps none on a metric); ``task.lr_scheduler=off`` leaves the
  schedulers out (fl_bench.clients.lightning_optimizers), and trips step the optimizer at its
  configured lr.
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

import logging
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fl_bench.clients.lightning_hooks import (call_hook, changed_attributes, clip_gradient_list, defines, overrides,
                                              refuse_callbacks, restore_attributes, user_code, user_error)
from fl_bench.clients.lightning_optimizers import ModuleOptimizer, step_schedulers
from fl_bench.clients.lightning_task import LightningTask, flat_buffers, load_buffers
from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.trainer import ClientTrainer, views
from fl_bench.contracts import Broadcast
from fl_bench.data import FederatedData
from fl_bench.errors import ConfigError

logger = logging.getLogger(__name__)


# The hooks a trip calls where the module has them (lightning_hooks.HOOKS says when): LightningModule's own are
# empty, or do what the trip does itself (optimizer.step, zero_grad, Fabric's backward), so a trip calls only those
# the module overrides (by its class or on the instance): each call of an empty one cost a few microseconds.
TRIP_HOOKS = ("on_fit_start", "on_train_start", "on_train_epoch_start", "on_train_batch_start", "optimizer_step",
              "on_before_zero_grad", "optimizer_zero_grad", "on_before_backward", "backward", "on_after_backward",
              "on_before_optimizer_step", "configure_gradient_clipping", "lr_scheduler_step", "on_train_batch_end",
              "on_train_epoch_end", "on_train_end", "on_fit_end")
# Those that take (or act on) the module's optimizer: refused where trips step with the algorithm's rule
OPTIMIZER_HOOKS = ("optimizer_step", "on_before_zero_grad", "optimizer_zero_grad", "backward", "on_before_optimizer_step",
                   "configure_gradient_clipping", "lr_scheduler_step")
_TRIP_HOOK_SET = frozenset(TRIP_HOOKS)
_CLASS_HOOKS: dict[type, frozenset[str]] = {}  # by module class: walking the hooks every trip cost 5 µs


def _hooks_defined(module: nn.Module) -> frozenset[str]:
    """The trip hooks that do something: those the module's class overrides (LightningModule's are empty, or
    the trip's own work), and those set on the instance."""
    from lightning import LightningModule

    cls = type(module)
    found = _CLASS_HOOKS.get(cls)
    if found is None:
        found = _CLASS_HOOKS[cls] = frozenset(hook for hook in TRIP_HOOKS
                                              if getattr(cls, hook) is not getattr(LightningModule, hook))
    own = vars(module)
    return found if own.keys().isdisjoint(_TRIP_HOOK_SET) else found | _TRIP_HOOK_SET.intersection(own)


def _batch_output(loss: torch.Tensor | None, output: Any) -> dict[str, Any]:
    """What lightning.Trainer hands on_train_batch_end as ``outputs``: the loss detached and the other keys
    of a dict the step returned; {} where it returned None (automatic optimization's ClosureResult)."""
    if loss is None:
        return {}
    extra = {key: value for key, value in output.items() if key != "loss"} if isinstance(output, dict) else {}
    return {"loss": loss.detach().clone(), **extra}


class _TripStrategy:
    """What a trip's optimizer, as the module's optimizer_step gets it (a LightningOptimizer), steps through:
    ``optimizer.step(closure)`` runs the closure, then the hooks and clipping after it and the optimizer's
    step at the algorithm's lr factor (LightningClientTrainer._after_closure), as the Trainer's precision
    plugin does."""

    def __init__(self, trainer: "LightningClientTrainer"):
        self.trainer = trainer

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Any, model: Any = None, **kwargs: Any) -> Any:
        value = closure()
        self.trainer._after_closure(optimizer)
        return value


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
                 fabric: Any, own_optimizer: bool, precision: str, chunk: int = 256):
        super().__init__(task, data, local, vmap=False, chunk=chunk, update=update, precision=precision)
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
        # the module's self.optimizers(): a trip's optimizer (_optimizer), or under the algorithm's rule an SGD at its lr
        task.optimizer = None if own_optimizer else torch.optim.SGD(self.params, lr=local.lr)
        if own_optimizer and not overrides(self.module, "configure_optimizers"):
            raise ConfigError(f"{type(self.module).__qualname__} has no configure_optimizers: under this algorithm a "
                              f"client trip steps the module's own optimizer; add one (as lightning.Trainer needs)")
        self.module_optimizer = ModuleOptimizer(self.module, task, local, data.sizes)  # (its configure_optimizers)
        self._host: tuple[Any, Any, Any] | None = None  # the host's generator states during trips (_local_sgd)
        self._defined: frozenset[str] = frozenset()  # the trip hooks the module has (_hook), found per trip
        self.batched: Any = None  # fl_bench.clients.lightning_batched.BatchedTrips, where trips train together
        self.why_one_at_a_time: str | None = None  # (choose_batching)
        self.refuse_hooks()
        self._refuse_unread_knobs()
        if own_optimizer:
            self.module_optimizer.check_schedulers()

    def _refuse_unread_knobs(self) -> None:
        """A task knob nothing in this run reads stops it in one line (it would be ignored)."""
        cfg, name = self.task.cfg, type(self.module).__qualname__
        if cfg.lr_scheduler == "off" and not self.own_optimizer:
            raise ConfigError("task.lr_scheduler=off is not allowed here: under this algorithm trips step with its own "
                              "rule at algorithm.client_lr, and the module's configure_optimizers (its schedulers "
                              "included) is not used; leave task.lr_scheduler=on")
        if (cfg.gradient_clip_algorithm is not None and not cfg.gradient_clip_val
                and not defines(self.module, "configure_gradient_clipping")):
            raise ConfigError(f"task.gradient_clip_algorithm={cfg.gradient_clip_algorithm} clips nothing without "
                              f"task.gradient_clip_val (and {name} has no configure_gradient_clipping of its own to "
                              f"read it): set task.gradient_clip_val, or leave the algorithm unset")

    def autocast(self):
        """Fabric's precision context for the module's steps."""
        return self.fabric.autocast()

    def describe(self) -> str:
        """The task and how its trips step, for the run's first lines."""
        how = ("its configure_optimizers' optimizer (algorithm.client_lr is not used)" if self.own_optimizer else
               f"the algorithm's rule at algorithm.client_lr={self.local.lr} (configure_optimizers is not used)")
        schedulers, left_out = self.module_optimizer.schedulers, self.module_optimizer.left_out
        if schedulers:
            kinds = " and ".join(f"{kind} (per {interval})" for kind, interval, _ in schedulers)
            how += (f", its lr scheduler {kinds} acting within each trip and starting afresh with every trip "
                    f"(across trips: algorithm.lr_decay)")
        if self.own_optimizer and self.task.cfg.lr_scheduler == "off":
            how += (f", its lr scheduler {' and '.join(left_out)} left out (task.lr_scheduler=off): the optimizer's "
                    f"configured lr throughout each trip (across trips: algorithm.lr_decay)" if left_out else
                    ", at its configured lr (task.lr_scheduler=off; configure_optimizers returns no lr scheduler)")
        together = (f"; {self.batched.describe()}" if self.batched is not None else
                    f"; trips train one at a time: {self.why_one_at_a_time}" if self.why_one_at_a_time else "")
        return f"{self.task.describe()}; trips step with {how}{together}"

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
        """The buffers a resumed run needs (a checkpoint keeps them), and what the module's on_save_checkpoint
        adds to a dict holding its state_dict, as under lightning.Trainer (lightning_hooks.HOOKS)."""
        state = {"global": self.global_buffers, "clients": self.client_buffers, "trips": self._trip_buffers}
        if defines(self.module, "on_save_checkpoint"):
            checkpoint = {"state_dict": self.module.state_dict()}
            call_hook(self.module, "on_save_checkpoint", checkpoint)
            state["module"] = {key: value for key, value in checkpoint.items() if key != "state_dict"}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the module's on_load_checkpoint gets the dict its on_save_checkpoint filled."""
        self.global_buffers, self.client_buffers, self._trip_buffers = state["global"], state["clients"], state["trips"]
        if defines(self.module, "on_load_checkpoint"):
            call_hook(self.module, "on_load_checkpoint", {"state_dict": self.module.state_dict(), **state.get("module", {})})
            self.task.attributes = None  # (what it set, trips find: LightningTask.trips_begin)

    def choose_batching(self, start: Broadcast, asked: bool) -> None:
        """Whether trips train together (fl_bench.clients.lightning_batched), where ``asked``
        (``vmap_clients``, resolved): the module and the run allow it, and a probe trip trained both ways
        gives one Delta; else one at a time, and :meth:`describe` says why."""
        from fl_bench.clients.lightning_batched import BatchedTrips, why_not_batched

        self.batched, self.why_one_at_a_time = None, None
        if not asked:
            return
        self.why_one_at_a_time = why_not_batched(self)
        if self.why_one_at_a_time is None:
            batched = BatchedTrips(self)
            self.why_one_at_a_time = batched.probe(start, int(np.argmax(self._sizes)))
            self.batched = batched if self.why_one_at_a_time is None else None
        # (contracts.Trainer.vmap: the loop hands a batching trainer every trip started so far, the largest batch)
        self.vmap = self.batched is not None

    def configured_optimizer(self) -> torch.optim.Optimizer:
        """A fresh optimizer from the module's configure_optimizers (refused in one line where a trip cannot
        step it), not set up by Fabric."""
        return self.module_optimizer.configured()[0]

    def train(self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Any = None,
              steps: Sequence[int] | None = None) -> Sequence[torch.Tensor]:
        """As :meth:`ClientTrainer.train`: together (:meth:`choose_batching`), or one at a time."""
        if self.batched is None or len(clients) < 2:
            return self.train_one_at_a_time(starts, clients, seeds, out, steps)
        if out is None:
            out = torch.empty(len(clients), self.upload_size, device=self.device)
        from fl_bench.clients.lightning_batched import NotBatchable, vmap_reason

        try:
            self.batched.train(starts, clients, seeds, out, steps)
        except Exception as error:  # (a step the probe did not meet: this batch, and every later one, alone)
            self.batched = None
            self.why_one_at_a_time = str(error) if isinstance(error, NotBatchable) else vmap_reason(error)
            logger.warning("task=lightning: trips train one at a time from here on: %s", self.why_one_at_a_time)
            return self.train_one_at_a_time(starts, clients, seeds, out, steps)
        return out

    def train_one_at_a_time(self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Any = None,
                            steps: Sequence[int] | None = None) -> Sequence[torch.Tensor]:
        """As :meth:`ClientTrainer.train`, one trip after the other; each trip's buffers start from its
        download (``_trip``)."""
        self._downloads = dict(zip(seeds, starts))
        if out is None:
            out = torch.empty(len(clients), self.upload_size, device=self.device)
        try:
            return self._train_sequential(starts, clients, seeds, out, steps)
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

    def _hook(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the module's hook ``name``, where it has one of its own (``self._defined``, found at the
        start of each trip: LightningModule's are empty), and give what it returns."""
        if name in self._defined:
            try:
                return getattr(self.module, name)(*args, **kwargs)
            except Exception as error:
                raised = user_error(self.module, name, error)
                if raised is error:
                    raise
                raise raised from error
        return None

    def _optimizer(self) -> tuple[torch.optim.Optimizer, list[Any]]:
        """A fresh optimizer and its scheduler configs (:meth:`_configured`), the optimizer set up by
        Fabric's strategy, which steps it (its precision: a GradScaler's step under 16-mixed). Not
        through ``fabric.setup_optimizers``, whose wrapper creates a class for every optimizer (every
        trip) to step it the same way (fl_bench's strategies, single device or DDP, give it no
        callbacks or DeepSpeed engine); the hooks get the optimizer itself, as lightning.Trainer's do."""
        optimizer, configs = self.module_optimizer.configured()
        self.task.optimizer = optimizer = self.fabric.strategy.setup_optimizer(optimizer)  # (self.optimizers())
        return optimizer, configs

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
        """One trip as lightning.Trainer's fit of the module over the trip's minibatches (a trip is a fit of its
        own): its hooks where and in the order the Trainer calls them (lightning_hooks.HOOKS), the module's
        counters within the trip (LightningTask.set_counters), and its Python attributes restored after it."""
        local, params, task, module = self.local, self.params, self.task, self.module
        x, y = self.data.client(client)
        gen = torch.Generator().manual_seed(seed)  # augmentation draws
        per_epoch = int(local.batches_per_epoch(len(y)))
        # y_0's views: for FedProx's term and the algorithm's rule (not made for a plain trip: 30 µs)
        anchors = views(start, self.shapes) if self.update.prox_mu or not self.own_optimizer else None
        state_views = {k: views(v, self.shapes) for k, v in state.items()}
        self._start_buffers(client, self._downloads[seed])
        task.metrics.trip = seed
        defined = self._defined = _hooks_defined(module)
        kept = task.trips_begin()  # its attributes, restored after the trip (a client keeps none between trips)
        task.trainer_view()
        task.set_counters(0, 0)
        optimizer, schedulers = self._optimizer() if self.own_optimizer else (None, [])
        self._hook("on_fit_start")
        stepper = self._lr_scheduler_step if "lr_scheduler_step" in defined else None
        clip, algorithm = task.cfg.gradient_clip_val, task.cfg.gradient_clip_algorithm
        self._anchors, self._clip = anchors, (clip or 0.0) if "configure_gradient_clipping" not in defined else None
        self._hook("on_train_start")
        last = len(counts) - 1
        for step, count in enumerate(counts):
            batch_idx, epoch = step % per_epoch, step // per_epoch
            task.set_counters(epoch, step)
            if batch_idx == 0:
                self._hook("on_train_epoch_start")
            picked = rows[step, :count]
            if self.data.reads is not None:  # a Dataset that augments in __getitem__: this batch's own draw
                offset = int(self.data.offsets[client])
                inputs = self.data.reads(offset + picked.cpu().numpy()).to(x.device)
            else:
                inputs = x[picked]
            batch = task.batch(inputs, y[picked], True, gen)
            if "on_train_batch_start" in defined:
                self._batch_start(batch, batch_idx)
            if optimizer is not None:
                self._scale = local.step_lr(count, version) / local.lr  # LR-norm's n/B and the lr schedule's factor
                loss, output = self._optimizer_step(optimizer, batch, batch_idx, epoch)
            else:
                with self.autocast():
                    loss, output = task.training_loss(batch, batch_idx)
                if loss is not None:
                    self._hook("on_before_backward", loss)
                    grads = list(torch.autograd.grad(loss, params))
                    self._hook("on_after_backward")
                    with torch.no_grad():
                        if clip:  # task.gradient_clip_val, as the Trainer clips
                            clip_gradient_list(grads, clip, algorithm)
                        if step == 0 and first_gradient is not None:
                            torch._foreach_copy_(views(first_gradient, self.shapes), grads)
                        self.update.step(params, grads, anchors, local.step_lr(count, version), state_views)
            task.set_counters(epoch, step + 1)
            # the Trainer's order: step schedulers, at an epoch's last step its epoch schedulers, on_train_batch_end
            step_schedulers(schedulers, "step", step + 1, stepper)
            ends_epoch = batch_idx == per_epoch - 1 or step == last
            if ends_epoch:
                step_schedulers(schedulers, "epoch", epoch + 1, stepper)
            if "on_train_batch_end" in defined:
                self._hook("on_train_batch_end", _batch_output(loss, output), batch, batch_idx)
            if ends_epoch:
                self._hook("on_train_epoch_end")
                task.metrics.end_epoch()  # (after the hook: what it logs on_epoch counts for this epoch)
        task.set_counters(last // per_epoch + 1, len(counts))
        self._hook("on_train_end")
        self._hook("on_fit_end")
        task.set_counters(0, 0)
        if optimizer is not None:  # (the last step's gradients: no later trip sees them; zero_grad cost 10 µs)
            for p in params:
                p.grad = None
        changed = changed_attributes(module, kept)
        if changed:
            restore_attributes(module, kept, changed)
        self._end_buffers(client, seed)

    def _batch_start(self, batch: Any, batch_idx: int) -> None:
        """on_train_batch_start, whose -1 (skip the rest of the epoch, under the Trainer) is refused."""
        response = self._hook("on_train_batch_start", batch, batch_idx)
        if type(response) is int and response == -1:
            raise ConfigError(f"{type(self.module).__qualname__}.on_train_batch_start returned -1, with which "
                              f"lightning.Trainer skips the rest of the epoch: a client trip trains the steps its plan "
                              f"gives (its time and FLOPs count them); return None, and skip a batch by returning None "
                              f"from training_step")

    def _optimizer_step(self, optimizer: torch.optim.Optimizer, batch: Any, batch_idx: int,
                        epoch: int) -> tuple[torch.Tensor | None, Any]:
        """One step of the module's optimizer as the Trainer's automatic optimization takes it: the module's
        optimizer_step with the closure (zero_grad hooks, training_step, backward), where it has one; else the
        closure, :meth:`_after_closure` and the step. Gives training_step's loss and output."""
        self._result = None
        if "optimizer_step" not in self._defined:
            self._closure(optimizer, batch, batch_idx, epoch)
            self._after_closure(optimizer)
            return self._result

        def optimizer_closure() -> torch.Tensor | None:
            loss, _ = self._closure(optimizer, batch, batch_idx, epoch)
            return None if loss is None else loss.detach()

        self._hook("optimizer_step", epoch, batch_idx, self._lightning_optimizer(optimizer), optimizer_closure)
        if self._result is None:
            raise ConfigError(f"{type(self.module).__qualname__}.optimizer_step did not run optimizer_closure: it runs "
                              f"training_step and backward, as under lightning.Trainer; call "
                              f"optimizer.step(closure=optimizer_closure)")
        return self._result

    def _closure(self, optimizer: torch.optim.Optimizer, batch: Any, batch_idx: int,
                 epoch: int) -> tuple[torch.Tensor | None, Any]:
        """The Trainer's closure: training_step, the gradients zeroed (with their hooks), and, where it gave a
        loss, backward (FedProx's (mu/2)||y - y_0||^2 added to the loss) between its hooks."""
        defined = self._defined
        with self.autocast():
            loss, output = self.task.training_loss(batch, batch_idx)
        if "on_before_zero_grad" in defined:
            self._hook("on_before_zero_grad", optimizer)
        if "optimizer_zero_grad" in defined:
            self._hook("optimizer_zero_grad", epoch, batch_idx, optimizer)
        elif type(optimizer).zero_grad is torch.optim.Optimizer.zero_grad:  # its work, without its profiler record (10 µs)
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            optimizer.zero_grad()
        if loss is not None:
            objective = loss
            if self.update.prox_mu:  # FedProx: (mu/2)||y - y_0||^2 in the objective
                objective = loss + 0.5 * self.update.prox_mu * sum((p - a).pow(2).sum()
                                                                   for p, a in zip(self.params, self._anchors))
            self._hook("on_before_backward", objective)
            if "backward" in defined:
                self._hook("backward", objective)
            else:
                self.fabric.backward(objective)
            self._hook("on_after_backward")
        self._result = loss, output
        return self._result

    def _after_closure(self, optimizer: torch.optim.Optimizer) -> None:
        """After the closure, as the Trainer's precision plugin: on_before_optimizer_step, clipping
        (:meth:`_clip_step`), and, where training_step gave a loss, the optimizer's step (Fabric's strategy:
        its precision) at the lr times the algorithm's factor for this step (``self._scale``)."""
        stepped = self._result is not None and self._result[0] is not None
        scale, lrs = self._scale, None
        if stepped and scale != 1.0:  # (the module's scheduler or optimizer_step set the lr: scaled for this step alone)
            lrs = [group["lr"] for group in optimizer.param_groups]
            for group, lr in zip(optimizer.param_groups, lrs):
                group["lr"] = lr * scale
        self._hook("on_before_optimizer_step", optimizer)
        if self._clip is None or self._clip:
            self._clip_step(optimizer)
        if stepped:
            with user_code(self.module, "configure_optimizers' optimizer step"):
                self.fabric.strategy.optimizer_step(optimizer)
        if lrs is not None:
            for group, lr in zip(optimizer.param_groups, lrs):
                group["lr"] = lr

    def _clip_step(self, optimizer: torch.optim.Optimizer) -> None:
        """The module's configure_gradient_clipping with the Trainer's settings (task.gradient_clip_val and
        task.gradient_clip_algorithm), or, without one, its clip_gradients at task.gradient_clip_val."""
        view = self.module._fabric
        if self._clip is None:
            self._hook("configure_gradient_clipping", optimizer, gradient_clip_val=view.gradient_clip_val,
                       gradient_clip_algorithm=view.gradient_clip_algorithm)
        else:
            call_hook(self.module, "clip_gradients", optimizer, gradient_clip_val=view.gradient_clip_val,
                      gradient_clip_algorithm=view.gradient_clip_algorithm)

    def _lightning_optimizer(self, optimizer: torch.optim.Optimizer) -> Any:
        """The optimizer as lightning.Trainer hands it to optimizer_step: a LightningOptimizer, whose
        ``step(closure)`` goes through :class:`_TripStrategy` (kept across trips while the optimizer's class is
        the same: Lightning makes a class for each one)."""
        from lightning.pytorch.core.optimizer import LightningOptimizer

        wrapped = getattr(self, "_wrapped", None)
        if wrapped is None or type(wrapped._optimizer) is not type(optimizer):
            wrapped = self._wrapped = LightningOptimizer(optimizer)
            wrapped._strategy = _TripStrategy(self)
        wrapped._optimizer = optimizer
        return wrapped

    def _lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """The module's lr_scheduler_step, as the Trainer calls it for each scheduler step."""
        self._hook("lr_scheduler_step", scheduler, metric)

    def refuse_hooks(self) -> None:
        """What trips cannot honour of the module's hooks, refused in one line: callbacks from its
        configure_callbacks (no lightning.Trainer runs them), and, where trips step with the algorithm's rule,
        hooks that take the module's optimizer (there is none), naming the first it overrides."""
        refuse_callbacks(self.module)
        hook = next((hook for hook in OPTIMIZER_HOOKS if hook in _hooks_defined(self.module)), None)
        if not self.own_optimizer and hook is not None:
            raise ConfigError(f"{type(self.module).__qualname__} overrides {hook}, which fl_bench cannot call under "
                              f"this algorithm: its client trips step with the algorithm's rule at "
                              f"algorithm.client_lr on the module's gradients, not with the module's optimizer; use an "
                              f"algorithm whose clients step the module's optimizer (fedavg, fedbuff, fedprox, ...), or "
                              f"leave {hook} out")
