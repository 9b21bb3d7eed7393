"""Synchronous rounds: the FedAvg family. The round protocol (cohort, over-selection, deadline)
is the engine's step policy; the server math is FedBuff's aggregation over the round's uploads."""

from __future__ import annotations

import math

from dataclasses import dataclass, field

from fl_bench.algorithms.base import SyncConfig
from fl_bench.algorithms.buffered import FedBuff, FedBuffAggregation
from fl_bench.algorithms.weightings import WeightingConfig, default_weighting
from fl_bench.engine.protocol import Rounds
from fl_bench.schema import require, schema


class FedAvg(FedBuff):
    """FedAvg (McMahan et al. 2017): w <- w - eta_g * sum_i n_i Delta_i / sum_i n_i over a round's
    uploads (weighting=examples, reduction=mean)."""

    step_policy = Rounds


class FedAvgM(FedAvg):
    """FedAvgM (Hsu et al. 2019): FedAvg with server momentum m <- beta m + Dbar, w <- w - eta_g m."""


class FedProx(FedAvg):
    """FedProx (Li et al. 2020): FedAvg whose clients minimise F_i(y) + (mu/2)||y - w||^2
    (the proximal gradient is added in fl_bench.clients.trainer)."""


class AdaptiveFedOpt(FedAvg):
    """AdaptiveFedOpt (Reddi et al. 2021; FedGBO's AFO): FedAvg clients (SGD), a server SGDm /
    RMSProp / Adam step (``server_optimizer``, torch.optim) on the mean update as pseudo-gradient."""


class FedMAX(FedAvg):
    """FedMAX (Chen et al. 2020): FedAvg whose clients add alpha KL(U || softmax(a)) over the
    penultimate activations a to the local loss (``entropy_weight``; fl_bench.clients.task)."""


@dataclass
class FedAvgFamilyConfig(FedBuffAggregation, SyncConfig):
    """Synchronous rounds stepped by FedBuff's aggregation over the round's uploads: examples-weighted by default."""

    weighting: WeightingConfig = field(default_factory=default_weighting("examples"))


@schema("algorithm", "fedavg", FedAvg)
class FedAvgConfig(FedAvgFamilyConfig):
    """FedAvg (McMahan et al. 2017): synchronous rounds; the server steps with the examples-weighted
    mean of the round's updates (``server_optimizer``: plain SGD unless chosen)."""


@schema("algorithm", "fedavgm", FedAvgM)
class FedAvgMConfig(FedAvgFamilyConfig):
    """Server momentum: conf/algorithm/fedavgm.yaml chooses algorithm/server_optimizer=momentum (beta 0.9)."""


@schema("algorithm", "fedprox", FedProx)
class FedProxConfig(FedAvgFamilyConfig):
    """FedProx (Li et al. 2020): FedAvg with the proximal term (mu/2)||y - w||^2, mu = ``prox_mu``,
    in the local objective."""

    prox_mu: float = 0.01  # 0 is FedAvg, FedProx's nested special case (a protocol's search must reach it)


@schema("algorithm", "adaptive_fedopt", AdaptiveFedOpt)
class AdaptiveFedOptConfig(FedAvgFamilyConfig):
    """AdaptiveFedOpt (FedGBO's AFO): FedAvg with a server SGDm / RMSProp / Adam step
    (conf/algorithm/adaptive_fedopt.yaml chooses algorithm/server_optimizer=adam, eps 1e-3)."""


@schema("algorithm", "fedmax", FedMAX)
class FedMAXConfig(FedAvgFamilyConfig):
    """FedMAX (Chen et al. 2020): FedAvg with alpha KL(U || softmax(a)), alpha = ``entropy_weight``,
    in the local loss."""

    entropy_weight: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        # alpha = 0 is FedAvg, FedMAX's nested special case (a protocol's search must be able to reach it)
        require(math.isfinite(self.entropy_weight) and self.entropy_weight >= 0, "algorithm.entropy_weight",
                 self.entropy_weight, "FedMAX's alpha must be >= 0")
