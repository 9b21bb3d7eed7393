"""FedLaAvg (Yan et al. 2020): federated *latest* averaging under intermittent availability."""

from __future__ import annotations

import numpy as np
import torch

from fl_bench.algorithms.base import ServerAlgorithm, SyncConfig
from fl_bench.algorithms.client_state import ClientTable
from fl_bench.clients.local_update import LocalTraining
from fl_bench.contracts import Upload
from fl_bench.engine.protocol import Rounds
from fl_bench.schema import choice, require, schema


class FedLaAvg(ServerAlgorithm):
    """Alg. 1 with App. E's local steps. The server keeps every client's latest gradient g_i (zero
    before it first takes part) in an N x P table and their average gbar = sum_i p_i g_i over *all*
    clients (p_i = n_i / n). A round's clients (the available ones absent longest:
    ``selection=longest_absent``) each send g_i^t - g_i^prev; the server updates
    gbar <- gbar + sum_i p_i (g_i^t - g_i^prev) (eq. 4) and steps w_t = w_{t-1} - eta_t gbar_t.
    With local steps the "gradient" is the trip's accumulated update over its lr, Delta / eta_t
    (App. E; ``gradient=mean_step``: over eta_t Q_i, Q_i the trip's local steps), and
    eta_t = client_lr * lr_decay^t decays per round as the paper tunes it. With full
    participation and fresh gradients this is FedAvg with weights p_i.
    """

    step_policy = Rounds
    reads_client_rule = True

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self.latest = ClientTable(num_clients, params.numel(), dtype=params.dtype, device=params.device)  # g_i
        self.average = torch.zeros_like(params)  # gbar
        self._local = LocalTraining.from_config(cfg)
        self._total = float(self.client_sizes.sum())  # n
        self._steps = self._local.num_steps(np.asarray(self.client_sizes))  # Q_i per client (gradient=mean_step)

    def lr(self, version: int) -> float:
        """eta_t, the lr of rounds that start from model version t (clients and server alike)."""
        return self._local.lr_at(version)

    def add(self, upload: Upload) -> None:
        gradient = upload.vector / self.lr(upload.version)  # App. E: accumulated update / lr
        if self.cfg.gradient == "mean_step":  # the steps it ran (fewer under partial work), else its client's Q_i
            gradient /= float(upload.steps or self._steps[upload.client])
        difference = gradient - self.latest[upload.client]  # what the client uploads (Alg. 1 line 8)
        weight = float(self.client_sizes[upload.client]) / self._total  # p_i = n_i / n
        self.average.add_(difference, alpha=weight)  # eq. (4)
        self.latest[upload.client] = gradient

    def _step(self) -> None:
        self.params.sub_(self.average, alpha=self.lr(self.version))  # w_t = w_{t-1} - eta_t gbar_t


@schema("algorithm", "fedlaavg", FedLaAvg)
class FedLaAvgConfig(SyncConfig):
    """FedLaAvg (Yan et al. 2020, Alg. 1 / App. E): rounds of beta N clients (cohort), the available
    ones absent longest (conf/algorithm/fedlaavg.yaml chooses selection=longest_absent); the server
    steps with the average of every client's latest gradient. Its step is its own (eta_t = client_lr
    * lr_decay^t): no server optimizer."""

    # App. E's "gradient" of a trip of Q local steps: "accumulated", Delta / eta (the update over the
    # lr); "mean_step", Delta / (eta Q), the mean local-step gradient, which makes the server's step Q
    # times smaller at the same lr.
    gradient: str = "accumulated"

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("algorithm.gradient", self.gradient, ("accumulated", "mean_step"))
        require(self.late_uploads == "drop", "algorithm.late_uploads", self.late_uploads,
                 "FedLaAvg's latest gradients are computed at the round's model: must be drop")
