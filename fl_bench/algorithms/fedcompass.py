"""FedCompass (Li, Chaturvedi, He, Chen, Singh, Kindratenko, Huerta, Kim & Madduri, "Efficient Cross-Silo Federated
Learning on Heterogeneous Client Devices using a Computing Power-Aware Scheduler", ICLR 2024): a semi-asynchronous
method whose server assigns each trip's local steps so that clients of similar speed arrive together, and
aggregates each such group at once.

Three components, each where its kind lives:

- the speed estimate and the step assignment: the Compass work schedule (:class:`fl_bench.engine.work.CompassSchedule`,
  ``algorithm/work_schedule=compass``);
- when the server steps (a group complete, its T_max timer, a client of unknown speed): the Compass step policy
  (:class:`fl_bench.engine.protocol.Compass`);
- the group aggregation: this server.

What was read: the authors' release APPFL/FedCompass@af96db2 (``src/appfl/scheduler/compass_scheduler.py``,
``src/appfl/aggregator/fedcompass_aggregator.py``, ``examples/config/server_fedcompass.yaml``), APPFL's current
version of both files, and the paper's abstract and Figure 1; the paper's body could not be read here, so no
equation number is quoted. Where the sources disagree, the reading chosen (each stated in the sweep file that
registers FedCompass's claim):

- staleness s(tau) = (1 + tau)^-a, a = ``algorithm.staleness.exponent`` 0.5, decaying as APPFL's current code has it; the
  release computes (1 + tau)^+a, which weighs staler updates more (taken as the sign slip APPFL fixed);
- staleness is measured when the upload's step is taken (as both versions of the code), not when it arrives;
- a client's first trip trains Q_min steps (Figure 1), and every speed is measured over the steps a trip trained
  (the release divides a first trip by Q_max, the steps its configs run);
- each upload counts once, in the step it enters (the release keys buffers by client, so a client's late update
  is overwritten by its next one before a step; and it counts a late update twice in its budget);
- weights p_i = 1/N with N the clients that train at once (``concurrent_clients``, the run's concurrency): in the
  paper's cross-silo runs every client trains at once, so that is its 1/N; on a cross-device workload (more
  clients than train at once) 1/N over all clients would shrink every step with the population.
"""

from __future__ import annotations

import numpy as np
import torch

from fl_bench.algorithms.base import AlgorithmConfig, ServerAlgorithm, ServerOptimized, StalenessScaled, Weighted
from fl_bench.algorithms.server_optimizers import ServerOptimizerStep
from fl_bench.contracts import Upload
from fl_bench.engine.protocol import Compass
from fl_bench.schema import build, require, schema


class FedCompass(ServerAlgorithm):
    """FedCompass's aggregation (the release's ``fedcompass_aggregator.py`` ``aggregate``, 31-70, its gradient
    form, which every released config uses): one step on a group's uploads and the general buffer's,

        w <- w - alpha sum_j p_j s(tau_j) Delta_j,      p_j = 1/N (``algorithm/weighting=uniform``)

    a weighted *sum*, not a mean: a group of k fresh uploads moves w by alpha k/N times their mean, and a step on
    one upload (a client of unknown speed) by alpha s(tau)/N times it. alpha is the server optimizer's lr (SGD at
    0.9, the release's; ``algorithm/server_optimizer=momentum`` is [L]'s FedCompass+M). s is the config's staleness
    function (``algorithm/staleness``). ``algorithm/weighting=examples``: p_j = n_j / (N mean_i n_i), the mean over
    all clients, which is n_j / sum_i n_i when N is every client (a weighting that is not constant is taken in
    examples' units: w_j / (N mean_i n_i))."""

    step_policy = Compass

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self._optimizer = ServerOptimizerStep(cfg, params)
        self._weighting, self._staleness = build(cfg.weighting), build(cfg.staleness)
        self._mean_size = float(np.mean(self.client_sizes))
        self._coefficients: list[float] = []  # p_j s(tau_j) of this step's uploads, in order

    def weight(self, upload: Upload) -> float:
        """p_j s(tau_j), the coefficient of the upload's Delta in the step."""
        p = 1.0 / self.cfg.concurrent_clients
        if not self._weighting.constant:
            p *= self._weighting.weight(upload) / self._mean_size
        return p * self._staleness.checked_scale(upload.staleness)

    def add(self, upload: Upload) -> None:
        coefficient = self.weight(upload)
        if not self._coefficients:
            self._optimizer.grad.zero_()
        self._optimizer.grad.add_(upload.vector, alpha=coefficient)
        self._coefficients.append(coefficient)

    def _step(self) -> None:
        self._optimizer.step()
        self.step_weights, self._coefficients = self._coefficients, []

    def server_state_nbytes(self) -> int:
        """The server optimizer's state (none for plain SGD; momentum: P values)."""
        return self._optimizer.state_nbytes


@schema("algorithm", "fedcompass", FedCompass)
class FedCompassConfig(Weighted, StalenessScaled, ServerOptimized, AlgorithmConfig):
    """FedCompass (Li et al., ICLR 2024): the Compass work schedule's groups (``algorithm/work_schedule=compass``,
    whose knobs are Q_min, Q_max, lambda and beta), each aggregated as w <- w - alpha sum_j p_j s(tau_j) Delta_j,
    alpha the server optimizer's lr (0.9)."""

    # N in p_j = 1/N: the clients that train at once (conf/algorithm/fedcompass.yaml: the run's concurrency)
    concurrent_clients: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.concurrent_clients >= 1, "algorithm.concurrent_clients", self.concurrent_clients, "must be >= 1")
