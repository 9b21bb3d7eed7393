"""CA2FL (Wang, Cao, Wu, Chen & Chen, "Tackling the Data Heterogeneity in Asynchronous Federated Learning
with Cached Update Calibration", ICLR 2024): buffered asynchronous aggregation that caches every client's
latest update and calibrates each server step with the cache.

The server of Alg. 1, in the paper's symbols (Delta_i = x_{i,K} - x, the client's move; fl_bench uploads
Delta = y_0 - y_Q, its negative, so the model moves by minus the same step). h_i^t is client i's latest
update cached before step t (zero before its first), h_t = (1/N) sum_{i=1}^N h_i^t the mean over all N
clients, S_t the M updates buffered for step t:

    v_t       = h_t + (1/M) sum_{i in S_t} (Delta_i - h_i^t)     (the calibrated update)
    x_{t+1}   = x_t + eta v_t
    h_i^{t+1} = Delta_i for i in S_t, h_j^{t+1} = h_j^t otherwise (the cache refreshed after the step)

so h_{t+1} = h_t + (1/N) sum_{i in S_t} (Delta_i - h_i^t), which is how it is kept (one P-vector, not a
sum over N rows each step). The first step (empty cache) is FedBuff's plain mean.

What was read, and the choices left open. No text of the paper's Alg. 1 or code from its authors was
available here (only the abstract and reviews, which say the server "caches the latest update for each
client and reuse[s] these variables for calibrating the global update at each round"); the steps above
are the description this implementation was asked to follow, and they agree with a public non-official
reimplementation (FLGo's ``ca2fl``): h_t averages over all N clients, unseen ones counting zero (the
default, ``cache_mean_over=all``; ``seen`` averages over the clients seen before the step, which makes the
early steps' h_t larger: issue 60's test of whether a mostly empty cache is why CA2FL trails), the calibration subtracts each client's cache from before the step, and the
cache is refreshed after v_t is computed. The paper's equation numbers are not quoted for that reason.
A client with two updates in one buffer (it was picked again before the step): each update is
calibrated by the cache as it stands when it arrives, refreshed by the earlier one, so the pair adds
Delta_later - h_i^t to the sum (the client counts once in the cache) while 1/M counts both uploads.
"""

from __future__ import annotations

import math

import torch

from fl_bench.algorithms.base import AsyncConfig, ServerAlgorithm
from fl_bench.algorithms.client_state import ClientDict
from fl_bench.contracts import Upload, tensor_bytes
from fl_bench.engine.protocol import BufferedAsync
from fl_bench.schema import require, schema


class CA2FL(ServerAlgorithm):
    """CA2FL's server (module docstring): x <- x - eta (h_t + (1/M) sum_i (Delta_i - h_i)), the cache of
    every client's latest Delta a :class:`ClientDict` (rows only for clients seen: ``client_state_bytes``)."""

    step_policy = BufferedAsync

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self.cache = ClientDict()  # h_i: each client's latest Delta
        self.cache_mean = torch.zeros_like(params)  # h_t = (1/N) sum_i h_i, over all N clients
        self._calibration = torch.zeros_like(params)  # sum_{i in S_t} (Delta_i - h_i^t)
        self._count = 0  # M: the uploads of this step
        self._seen = 0  # clients in the cache before this step's uploads (cache_mean_over=seen)

    def add(self, upload: Upload) -> None:
        cached = self.cache.get(upload.client)
        self._calibration.add_(upload.vector)
        if cached is None:
            self.cache[upload.client] = upload.vector.clone()  # the engine reuses the upload's storage
        else:
            self._calibration.sub_(cached)
            cached.copy_(upload.vector)
        self._count += 1

    def _step(self) -> None:
        # v_t = h_t + (1/M) calibration with h_t the mean before this step's refresh; then h_{t+1}
        if self.cfg.cache_mean_over == "all":
            self.params.sub_(self.cache_mean, alpha=self.cfg.server_lr)
        elif self._seen:  # the mean over the seen clients: (N / seen) times the mean over all N
            self.params.sub_(self.cache_mean, alpha=self.cfg.server_lr * self.num_clients / self._seen)
        self.params.sub_(self._calibration, alpha=self.cfg.server_lr / self._count)
        self.cache_mean.add_(self._calibration, alpha=1.0 / self.num_clients)
        self._calibration.zero_()
        self._count = 0
        self._seen = len(self.cache.rows)

    def server_state_nbytes(self) -> int:
        """h_t, the mean of the cached updates (P values); the cache itself is ``client_state_bytes``."""
        return tensor_bytes([self.cache_mean])


@schema("algorithm", "ca2fl", CA2FL)
class CA2FLConfig(AsyncConfig):
    """CA2FL (Wang et al., ICLR 2024, Alg. 1): every M = ``buffer_size`` uploads, x <- x - eta v_t with v_t
    = h_t + (1/M) sum_i (Delta_i - h_i), h_i each client's cached latest update and h_t their mean over
    all clients. No weights and no staleness scaling: the shared weighting knobs are not read."""

    step_size = "server_lr"

    buffer_size: int = 10  # M (FedBuff's default)
    server_lr: float = 1.0  # eta
    cache_mean_over: str = "all"  # h_t over all N clients (unseen count zero) or the clients seen so far

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.cache_mean_over in ("all", "seen"), "algorithm.cache_mean_over", self.cache_mean_over,
                "must be all (every client, unseen ones zero) or seen (the clients seen so far)")
        require(math.isfinite(self.server_lr) and self.server_lr > 0, "algorithm.server_lr", self.server_lr, "must be > 0")
