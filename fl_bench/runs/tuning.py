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


def ranked(trials, seeds: list[int], direction: str) -> list[dict]:
    """A study's completed settings best first, each ``{params, value, per_seed: {seed: value}}``
    (``trials``: Optuna's frozen trials of the fl_bench sweeper, whose runs were on ``seeds`` in that
    order; a proposal it told from history, a pruned or a failed trial is left out). Ties keep the
    order the trials ran in."""
    done = [t for t in trials if t.state.name == "COMPLETE" and "repeat_of" not in t.user_attrs and t.params]
    done.sort(key=lambda t: t.value if direction == "minimize" else -t.value)  # (a stable sort)
    return [{"params": dict(t.params), "value": float(t.value),
             "per_seed": dict(zip(seeds, map(float, t.user_attrs["per_seed"])))} for t in done]


def confirmed(candidates: list[dict], how: str, direction: str) -> dict:
    """The finalist to keep: the best ``how`` (AGGREGATES) over each candidate's ``per_seed`` values,
    the tuning seeds' and the confirmation seeds' together; a tie goes to the earlier candidate
    (the one the search ranked higher)."""
    scores = [aggregate(list(c["per_seed"].values()), how, direction) for c in candidates]
    best = (min if direction == "minimize" else max)(range(len(candidates)), key=lambda i: scores[i])
    return {**candidates[best], "value": scores[best]}
