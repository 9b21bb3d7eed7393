"""The measures a table reads (a sweep file's ``tables.<name>.measure``), one entry each: what its evidence
counts, how an effect compares two arms, and which page shows it; every stage after the sweep file reads these
entries instead of switching on the measure's name."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measure:
    """A table's measure. ``to_target``: the runs are counted until they reach the target accuracy (a miss
    counts as the budget), and two arms compare as a ratio of medians (lower is better); otherwise they
    compare as a difference of accuracies in points (higher is better). ``in_rounds``: counted in rounds
    (server steps) instead of client trips. ``reads_final``: the accuracy of the model each run ends with,
    not the best within the budget. ``judged_as``: the measure the verdict reads where it is not this one.
    ``page``: the table its page shows (fl_bench.analysis.report's pages; ``fairness``:
    fl_bench.analysis.fairness). ``axes``: the curves' x axes. ``unit``: the evidence's median, as its
    page names it. ``plots``: plots only this measure's page shows."""

    name: str
    to_target: bool
    page: str
    unit: str
    axes: tuple[str, str] = ("server_step", "trips")
    in_rounds: bool = False
    reads_final: bool = False
    judged_as: str | None = None
    plots: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """How an effect compares two arms: ``ratio`` or ``difference``."""
        return "ratio" if self.to_target else "difference"

    @property
    def accuracy(self) -> str:
        """The summary key an accuracy measure reads."""
        return "final_val_accuracy" if self.reads_final else "best_val_accuracy"

    @property
    def verdict(self) -> Measure:
        """The measure the verdicts read (FedStaleWeight's fairness table is judged on best accuracy)."""
        return MEASURES[self.judged_as] if self.judged_as else self


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
    Measure("privacy", to_target=False, page="privacy", unit="final accuracy (%)", reads_final=True, plots=("privacy",)),
    # FedStaleWeight's weight shares per group, with the evidence on best accuracy
    Measure("fairness", to_target=False, page="fairness", unit="best accuracy (%)", judged_as="best_accuracy"),
)}
# The measures a page of run directories shows by itself (python -m fl_bench.analysis.report --measure)
REPORT_MEASURES = tuple(name for name, measure in MEASURES.items() if measure.page != "fairness")
