"""The pooled-data reference's config (``algorithm=centralized``): sequential SGD on every client's examples
pooled into one, run by :class:`fl_bench.runs.centralized.CentralizedRun` on a lightning.Trainer. It lives
with the runs, not with the server algorithms, which it is not: a run of its own, chosen from the algorithm
group so that a comparison's arms differ in one choice (``algorithm=fedavg`` against ``algorithm=centralized``).
The target is named as a string: the run module imports the run config, which imports this."""

from __future__ import annotations

from typing import Optional

from fl_bench.algorithms.base import SyncConfig
from fl_bench.schema import require, schema


@schema("algorithm", "centralized", "fl_bench.runs.centralized.CentralizedRun")
class CentralizedConfig(SyncConfig):
    """Sequential SGD on the pooled data (FedLaAvg's S-SGD, HFL's S-SGD) on a lightning.Trainer
    (fl_bench.runs.centralized): every round one trip of the same local steps, batch size and lr
    schedule as the federated runs, on all clients' examples pooled into one. Logged on the same axes
    (rounds, trips) as the others. It has none of the server algorithms' knobs (a server optimizer, weighting,
    staleness scaling)."""

    cohort: Optional[int] = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.cohort == 1, "algorithm.cohort", self.cohort, "centralized training is one model: must be 1")
        require(self.over_selection == 0, "algorithm.over_selection", self.over_selection, "must be 0 (one model)")
        # what acts on a client's anchor has nothing to act on; a round's timing (deadline, fixed_rounds,
        # late_uploads) has no clock to act on either: check_centralized refuses it with whatever else a preset set
        require(self.prox_mu == 0, "algorithm.prox_mu", self.prox_mu, "must be 0 (no downloaded model to stay near)")
        require(self.work_schedule.name == "fixed", "algorithm/work_schedule", self.work_schedule.name,
                "must be fixed: each round's one trip trains the local steps of algorithm.local_steps or local_epochs")
