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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fl_bench.clients.batched import LinearChain, StepGraph, batched_forward, linear_chain
from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.task import ClassificationTask
from fl_bench.contracts import Broadcast, Trainer
from fl_bench.data import FederatedData
from fl_bench.errors import ConfigError
from fl_bench.models import unrolled_rnns

_LOW32 = 0xFFFFFFFF


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


def minibatch_plan(sizes: np.ndarray, seeds: list[int], local: LocalTraining,
                   steps: Sequence[int] | None = None) -> MinibatchPlan:
    """Shuffled minibatches for a batch of trips, built in a few vectorised ops; ``steps[i]``, if
    given, is trip i's number of steps in place of its full work: fewer (partial work:
    fl_bench.engine.behaviour) or more (a work schedule's: fl_bench.engine.work), epochs repeating as needed.

    Each epoch visits the client's examples in a fresh random order (the last batch of an epoch
    may be short; with ``local.drop_last`` it is left out, unless it is the client's only one); with
    fixed Q steps the epochs repeat as needed. The order comes from a
    counter-based hash of (trip seed, epoch, example), so a trip's minibatches depend only on its
    seed, not on which other trips share its batch or on the training path.
    """
    n = torch.as_tensor(np.asarray(sizes, dtype=np.int64))
    bsz = local.batch_size
    per_epoch = torch.as_tensor(local.batches_per_epoch(np.asarray(sizes, dtype=np.int64)))
    full = local.num_steps(np.asarray(sizes, dtype=np.int64))
    steps = torch.as_tensor(full if steps is None else np.asarray(steps, dtype=np.int64))
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


class ClientTrainer(Trainer):
    """Local training of a batch of client trips, each from its own starting model, stepping with
    ``update`` (default: SGD with ``local``'s FedProx term): the :class:`fl_bench.contracts.Trainer`
    of the built-in task, whose hooks it leaves at their defaults."""

    def __init__(
        self,
        task: ClassificationTask,
        data: FederatedData,
        local: LocalTraining,
        vmap: bool = False,
        chunk: int = 256,
        update: LocalUpdate | None = None,
        graphs: bool = False,
        precision: str = "32-true",
    ):
        self.task = task
        self.data = data
        self.local = local
        self.update = update if update is not None else LocalUpdate(local.prox_mu)
        self.vmap = vmap
        self.chunk = chunk  # most trips per vmap pass
        # Batched trips step on fixed buffers (fl_bench.clients.batched.StepGraph), captured as CUDA graphs on a GPU
        self.graphs = graphs
        self.precision = precision  # "bf16-mixed": forward and loss under bfloat16 autocast; parameters stay fp32
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
        plain = type(task) is ClassificationTask and not task.entropy_weight and precision == "32-true"
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
        """The forward pass's precision: bfloat16 autocast with ``precision="bf16-mixed"``, else a no-op.
        No cast cache: each step's parameters are new leaves, and CUDA graph capture forbids it."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16-mixed",
                              cache_enabled=False)

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
        """Copy the flat model ``params`` into the task's parameters."""
        self.flat.copy_(params)

    def gathered_buffers(self, seeds: list[int], clients: list[int], gather: Callable) -> None:
        """In a run across processes (fl_bench.clients.distributed), after each batch of trips: take what
        every process's trips left of the task's own state (``gather`` stacks a tensor over processes).
        The built-in task keeps none."""

    def train(
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor] | None = None,
        steps: Sequence[int] | None = None,
    ) -> Sequence[torch.Tensor]:
        """One local training per trip from ``starts[i]``, the Broadcast it downloaded (often shared
        between trips; its flat ``params`` is y_0 and its ``state`` what the update rule reads; both
        are left untouched). Writes trip i's upload into ``out[i]`` (e.g. rows of a reused upload
        buffer: fresh multi-MB buffers cost page faults on every trip) or, without ``out``, into a
        new [b, upload_size] tensor; returns ``out``. An upload row is Delta, then the update rule's
        ``upload_keys`` (MFL's moved state, Mimelite's gradient), P values each. ``steps[i]``: trip i
        stops after that many of its local steps (partial work); None: every trip does its full work."""
        if out is None:
            out = torch.empty(len(clients), self.upload_size, device=self.device)
        if self.vmap:
            train = self._train_static if self.static_steps() else self._train_batched
            for s in range(0, len(clients), self.chunk):
                part = slice(s, s + self.chunk)
                train(starts[part], clients[part], seeds[part], out[part], None if steps is None else steps[part])
            return out
        return self._train_sequential(starts, clients, seeds, out, steps)

    def _train_sequential(
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor],
        steps: Sequence[int] | None = None,
    ) -> Sequence[torch.Tensor]:
        """:meth:`train` one trip after the other (``out`` given)."""
        plan = minibatch_plan(self.data.sizes[clients], seeds, self.local, steps)
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
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor],
        steps: Sequence[int] | None = None,
    ) -> None:
        """All trips step together. Trips are sorted by step count, longest first, so at step t the
        trips still training are a prefix ``[:active]`` and finished ones cost nothing; a short
        last batch is a masked row, so LR-norm's n/B and the per-trip mean loss stay exact. The
        longest trip's steps after all others finished run in the sequential loop."""
        task, data, update = self.task, self.data, self.update
        plan, rows, weights, lrs = self._step_inputs(starts, clients, seeds, steps)
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
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], steps: Sequence[int] | None
    ) -> tuple[MinibatchPlan, torch.Tensor, torch.Tensor, float | torch.Tensor]:
        """A batch's minibatch plan, and on the device: its example rows into the data [b, S, B],
        each trip's mean weights over its real examples [b, S, B] (a short last batch is a masked
        row, so LR-norm's n/B and the per-trip mean loss stay exact), and the step lrs ([b, S] under
        LR-norm or decay, else one float)."""
        plan = minibatch_plan(self.data.sizes[clients], seeds, self.local, steps)
        first = torch.as_tensor(self.data.offsets[np.asarray(clients)], device=self.device)
        rows = plan.rows.to(self.device) + first[:, None, None]
        mask = plan.mask.to(self.device)
        counts = mask.sum(-1)  # [b, S] examples per step
        weights = mask / counts.clamp(min=1)[..., None]
        versions = torch.tensor([start.version for start in starts], device=self.device)[:, None]
        return plan, rows, weights, self.local.step_lr(counts, versions)

    def _train_static(
        self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor],
        steps: Sequence[int] | None = None,
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
        plan, rows, weights, lrs = self._step_inputs(starts, clients, seeds, steps)
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
