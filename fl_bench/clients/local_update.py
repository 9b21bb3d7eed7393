"""The client's knobs and its local step rule, apart from the trainers that run them: algorithms
depend on this module alone (no model, task or trainer imports)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from fl_bench.engine.work import WorkScheduleConfig, schema_work_schedule
from fl_bench.schema import choice, require

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
    # How many local steps each trip trains, decided as it starts (fl_bench.engine.work): its full work above
    # (fixed), or a schedule's, such as FedCompass's (algorithm/work_schedule=compass)
    work_schedule: WorkScheduleConfig = field(default_factory=schema_work_schedule)
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
    drop_last: bool = False  # each epoch's short last batch left out (task=lightning's task.drop_last)

    @classmethod
    def from_config(cls, cfg: ClientConfig, drop_last: bool = False) -> "LocalTraining":
        """The settings of an algorithm config's client knobs (:class:`ClientConfig`), with the task's
        ``drop_last``."""
        return cls(
            lr=cfg.client_lr,
            batch_size=cfg.batch_size,
            epochs=cfg.local_epochs,
            steps=cfg.local_steps,
            lr_norm=cfg.lr_norm,
            prox_mu=cfg.prox_mu,
            decay=cfg.lr_decay,
            schedule=cfg.lr_schedule,
            drop_last=drop_last,
        )

    def batches_per_epoch(self, num_examples):
        """Minibatches in one epoch of n examples (an integer or an array): ceil(n / B), or with
        ``drop_last`` floor(n / B), at least one (a client with fewer than B examples takes them all)."""
        if self.drop_last:
            return np.maximum(num_examples // self.batch_size, 1)
        return -(-num_examples // self.batch_size)

    def num_steps(self, num_examples: np.ndarray) -> np.ndarray:
        """Local steps of one trip per client, for an array of example counts n: ``steps`` (Q) if
        fixed, else ``epochs`` times :meth:`batches_per_epoch`."""
        if self.steps is not None:
            return np.full_like(num_examples, self.steps)
        return self.epochs * self.batches_per_epoch(num_examples)

    def examples_per_trip(self, num_examples: np.ndarray) -> np.ndarray:
        """Examples one trip trains on: whole epochs of n, or with Q fixed steps the epochs of the
        minibatch plan repeated (full epochs, then Q mod ceil(n/B) full batches); with ``drop_last``
        an epoch is its full batches (all n where n < B)."""
        per_epoch = self.batches_per_epoch(num_examples)
        epoch = np.minimum(per_epoch * self.batch_size, num_examples) if self.drop_last else num_examples
        if self.steps is None:
            return self.epochs * epoch
        return (self.steps // per_epoch) * epoch + (self.steps % per_epoch) * self.batch_size

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
        """Whether the lr is the same for every model version (exponential schedule, decay 1)."""
        return self.schedule == "exponential" and self.decay == 1.0

    def _scale(self, version):
        """The schedule's factor at model version(s) ``version`` (an integer or a tensor)."""
        return 1.0 / (1 + version) if self.schedule == "inverse" else self.decay ** version

    def lr_at(self, version: int) -> float:
        """eta_t: the client lr of trips from model version ``version`` (servers that step with the
        clients' lr, FedLaAvg and HFL, use it too)."""
        return self.lr * self._scale(version)


def has_batch_norm(module: torch.nn.Module) -> bool:
    """Whether ``module`` has BatchNorm layers (training on a batch of one example raises), which
    makes ``task.drop_last=null`` drop each epoch's short last batch."""
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules())


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
        """One local step: update ``params`` in place from ``grads`` (which it may overwrite), for one
        trip or a batch (shapes in the class docstring). ``anchors`` and ``state`` are read only, except
        the ``moving_keys`` entries of ``state``. Here: y <- y - lr (g + mu (y - y_0))."""
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
