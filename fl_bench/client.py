"""Client local training (FedBuff Alg. 2): minibatch SGD from the downloaded model, returns
Delta = y_0 - y_Q.

The engine hands over a batch of client trips, each with its own starting model (the version
it downloaded). ``vmap=False`` trains them one after the other in a plain torch loop whose
parameters are views of one flat vector; ``vmap=True`` trains them together, one forward and
backward pass per local step over stacked per-client parameters (``torch.func.vmap`` of
``functional_call``). Both follow one minibatch plan built from each trip's seed, and both step
with one :class:`LocalUpdate` rule, written once for lists of parameter-shaped tensors, so they give
the same Delta to float tolerance. No Lightning ``Trainer`` per trip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from fl_bench.batched import LinearChain, StepGraph, batched_forward, linear_chain
from fl_bench.data import FederatedData
from fl_bench.engine.messages import Broadcast
from fl_bench.errors import ConfigError
from fl_bench.models import unrolled_rnns
from fl_bench.schema import choice, require
from fl_bench.task import ClassificationTask

_LOW32 = 0xFFFFFFFF


LR_SCHEDULES = ("exponential", "inverse")


@dataclass
class ClientConfig:
    """The client's local training knobs, part of every algorithm's config (``algorithm.<knob>``)."""

    # minibatch SGD, one epoch by default (FedBuff App. B.2)
    client_lr: float = 0.1
    batch_size: int = 32
    local_epochs: int = 1
    # If set, run exactly this many local steps (Q) instead of whole epochs.
    local_steps: Optional[int] = None
    # FedProx's proximal coefficient mu, FedAsync's rho: + (mu/2)||y - w||^2 (0 disables the term).
    prox_mu: float = 0.0
    # FedMAX's alpha (Chen et al. 2020): + alpha KL(U || softmax(a)) over the penultimate activations
    # a in the local loss (0 disables the term); a client objective any algorithm can use.
    entropy_weight: float = 0.0
    # LR-norm (FedBuff Sec. 5, App. C.6): a local step on a batch of n < B examples uses lr * n / B.
    # A client rule, so any algorithm can use it; FedBuff's YAML turns it on as the paper does.
    lr_norm: bool = False
    # Per-round learning-rate decay (FedLaAvg Sec. 5, tuned with the initial lr): a trip from model
    # version t trains with client_lr * lr_decay^t (one version per synchronous round).
    lr_decay: float = 1.0
    # exponential: client_lr * lr_decay^t | inverse: client_lr / (1 + t) (HFL Sec. 5: eta_t = eta_0 / (1 + t))
    lr_schedule: str = "exponential"

    def __post_init__(self) -> None:
        a = "algorithm."
        require(math.isfinite(self.client_lr) and self.client_lr > 0, a + "client_lr", self.client_lr, "must be > 0")
        require(self.batch_size >= 1, a + "batch_size", self.batch_size, "must be >= 1")
        require(self.local_epochs >= 1, a + "local_epochs", self.local_epochs, "must be >= 1")
        require(self.local_steps is None or self.local_steps >= 1, a + "local_steps", self.local_steps, "must be >= 1 or null")
        require(self.prox_mu >= 0, a + "prox_mu", self.prox_mu, "must be >= 0")
        require(math.isfinite(self.entropy_weight) and self.entropy_weight >= 0, a + "entropy_weight", self.entropy_weight,
                "must be >= 0")
        require(0 < self.lr_decay <= 1, a + "lr_decay", self.lr_decay, "must be in (0, 1] (1: no decay)")
        choice(a + "lr_schedule", self.lr_schedule, LR_SCHEDULES)


@dataclass(frozen=True)
class LocalTraining:
    """Client optimizer settings for one algorithm."""

    lr: float
    batch_size: int
    epochs: int = 1
    steps: int | None = None  # fixed Q local steps instead of whole epochs
    lr_norm: bool = False  # FedBuff Sec. 5: a batch of n < B examples uses lr * n / B
    prox_mu: float = 0.0  # FedProx: + (mu/2) ||y - y_0||^2 in the local objective
    decay: float = 1.0  # lr * decay^v for a trip that downloaded model version v (FedLaAvg Sec. 5)
    schedule: str = "exponential"  # exponential: lr * decay^v | inverse: lr / (1 + v) (HFL Sec. 5)

    @classmethod
    def from_config(cls, cfg: ClientConfig) -> "LocalTraining":
        return cls(
            lr=cfg.client_lr,
            batch_size=cfg.batch_size,
            epochs=cfg.local_epochs,
            steps=cfg.local_steps,
            lr_norm=cfg.lr_norm,
            prox_mu=cfg.prox_mu,
            decay=cfg.lr_decay,
            schedule=cfg.lr_schedule,
        )

    def num_steps(self, num_examples: np.ndarray) -> np.ndarray:
        if self.steps is not None:
            return np.full_like(num_examples, self.steps)
        return self.epochs * -(-num_examples // self.batch_size)

    def examples_per_trip(self, num_examples: np.ndarray) -> np.ndarray:
        """Examples one trip trains on: whole epochs of n, or with Q fixed steps the epochs of the
        minibatch plan repeated (full epochs, then Q mod ceil(n/B) full batches)."""
        if self.steps is None:
            return self.epochs * num_examples
        per_epoch = -(-num_examples // self.batch_size)
        return (self.steps // per_epoch) * num_examples + (self.steps % per_epoch) * self.batch_size

    def step_lr(self, count, version=0):
        """The lr of a local step on ``count`` examples (an integer, or a tensor of counts per trip)
        of a trip from model version ``version`` (an integer, or a tensor broadcasting with count):
        ``lr * decay^version``, times ``count / B`` with LR-norm (FedBuff Sec. 5), so a short batch
        moves less. A plain float where neither applies (the batched path's fast case)."""
        lr = self.lr if self.constant else self.lr * self._scale(version)
        if self.lr_norm:
            return lr * count / self.batch_size
        if isinstance(lr, torch.Tensor):  # per-trip decayed lrs: one per trip and step, as counts
            return lr.expand_as(count).to(torch.get_default_dtype())
        return lr

    @property
    def constant(self) -> bool:
        return self.schedule == "exponential" and self.decay == 1.0

    def _scale(self, version):
        """The schedule's factor at model version(s) ``version`` (an integer or a tensor)."""
        return 1.0 / (1 + version) if self.schedule == "inverse" else self.decay ** version

    def lr_at(self, version: int) -> float:
        """eta_t: the client lr of trips from model version ``version`` (servers that step with the
        clients' lr, FedLaAvg and HFL, use it too)."""
        return self.lr * self._scale(version)


def _per_trip(lr: torch.Tensor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """A [b] lr as one view per [b, *shape] tensor that broadcasts over its trailing dims."""
    by_dim = {d: lr.view(-1, *[1] * (d - 1)) for d in {t.dim() for t in tensors}}
    return [by_dim[t.dim()] for t in tensors]


class LocalUpdate:
    """The client's local step rule, written once for both training paths: plain SGD with
    FedProx's proximal term, ``y <- y - lr * (g + mu (y - y_0))`` (Li et al. 2020, eq. 2: the
    gradient of (mu/2) ||y - y_0||^2 is mu (y - y_0); ``mu = 0`` is FedAvg / FedBuff SGD).

    ``step`` updates ``params`` in place from ``grads`` (which it may overwrite). Every argument is
    a list of parameter-shaped tensors, for one trip (``[*shape]``, ``lr`` a float) or for a batch
    of trips (``[b, *shape]``, ``lr`` a ``[b]`` tensor, one per trip): ``anchors`` is y_0, the model
    the trip downloaded, and ``state`` holds the broadcast's server state named in ``state_keys``,
    split the same way and held fixed (e.g. FedGBO's statistics s in ``y <- y - U(eta, g, s)``).
    ``lr`` already includes LR-norm (:meth:`LocalTraining.step_lr`, FedBuff Sec. 5). A rule that
    uses elementwise / foreach ops and :meth:`descend` for the lr multiply runs unchanged on both
    shapes, so a subclass overriding ``step`` is batched by the vmap path for free. The tensors in
    ``anchors`` and ``state`` are the trips' downloads: read them, never write them.
    """

    state_keys: tuple[str, ...] = ()  # the Broadcast.state entries ``step`` reads
    # Those of them that ``step`` moves (MFL's optimizer state): the trainer hands the rule a copy
    # per trip and uploads where it ended.
    moving_keys: tuple[str, ...] = ()
    # Mimelite: a gradient at y_0 is uploaded too, over the client's whole data ("full") or the
    # first local step's minibatch ("minibatch", MimeXlite: no extra computation).
    start_gradient: str | None = None

    def __init__(self, prox_mu: float = 0.0):
        self.prox_mu = prox_mu
        # Operations per parameter per step (FedGBO App. B, eq. 22): SGD 2 (+, x -eta), FedProx 5.
        self.ops_per_param = 5 if prox_mu else 2

    @property
    def upload_keys(self) -> tuple[str, ...]:
        """What a trip uploads besides Delta, each a parameter-sized vector, in this order."""
        return self.moving_keys + (("gradient",) if self.start_gradient else ())

    def step(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        anchors: list[torch.Tensor] | None,
        lr: float | torch.Tensor,
        state: dict[str, list[torch.Tensor]],
    ) -> None:
        self.add_proximal(params, grads, anchors)
        self.descend(params, grads, lr)

    def add_proximal(self, params: list[torch.Tensor], grads: list[torch.Tensor], anchors: list[torch.Tensor] | None) -> None:
        """g <- g + mu (y - y_0), in place (FedProx)."""
        if self.prox_mu and anchors is not None:
            torch._foreach_add_(grads, torch._foreach_sub(params, anchors), alpha=self.prox_mu)

    @staticmethod
    def descend(params: list[torch.Tensor], directions: list[torch.Tensor], lr: float | torch.Tensor) -> None:
        """``params <- params - lr * directions`` in place, with ``lr`` a float or a [b] tensor of
        per-trip lrs (``directions`` are left as they are)."""
        if isinstance(lr, torch.Tensor):
            torch._foreach_sub_(params, torch._foreach_mul(directions, _per_trip(lr, directions)))
        else:
            torch._foreach_add_(params, directions, alpha=-lr)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for x < 2^32, in int64 without overflow (c split into 16-bit halves)."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _LOW32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer mix (Wellons' "lowbias32"): distinct inputs give distinct keys."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


@dataclass
class MinibatchPlan:
    """Every trip's local steps: ``rows[i, t]`` are trip i's example indices (within its client)
    at step t, valid where ``mask``; ``steps[i]`` is its number of steps (host array)."""

    rows: torch.Tensor  # [b, max steps, B] int64
    mask: torch.Tensor  # [b, max steps, B] bool
    steps: np.ndarray  # [b]


def minibatch_plan(sizes: np.ndarray, seeds: list[int], local: LocalTraining) -> MinibatchPlan:
    """Shuffled minibatches for a batch of trips, built in a few vectorised ops.

    Each epoch visits the client's examples in a fresh random order (the last batch of an epoch
    may be short); with fixed Q steps the epochs repeat as needed. The order comes from a
    counter-based hash of (trip seed, epoch, example), so a trip's minibatches depend only on its
    seed, not on which other trips share its batch or on the training path.
    """
    n = torch.as_tensor(np.asarray(sizes, dtype=np.int64))
    bsz = local.batch_size
    per_epoch = -(-n // bsz)
    steps = torch.as_tensor(local.num_steps(np.asarray(sizes, dtype=np.int64)))
    epochs = int((-(-steps // per_epoch)).max())
    seed = torch.tensor(seeds, dtype=torch.int64)
    trip_key = _hash32(_hash32(seed & _LOW32) ^ ((seed >> 32) & _LOW32))  # [b]
    epoch_key = _hash32((trip_key[:, None] + torch.arange(epochs)) & _LOW32)  # [b, E]
    # One segment per (trip, epoch) holding that client's example ids 0..n-1, segments laid end to
    # end; a single sort by (segment, key) shuffles every segment at once, with no padding.
    segment_len = n.repeat_interleave(epochs)  # [b * E]
    segment_start = torch.cumsum(segment_len, 0) - segment_len
    segment = torch.arange(len(segment_len)).repeat_interleave(segment_len)
    example = torch.arange(len(segment)) - segment_start[segment]
    keys = _hash32(example ^ epoch_key.view(-1)[segment])  # < 2^32, distinct within a segment
    shuffled = example[((segment << 32) | keys).argsort()]
    t = torch.arange(int(steps.max()))[None, :]
    epoch, batch = t // per_epoch[:, None], t % per_epoch[:, None]  # [b, S]
    pos = batch[..., None] * bsz + torch.arange(bsz)  # [b, S, B] position within the epoch's order
    mask = (pos < n[:, None, None]) & (t < steps[:, None])[..., None]
    first = segment_start.view(-1, epochs).gather(1, epoch.clamp(max=epochs - 1))  # [b, S]
    rows = shuffled[(first[..., None] + pos).masked_fill_(~mask, 0)].masked_fill_(~mask, 0)
    return MinibatchPlan(rows, mask, steps.numpy())


def flatten_parameters(module: torch.nn.Module) -> tuple[torch.Tensor, list[torch.nn.Parameter]]:
    """Make every trainable parameter a view into one flat vector; return (vector, parameters)."""
    params = [p for p in module.parameters() if p.requires_grad]
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    for p, view in zip(params, views(flat, [p.shape for p in params])):
        p.data = view
    return flat, params


def views(vector: torch.Tensor, shapes: list[torch.Size]) -> list[torch.Tensor]:
    """Split the last dimension of ``vector`` into parameter-shaped views ([..., P] -> [..., *shape])."""
    out, offset, lead = [], 0, vector.shape[:-1]
    for shape in shapes:
        size = math.prod(shape)
        out.append(vector[..., offset : offset + size].view(*lead, *shape))
        offset += size
    return out


class ClientTrainer:
    """Local training of a batch of client trips, each from its own starting model, stepping with
    ``update`` (default: SGD with ``local``'s FedProx term)."""

    def __init__(
        self,
        task: ClassificationTask,
        data: FederatedData,
        local: LocalTraining,
        vmap: bool = False,
        chunk: int = 256,
        update: LocalUpdate | None = None,
        graphs: bool = False,
        precision: str = "fp32",
    ):
        self.task = task
        self.data = data
        self.local = local
        self.update = update if update is not None else LocalUpdate(local.prox_mu)
        self.vmap = vmap
        self.chunk = chunk  # most trips per vmap pass
        # Batched trips step on fixed buffers (fl_bench.batched.StepGraph), captured as CUDA graphs on a GPU
        self.graphs = graphs
        self.precision = precision  # "bf16": forward and loss under bfloat16 autocast; parameters stay fp32
        self._buffers: torch.Tensor | None = None
        self._step_graphs: dict[int, StepGraph] = {}
        self.flat, self.params = flatten_parameters(task)
        self.device = self.flat.device
        self.names = [name for name, p in task.model.named_parameters() if p.requires_grad]
        self.shapes = [p.shape for p in self.params]
        if vmap:
            # One forward over stacked per-trip parameters: p[name] is [b, *shape], x is [b, B, ...].
            # With FedMAX's term the penultimate activations (kept by the task's hook) come out too.
            self.forward_batched = batched_forward(task.model, bool(task.entropy_weight), lambda: task.features)
            self._check_vmappable()
        # Linear/ReLU models with the plain objective get their batched gradients written out (no autograd)
        layers = linear_chain(task.model)
        plain = type(task) is ClassificationTask and not task.entropy_weight and precision == "fp32"
        trainable = all(p.requires_grad for p in task.model.parameters())
        self.chain = LinearChain(layers) if vmap and plain and trainable and layers is not None else None

    def batched_gradients(self, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                          weights: torch.Tensor) -> list[torch.Tensor]:
        """Each trip's gradient of its own objective (``weights`` [b, B]: its examples' shares), for
        stacked parameters ``params`` ([b, *shape] each) and inputs ``x`` [b, B, ...]: the gradient
        of the sum over trips of their objectives w.r.t. trip i's parameters is trip i's own."""
        if self.chain is not None:
            grads = self.chain.gradients(dict(zip(self.names, params)), x, y, weights, self.task.weight_decay)
            return [grads[name] for name in self.names]
        leaves = [p.detach().requires_grad_() for p in params]
        with self.autocast():
            logits, features = self.forward_batched(dict(zip(self.names, leaves)), x)
            loss = self.task.objective(logits, y, leaves, weights, features)
        return list(torch.autograd.grad(loss, leaves))

    def views(self, vector: torch.Tensor) -> list[torch.Tensor]:
        """``vector``'s last dimension as parameter-shaped views."""
        return views(vector, self.shapes)

    def autocast(self) -> torch.autocast:
        """The forward pass's precision: bfloat16 autocast with ``precision="bf16"``, else a no-op.
        No cast cache: each step's parameters are new leaves, and CUDA graph capture forbids it."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16", cache_enabled=False)

    def static_steps(self) -> bool:
        """Whether batched trips step on :class:`StepGraph`'s fixed buffers: asked for (``graphs``),
        and the step is a pure function of them: no random augmentation (a host-side generator), no
        server state that moves with each step (MFL: a finished trip's lr 0 would not hold it) and
        no start gradient to keep (Mimelite)."""
        transform = self.task.transform
        augments = transform is not None and (transform.random_flip or transform.crop_size is not None)
        update = self.update
        return self.vmap and self.graphs and not augments and not update.moving_keys and not update.start_gradient

    def load(self, params: torch.Tensor) -> None:
        self.flat.copy_(params)

    def train(
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor] | None = None
    ) -> Sequence[torch.Tensor]:
        """One local training per trip from ``starts[i]``, the Broadcast it downloaded (often shared
        between trips; its flat ``params`` is y_0 and its ``state`` what the update rule reads; both
        are left untouched). Writes trip i's upload into ``out[i]`` (e.g. rows of a reused upload
        buffer: fresh multi-MB buffers cost page faults on every trip) or, without ``out``, into a
        new [b, upload_size] tensor; returns ``out``. An upload row is Delta, then the update rule's
        ``upload_keys`` (MFL's moved state, Mimelite's gradient), P values each."""
        if out is None:
            out = torch.empty(len(clients), self.upload_size, device=self.device)
        if self.vmap:
            train = self._train_static if self.static_steps() else self._train_batched
            for s in range(0, len(clients), self.chunk):
                part = slice(s, s + self.chunk)
                train(starts[part], clients[part], seeds[part], out[part])
            return out
        plan = minibatch_plan(self.data.sizes[clients], seeds, self.local)
        rows, counts = plan.rows.to(self.device), plan.mask.sum(-1).numpy()
        update = self.update
        for i, (client, seed) in enumerate(zip(clients, seeds)):
            start, (delta, *extras) = starts[i], self.upload_parts(out[i])
            self.load(start.params)
            state = {k: start.state[k] for k in update.state_keys}
            for key, slot in zip(update.moving_keys, extras):  # moved in place: the upload holds where it ends
                state[key] = slot.copy_(start.state[key])
            first_gradient = extras[-1] if update.start_gradient == "minibatch" else None
            if update.start_gradient == "full":
                self.full_gradient(client, seed, out=extras[-1])
            self._local_sgd(client, seed, start.params, state, rows[i], counts[i, : plan.steps[i]].tolist(), start.version,
                            first_gradient)
            torch.sub(start.params, self.flat, out=delta)
        return out

    @property
    def upload_size(self) -> int:
        """Values one upload row holds: Delta, then each of the update rule's ``upload_keys``."""
        return self.flat.numel() * (1 + len(self.update.upload_keys))

    def upload_parts(self, row: torch.Tensor) -> list[torch.Tensor]:
        """An upload row split into Delta and the extras (views)."""
        return list(row.view(-1, self.flat.numel()).unbind(0))

    def full_gradient(self, client: int, seed: int, out: torch.Tensor, chunk: int = 512) -> torch.Tensor:
        """The gradient of the client's whole local objective at the loaded model (Mimelite's
        full-batch gradient at x_t), summed over chunks of examples weighted by their share."""
        x, y = self.data.client(client)
        gen = torch.Generator().manual_seed(seed ^ 0x5EED)  # augmentation draws of its own
        out.zero_()
        for s in range(0, len(y), chunk):
            share = len(y[s : s + chunk]) / len(y)
            with self.autocast():
                loss = self.task.loss(x[s : s + chunk], y[s : s + chunk], gen) * share
            grads = torch.autograd.grad(loss, self.params)
            with torch.no_grad():
                for part, g in zip(views(out, self.shapes), grads):
                    part.add_(g)
        return out

    def _local_sgd(
        self, client: int, seed: int, start: torch.Tensor, state: dict[str, torch.Tensor], rows: torch.Tensor,
        counts: list[int], version: int, first_gradient: torch.Tensor | None = None,
    ) -> None:
        """Local steps on the loaded model: step t uses example rows ``rows[t, :counts[t]]``;
        ``start`` is y_0, the model the trip downloaded, and ``state`` the flat server state the
        update rule reads (only its ``moving_keys`` are written). ``first_gradient``: where to keep
        the first step's minibatch gradient (MimeXlite)."""
        local, params, update = self.local, self.params, self.update
        x, y = self.data.client(client)
        gen = torch.Generator().manual_seed(seed)  # augmentation draws
        anchors = views(start, self.shapes)
        state_views = {k: views(v, self.shapes) for k, v in state.items()}
        for step, count in enumerate(counts):
            idx = rows[step, :count]
            with self.autocast():
                loss = self.task.loss(x[idx], y[idx], gen)
            grads = list(torch.autograd.grad(loss, params))
            with torch.no_grad():
                if step == 0 and first_gradient is not None:
                    torch._foreach_copy_(views(first_gradient, self.shapes), grads)
                update.step(params, grads, anchors, local.step_lr(count, version), state_views)

    def _train_batched(
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor]
    ) -> None:
        """All trips step together. Trips are sorted by step count, longest first, so at step t the
        trips still training are a prefix ``[:active]`` and finished ones cost nothing; a short
        last batch is a masked row, so LR-norm's n/B and the per-trip mean loss stay exact. The
        longest trip's steps after all others finished run in the sequential loop."""
        local, task, data, update = self.local, self.task, self.data, self.update
        plan, rows, weights, lrs = self._step_inputs(starts, clients, seeds)
        order = np.argsort(-plan.steps, kind="stable")
        active_at = (plan.steps[order][None, :] > np.arange(int(plan.steps.max()))[:, None]).sum(1)
        order_t = torch.as_tensor(order, device=self.device)
        rows, weights = rows[order_t], weights[order_t]
        if isinstance(lrs, torch.Tensor):
            lrs = lrs[order_t]
        origin, stacked, *flat_state = self._workspace(len(clients))  # [b, P] each, reused across calls
        gradient = flat_state.pop() if update.start_gradient else None  # Mimelite's upload, [b, P]
        torch.stack([starts[i].params for i in order], out=origin)
        for key, buffer in zip(update.state_keys, flat_state):  # per-trip copies: moving keys move in them
            torch.stack([starts[i].state[key] for i in order], out=buffer)
        if update.start_gradient == "full":
            for row, i in enumerate(order):
                self.load(origin[row])
                self.full_gradient(clients[i], seeds[i], out=gradient[row])
        stacked.copy_(origin)  # the parameter views below write into it
        stacked_params = views(stacked, self.shapes)
        origin_params = views(origin, self.shapes)
        state_params = {key: views(buffer, self.shapes) for key, buffer in zip(update.state_keys, flat_state)}
        sliced_for = None
        gen = torch.Generator().manual_seed(int(seeds[0]))  # augmentation draws (differ from the sequential path)
        together = int((active_at >= 2).sum())  # once one trip is left, the plain loop steps it faster
        with unrolled_rnns(task.model):  # vmap-able RNN loops
            for step, active in enumerate(active_at[:together].tolist()):
                idx = rows[:active, step]
                x = task.inputs(data.x[idx.reshape(-1)], True, gen)
                x = x.view(active, -1, *x.shape[1:])
                grads = self.batched_gradients([p[:active] for p in stacked_params], x, data.y[idx], weights[:active, step])
                if step == 0 and update.start_gradient == "minibatch":  # every trip is active at step 0
                    torch._foreach_copy_(views(gradient, self.shapes), grads)
                if sliced_for != active:  # the active trips' rows, re-sliced only when a trip finishes
                    sliced_for = active
                    params, anchors = [p[:active] for p in stacked_params], [p[:active] for p in origin_params]
                    state = {key: [p[:active] for p in v] for key, v in state_params.items()}
                lr = lrs[:active, step] if isinstance(lrs, torch.Tensor) else lrs
                with torch.no_grad():
                    update.step(params, grads, anchors, lr, state)
        longest = order[0]
        if plan.steps[longest] > together:
            self.load(stacked[0])
            counts_left = plan.mask[longest, together : plan.steps[longest]].sum(-1).tolist()
            rows_left = plan.rows[longest, together:].to(self.device)
            state_left = {key: buffer[0] for key, buffer in zip(update.state_keys, flat_state)}
            first_gradient = gradient[0] if update.start_gradient == "minibatch" and together == 0 else None
            self._local_sgd(clients[longest], seeds[longest], origin[0], state_left, rows_left, counts_left,
                            starts[longest].version, first_gradient)
            stacked[0] = self.flat
        moved = [flat_state[update.state_keys.index(key)] for key in update.moving_keys]
        for row, i in enumerate(order):
            delta, *extras = self.upload_parts(out[i])
            torch.sub(origin[row], stacked[row], out=delta)
            for slot, buffer in zip(extras, [*moved, *([gradient] if gradient is not None else [])]):
                slot.copy_(buffer[row])

    def _step_inputs(
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int]
    ) -> tuple[MinibatchPlan, torch.Tensor, torch.Tensor, float | torch.Tensor]:
        """A batch's minibatch plan, and on the device: its example rows into the data [b, S, B],
        each trip's mean weights over its real examples [b, S, B] (a short last batch is a masked
        row, so LR-norm's n/B and the per-trip mean loss stay exact), and the step lrs ([b, S] under
        LR-norm or decay, else one float)."""
        plan = minibatch_plan(self.data.sizes[clients], seeds, self.local)
        first = torch.as_tensor(self.data.offsets[np.asarray(clients)], device=self.device)
        rows = plan.rows.to(self.device) + first[:, None, None]
        mask = plan.mask.to(self.device)
        counts = mask.sum(-1)  # [b, S] examples per step
        weights = mask / counts.clamp(min=1)[..., None]
        versions = torch.tensor([start.version for start in starts], device=self.device)[:, None]
        return plan, rows, weights, self.local.step_lr(counts, versions)

    def _train_static(
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor]
    ) -> None:
        """All trips step together on one :class:`StepGraph` of the next power-of-two size (one CUDA
        graph per size, replayed for every step of every batch). A trip past its last step, and a
        row that only pads the batch, steps with lr 0 and weight 0: it stays where it is. The same
        minibatch plan, weights and lrs as :meth:`_train_batched`, so the same Deltas."""
        b = len(clients)
        size = 1 << (b - 1).bit_length()
        graph = self._step_graphs.get(size)
        if graph is None:
            capture = self.device.type == "cuda"
            graph = self._step_graphs[size] = StepGraph(self, size, self.local.batch_size, capture)
        plan, rows, weights, lrs = self._step_inputs(starts, clients, seeds)
        live = plan.mask.any(-1).to(self.device)  # [b, S]: the trip still trains at this step
        lrs = (torch.as_tensor(lrs, dtype=weights.dtype, device=self.device) * live).expand(live.shape)  # 0 once finished
        torch.stack([start.params for start in starts], out=graph.params[:b])
        graph.params[b:] = graph.params[0]  # padding rows: any finite model
        graph.anchors.copy_(graph.params)
        for key, buffer in graph.state.items():
            torch.stack([start.state[key] for start in starts], out=buffer[:b])
            buffer[b:] = buffer[0]
        graph.rows.zero_(), graph.weights.zero_(), graph.lr.zero_()  # padding rows: weight 0, lr 0
        for step in range(int(plan.steps.max())):
            graph.rows[:b].copy_(rows[:, step])
            graph.weights[:b].copy_(weights[:, step])
            graph.lr[:b].copy_(lrs[:, step])
            graph.step()
        for i in range(b):
            torch.sub(graph.anchors[i], graph.params[i], out=self.upload_parts(out[i])[0])

    def _workspace(self, b: int) -> list[torch.Tensor]:
        """[b, P] buffers for the batched path (start, trained, one per state key the update rule
        reads, one for a start gradient), grown as needed and kept: see ``train``."""
        n = 2 + len(self.update.state_keys) + bool(self.update.start_gradient)
        if self._buffers is None or self._buffers.shape[1] < b or self._buffers.shape[0] < n:
            self._buffers = torch.empty(n, b, self.flat.numel(), device=self.device)
        return list(self._buffers[:n, :b])

    def _check_vmappable(self) -> None:
        """Fail at start-up, in one line, for a model torch.func.vmap cannot batch (e.g. cuDNN RNNs)."""
        x = self.task.inputs(self.data.x[:2], True).unsqueeze(0)
        params = {n: p.detach().unsqueeze(0) for n, p in zip(self.names, self.params)}
        try:
            with unrolled_rnns(self.task.model):
                self.forward_batched(params, x)
        except RuntimeError as err:
            raise ConfigError(
                f"vmap_clients=true cannot batch model {type(self.task.model).__name__}: "
                f"{str(err).splitlines()[0].rstrip('.')}; use vmap_clients=false"
            ) from None
