"""A user's LightningModule's client trips trained together (``task=lightning``, ``vmap_clients``): the
module's own ``training_step`` over stacked per-trip parameters, ``torch.func.vmap`` of
``torch.func.functional_call``, as the built-in task's batched path (fl_bench.clients.trainer), so that
a small module is not paid for one trip at a time.

Each trip follows its own minibatch plan (the one the one-at-a-time path walks). At each local step the
trips still training are grouped by what their ``training_step`` sees besides the data (the batch's
size, ``batch_idx``, the local epoch): usually one group, one vmapped call. The gradients of the summed
losses are each trip's own; the step is

- the module's optimizer, rebuilt over the stacked parameters with the groups and settings its
  ``configure_optimizers`` gave: an optimizer whose update is elementwise (SGD, Adam, ...) moves each
  trip's row as it moves that trip's own parameters; where the trips' lrs differ at a step (LR-norm's
  n/B, ``algorithm.lr_decay`` by the version downloaded), each row's move is scaled by its own factor
  (such an optimizer's move is linear in its lr);
- or the algorithm's rule at ``algorithm.client_lr``, per trip (as the built-in batched path).

What the step logs is kept per trip and handed to the module's ``self.log`` trip by trip, step by step,
after the batch (so ``task_metrics.csv`` sums what the one-at-a-time path sums); a trip's Delta is read
out at its last step. Where the module cannot be batched so (a hook that needs one client, buffers a trip
updates in place, random draws, a scheduler, an optimizer that is not elementwise, data-dependent control
flow, ...), :func:`why_not_batched` and :meth:`BatchedTrips.probe` say why in one line and the trips train
one at a time. The probe also trains one trip both ways and compares the Deltas.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_map

from fl_bench.clients.lightning_hooks import (HOOKS, TRIP, attribute_snapshot, changed_attributes, defines,
                                              restore_attributes)
from fl_bench.clients.trainer import minibatch_plan, views
from fl_bench.contracts import Broadcast

# Optimizers whose update of a parameter reads only that parameter's own elements, gradient and state
# (and a step count): over stacked per-trip rows each row moves as that trip's parameters would alone.
ELEMENTWISE = ("SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta")
# The trip hooks a batched step cannot call per trip (one call steps many trips): a module that overrides one
# trains one trip at a time. (configure_optimizers is called once per batch of trips, training_step vmapped.)
PER_TRIP_HOOKS = tuple(hook for hook, (place, _) in HOOKS.items()
                       if place == TRIP and hook not in ("configure_optimizers", "training_step"))
IGNORED = -100  # cross_entropy's and nll_loss's ignore_index: a target they leave out of the loss and its mean
TOLERANCE = 1e-4  # the probe's trip, batched against alone: largest |difference| / largest |Delta|
CHECKED = 256  # training examples the padding check steps on
ONE_BY_ONE = 3  # groups of at most this many trips step trip by trip (vmap's fixed cost is about 4 plain steps)


class NotBatchable(Exception):
    """Why a batch of trips cannot train together (the trainer trains them one at a time)."""


def why_not_batched(trainer: Any) -> str | None:
    """What in the module or the run keeps its trips from training together, in a few words; None: nothing
    (the probe may still find something: :meth:`BatchedTrips.probe`)."""
    module, update = trainer.module, trainer.update
    hooks = [hook for hook in PER_TRIP_HOOKS if defines(module, hook)]
    if hooks:
        return f"its {hooks[0]} hook is called per trip"
    if any(True for _ in module.buffers()):
        return "its buffers (BatchNorm's running statistics) are updated in place by each trip"
    if trainer.task.cfg.gradient_clip_val:
        return "task.gradient_clip_val clips each trip's gradients by their own norm"
    if trainer.data.reads is not None:
        return "its Dataset draws every read afresh (augmentation), per trip"
    transform = trainer.task.transform
    if transform is not None and (transform.random_flip or transform.crop_size is not None):
        return "the dataset's random augmentation is drawn per trip"
    if update.moving_keys or update.start_gradient:
        return "the algorithm's client rule keeps state of its own through a trip"
    if trainer.own_optimizer:
        if trainer.module_optimizer.schedulers:
            return "its lr scheduler steps one optimizer per trip"
        if trainer.precision == "16-mixed":
            return "precision=16-mixed scales each trip's loss"
        optimizer = type(trainer.configured_optimizer())
        name = optimizer.__name__
        if name not in ELEMENTWISE or getattr(torch.optim, name, None) is not optimizer:
            return f"its optimizer {name} is not one whose update is elementwise ({', '.join(ELEMENTWISE)})"
    return None


class _TrainingStep(nn.Module):
    """The module's ``training_step`` as a forward, for ``functional_call`` (parameters named ``module.*``)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, batch: Any, batch_idx: int) -> Any:
        return self.module.training_step(batch, batch_idx)


class _Recorder:
    """Collects what one vmapped ``training_step`` logs: (call, name, value, options), values as tensors
    (batched per trip) or plain numbers; a torchmetrics Metric cannot be updated per trip in one call."""

    def __init__(self):
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []

    def log(self, name: str, value: Any, **options: Any) -> None:
        self._check(name, value)
        self.calls.append((name, value, options))

    def log_dict(self, dictionary: Any, **options: Any) -> None:
        for name, value in dictionary.items():
            self.log(name, value, **options)

    @staticmethod
    def _check(name: str, value: Any) -> None:
        if not isinstance(value, (torch.Tensor, int, float)):
            raise NotBatchable(f"it logs {name!r} as a {type(value).__name__} (a torchmetrics Metric is updated "
                               f"in place per trip)")


class BatchedTrips:
    """Trains a :class:`fl_bench.clients.lightning_trainer.LightningClientTrainer`'s trips together
    (module docstring)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.step_module = _TrainingStep(trainer.module)
        self.names = [f"module.{name}" for name, p in trainer.module.named_parameters() if p.requires_grad]
        from torch.func import functional_call, vmap

        # (untying shared weights costs a walk of the module per call: only where the module shares some)
        module = trainer.module
        tied = len(list(module.named_parameters(remove_duplicate=False))) != len(list(module.parameters()))

        def training_step(params: dict[str, torch.Tensor], batch: Any, batch_idx: int, recorder: _Recorder) -> Any:
            output = functional_call(self.step_module, params, (batch, batch_idx), tie_weights=tied)
            loss = output.get("loss") if isinstance(output, dict) else output
            if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
                raise NotBatchable("its training_step returns no scalar loss on every batch")
            values = tuple(value if isinstance(value, torch.Tensor) else torch.tensor(float(value), dtype=torch.float64)
                           for _, value, _ in recorder.calls)  # (a number as logged: float64)
            return loss, values

        self.pad = False  # short batches padded with ignored targets (the probe decides)
        self._functional = training_step
        self._vmap = vmap

    def autocast(self) -> Any:
        """The module's precision context (Fabric's), or none at full precision (entering one costs)."""
        return contextlib.nullcontext() if self.trainer.precision == "32-true" else self.trainer.autocast()

    def describe(self) -> str:
        """How the trips train, for the run's first lines."""
        short = ("a short batch padded to its group's size with targets the loss leaves out (ignore_index "
                 f"{IGNORED}: the probe found the step unchanged by them)" if self.pad else
                 "trips of different batch sizes in calls of their own")
        return f"trips train together, batched over clients (vmap_clients; {short})"

    # ------------------------------------------------------------------ start-up
    def probe(self, start: Broadcast, client: int) -> str | None:
        """Train one trip of ``client`` batched (beside a second copy) and alone; None where both give the
        same Delta (to float tolerance) and the module's attributes are as they were; else why not."""
        trainer, module = self.trainer, self.trainer.module
        before = attribute_snapshot(module)
        seeds = [0x5EED_0001 + i for i in range(ONE_BY_ONE + 1)]  # (enough trips for a vmapped call)
        out = torch.empty(len(seeds), trainer.upload_size, device=trainer.device)
        generator = torch.get_rng_state()
        try:
            self.train([start] * len(seeds), [client] * len(seeds), seeds, out, keep_logs=False)
        except NotBatchable as why:
            return str(why)
        except Exception as error:  # what vmap cannot batch (random draws, data-dependent control flow, ...)
            return vmap_reason(error)
        finally:
            trainer.load(start.params)
            drew = not torch.equal(generator, torch.get_rng_state())
            torch.set_rng_state(generator)
            changed = sorted(changed_attributes(module, before))
            if changed:  # (the probe's trips leave the module as they found it)
                restore_attributes(module, before, changed)
        if drew:  # (a trip's draws come from its own seed: batched, they would come from the batch's)
            return vmap_reason(RuntimeError("randomness"))
        if changed:
            return f"its training_step changes the module's attribute {changed[0]} (one value for many trips)"
        alone = torch.empty(1, trainer.upload_size, device=trainer.device)
        self.pad = self._padding_leaves_the_step()
        trainer.train_one_at_a_time([start], [client], seeds[:1], alone)
        trainer.task.metrics.discard()
        trainer.load(start.params)
        scale = float(alone.abs().max())
        difference = float((alone[0] - out[0]).abs().max())
        if difference > TOLERANCE * max(scale, 1e-12):
            return (f"its training_step gives a trip batched another Delta than alone (largest difference "
                    f"{difference:.3g} of {scale:.3g})")
        return None

    def _padding_leaves_the_step(self) -> bool:
        """Whether a short batch can be padded to its group's size (the group's trips then take one call):
        the task's batches are (inputs, integer targets) and the module's step on a few of ``client``'s
        examples gives the same loss, gradients and logged values with three more examples whose targets
        are ``IGNORED``, as cross-entropy's default ignore_index leaves them out."""
        trainer = self.trainer
        # Many examples (not one client's few), so that a statistic the module computes over the batch's rows
        # (an accuracy by hand) is not zero on both sides by chance.
        x, y = trainer.data.x[:CHECKED], trainer.data.y[:CHECKED]
        if trainer.task.cfg.batch != "pair" or y.is_floating_point() or len(y) < 2:
            return False
        n = len(y)
        stacked = [p.detach().unsqueeze(0).requires_grad_() for p in trainer.params]
        padded_y = torch.cat([y[:n], torch.full((3,), IGNORED, dtype=y.dtype, device=y.device)])
        padded_x = torch.cat([x[:n], x[:1].expand(3, *x.shape[1:])])
        results = []
        for inputs, targets in ((x[:n], y[:n]), (padded_x, padded_y)):
            try:
                loss, values, _ = self._step(stacked, inputs.unsqueeze(0), targets.unsqueeze(0), 0)
                grads = torch.autograd.grad(loss.sum(), stacked)
            except Exception:  # (a step that refuses the ignored targets: the trips are grouped by batch size)
                return False
            results.append([loss.detach(), *[v.detach().float() for v in values], *grads])
        return all(a.shape == b.shape and torch.allclose(a, b, rtol=TOLERANCE, atol=1e-7)
                   for a, b in zip(*results))

    # ------------------------------------------------------------------ training
    def train(self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor],
              steps: Sequence[int] | None = None, keep_logs: bool = True) -> None:
        """Trip i's upload (Delta) into ``out[i]``, as ``LightningClientTrainer.train``; cohorts of one lr
        scale (the module's optimizer) or all at once (the algorithm's rule), ``trainer.chunk`` at most."""
        trainer, local = self.trainer, self.trainer.local
        plan = minibatch_plan(trainer.data.sizes[clients], seeds, local, steps)
        logs: list[list[tuple]] = [[] for _ in clients]  # per trip: ("log", name, value, options) | ("epoch",)
        kept = trainer.task.trips_begin()  # the module's attributes as trips find them
        for s in range(0, len(clients), trainer.chunk):
            self._train_together(np.arange(s, min(s + trainer.chunk, len(clients))), starts, clients, plan, out, logs)
        changed = changed_attributes(trainer.module, kept)
        if changed:  # (a step the probe did not meet: many trips saw one value; the trainer retrains them one by one)
            restore_attributes(trainer.module, kept, changed)
            raise NotBatchable(f"its training_step changes the module's attribute {sorted(changed)[0]} (one value for "
                               f"many trips)")
        if keep_logs and any(event[0] == "log" for events in logs for event in events):  # (else end_epoch has nothing)
            self._replay(logs, seeds)

    def _train_together(self, part: np.ndarray, starts: Sequence[Broadcast], clients: list[int], plan: Any,
                        out: Sequence[torch.Tensor], logs: list[list[tuple]]) -> None:
        """The trips ``part`` step together: per local step, one vmapped ``training_step`` per group of the
        trips still training, then one optimizer (or rule) step for all; a trip's Delta is read out at its
        last step (the rows of finished trips may move after it: nothing reads them)."""
        trainer = self.trainer
        local, task, data, update = trainer.local, trainer.task, trainer.data, trainer.update
        device = trainer.device
        order = part[np.argsort(-plan.steps[part], kind="stable")]  # longest first: the active trips are a prefix
        b, steps = len(order), plan.steps[order]
        last = int(steps[0])
        chosen = np.asarray(clients)[order]
        per_epoch = np.asarray(local.batches_per_epoch(data.sizes[chosen]))
        order_t = torch.as_tensor(order)
        mask = plan.mask[order_t][:, :last]  # [b, S, B]
        counts = mask.sum(-1).numpy()  # [b, S] examples per step
        rows = (plan.rows[order_t][:, :last] + torch.as_tensor(data.offsets[chosen])[:, None, None]).to(device)
        targets = data.y[rows]
        if self.pad:  # a short batch's missing examples (the trip's first), with a target the loss leaves out
            targets.masked_fill_(~mask.to(device), IGNORED)
        origin = torch.stack([starts[i].params for i in order])  # y_0 of each trip, [b, P]
        anchors = views(origin, trainer.shapes)
        state = {k: views(torch.stack([starts[i].state[k] for i in order]), trainer.shapes) for k in update.state_keys}
        configured = trainer.configured_optimizer() if trainer.own_optimizer else None
        params = [a.clone().requires_grad_() for a in anchors]  # what steps: a [b, *shape] leaf per parameter
        optimizer, base_lrs = None, []
        if configured is not None:
            optimizer = type(configured)([{**settings, "params": [params[i] for i in members]}
                                          for settings, members in self._groups_of(configured)], **configured.defaults)
            optimizer = trainer.fabric.strategy.setup_optimizer(optimizer)
            base_lrs = [group["lr"] for group in optimizer.param_groups]
        # Per trip and step: its lr (LR-norm's n/B, the schedule's factor; 0 once finished), whether its epoch
        # ends there; per step, how many trips still train.
        t_all = np.arange(last)
        versions = np.asarray([starts[i].version for i in order])
        lrs = np.broadcast_to(local.step_lr(counts, versions[:, None]), (b, last)) * (t_all[None, :] < steps[:, None])
        scales = lrs / local.lr  # what the one-at-a-time path multiplies the optimizer's lr by (float64)
        epoch_ends = ((t_all[None, :] + 1) % per_epoch[:, None] == 0) | (t_all[None, :] == steps[:, None] - 1)
        active_at = np.append((steps[None, :] > t_all[:, None]).sum(1), 0)
        mu = update.prox_mu
        previous = task.optimizer  # what the module's self.optimizers() gives: the optimizer these trips step
        task.optimizer = optimizer or previous
        for t in range(last):
            active = int(active_at[t])
            total = None
            for members, count, batch_idx, epoch in _groups(counts[:active, t], t % per_epoch[:active],
                                                            t // per_epoch[:active], self.pad):
                index = members if isinstance(members, slice) else torch.as_tensor(members, device=device)
                picked = rows[index, t, :count]
                task.set_counters(epoch, t)
                rows_of_params = params if members == slice(0, b) else [p[index] for p in params]  # (a slice's backward
                # fills a tensor of the leaf's size: none where every trip steps)
                loss, values, calls = self._step(rows_of_params, data.x[picked], targets[index, t, :count], batch_idx)
                if calls:
                    for j, row in enumerate(range(b)[members] if isinstance(members, slice) else members):
                        logs[order[row]].extend(("log", name, value[j].detach(), options)
                                                for (name, _, options), value in zip(calls, values))
                if mu and optimizer is not None:  # FedProx: (mu/2)||y - y_0||^2 in the objective
                    loss = loss + 0.5 * mu * sum((p[index] - a[index]).pow(2).flatten(1).sum(1)
                                                 for p, a in zip(params, anchors))
                total = loss.sum() if total is None else total + loss.sum()
            if optimizer is not None:
                total.backward()  # (Fabric's backward is this one where trips batch: no loss scaling, one device)
                self._optimizer_step(optimizer, base_lrs, params, scales[:active, t], active)
            else:
                grads = list(torch.autograd.grad(total, params))
                with torch.no_grad():
                    lr = torch.as_tensor(lrs[:, t], dtype=origin.dtype, device=device)
                    update.step(params, grads, anchors, lr, state)
            for row in np.flatnonzero(epoch_ends[:active, t]):
                logs[order[row]].append(("epoch",))
            first, end = int(active_at[t + 1]), active  # the trips whose last step this was
            if first < end:
                with torch.no_grad():
                    deltas = torch.cat([(a[first:end] - p[first:end]).flatten(1) for a, p in zip(anchors, params)], 1)
                    for k, row in enumerate(range(first, end)):
                        trainer.upload_parts(out[order[row]])[0].copy_(deltas[k])
        task.optimizer = previous

    def _optimizer_step(self, optimizer: torch.optim.Optimizer, base_lrs: list[float], params: list[torch.Tensor],
                        scale: np.ndarray, active: int) -> None:
        """Step the trips' rows with the lr the one-at-a-time path would set, the optimizer's times each active
        trip's ``scale``. One scale for all: the groups' lr times it, as that path. Scales that differ: an
        elementwise optimizer's move is linear in its lr (its state is not: it never reads the lr), so each
        row's move at the optimizer's lr is scaled by its own factor (equal to float rounding); plain SGD's
        move, -lr g, is taken with each row's lr at once."""
        first = float(scale[0])
        uniform = bool((scale == first).all())
        factor = None if uniform else torch.as_tensor(scale, dtype=params[0].dtype, device=params[0].device)
        with torch.no_grad():
            if factor is not None and _plain_sgd(optimizer):
                for group, lr in zip(optimizer.param_groups, base_lrs):
                    for p in group["params"]:
                        p[:active].addcmul_(p.grad[:active], factor.view(-1, *[1] * (p.dim() - 1)), value=-lr)
            else:
                for group, lr in zip(optimizer.param_groups, base_lrs):
                    group["lr"] = lr * first if uniform else lr
                before = None if uniform else [p.detach()[:active].clone() for p in params]
                optimizer.step()  # (Fabric's precision step is this one under 32-true and bf16-mixed; 16-mixed: alone)
                for group, lr in zip(optimizer.param_groups, base_lrs):
                    group["lr"] = lr
                for p, old in zip(params, before or []):
                    p[:active].sub_(old).mul_(factor.view(-1, *[1] * (p.dim() - 1))).add_(old)
        for p in params:  # (zero_grad's own loop cost more)
            p.grad = None

    def _step(self, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, batch_idx: int,
              ) -> tuple[torch.Tensor, tuple, list]:
        """One vmapped ``training_step`` of a group of trips with parameters ``params`` ([g, *shape] each), on
        their examples ``x`` [g, n, ...] and targets ``y`` [g, n] (as the task makes a batch of them): their
        losses [g], what they logged ([g] each) and the log calls' names and options."""
        g = x.shape[0]
        batch = _each(self.trainer.task.batch(x.flatten(0, 1), y.flatten(0, 1), True, None),
                      lambda v: v.view(g, -1, *v.shape[1:]))
        named = dict(zip(self.names, params))
        module, recorder = self.trainer.module, _Recorder()
        installed = module.log, module.log_dict
        module.log, module.log_dict = recorder.log, recorder.log_dict
        try:
            with self.autocast():
                if g <= ONE_BY_ONE:  # a few trips (the longest ones' last steps): a call each costs less than vmap's
                    # (unbind: one backward node for the rows, not a filled tensor each)
                    trips = [dict(zip(named, rows)) for rows in zip(*(v.unbind(0) for v in named.values()))]
                    results = []
                    for j, own in enumerate(trips):
                        recorder.calls.clear()
                        results.append(self._functional(own, _each(batch, lambda v: v[j]), batch_idx, recorder))
                    loss = torch.stack([loss for loss, _ in results])
                    values = tuple(torch.stack(column) for column in zip(*(values for _, values in results)))
                else:
                    step = self._vmap(lambda p, b: self._functional(p, b, batch_idx, recorder), in_dims=(0, 0))
                    recorder.calls.clear()
                    loss, values = step(named, batch)
        finally:
            module.log, module.log_dict = installed
        return loss, values, recorder.calls

    def _groups_of(self, configured: torch.optim.Optimizer) -> list[tuple[dict[str, Any], list[int]]]:
        """The module's optimizer's groups: each one's settings and the indices of the trainable parameters
        it holds."""
        by_id = {id(p): i for i, p in enumerate(self.trainer.params)}
        groups = [({k: v for k, v in group.items() if k != "params"},
                   [by_id[id(p)] for p in group["params"] if id(p) in by_id]) for group in configured.param_groups]
        return [(settings, members) for settings, members in groups if members]

    def _replay(self, logs: list[list[tuple]], seeds: list[int]) -> None:
        """What each trip's steps logged, through the module's ``self.log``, trip by trip in order, with the
        end of each local epoch where the trip's epoch ended (as the one-at-a-time path records them)."""
        trainer = self.trainer
        metrics, module = trainer.task.metrics, trainer.module
        for seed, events in zip(seeds, logs):
            metrics.trip = seed
            for event in events:
                if event[0] == "log":
                    module.log(event[1], event[2], **event[3])
                else:
                    metrics.end_epoch()



def _plain_sgd(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer is SGD without momentum, weight decay or maximize: its step is -lr g."""
    return type(optimizer) is torch.optim.SGD and all(
        not group["momentum"] and not group["weight_decay"] and not group["maximize"] for group in optimizer.param_groups)


def _each(batch: Any, change: Any) -> Any:
    """``change`` applied to every tensor of a batch (a tensor, a tuple or list of them, a dict)."""
    if isinstance(batch, torch.Tensor):
        return change(batch)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_each(v, change) for v in batch)
    if isinstance(batch, dict):
        return {k: _each(v, change) for k, v in batch.items()}
    return tree_map(lambda v: change(v) if isinstance(v, torch.Tensor) else v, batch)


def _groups(counts: np.ndarray, batch_idx: np.ndarray, epochs: np.ndarray, pad: bool,
            ) -> list[tuple[Any, int, int, int]]:
    """The active trips grouped by (batch size, batch_idx, epoch), or with ``pad`` by (batch_idx, epoch),
    the group's batch size its largest: one slice where all agree (the usual case), else an index array per
    distinct key."""
    sizes_agree = pad or (counts == counts[0]).all()
    if sizes_agree and (batch_idx == batch_idx[0]).all() and (epochs == epochs[0]).all():
        return [(slice(0, len(counts)), int(counts.max()), int(batch_idx[0]), int(epochs[0]))]
    keys = np.stack([np.zeros_like(counts) if pad else counts, batch_idx, epochs], 1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    groups = []
    for k in range(len(unique)):
        members = np.flatnonzero(inverse.reshape(-1) == k)
        groups.append((members, int(counts[members].max()), int(unique[k, 1]), int(unique[k, 2])))
    return groups


def vmap_reason(error: Exception) -> str:
    """Why vmap could not batch the module's step, in a few words."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "randomness" in text:
        return "its training_step draws random numbers (dropout), which each trip draws from its own seed"
    if "data-dependent control flow" in text or ".item()" in text:
        return f"its training_step reads a tensor's value in Python ({text[:120]})"
    return f"vmap cannot batch its training_step ({type(error).__name__}: {text[:160]})"
