"""The measures a table reads (a sweep file's ``tables.<name>.measure``), one entry each: what its evidence
counts of each run, how an effect compares two arms, and which page shows it; every stage after the sweep file
reads these entries instead of switching on the measure's name. A measure from outside fl_bench registers
itself, with its page's section, when its module is imported (fl_bench.analysis.sections.register;
docs/extending/measures.md): :func:`find` imports the plugin modules for a name it does not know yet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Measure:
    """A table's measure. ``to_target``: the runs are counted until they reach the target accuracy (a miss
    counts as the budget), and two arms compare as a ratio of medians (lower is better); otherwise they
    compare as a difference of accuracies in points (higher is better). ``in_rounds``: counted in rounds
    (server steps) instead of client trips. ``reads_final``: the accuracy of the model each run ends with,
    not the best within the budget. ``reads``: what the verdict reads of each run where it is not a column of
    the runs frame (:attr:`column`): a function of the runs frame (one row per run: its summary.json) giving one
    value per run, a fraction for a difference measure (shown in points). ``judged_as``: the measure the verdict
    reads where it is not this one. ``page``: the page kind that shows it (its section,
    fl_bench.analysis.sections.SECTIONS; ``fairness``: fl_bench.analysis.fairness). ``axes``: the curves'
    x axes. ``unit``: the evidence's median, as its page names it."""

    name: str
    to_target: bool
    page: str
    unit: str
    axes: tuple[str, str] = ("server_step", "trips")
    in_rounds: bool = False
    reads_final: bool = False
    judged_as: str | None = None
    reads: Callable[[pd.DataFrame], pd.Series] | None = None

    @property
    def kind(self) -> str:
        """How an effect compares two arms: ``ratio`` or ``difference``."""
        return "ratio" if self.to_target else "difference"

    @property
    def column(self) -> str:
        """The runs frame's column (a summary.json key) the verdict reads where ``reads`` is None: trips (or,
        in the rounds view, rounds) to the target, or the best or the final accuracy."""
        if self.to_target:
            return "trips_to_target"
        return "final_val_accuracy" if self.reads_final else "best_val_accuracy"

    @property
    def verdict(self) -> Measure:
        """The measure the verdicts read (FedStaleWeight's fairness table is judged on best accuracy)."""
        return MEASURES[self.judged_as] if self.judged_as else self

    def per_run(self, runs: pd.DataFrame) -> pd.Series:
        """One value per run of ``runs`` (its index), as the runs recorded it: ``reads(runs)``, else the column
        (NaN: a run that missed the target)."""
        return runs[self.column] if self.reads is None else self.reads(runs)

    def samples(self, group: pd.DataFrame) -> tuple[np.ndarray, bool]:
        """One value per seed of one arm's runs (``group``) as the verdict reads it, and whether a seed missed the
        target: a count to the target with a miss counted as the budget (max_trips), or points (100 x the
        fraction)."""
        values = self.per_run(group)
        if self.to_target:
            missed = values.isna()
            return values.fillna(group["max_trips"]).to_numpy(float), bool(missed.any())
        return 100 * values.to_numpy(float), False


MEASURES = {measure.name: measure for measure in (
    # client trips to the target (FedBuff)
    Measure("trips", to_target=True, page="to_target", unit="client trips to target", axes=("trips", "sim_time")),
    # rounds to the target (round-based papers: FedLaAvg Table 3)
    Measure("rounds", to_target=True, page="to_target", unit="rounds to target", in_rounds=True),
    # best accuracy within the budget (FedLaAvg Table 2)
    Measure("best_accuracy", to_target=False, page="accuracy", unit="best accuracy (%)"),
    # the same table with the evidence on the model each run ends with
    Measure("final_accuracy", to_target=False, page="accuracy", unit="final accuracy (%)", reads_final=True),
    # FedGBO Table IV: max accuracy, and the upload and computation spent to reach it
    Measure("costs", to_target=False, page="costs", unit="best accuracy (%)", axes=("upload_gb", "tflops")),
    # FedBuff Fig. 4: final accuracy at each privacy level
    Measure("privacy", to_target=False, page="privacy", unit="final accuracy (%)", reads_final=True),
    # FedStaleWeight's weight shares per group, with the evidence on best accuracy
    Measure("fairness", to_target=False, page="fairness", unit="best accuracy (%)", judged_as="best_accuracy"),
)}


def find(name: str) -> Measure | None:
    """The measure ``name``; where none has that name yet, the plugin modules are imported first (a plugin's
    measure registers itself: fl_bench.schema.load_plugins, ConfigError for one that cannot be imported).
    None for a name no measure has."""
    if name not in MEASURES:
        from fl_bench.schema import load_plugins

        load_plugins()
    return MEASURES.get(name)
