"""Server algorithms: how client uploads become server steps.

The orchestrator drives every algorithm through the same two calls: ``add`` each of the
``buffer_size`` uploads that make up one server step, then ``step`` (which advances the model
version). Synchronous algorithms are
buffered aggregation with the buffer equal to the round's cohort and zero staleness.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fl_bench.config import (
    AlgorithmConfig,
    FedAsyncConfig,
    FedAvgConfig,
    FedAvgMConfig,
    FedBuffConfig,
    FedProxConfig,
)


def staleness_scale(staleness: int, exponent: float) -> float:
    """s(tau) = 1 / (1 + tau)^alpha (FedBuff Sec. 5; polynomial staleness of Xie et al. 2019)."""
    return (1.0 + staleness) ** -exponent


class ServerAlgorithm:
    synchronous: ClassVar[bool] = False
    # What a client uploads: its update Delta = y_0 - y_Q, or its final model y_Q.
    upload: ClassVar[str] = "delta"

    def __init__(self, cfg: AlgorithmConfig, params: torch.Tensor, buffer_size: int = 1):
        self.cfg = cfg
        self.params = params  # the global model w, a flat vector updated in place
        self.buffer_size = buffer_size  # uploads per server step
        self.version = 0  # server steps taken so far

    def add(self, update: torch.Tensor, num_examples: int, staleness: int) -> None:
        raise NotImplementedError

    def step(self) -> None:
        self._step()
        self.version += 1

    def _step(self) -> None:
        raise NotImplementedError


class FedBuff(ServerAlgorithm):
    """FedBuff server (Nguyen et al. 2022, Alg. 1 lines 7-17).

    Buffer K uploads; Dbar = (1/K) sum_i s(tau_i) w_i Delta_i (``reduction=sum``, App. B.2) or
    the weighted average sum_i s w Delta / sum_i s w (``reduction=mean``); then a server-optimizer
    step with Dbar as the pseudo-gradient: SGD w <- w - eta_g Dbar, with momentum beta
    m <- beta m + Dbar, w <- w - eta_g m (torch.optim.SGD's convention), or Adam.
    Weights w_i (Table 7): lrnorm and uniform -> 1 (LR-norm acts on the client), examples -> n_i.
    """

    def __init__(self, cfg: AlgorithmConfig, params: torch.Tensor, buffer_size: int):
        super().__init__(cfg, params, buffer_size)
        self._param = torch.nn.Parameter(params, requires_grad=False)  # shares storage with params
        self._param.grad = torch.zeros_like(params)
        if cfg.server_optimizer == "adam":
            self._opt = torch.optim.Adam([self._param], lr=cfg.server_lr, betas=(cfg.server_momentum, 0.99))
        else:
            self._opt = torch.optim.SGD([self._param], lr=cfg.server_lr, momentum=cfg.server_momentum)
        self._sum = torch.zeros_like(params)
        self._weight_sum = 0.0
        self._count = 0

    def add(self, update, num_examples, staleness):
        weight = float(num_examples) if self.cfg.weighting == "examples" else 1.0
        weight *= staleness_scale(staleness, self.cfg.staleness_exponent)
        self._sum.add_(update, alpha=weight)
        self._weight_sum += weight
        self._count += 1

    def _step(self):
        denominator = self._count if self.cfg.reduction == "sum" else self._weight_sum
        torch.div(self._sum, denominator, out=self._param.grad)
        self._opt.step()
        self._sum.zero_()
        self._weight_sum, self._count = 0.0, 0


class FedAvg(FedBuff):
    """FedAvg (McMahan et al. 2017): a synchronous round of `cohort` clients on one model version,
    then w <- w - eta_g * sum_i n_i Delta_i / sum_i n_i (weighting=examples, reduction=mean)."""

    synchronous = True


class FedAvgM(FedAvg):
    """FedAvgM (Hsu et al. 2019): FedAvg with server momentum m <- beta m + Dbar, w <- w - eta_g m."""


class FedProx(FedAvg):
    """FedProx (Li et al. 2020): FedAvg whose clients minimise F_i(y) + (mu/2)||y - w||^2
    (the proximal gradient is added in fl_bench.client)."""


class FedAsync(ServerAlgorithm):
    """FedAsync (Xie et al. 2019): every upload is applied at once,
    w <- (1 - a_t) w + a_t y_client with a_t = a * s(tau) (a = ``server_lr``)."""

    upload = "model"

    def __init__(self, cfg: AlgorithmConfig, params: torch.Tensor):
        super().__init__(cfg, params)
        self._client_model: torch.Tensor | None = None
        self._mix = 0.0

    def add(self, update, num_examples, staleness):
        self._client_model = update
        self._mix = self.cfg.server_lr * staleness_scale(staleness, self.cfg.staleness_exponent)

    def _step(self):
        self.params.lerp_(self._client_model, self._mix)  # w + a_t (y - w)
        self._client_model = None


def build_algorithm(cfg: AlgorithmConfig, params: torch.Tensor, cohort: int) -> ServerAlgorithm:
    """``cohort`` is the number of uploads that close a synchronous round."""
    if isinstance(cfg, FedBuffConfig):
        return FedBuff(cfg, params, cfg.buffer_size)
    if isinstance(cfg, FedAsyncConfig):
        return FedAsync(cfg, params)
    sync_classes = {FedAvgMConfig: FedAvgM, FedProxConfig: FedProx, FedAvgConfig: FedAvg}
    for config_type, algorithm in sync_classes.items():
        if isinstance(cfg, config_type):
            return algorithm(cfg, params, cohort)
    raise TypeError(f"no server algorithm for {cfg!r}")
