"""The base of the server algorithms (their contract is fl_bench.contracts.Server, the role of Flower's
``Strategy``), the configs they share and the server optimizers."""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Optional

import numpy as np
import torch
from omegaconf import MISSING

from fl_bench.algorithms.client_state import ClientState
from fl_bench.algorithms.server_optimizers import ServerOptimizerConfig, schema_server_optimizer
from fl_bench.clients.local_update import ClientConfig, LocalUpdate
from fl_bench.contracts import Broadcast, Server, tensor_bytes
from fl_bench.errors import ConfigError
from fl_bench.schema import choice, require


def staleness_scale(staleness: int, exponent: float) -> float:
    """s(tau) = 1 / (1 + tau)^alpha (FedBuff Sec. 5; polynomial staleness of Xie et al. 2019)."""
    return (1.0 + staleness) ** -exponent


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


WEIGHTINGS = ("examples", "uniform")


REDUCTIONS = ("sum", "mean")


STEP_NORMALISATIONS = ("none", "fednova")


# The server knobs every algorithm's config inherits (AlgorithmConfig's, SyncConfig's server_optimizer) that only
# an algorithm whose own code reads them honours; the client knobs (ClientConfig) and the step policy's
# (buffer_size, cohort, deadline, ...) are read by the engine and the client trainer for every algorithm.
SHARED_SERVER_KEYS = ("weighting", "reduction", "staleness_exponent", "step_normalisation", "server_optimizer")


def _plain(value):
    """A knob's value as compared with its default: a nested config (server_optimizer) as its fields, so
    that the bare schema's SGD and server_optimizer/sgd.yaml's are the same setting."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def _default(spec: dataclasses.Field):
    return spec.default_factory() if spec.default is dataclasses.MISSING else spec.default


def _built_in(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "fl_bench"


def declared_uses(cls: type, target: str) -> tuple[str, ...]:
    """The shared server knobs (SHARED_SERVER_KEYS) that the algorithm ``target`` of config class ``cls`` reads:
    a built-in schema's ``uses`` (its own or inherited); for a plugin's, the ``uses`` that ``cls`` or a plugin
    class above it declares, and one declared by a built-in algorithm's schema only where ``target`` is (a
    subclass of) that algorithm, whose code the declaration describes. None otherwise: an algorithm written
    from ServerAlgorithm reads none of them."""
    from hydra.utils import get_object

    owner = next(klass for klass in cls.__mro__ if "uses" in vars(klass))
    if owner is cls or not _built_in(owner) or _built_in(cls):
        return tuple(owner.uses)
    try:
        inherited = issubclass(get_object(target), get_object(vars(owner)["_target_"]))
    except Exception:  # a base schema without an algorithm of its own (AsyncConfig), or a target that is no class
        inherited = False
    return tuple(owner.uses) if inherited else ()


@dataclass
class AlgorithmConfig(ClientConfig):
    """Client training (``ClientConfig``) and aggregation knobs shared by every algorithm (FedBuff
    Table 4).

    ``uses`` declares which of the shared server knobs (:data:`SHARED_SERVER_KEYS`) the algorithm's code
    reads (tests/algorithms/test_algorithms.py checks each built-in's against what its code reads). Every
    algorithm, built in or a plugin's, refuses in one line before any run every other one set to anything
    but its schema's default: a knob it inherits and ignores would be a silent wrong result (a sweep over
    staleness_exponent would give identical CA2FL runs)."""

    # (a ClassVar: a declaration of the class, not a config key)
    uses: ClassVar[tuple[str, ...]] = ()
    # The knob of its own that sizes the server step, if any (FedAsync's mixing, CA2FL's server_lr): with the
    # server optimizer's lr where it reads one, what a diverged run's line names (step_size_key)
    step_size: ClassVar[Optional[str]] = None

    name: str = MISSING
    # The ServerAlgorithm class (fl_bench.algorithms); a new algorithm names its own.
    _target_: str = MISSING
    # --- server: how updates are weighted and combined (the server step is the algorithm's own:
    # server_optimizer for FedBuff and the FedAvg family, mixing for FedAsync)
    # examples: w_i = n_i / mean(n) over the buffer (mean 1) | uniform: w_i = 1 (FedBuff Table 7;
    # Table 7's "LR-norm" arm is lr_norm=true with uniform weights).
    weighting: str = "uniform"
    reduction: str = "mean"  # sum: (1/K) sum s_i w_i D_i ; mean: sum s_i w_i D_i / sum s_i w_i
    staleness_exponent: float = 0.5  # alpha in s(tau) = (1 + tau)^-alpha
    # fednova: each Delta_i counts as tau_eff Delta_i / tau_i, tau_i its local steps, tau_eff their
    # weighted mean (FedNova; for uploads of unequal local work, e.g. behaviour.work_deadline). FedBuff and
    # the FedAvg family; the others refuse it.
    step_normalisation: str = "none"

    def __post_init__(self) -> None:
        super().__post_init__()
        a = "algorithm."
        require(self.weighting != "lrnorm", a + "weighting", self.weighting,
                "LR-norm is the client setting algorithm.lr_norm=true now; choose weighting examples or uniform")
        choice(a + "weighting", self.weighting, WEIGHTINGS)
        choice(a + "reduction", self.reduction, REDUCTIONS)
        choice(a + "step_normalisation", self.step_normalisation, STEP_NORMALISATIONS)
        require(self.staleness_exponent >= 0, a + "staleness_exponent", self.staleness_exponent, "must be >= 0")
        self._refuse_unread()

    def step_size_key(self) -> Optional[str]:
        """The key, under ``algorithm.``, that sizes this algorithm's server step: its server optimizer's lr where
        its code reads one, else its own :attr:`step_size` (None: no server step size)."""
        return "server_optimizer.lr" if "server_optimizer" in declared_uses(type(self), self._target_) else self.step_size

    def _refuse_unread(self) -> None:
        """ConfigError naming the first shared server knob that this algorithm does not read and that is set
        to anything but its default."""
        cls = type(self)
        uses = declared_uses(cls, self._target_)
        unknown = [key for key in uses if key not in SHARED_SERVER_KEYS]
        require(not unknown, f"{cls.__name__}.uses", list(uses), f"name shared server knobs: {', '.join(SHARED_SERVER_KEYS)}")
        declared = f"{cls.__name__}.uses " + (f"lists only {', '.join(uses)}" if uses else "is empty")
        fix = "" if _built_in(cls) else f", or if the algorithm reads it, add it to {cls.__name__}.uses"
        for spec in dataclasses.fields(self):
            if spec.name not in SHARED_SERVER_KEYS or spec.name in uses:
                continue
            value, default = _plain(getattr(self, spec.name)), _plain(_default(spec))
            if value == default:
                continue
            if isinstance(value, dict):  # server_optimizer: the option chosen, or the first knob of it that differs
                if value.get("name") != default.get("name"):
                    shown, leave = f"algorithm/server_optimizer={value.get('name')}", f"{default.get('name')}"
                else:
                    sub = next(k for k in value if value[k] != default.get(k))
                    shown, leave = f"algorithm.server_optimizer.{sub}={value[sub]!r}", repr(default.get(sub))
            else:
                shown, leave = f"algorithm.{spec.name}={value!r}", repr(default)
            raise ConfigError(f"{shown} is not allowed with algorithm={self.name}: its code does not read it "
                              f"({declared}); leave it at {leave}{fix}")


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
    weighting: str = "examples"
    server_optimizer: ServerOptimizerConfig = field(default_factory=schema_server_optimizer)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.cohort is None or self.cohort >= 1, "algorithm.cohort", self.cohort, "must be >= 1 or null")
        require(self.over_selection >= 0, "algorithm.over_selection", self.over_selection, "must be >= 0")
        require(self.deadline is None or self.deadline > 0, "algorithm.deadline", self.deadline, "must be > 0 or null")
        choice("algorithm.late_uploads", self.late_uploads, LATE_UPLOADS)
        require(not self.fixed_rounds or self.deadline is not None, "algorithm.fixed_rounds", self.fixed_rounds,
                 "fixed-length rounds need algorithm.deadline (their length)")
