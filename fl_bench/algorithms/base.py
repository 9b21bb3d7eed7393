"""The server algorithm contract (the role of Flower's ``Strategy``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import torch

from fl_bench.algorithms.client_state import ClientState
from fl_bench.client import LocalUpdate
from fl_bench.engine.messages import Broadcast, Upload, tensor_bytes
from fl_bench.errors import ConfigError


def staleness_scale(staleness: int, exponent: float) -> float:
    """s(tau) = 1 / (1 + tau)^alpha (FedBuff Sec. 5; polynomial staleness of Xie et al. 2019)."""
    return (1.0 + staleness) ** -exponent


class ServerAlgorithm(ABC):
    """How uploads become server steps. The engine drives every algorithm the same way:

    1. ``broadcast()`` when a trip starts: what the client downloads. The engine keeps the returned
       message (cloned) for as long as a pending trip that downloaded this version needs it, so
       anything the client trains from belongs in it.
    2. ``add(upload)`` for each upload that makes up the next server step, in arrival order. When
       the step comes is the step policy's decision (K buffered uploads, a closed round), not the
       algorithm's. ``upload.staleness`` counts server steps since ``upload.version`` was
       downloaded; ``upload.client`` identifies the client for per-client state.
    3. ``step()`` once those uploads are added: update ``params`` in place and advance ``version``.

    ``params`` is the flat global model (the client trainer's layout). ``upload`` says what a client
    sends: its update Delta = y_0 - y_Q (``"delta"``) or its final model y_Q (``"model"``).
    Per-client server state lives in :class:`ClientState` attributes so that its memory is reported.
    """

    upload: ClassVar[str] = "delta"
    # The last step's normalised weight of each upload, in add order, for an algorithm that defines
    # one (FedStaleWeight's alpha_j): the engine logs it in trips.csv's ``weight`` (fairness metrics).
    step_weights: list[float] | None = None

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes: np.ndarray | None = None):
        self.cfg = cfg
        self.params = params
        self.num_clients = num_clients
        # Every client's training examples n_i (for weights p_i = n_i / n over all clients); equal if
        # unknown. The engine sets it after construction, so a subclass's __init__ need not take it.
        self.client_sizes = np.ones(num_clients, dtype=np.int64) if client_sizes is None else np.asarray(client_sizes)
        self.version = 0  # server steps taken so far

    def broadcast(self) -> Broadcast:
        """The current model version as clients download it (override to send extra state)."""
        return Broadcast(self.version, self.params)

    def local_update(self) -> LocalUpdate:
        """The clients' local step rule (fl_bench.client.LocalUpdate): SGD with FedProx's term by
        default; FedGBO's family steps with its optimizer statistics."""
        return LocalUpdate(self.cfg.prox_mu)

    @property
    def upload_keys(self) -> tuple[str, ...]:
        """What each upload carries besides Delta (``Upload.extras``), set by the local rule."""
        return self.local_update().upload_keys

    def upload_nbytes(self) -> int:
        """Bytes one upload carries: Delta and each extra, parameter-sized (FedGBO Table I)."""
        return tensor_bytes([self.params]) * (1 + len(self.upload_keys))

    @abstractmethod
    def add(self, upload: Upload) -> None:
        """Take one upload of the coming server step."""

    def step(self) -> None:
        self._step()
        self.version += 1

    @abstractmethod
    def _step(self) -> None:
        """Apply the added uploads to ``params``."""

    def server_state_nbytes(self) -> int:
        """Memory of other server state that grows with the setting (HFL's ring of past models)."""
        return 0

    def client_state_nbytes(self) -> int:
        """Memory of the per-client state this algorithm keeps (the run summary states it)."""
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, ClientState))


class ServerOptimizerStep:
    """A torch.optim optimizer stepping ``params`` in place with a pseudo-gradient, built from
    ``cfg.server_optimizer`` (fl_bench.config.ServerOptimizerConfig): sgd, w <- w - lr Dbar;
    momentum, m <- beta m + Dbar, w <- w - lr m (torch's convention; FedBuff Alg. 1 line 12), or
    Nesterov's variant; adam, Adam with the configured betas and eps; rmsprop, v <- beta v +
    (1 - beta) Dbar^2, w <- w - lr Dbar / (sqrt(v) + eps)."""

    def __init__(self, cfg, params: torch.Tensor):
        self._param = torch.nn.Parameter(params, requires_grad=False)  # shares storage with params
        self._param.grad = torch.zeros_like(params)
        opt = cfg.server_optimizer
        if opt.name == "sgd":
            self._opt = torch.optim.SGD([self._param], lr=opt.lr, momentum=0.0)
        elif opt.name == "momentum":
            self._opt = torch.optim.SGD([self._param], lr=opt.lr, momentum=opt.momentum, nesterov=opt.nesterov)
        elif opt.name == "adam":
            self._opt = torch.optim.Adam([self._param], lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps)
        elif opt.name == "rmsprop":
            self._opt = torch.optim.RMSprop([self._param], lr=opt.lr, alpha=opt.beta, eps=opt.eps)
        else:
            raise ConfigError(f"algorithm.server_optimizer.name={opt.name!r} is not allowed: choose one of sgd, momentum, adam, rmsprop")

    @property
    def grad(self) -> torch.Tensor:
        return self._param.grad

    # A pickled Parameter drops its .grad (checkpoints pickle the server): carry it alongside.
    def __getstate__(self) -> dict:
        return {**vars(self), "_grad": self._param.grad}

    def __setstate__(self, state: dict) -> None:
        grad = state.pop("_grad")
        vars(self).update(state)
        self._param.grad = grad

    def step(self) -> None:
        self._opt.step()
