"""Client local training (FedBuff Alg. 2): minibatch SGD from the downloaded model, returns
Delta = y_0 - y_Q.

The task's trainable parameters are re-pointed to views of one flat vector, so loading a model,
snapshotting it and computing Delta are single vector operations. The orchestrator hands over a
batch of jobs that all start from the same model version; this trainer runs them one after the
other in a plain torch loop (no Lightning ``Trainer`` per trip).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fl_bench.config import AlgorithmConfig
from fl_bench.data import FederatedData
from fl_bench.task import ClassificationTask


@dataclass(frozen=True)
class LocalTraining:
    """Client optimizer settings for one algorithm."""

    lr: float
    batch_size: int
    epochs: int = 1
    steps: int | None = None  # fixed Q local steps instead of whole epochs
    lr_norm: bool = False  # FedBuff Sec. 5: a batch of n < B examples uses lr * n / B
    prox_mu: float = 0.0  # FedProx: + (mu/2) ||y - y_0||^2 in the local objective

    @classmethod
    def from_config(cls, cfg: AlgorithmConfig) -> "LocalTraining":
        return cls(
            lr=cfg.client_lr,
            batch_size=cfg.batch_size,
            epochs=cfg.local_epochs,
            steps=cfg.local_steps,
            lr_norm=cfg.weighting == "lrnorm",
            prox_mu=cfg.prox_mu,
        )

    def num_steps(self, num_examples: int) -> int:
        if self.steps is not None:
            return self.steps
        return self.epochs * -(-num_examples // self.batch_size)


def flatten_parameters(module: torch.nn.Module) -> tuple[torch.Tensor, list[torch.nn.Parameter]]:
    """Make every trainable parameter a view into one flat vector; return (vector, parameters)."""
    params = [p for p in module.parameters() if p.requires_grad]
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    return flat, params


class ClientTrainer:
    """Local training of a batch of clients that start from one model version.

    ``vmap=False`` trains them one after the other; ``vmap=True`` trains them in one pass over
    stacked parameters (``torch.func.vmap`` of the per-client gradient), padding every client to
    the longest local epoch and masking the missing examples and steps, so LR-norm, FedProx and
    each client's own step count stay exact. Both draw the same minibatches from the same seeds.
    """

    def __init__(self, task: ClassificationTask, data: FederatedData, local: LocalTraining, vmap: bool = False):
        self.task = task
        self.data = data
        self.local = local
        self.vmap = vmap
        self.flat, self.params = flatten_parameters(task)
        self.device = self.flat.device
        self.names = [name for name, p in task.model.named_parameters() if p.requires_grad]

    def load(self, params: torch.Tensor) -> None:
        self.flat.copy_(params)

    def train(self, start: torch.Tensor, clients: list[int], seeds: list[int]) -> torch.Tensor:
        """Run one local training per client from ``start``; return the deltas, shape [len(clients), P]."""
        if self.vmap:
            return self._train_vmap(start, clients, seeds)
        deltas = torch.empty(len(clients), self.flat.numel(), device=self.device)
        for row, (client, seed) in enumerate(zip(clients, seeds)):
            self.load(start)
            self._local_sgd(client, seed, start)
            torch.sub(start, self.flat, out=deltas[row])
        return deltas

    def _local_sgd(self, client: int, seed: int, start: torch.Tensor) -> None:
        local, params = self.local, self.params
        x, y = self.data.client(client)
        n, bsz = len(y), local.batch_size
        gen = torch.Generator().manual_seed(seed)
        start_views = self._views(start) if local.prox_mu else None
        for idx in self._minibatches(n, gen):
            idx = idx.to(self.device, non_blocking=True)
            grads = torch.autograd.grad(self.task.loss(x[idx], y[idx], gen), params)
            lr = local.lr * len(idx) / bsz if local.lr_norm else local.lr
            with torch.no_grad():
                if start_views is not None:
                    # grad of (mu/2)||y - y_0||^2 is mu (y - y_0) (FedProx, Li et al. 2020, eq. 2)
                    torch._foreach_add_(grads, torch._foreach_sub(params, start_views), alpha=local.prox_mu)
                torch._foreach_add_(params, grads, alpha=-lr)

    def _minibatches(self, n: int, gen: torch.Generator):
        """A client's minibatch indices, drawn lazily (the task may draw augmentation from the same
        generator between batches): reshuffled every epoch, the last batch of an epoch may be short."""
        perm, pos = torch.randperm(n, generator=gen), 0
        for _ in range(self.local.num_steps(n)):
            if pos >= n:  # next epoch: reshuffle
                perm, pos = torch.randperm(n, generator=gen), 0
            yield perm[pos : pos + self.local.batch_size]
            pos += self.local.batch_size

    def _views(self, vector: torch.Tensor) -> list[torch.Tensor]:
        out, offset = [], 0
        for p in self.params:
            out.append(vector[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        return out

    def _minibatch_plan(self, clients: list[int], seeds: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of every client's minibatches, [b, steps, B], and their validity mask; the same
        generator calls as the sequential loop, so both paths see the same minibatches."""
        bsz = self.local.batch_size
        sizes = [int(self.data.sizes[c]) for c in clients]
        steps = max(self.local.num_steps(n) for n in sizes)
        rows = torch.zeros(len(clients), steps, bsz, dtype=torch.long)
        mask = torch.zeros(len(clients), steps, bsz, dtype=torch.bool)
        for r, (client, seed, n) in enumerate(zip(clients, seeds, sizes)):
            first = int(self.data.offsets[client])
            for step, chunk in enumerate(self._minibatches(n, torch.Generator().manual_seed(seed))):
                rows[r, step, : len(chunk)] = chunk + first
                mask[r, step, : len(chunk)] = True
        return rows.to(self.device), mask.to(self.device)

    def _train_vmap(self, start: torch.Tensor, clients: list[int], seeds: list[int]) -> torch.Tensor:
        from torch.func import functional_call, grad, vmap

        local, task, b = self.local, self.task, len(clients)
        rows, mask = self._minibatch_plan(clients, seeds)
        weight_decay = task.weight_decay

        def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
            # The mean over the real examples of the batch, as F.cross_entropy takes it in task.loss.
            ce = torch.nn.functional.cross_entropy(functional_call(task.model, params, (x,)), y, reduction="none")
            value = (ce * m).sum() / m.sum().clamp(min=1)
            if weight_decay:
                value = value + 0.5 * weight_decay * sum(p.pow(2).sum() for p in params.values())
            return value

        client_grads = vmap(grad(loss), randomness="different")
        start_views = self._views(start)
        params = {n: v.unsqueeze(0).repeat(b, *[1] * v.dim()) for n, v in zip(self.names, start_views)}
        gen = torch.Generator().manual_seed(seeds[0])  # augmentation only (sequential draws differ)
        for step in range(rows.shape[1]):
            idx, m = rows[:, step], mask[:, step]
            x = task.inputs(self.data.x[idx.reshape(-1)], True, gen)
            x = x.view(b, -1, *x.shape[1:])
            y = self.data.y[idx]
            grads = client_grads(params, x, y, m.float())
            count = m.sum(1).float()
            # LR-norm scales by n/B; a client whose epoch is over (n = 0) does not move.
            lr = local.lr * (count / local.batch_size if local.lr_norm else (count > 0).float())
            with torch.no_grad():
                for name, start_view in zip(self.names, start_views):
                    g = grads[name]
                    if local.prox_mu:
                        g = g + local.prox_mu * (params[name] - start_view)
                    params[name] = params[name] - lr.view(-1, *[1] * start_view.dim()) * g
        flat = torch.cat([params[n].reshape(b, -1) for n in self.names], dim=1)
        return start.unsqueeze(0) - flat
