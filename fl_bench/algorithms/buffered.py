"""Buffered asynchronous aggregation: FedBuff and FedAsync."""

from __future__ import annotations

import torch

from fl_bench.algorithms.base import AsyncConfig, NovaNormalised, Reduced, ServerAlgorithm, ServerOptimized, StalenessScaled, Weighted
from fl_bench.algorithms.server_optimizers import ServerOptimizerStep
from fl_bench.contracts import Upload
from fl_bench.engine.protocol import BufferedAsync
from fl_bench.errors import ConfigError
from fl_bench.schema import build, require, schema


class FedBuff(ServerAlgorithm):
    """FedBuff server (Nguyen et al. 2022, Alg. 1 lines 7-17).

    Buffer K uploads; Dbar = (1/K) sum_i s(tau_i) w_i Delta_i (``reduction=sum``, App. B.2) or
    the weighted average sum_i s w Delta / sum_i s w (``reduction=mean``); then a server-optimizer
    step with Dbar as the pseudo-gradient. s(tau) is the config's staleness function (``algorithm/staleness``);
    weights w_i (Table 7; ``algorithm/weighting``): uniform -> 1; examples -> n_i / mean_j n_j over the buffer, normalised to mean 1 so that the step does not grow with the
    buffer's example count: with ``sum`` that is Dbar = sum_i s_i n_i Delta_i / sum_i n_i. (Table 7's
    LR-norm arm is a client rule, ``lr_norm``, with uniform weights.) The synchronous FedAvg family
    reuses this aggregation with the round's uploads (zero staleness).

    ``step_normalisation=fednova`` (Wang et al. 2020, "Tackling the Objective Inconsistency Problem in
    Heterogeneous Federated Optimization", Sec. 4, FedNova with local SGD, whose normalised update is
    d_i = Delta_i / tau_i): each Delta_i enters as tau_eff Delta_i / tau_i, with tau_i the upload's local
    steps and tau_eff = sum_i w_i tau_i / sum_i w_i. With FedAvg's weights (examples, mean, s = 1) the step
    is FedNova's -tau_eff sum_i p_i eta d_i; when every tau_i is equal it is the plain step.
    """

    step_policy = BufferedAsync

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self._optimizer = ServerOptimizerStep(cfg, params)
        self._weighting, self._staleness = build(cfg.weighting), build(cfg.staleness)
        self._sum = torch.zeros_like(params)  # sum_i s_i w_i Delta_i, w_i unnormalised (n_i or 1)
        self._weight_sum = 0.0  # sum_i w_i: K * mean(w), the normaliser of the weights
        self._scaled_weight_sum = 0.0  # sum_i s_i w_i
        self._scaled: list[float] = []  # each upload's coefficient in the sum, s_i w_i (/ tau_i) (fairness logs)
        self._steps_sum = 0.0  # sum_i w_i tau_i (fednova's tau_eff times sum_i w_i)

    def add(self, upload: Upload) -> None:
        weight = self._weighting.weight(upload)
        scaled = weight * self._staleness.checked_scale(upload.staleness)
        coefficient = scaled  # of Delta_i in the sum
        if self.cfg.step_normalisation == "fednova":  # Delta_i / tau_i here; times tau_eff in _step
            if upload.steps < 1:
                raise ConfigError(f"algorithm.step_normalisation=fednova needs each upload's local steps, and an upload "
                                  f"of client {upload.client} has {upload.steps}")
            self._steps_sum += weight * upload.steps
            coefficient /= upload.steps
        self._sum.add_(upload.vector, alpha=coefficient)
        self._weight_sum += weight
        self._scaled_weight_sum += scaled
        self._scaled.append(coefficient)

    def private_weight(self, upload: Upload) -> float:
        """s(tau) <= 1: staleness weighting is kept under DP (uniform weights, a step divided by K)."""
        return self._staleness.checked_scale(upload.staleness)

    def dp_check(self, mechanism: str) -> None:
        cfg = self.cfg
        if self.upload != "delta" or self.upload_keys:
            raise ConfigError(f"dp={mechanism} is not allowed with algorithm={cfg.name}: DP clips and noises model "
                              f"updates Delta and nothing else, and this algorithm uploads {self.upload_keys or self.upload}")
        if not self._weighting.constant:  # n_i / mean n over the step: unbounded, and set by the other uploads
            raise ConfigError(f"dp={mechanism} is not allowed with algorithm/weighting={cfg.weighting.name}: a client's "
                              f"weight normalised over the step (n_i / mean n) is unbounded, so is its sensitivity; use "
                              f"algorithm/weighting=uniform")
        if cfg.step_normalisation != "none":  # the server sees one private aggregate, not each upload's steps
            raise ConfigError(f"dp={mechanism} is not allowed with algorithm.step_normalisation={cfg.step_normalisation}: "
                              f"the private step sees one aggregate, not each upload's local steps; use "
                              f"step_normalisation=none")
        stale = self.step_policy is BufferedAsync or getattr(cfg, "late_uploads", "drop") == "deliver"
        if cfg.reduction == "mean" and stale and not self._staleness.constant:
            raise ConfigError(f"dp={mechanism} is not allowed with algorithm.reduction=mean and stale uploads: it "
                              f"divides by the step's sum of staleness weights, which the other clients set; use "
                              f"algorithm.reduction=sum (a private step divides by K)")

    def _step(self) -> None:
        # sum: (1/K) sum_i s_i (w_i / mean w) Delta_i = sum_i s_i w_i Delta_i / sum_i w_i
        denominator = self._weight_sum if self.cfg.reduction == "sum" else self._scaled_weight_sum
        if self.cfg.step_normalisation == "fednova":  # the sum holds s_i w_i Delta_i / tau_i: times tau_eff
            denominator *= self._weight_sum / self._steps_sum
            self._steps_sum = 0.0
        torch.div(self._sum, denominator, out=self._optimizer.grad)
        self._optimizer.step(self.step_lr())
        self.step_weights = [scaled / denominator for scaled in self._scaled]  # each upload's share of Dbar
        self._scaled = []
        self._sum.zero_()
        self._weight_sum, self._scaled_weight_sum = 0.0, 0.0

    def step_lr(self) -> float | None:
        """The server optimizer's rate for the step being taken; None: its configured one (FADAS's varies)."""
        return None

    def server_state_nbytes(self) -> int:
        """The server optimizer's state: momentum (P values), Adam's or AMSGrad's moments (2P, 3P)."""
        return self._optimizer.state_nbytes


class FedAsync(ServerAlgorithm):
    """FedAsync (Xie et al. 2019): every upload is applied at once,
    w <- (1 - a_t) w + a_t y_client with a_t = a * s(tau) (a = ``mixing``)."""

    upload = "model"

    step_policy = BufferedAsync

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self._staleness = build(cfg.staleness)
        self._client_model: torch.Tensor | None = None
        self._mix = 0.0

    def add(self, upload: Upload) -> None:
        self._client_model = upload.vector
        self._mix = self.cfg.mixing * self._staleness.checked_scale(upload.staleness)

    def _step(self) -> None:
        self.params.lerp_(self._client_model, self._mix)  # w + a_t (y - w)
        self._client_model = None


class FedBuffAggregation(Weighted, StalenessScaled, Reduced, NovaNormalised, ServerOptimized):
    """The knobs FedBuff's aggregation reads (:class:`FedBuff`'s; the FedAvg family's and FADAS's too): the
    mixins of fl_bench.algorithms.base, before the protocol's config in each config's bases."""


@schema("algorithm", "fedbuff", FedBuff)
class FedBuffConfig(FedBuffAggregation, AsyncConfig):
    """FedBuff (Nguyen et al. 2022): a server step every K = ``buffer_size`` uploads, each scaled
    by s(tau), with a server optimizer; App. B.2's sum reduction and Sec. 5's LR-norm by default."""

    buffer_size: int = 10  # K
    lr_norm: bool = True  # FedBuff Sec. 5
    reduction: str = "sum"  # FedBuff App. B.2: weighted sum of the buffered updates


@schema("algorithm", "fedasync", FedAsync)
class FedAsyncConfig(StalenessScaled, AsyncConfig):
    """FedAsync (Xie et al. 2019): w <- (1 - a_t) w + a_t w_client with a_t = mixing * s(tau)."""

    step_size = "mixing"

    mixing: float = 0.5  # a (FedBuff Table 4's eta_g column for FedAsync)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.buffer_size == 1, "algorithm.buffer_size", self.buffer_size, "FedAsync applies every upload: must be 1")
        require(0 < self.mixing <= 1, "algorithm.mixing", self.mixing, "FedAsync's mixing weight a must be in (0, 1]")
