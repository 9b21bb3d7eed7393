"""FedGBO (Mills et al., Alg. 1) and the adaptive-FL baselines it is compared with (Sec. 4): MFL,
Mimelite and MimeXlite. All run FedAvg's rounds: clients download x_t and the global optimizer's
statistics s_t, take K local steps, and the server sets x_{t+1} to the mean of the uploaded models.
They differ in where s moves (fl_bench.algorithms.global_optimizer writes U, T and I once):

- FedGBO: s fixed on clients; the server inverts the mean model change into the mean local
  gradient, g~ = I(x_t, x_{t+1}, s_t, K, eta), and tracks it, s_{t+1} = T(g~, s_t). Upload: x.
- MFL: s moves on clients with every step; the server averages the clients' s with their models.
  Upload: x, s.
- Mimelite: s fixed on clients, which also upload a full-batch gradient at x_t; the server tracks
  the mean of those, s_{t+1} = T(mean grad f_i(x_t), s_t). Upload: x, grad f. MimeXlite: the first
  local step's minibatch gradient at x_t instead.

AdaptiveFedOpt and FedMAX are FedAvg with a server optimizer / a client objective term
(fl_bench.algorithms.synchronous).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from fl_bench.algorithms.base import ServerAlgorithm, SyncConfig, Weighted
from fl_bench.algorithms.global_optimizer import FixedStatistics, GlobalOptimizer, MovingStatistics
from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.contracts import Broadcast, Upload
from fl_bench.engine.protocol import Rounds
from fl_bench.schema import build, choice, require, schema


class _GlobalStatistics(ServerAlgorithm):
    """Rounds whose clients download x_t and s_t; x_{t+1} = the (weighted) mean of the uploaded y_K,
    i.e. x_t - mean Delta_i (Alg. 1: 1/|S_t| sum y_K, ``algorithm/weighting=uniform``)."""

    step_policy = Rounds
    reads_client_rule = True

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self.optimizer = GlobalOptimizer.from_config(cfg)
        self.state = self.optimizer.initial_state(params)  # s_t, sent with every broadcast
        self._local = LocalTraining.from_config(cfg)
        self._weighting = build(cfg.weighting)  # x_{t+1}: the uploads' plain mean (Alg. 1) under uniform
        self._delta = torch.zeros_like(params)  # sum_i w_i Delta_i
        self._extras = {key: torch.zeros_like(params) for key in self.upload_keys}  # sum_i w_i extra_i
        self._weight = 0.0
        self._steps = 0.0  # sum_i w_i K_i: the local steps the uploads ran (K each, fewer under partial work)

    def broadcast(self) -> Broadcast:
        return Broadcast(self.version, self.params, self.state)

    def add(self, upload: Upload) -> None:
        weight = self._weighting.weight(upload)
        self._delta.add_(upload.vector, alpha=weight)
        for key, total in self._extras.items():
            total.add_(upload.extras[key], alpha=weight)
        self._weight += weight
        self._steps += weight * (upload.steps or self.cfg.local_steps or 0)

    def _step(self) -> None:
        mean_delta = self._delta.div_(self._weight)  # x_t - x_{t+1}
        means = {key: total.div_(self._weight) for key, total in self._extras.items()}
        self._update_state(mean_delta, means, self._steps / self._weight)
        self.params.sub_(mean_delta)
        self._delta.zero_()
        for total in self._extras.values():
            total.zero_()
        self._weight, self._steps = 0.0, 0.0

    def _update_state(self, mean_delta: torch.Tensor, means: dict[str, torch.Tensor], steps: float) -> None:
        """Move the statistics s_t from the round's mean update, mean extras and mean local steps."""
        raise NotImplementedError


class FedGBO(_GlobalStatistics):
    """Alg. 1: g~ = I(x_t, x_{t+1}, s_t, K, eta), s_{t+1} = T(g~, s_t) (Table II)."""

    def local_update(self) -> LocalUpdate:
        return FixedStatistics(self.optimizer, self.cfg.prox_mu)

    def _update_state(self, mean_delta, means, steps) -> None:
        # K: the uploads' mean local steps, algorithm.local_steps unless a work deadline cut some trips short
        lr = self._local.lr_at(self.version)  # eta of this round's trips
        self.optimizer.track(self.optimizer.inverse(mean_delta, self.state, lr, steps), self.state)


class MFL(_GlobalStatistics):
    """MFL (Liu et al. 2020, as FedGBO Sec. 4 describes it): s_{t+1} = the mean of the clients' s_K."""

    def local_update(self) -> LocalUpdate:
        return MovingStatistics(self.optimizer, self.cfg.prox_mu)

    def _update_state(self, mean_delta, means, steps) -> None:
        for key, value in self.state.items():
            value.copy_(means[key])


class Mimelite(_GlobalStatistics):
    """Mimelite (Karimireddy et al. 2020, as FedGBO Sec. 4): s_{t+1} = T(mean_i grad f_i(x_t), s_t),
    the gradient over each client's data (``start_gradient=full``) or one minibatch (``minibatch``:
    MimeXlite, FedGBO Sec. 5.2)."""

    def local_update(self) -> LocalUpdate:
        return FixedStatistics(self.optimizer, self.cfg.prox_mu, start_gradient=self.cfg.start_gradient)

    def _update_state(self, mean_delta, means, steps) -> None:
        self.optimizer.track(means["gradient"], self.state)


OPTIMIZERS = ("sgdm", "rmsprop", "adam")


START_GRADIENTS = ("full", "minibatch")


@dataclass
class GlobalStatisticsConfig(Weighted, SyncConfig):
    """FedGBO's family (Mills et al., Table II): clients download x_t and the optimizer statistics
    s_t and take ``local_steps`` K steps; x_{t+1} = mean of the uploaded models (uniform, Alg. 1).
    ``beta`` is SGDm's / RMSProp's beta and Adam's beta1; Adam's beta2 and eps as in Sec. 5."""

    optimizer: str = "sgdm"
    beta: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-3
    local_steps: Optional[int] = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        a = "algorithm."
        choice(a + "optimizer", self.optimizer, OPTIMIZERS)
        require(0 <= self.beta < 1, a + "beta", self.beta, "must be in [0, 1)")
        require(0 <= self.beta2 < 1, a + "beta2", self.beta2, "must be in [0, 1)")
        require(math.isfinite(self.eps) and self.eps > 0, a + "eps", self.eps, "must be > 0")
        require(not self.lr_norm, a + "lr_norm", self.lr_norm, "must be false: U steps with one eta (Table II)")
        require(self.late_uploads == "drop", a + "late_uploads", self.late_uploads,
                 "must be drop: a late model was trained with another round's statistics")


@schema("algorithm", "fedgbo", FedGBO)
class FedGBOConfig(GlobalStatisticsConfig):
    """FedGBO (Mills et al., Alg. 1): s fixed on clients; the server tracks the mean local gradient
    it inverts from the mean update, so ``local_steps`` K must be set."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.local_steps is not None, "algorithm.local_steps", self.local_steps,
                 "FedGBO's inverse step I divides by a fixed K: set algorithm.local_steps")


@schema("algorithm", "mfl", MFL)
class MFLConfig(GlobalStatisticsConfig):
    """MFL (Liu et al. 2020): s moves with every local step; the server averages the clients' s."""


@schema("algorithm", "mimelite", Mimelite)
class MimeliteConfig(GlobalStatisticsConfig):
    """Mimelite (start_gradient=full) and MimeXlite (minibatch, conf/algorithm/mimexlite.yaml)."""

    start_gradient: str = "full"

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("algorithm.start_gradient", self.start_gradient, START_GRADIENTS)
