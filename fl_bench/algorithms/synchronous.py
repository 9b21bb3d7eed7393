"""Synchronous rounds: the FedAvg family. The round protocol (cohort, over-selection, deadline)
is the engine's step policy; the server math is FedBuff's aggregation over the round's uploads."""

from __future__ import annotations

from fl_bench.algorithms.buffered import FedBuff


class FedAvg(FedBuff):
    """FedAvg (McMahan et al. 2017): w <- w - eta_g * sum_i n_i Delta_i / sum_i n_i over a round's
    uploads (weighting=examples, reduction=mean)."""


class FedAvgM(FedAvg):
    """FedAvgM (Hsu et al. 2019): FedAvg with server momentum m <- beta m + Dbar, w <- w - eta_g m."""


class FedProx(FedAvg):
    """FedProx (Li et al. 2020): FedAvg whose clients minimise F_i(y) + (mu/2)||y - w||^2
    (the proximal gradient is added in fl_bench.client)."""


class Centralized(FedAvg):
    """Sequential SGD on the pooled data (FedLaAvg's and HFL's S-SGD): the experiment pools every
    client's examples into one client, each round is one trip of local steps on it, and w <- y
    (FedAvg with a cohort of one and server lr 1)."""


class AdaptiveFedOpt(FedAvg):
    """AdaptiveFedOpt (Reddi et al. 2021; FedGBO's AFO): FedAvg clients (SGD), a server SGDm /
    RMSProp / Adam step (``server_optimizer``, torch.optim) on the mean update as pseudo-gradient."""


class FedMAX(FedAvg):
    """FedMAX (Chen et al. 2020): FedAvg whose clients add alpha KL(U || softmax(a)) over the
    penultimate activations a to the local loss (``entropy_weight``; fl_bench.task)."""
