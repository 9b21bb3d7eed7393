"""How the tuner (hydra_plugins/fl_bench_optuna) scores a trial from its runs on the tuning seeds,
shared with the protocol that names the rule (fl_bench.analysis.reproduce)."""

from __future__ import annotations

import statistics

# mean: the average seed; worst: the worst seed (the largest value when minimizing), so a setting at the
# edge of stability, which collapses on some seeds, loses to one that holds on all; median: one outlying
# seed in three does not count
AGGREGATES = ("mean", "worst", "median")


def aggregate(values: list[float], how: str, direction: str) -> float:
    """A trial's objective from its per-seed ``values`` under the rule ``how`` (AGGREGATES)."""
    if how == "worst":
        return max(values) if direction == "minimize" else min(values)
    if how == "median":
        return float(statistics.median(values))
    return sum(values) / len(values)
