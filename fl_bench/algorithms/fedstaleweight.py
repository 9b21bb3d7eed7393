"""FedStaleWeight (Ma et al.): buffered asynchronous aggregation that gives slow clients back their
share by weighting each update with its client's expected staleness."""

from __future__ import annotations

import math

import torch

from fl_bench.algorithms.base import AsyncConfig, ServerAlgorithm
from fl_bench.algorithms.client_state import ClientTable
from fl_bench.contracts import Upload
from fl_bench.engine.protocol import BufferedAsync
from fl_bench.schema import choice, require, schema


class FedStaleWeight(ServerAlgorithm):
    """A full buffer of b updates: update j of client c(j) gets the raw weight E[tau_c] * b + 1
    (eq. 8; ``weight_rule=alg1``: E[tau_c] + 1, as Alg. 1 prints it), the weights are normalised to
    sum to 1 (the paper's 1/n cancels) and w <- w - eta_g sum_j alpha_j Delta_j (Delta = y_0 - y_Q,
    so this is the paper's w + eta_g sum alpha_j (y_Q - y_0)). E[tau_c] is the client's moving average
    of the staleness it was observed with, updated with each of its uploads before that upload is
    weighted: its first upload sets it, later ones E <- (1 - beta) E + beta tau (``staleness_ema`` =
    beta). With zero staleness everywhere every update weighs 1/b: buffered FedAvg.
    """

    step_policy = BufferedAsync

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self.expected_staleness = ClientTable(num_clients, 1, dtype=torch.float64)  # E[tau_c]
        self.observed = ClientTable(num_clients, 1, dtype=torch.bool)  # has the client uploaded yet
        self._raw: list[float] = []  # this buffer's raw weights, in arrival order
        self._sum = torch.zeros_like(params)  # sum_j raw_j Delta_j
        self.step_weights: list[float] = []  # the last step's alpha_j, in arrival order (fairness logs)

    def observe(self, client: int, staleness: int) -> float:
        """Update and return the client's expected staleness."""
        if bool(self.observed[client]):
            beta = self.cfg.staleness_ema
            value = (1 - beta) * float(self.expected_staleness[client]) + beta * staleness
        else:
            value = float(staleness)
        self.expected_staleness[client] = value
        self.observed[client] = True
        return value

    def raw_weight(self, expected: float) -> float:
        """The unnormalised weight of an update whose client expects staleness ``expected``:
        E b + 1 (``weight_rule=eq8``, eq. 8) or E + 1 (``alg1``, Alg. 1)."""
        if self.cfg.weight_rule == "eq8":
            return expected * self.cfg.buffer_size + 1.0  # eq. 8: (E[tau] b + 1) / n
        return expected + 1.0  # Alg. 1: (E[tau] + 1) / n

    def add(self, upload: Upload) -> None:
        raw = self.raw_weight(self.observe(upload.client, upload.staleness))
        self._raw.append(raw)
        self._sum.add_(upload.vector, alpha=raw)

    def _step(self) -> None:
        total = sum(self._raw)
        self.params.sub_(self._sum, alpha=self.cfg.server_lr / total)  # sum_j (raw_j / total) Delta_j
        self.step_weights = [raw / total for raw in self._raw]
        self._raw = []
        self._sum.zero_()


WEIGHT_RULES = ("eq8", "alg1")


@schema("algorithm", "fedstaleweight", FedStaleWeight)
class FedStaleWeightConfig(AsyncConfig):
    """FedStaleWeight (Ma et al., Alg. 1): buffered asynchronous aggregation whose update weights grow
    with the client's expected staleness, alpha_j ~ E[tau_j] b + 1 (eq. 8; weight_rule=alg1: E[tau_j]
    + 1), normalised; w <- w + eta_g sum alpha_j (y_Q - y_0)."""

    step_size = "server_lr"

    buffer_size: int = 5  # b
    weight_rule: str = "eq8"
    staleness_ema: float = 0.5  # beta: E[tau] <- (1 - beta) E[tau] + beta tau (the first upload sets it)
    server_lr: float = 1.0  # eta_g

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("algorithm.weight_rule", self.weight_rule, WEIGHT_RULES)
        require(0 < self.staleness_ema <= 1, "algorithm.staleness_ema", self.staleness_ema, "must be in (0, 1]")
        require(math.isfinite(self.server_lr) and self.server_lr > 0, "algorithm.server_lr", self.server_lr, "must be > 0")
