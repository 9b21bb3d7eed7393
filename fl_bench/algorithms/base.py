"""The base of the server algorithms (their contract is fl_bench.contracts.Server, the role of Flower's
``Strategy``), the configs they share and the server optimizers."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Optional

import numpy as np
import torch
from omegaconf import MISSING

from fl_bench.algorithms.client_state import ClientState
from fl_bench.algorithms.server_optimizers import ServerOptimizerConfig, schema_server_optimizer
from fl_bench.algorithms.weightings import StalenessConfig, WeightingConfig, default_staleness, default_weighting
from fl_bench.clients.local_update import ClientConfig, LocalUpdate
from fl_bench.contracts import Broadcast, Server, tensor_bytes
from fl_bench.errors import ConfigError
from fl_bench.schema import choice, require


class ServerAlgorithm(Server):
    """The base of every server algorithm: the :class:`fl_bench.contracts.Server` contract (whose
    docstrings say how the engine drives it: ``broadcast()``, ``add(upload)``, ``step()``) for an
    algorithm built from its config. A subclass implements ``add`` and ``_step`` and names its
    ``step_policy``.

    ``params`` is the flat global model (the client trainer's layout). Per-client server state lives
    in :class:`ClientState` attributes so that its memory is reported.
    """

    # The server's math reads the clients' lr eta_t or update rule (Delta / eta, U(eta, g, s)): their
    # trips must step with local_update() at algorithm.client_lr, never with an optimizer of their own
    # (a task=lightning module's configure_optimizers; fl_bench.clients.lightning_trainer).
    reads_client_rule: ClassVar[bool] = False

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes: np.ndarray | None = None):
        """``cfg``: the algorithm's config; ``params``: the initial flat model, which the algorithm
        owns and steps in place; ``client_sizes``: every client's training examples n_i (for weights
        p_i = n_i / n over all clients: FedLaAvg, HFL), equal if not given. A run passes all four."""
        self.cfg = cfg
        self.params = params
        self.num_clients = num_clients
        self.client_sizes = np.ones(num_clients, dtype=np.int64) if client_sizes is None else np.asarray(client_sizes)
        self.version = 0  # server steps taken so far

    def broadcast(self) -> Broadcast:
        """The current model version as clients download it (override to send extra state)."""
        return Broadcast(self.version, self.params)

    def local_update(self) -> LocalUpdate:
        """The clients' local step rule (fl_bench.clients.local_update.LocalUpdate): SGD with FedProx's term by
        default; FedGBO's family steps with its optimizer statistics."""
        return LocalUpdate(self.cfg.prox_mu)

    @property
    def upload_keys(self) -> tuple[str, ...]:
        """What each upload carries besides Delta (``Upload.extras``), set by the local rule."""
        return self.local_update().upload_keys

    def upload_nbytes(self) -> int:
        """Bytes one upload carries: Delta and each extra, parameter-sized (FedGBO Table I)."""
        return tensor_bytes([self.params]) * (1 + len(self.upload_keys))

    def dp_check(self, mechanism: str) -> None:
        """Refused by default; FedBuff and the FedAvg family allow DP."""
        raise ConfigError(f"dp={mechanism} is not allowed with algorithm={self.cfg.name}: its aggregation has no "
                          f"private form (DP clips, weights by at most 1 and noises Delta: use a FedBuff- or "
                          f"FedAvg-family algorithm)")

    def step(self) -> None:
        """The contract's step: ``_step``, then ``version`` advances. Subclasses implement ``_step``, not this."""
        self._step()
        self.version += 1

    @abstractmethod
    def _step(self) -> None:
        """Apply the added uploads to ``params``."""

    def client_state_nbytes(self) -> int:
        """Its :class:`ClientState` stores' memory."""
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, ClientState))




REDUCTIONS = ("sum", "mean")


STEP_NORMALISATIONS = ("none", "fednova")


@dataclass
class AlgorithmConfig(ClientConfig):
    """Client training (``ClientConfig``), read by the client trainer and the engine for every algorithm, and
    the algorithm's name and class. A config holds only the knobs its algorithm's code reads: a server knob
    several algorithms read is a small mixin below (weighting, staleness scaling, reduction, FedNova's
    normalisation, a server optimizer), listed *before* the protocol's config in the bases of each config whose
    code reads it, so that a knob it would ignore cannot be set at all (tests/algorithms/test_algorithms.py
    checks every built-in's fields against what its code reads)."""

    # The knob of its own that sizes the server step, if any (FedAsync's mixing, CA2FL's server_lr; a server
    # optimizer's lr with ServerOptimized): with client_lr, what a diverged run's line names (step_size_key)
    # (a ClassVar: a declaration of the class, not a config key)
    step_size: ClassVar[Optional[str]] = None

    name: str = MISSING
    # The ServerAlgorithm class (fl_bench.algorithms); a new algorithm names its own.
    _target_: str = MISSING

    def step_size_key(self) -> Optional[str]:
        """The key, under ``algorithm.``, that sizes this algorithm's server step (None: no server step size)."""
        return self.step_size


# The mixins each come before the protocol's config in a config's bases (class FedBuffConfig(Weighted, ...,
# AsyncConfig)): their checks then run in the one __post_init__ chain, after the client's and the protocol's.

@dataclass
class Weighted:
    """An upload is weighted by its client's data (``algorithm/weighting=uniform|examples``, a component of
    fl_bench.algorithms.weightings): the option the config's YAML chooses; uniform when built in Python."""

    weighting: WeightingConfig = field(default_factory=default_weighting("uniform"))


@dataclass
class StalenessScaled:
    """An upload of staleness tau is scaled by s(tau) (``algorithm/staleness=polynomial|constant``, a component of
    fl_bench.algorithms.weightings): the option the config's YAML chooses; constant when built in Python."""

    staleness: StalenessConfig = field(default_factory=default_staleness)


@dataclass
class Reduced:
    """How the weighted uploads combine: sum, (1/K) sum s_i w_i D_i | mean, sum s_i w_i D_i / sum s_i w_i."""

    reduction: str = "mean"

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("algorithm.reduction", self.reduction, REDUCTIONS)


@dataclass
class NovaNormalised:
    """fednova: each Delta_i counts as tau_eff Delta_i / tau_i, tau_i its local steps, tau_eff their weighted mean
    (FedNova; for uploads of unequal local work, e.g. behaviour.work_deadline) | none."""

    step_normalisation: str = "none"

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("algorithm.step_normalisation", self.step_normalisation, STEP_NORMALISATIONS)


@dataclass
class ServerOptimized:
    """A server optimizer steps the model with the aggregate as pseudo-gradient (``algorithm/server_optimizer=...``;
    plain SGD unless chosen); its lr sizes the step."""

    step_size = "server_optimizer.lr"

    server_optimizer: ServerOptimizerConfig = field(default_factory=schema_server_optimizer)


LATE_UPLOADS = ("drop", "deliver")


@dataclass
class AsyncConfig(AlgorithmConfig):
    """Buffered asynchronous protocol: up to `concurrency` trips in flight, a new client starts as
    soon as one finishes, and the server steps every `buffer_size` uploads."""

    buffer_size: int = 1  # K: uploads per server step

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.buffer_size >= 1, "algorithm.buffer_size", self.buffer_size, "must be a positive integer")


@dataclass
class SyncConfig(AlgorithmConfig):
    """Synchronous rounds: the FedAvg family. A round starts its clients on one model version and
    closes when `cohort` of its uploads are in, all of its trips are over, or its deadline passes."""

    # Clients whose updates close a round; null means the run's concurrency.
    cohort: Optional[int] = None
    # Over-selection (Bonawitz et al. 2019): start ceil((1 + over_selection) * cohort) clients,
    # keep the fastest `cohort`; the dropped trips still count as client trips.
    over_selection: float = 0.0
    # Close the round this long (virtual time) after it started, whatever is in (null: no deadline).
    deadline: Optional[float] = None
    # Rounds of exactly `deadline`: the round closes only then, even when all its uploads are in
    # (HFL's communication rounds, whose stragglers are late by whole rounds).
    fixed_rounds: bool = False
    # A trip still running when its round closes: drop (aborted then, a wasted trip) or deliver (it
    # finishes and its upload joins the round open when it arrives, with its staleness: HFL).
    late_uploads: str = "drop"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.cohort is None or self.cohort >= 1, "algorithm.cohort", self.cohort, "must be >= 1 or null")
        require(self.over_selection >= 0, "algorithm.over_selection", self.over_selection, "must be >= 0")
        require(self.deadline is None or self.deadline > 0, "algorithm.deadline", self.deadline, "must be > 0 or null")
        choice("algorithm.late_uploads", self.late_uploads, LATE_UPLOADS)
        require(not self.fixed_rounds or self.deadline is not None, "algorithm.fixed_rounds", self.fixed_rounds,
                 "fixed-length rounds need algorithm.deadline (their length)")
