"""A report page's sections, one per page kind (a measure's ``page``): the table the page shows, the sentence
above it, its markdown, the comparison of arms beside the means and the plots only that kind's pages show
(:class:`Section`), in :data:`SECTIONS`, which fl_bench.analysis.report looks up instead of switching on the
measure. The paper-specific layouts and prose live with their sections: FedBuff Table 1 (trips or rounds to
the target), FedLaAvg Table 2 (best accuracy), FedGBO Table IV (costs), FedBuff Fig. 4 (privacy).

A new measure is one module: its :class:`fl_bench.analysis.measures.Measure` (what the verdict reads of each
run) and, for a new page kind, its :class:`Section`, given to :func:`register` when the module is imported (a
plugin module: ``FL_BENCH_PLUGINS`` or the ``fl_bench.plugins`` entry points; docs/extending/measures.md).

One module for the four sections rather than a package of one module each: they share their tables (the
costs table extends the accuracy table, both compare arms by differences of means), which modules of one
floor of the analysis pipeline could not import from each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fl_bench.analysis.measures import MEASURES, Measure, find  # noqa: E402


def save_figure(fig: plt.Figure, path: Path) -> None:
    """A page's plot, laid out and written to ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def trips_to_target_table(runs: pd.DataFrame, reference: str | None) -> pd.DataFrame:
    """Per method: seeds, mean (and std) client trips to target (NaN if a seed missed it), the
    evaluation grid's resolution at the crossing, simulated time to target (also in mean client
    trip times, FedBuff Table 6's unit), and the ratio to the reference method."""
    rows = []
    for method, group in runs.groupby("method", sort=False):
        reached = group["trips_to_target"].notna().all()
        client_time = group.get("mean_client_time", pd.Series(float("nan"), index=group.index))
        rows.append({
            "method": method,
            "algorithm": group["algorithm"].iloc[0],
            "seeds": len(group),
            "diverged": int((group.get("status", pd.Series(dtype=str)) == "diverged").sum()),
            "concurrency": int(group["concurrency"].iloc[0]),
            "target_accuracy": group["target_accuracy"].iloc[0],
            "budget": int(group["max_trips"].max()),
            "trips_to_target": group["trips_to_target"].mean() if reached else float("nan"),
            "trips_std": group["trips_to_target"].std(ddof=0) if reached else float("nan"),
            "resolution": group.get("trips_to_target_resolution", pd.Series(dtype=float)).max(),
            "sim_time_to_target": group["sim_time_to_target"].mean() if reached else float("nan"),
            "client_times_to_target": (group["sim_time_to_target"] / client_time).mean() if reached else float("nan"),
            "final_val_accuracy": group["final_val_accuracy"].mean(),
        })
    table = pd.DataFrame(rows)
    if reference is not None:
        if reference not in set(table["method"]):
            raise ValueError(f"reference method {reference!r} is not among the runs: {', '.join(table['method'])}")
        base = table.loc[table["method"] == reference, "trips_to_target"].iloc[0]
        table["vs_reference"] = table["trips_to_target"] / base  # FedBuff Table 1: "FedAvgM needs 1.7x"
    return table


def best_accuracy_table(runs: pd.DataFrame, reference: str | None, metrics: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per method: best validation accuracy within the budget (FedLaAvg Table 2, FedGBO Table IV),
    mean and std over seeds, and its difference to the reference method in points. With ``metrics``,
    also the mean accuracy over each run's last 10% of evaluations (``tail_accuracy``): where the best
    is a maximum over time, the tail shows a model that oscillates (FedAvg under intermittent
    availability, FedLaAvg Example 1)."""
    tails = {}
    if metrics is not None:
        for run, group in metrics.groupby("run"):
            tails[run] = group["val_accuracy"].iloc[-max(1, len(group) // 10):].mean()
    rows = []
    for method, group in runs.groupby("method", sort=False):
        rows.append({
            "method": method,
            "algorithm": group["algorithm"].iloc[0],
            "seeds": len(group),
            "diverged": int((group.get("status", pd.Series(dtype=str)) == "diverged").sum()),
            "budget": int(group["max_trips"].max()),
            "rounds": int(group["server_steps"].max()),
            "best_accuracy": 100 * group["best_val_accuracy"].mean(),
            "best_std": 100 * group["best_val_accuracy"].std(ddof=0),
            "tail_accuracy": 100 * np.mean([tails.get(run, np.nan) for run in group["run"]]) if tails else np.nan,
            "final_val_accuracy": group["final_val_accuracy"].mean(),
            "final_std": group["final_val_accuracy"].std(ddof=0),
            **_accuracy_by_group(group),
        })
    table = pd.DataFrame(rows)
    if reference is not None:
        base = table.loc[table["method"] == reference, "best_accuracy"]
        if base.empty:
            raise ValueError(f"reference method {reference!r} is not among the runs: {', '.join(table['method'])}")
        table["vs_reference"] = table["best_accuracy"] - base.iloc[0]
    return table


def _accuracy_by_group(group: pd.DataFrame) -> dict[str, float]:
    """Median over seeds (%) of the final model's accuracy on the normal devices' and the stragglers'
    data (summary's final_val_accuracy_by_group, speed=stragglers); nothing when no run recorded it."""
    if "final_val_accuracy_by_group" not in group:
        return {}
    by_group = group["final_val_accuracy_by_group"].dropna()  # NaN: a run under another speed
    found = {f"{name} acc": 100 * float(np.median([g[name] for g in by_group])) if len(by_group) else float("nan")
             for name in ("normal", "straggler")}
    weights = group["straggler_step_weight"].dropna() if "straggler_step_weight" in group else pd.Series(dtype=float)
    found["straggler weight"] = float(np.median(weights)) if len(weights) else float("nan")
    return found


def _group_note(runs: pd.DataFrame) -> str:
    """What the normal / straggler columns measure, where the table has them."""
    if "val_accuracy_by_group_basis" not in runs:
        return ""
    bases = " or ".join(runs["val_accuracy_by_group_basis"].dropna().unique())
    return (f"; normal acc / straggler acc: the final model's accuracy on the normal devices' and on the stragglers' "
            f"data ({bases}), median over seeds, – for runs without stragglers; straggler weight: the stragglers' "
            f"uploads' shares of the server steps summed over the run (in steps: each step's shares sum to 1), median "
            f"over seeds, – where the algorithm logs no shares")


def _at_first(group: pd.DataFrame, reached: pd.Series) -> pd.Series:
    """The evaluation row where ``reached`` is first true (None if never)."""
    return group.loc[reached.idxmax()] if reached.any() else None


def costs_table(runs: pd.DataFrame, metrics: pd.DataFrame, reference: str | None) -> pd.DataFrame:
    """FedGBO Table IV's layout, per method: max accuracy (mean over seeds) with its 95% confidence
    interval (Student t over the seeds), the upload GB and TFLOPs each run had spent when it first
    reached its own max (mean over seeds), and those to first reach the reference's (FedAvg's) mean max
    accuracy, with how many seeds did (NaN unless all did). Costs are metrics.csv's cumulative
    bytes_up and flops at that evaluation."""
    from scipy import stats

    table = best_accuracy_table(runs, reference, metrics)
    target = None
    if reference is not None:
        target = runs.loc[runs["method"] == reference, "best_val_accuracy"].mean()
    by_run = dict(tuple(metrics.groupby("run")))
    rows = []
    for method, group in runs.groupby("method", sort=False):
        n, best = len(group), group["best_val_accuracy"]
        half_width = stats.t.ppf(0.975, n - 1) * best.std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
        at_max = [_at_first(by_run[r], by_run[r]["val_accuracy"] >= by_run[r]["val_accuracy"].max()) for r in group["run"]]
        at_ref = [_at_first(by_run[r], by_run[r]["val_accuracy"] >= target) if target is not None else None for r in group["run"]]
        reached = [row for row in at_ref if row is not None]
        all_reached = len(reached) == n
        rows.append({
            "method": method,
            "ci95": 100 * half_width,
            "upload_gb_at_max": np.mean([row["bytes_up"] for row in at_max]) / 1e9,
            "tflops_at_max": np.mean([row["flops"] for row in at_max]) / 1e12,
            "rounds_at_max": np.mean([row["server_step"] for row in at_max]),
            "reached_reference": f"{len(reached)}/{n}",
            "upload_gb_to_reference": np.mean([row["bytes_up"] for row in reached]) / 1e9 if all_reached else float("nan"),
            "tflops_to_reference": np.mean([row["flops"] for row in reached]) / 1e12 if all_reached else float("nan"),
            "rounds_to_reference": np.mean([row["server_step"] for row in reached]) if all_reached else float("nan"),
        })
    return table.merge(pd.DataFrame(rows), on="method")


def costs_markdown(table: pd.DataFrame) -> str:
    """:func:`costs_table` (with any paper columns) as a markdown table."""
    shown = pd.DataFrame({"method": table["method"]})
    shown["max accuracy (95% CI)"] = [f"{v:.2f} (± {c:.2f})" + (f" ({d} diverged)" if d else "")
                                      for v, c, d in zip(table["best_accuracy"], table["ci95"], table["diverged"])]
    for column, label in (("upload_gb_at_max", "upload GB"), ("tflops_at_max", "TFLOPs"), ("rounds_at_max", "rounds")):
        shown[f"{label} to max"] = table[column].map(lambda v: f"{v:.4g}")
    shown["reached reference max"] = table["reached_reference"]
    for column, label in (("upload_gb_to_reference", "upload GB"), ("tflops_to_reference", "TFLOPs"),
                          ("rounds_to_reference", "rounds")):
        shown[f"{label} to reference max"] = table[column].map(lambda v: "–" if pd.isna(v) else f"{v:.4g}")
    if "difference" in table:
        shown["difference"] = table["difference"]
    return shown.to_markdown(index=False, disable_numparse=True)  # keep "+0.40" and "4.5e-05" as written


def privacy_table(runs: pd.DataFrame) -> pd.DataFrame:
    """FedBuff Fig. 4: final accuracy per method (algorithm + DP mechanism) at each privacy level (the
    summary's dp_target_epsilon where sigma was calibrated, else dp_epsilon), with the largest epsilon a
    seed spent (dp_epsilon, at dp_delta, never above the target), mean and std over seeds; non-private
    runs have epsilon inf."""
    missing = pd.Series(np.nan, index=runs.index, dtype=float)
    spent = runs.get("dp_epsilon", missing).astype(float).fillna(np.inf)
    runs = runs.assign(
        mechanism=runs.get("dp_mechanism", pd.Series(index=runs.index, dtype=object)).fillna("none"),
        epsilon=spent, level=runs.get("dp_target_epsilon", missing).astype(float).fillna(spent).round(1),
    )
    runs = runs.assign(method=runs["algorithm"] + " + " + runs["mechanism"])
    rows = []
    for (method, level), group in runs.groupby(["method", "level"], sort=True):
        rows.append({"method": method, "level": level, "epsilon": group["epsilon"].max(), "seeds": len(group),
                     "final_accuracy": 100 * group["final_val_accuracy"].mean(),
                     "final_std": 100 * group["final_val_accuracy"].std(ddof=0),
                     "noise_multiplier": group.get("dp_noise_multiplier", pd.Series(np.nan, index=group.index)).mean()})
    return pd.DataFrame(rows)


def privacy_markdown(table: pd.DataFrame) -> str:
    """Per epsilon: each method's final accuracy and which is best (data; the evidence section judges)."""
    private = table[np.isfinite(table["epsilon"])]
    wide = private.assign(level=private["level"].round(0), cell=[f"{a:.2f} ± {s:.2f}" for a, s in
                                                                    zip(private["final_accuracy"], private["final_std"])])
    out = wide.pivot(index="level", columns="method", values="cell")
    winners = wide.loc[wide.groupby("level")["final_accuracy"].idxmax()].set_index("level")["method"]
    out["best"] = winners
    out.index.name = "epsilon"
    nonprivate = table[~np.isfinite(table["epsilon"])]
    lines = "; ".join(f"{m}: {a:.2f} ± {s:.2f}" for m, a, s in zip(nonprivate["method"], nonprivate["final_accuracy"],
                                                                   nonprivate["final_std"]))
    return out.reset_index().to_markdown(index=False, disable_numparse=True) + (f"\n\nWithout DP: {lines}." if lines else "")


def plot_privacy(table: pd.DataFrame, path: Path) -> None:
    """FedBuff Fig. 4: final accuracy against epsilon per private method (error bars: std over
    seeds), non-private methods as horizontal lines; saved to ``path``."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, group in table[np.isfinite(table["epsilon"])].groupby("method"):
        ax.errorbar(group["epsilon"], group["final_accuracy"], yerr=group["final_std"], marker="o", capsize=3, label=method)
    for method, row in table[~np.isfinite(table["epsilon"])].set_index("method").iterrows():
        ax.axhline(row["final_accuracy"], linestyle=":", linewidth=1, color="grey")
        ax.annotate(f"{method} (no DP)", (ax.get_xlim()[0], row["final_accuracy"]), fontsize="x-small", va="bottom")
    ax.set_xlabel("epsilon (delta 1e-7)")
    ax.set_ylabel("final validation accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    save_figure(fig, path)


def differences_of_means(table: pd.DataFrame, arms: dict, reference: str) -> pd.DataFrame:
    """Per arm compared with another (``vs``, default the reference): the difference of the mean accuracies
    in points, as data beside the means; the judgement is the evidence's (fl_bench.analysis.verdict), on
    medians and their intervals, with the paper's numbers."""
    by_method = table.set_index("method")
    out = table.drop(columns=["vs_reference"], errors="ignore")
    diffs = []
    for method in table["method"]:
        arm = arms.get(method)
        vs = arm.vs if arm is not None and arm.vs is not None else reference
        shown = method != vs and vs in by_method.index
        diffs.append(f"{by_method.loc[method, 'best_accuracy'] - by_method.loc[vs, 'best_accuracy']:+.2f} vs {vs}"
                     if shown else "")
    out["difference"] = diffs
    return out


def accuracy_markdown(table: pd.DataFrame) -> str:
    """:func:`best_accuracy_table` (with any paper columns) as a markdown table, accuracies as
    mean ± std."""
    shown = table.copy()
    shown["best_accuracy"] = [f"{v:.2f} ± {sd:.2f}" + (f" ({d} diverged)" if d else "")
                              for v, sd, d in zip(table["best_accuracy"], table["best_std"], table["diverged"])]
    shown["final_val_accuracy"] = [f"{100 * v:.2f} ± {100 * sd:.2f}" for v, sd in zip(table["final_val_accuracy"], table["final_std"])]
    for column in ("tail_accuracy", "normal acc", "straggler acc", "straggler weight"):
        if column in shown:
            shown[column] = shown[column].map(lambda v: "–" if pd.isna(v) else f"{v:.2f}")
    if "vs_reference" in shown:
        shown["vs_reference"] = [f"{v:+.2f}" for v in table["vs_reference"]]
    return shown.drop(columns=["algorithm", "best_std", "final_std", "diverged"]).rename(
        columns={"final_val_accuracy": "final_accuracy"}).to_markdown(index=False)


def ratios_of_means(table: pd.DataFrame, arms: dict, reference: str) -> pd.DataFrame:
    """Per arm compared with another (``vs``, default the reference; shown where the arm names a ``vs`` or a
    ``paper``): its ratio of mean client trips and of mean simulated time to that arm's, as data beside the
    means ('>' where this arm missed the target: its budget over the other's mean); the judgement is the
    evidence's (fl_bench.analysis.verdict), on medians and their intervals, with the paper's numbers."""
    by_method = table.set_index("method")
    out = table.drop(columns=["vs_reference"], errors="ignore")  # "ratio" says it, per arm
    for suffix, column in (("", "trips_to_target"), (" (time)", "client_times_to_target")):
        ratios = []
        for method in table["method"]:
            arm = arms.get(method)
            vs = arm.vs if arm is not None and arm.vs is not None else reference
            ours = by_method.loc[method, column]
            base = by_method.loc[vs, column] if vs in by_method.index else float("nan")  # vs not run
            lower_bound = pd.isna(ours) and not pd.isna(base)  # this method missed the target
            if lower_bound and not suffix:
                ours = by_method.loc[method, "budget"]
            shown = arm is not None and (arm.vs is not None or arm.paper is not None)  # a ratio the table means to show
            ratio = ours / base if shown and method != vs else float("nan")
            ratios.append("" if pd.isna(ratio) else (">" if lower_bound else "") + f"{ratio:.2f}×")
        out[f"ratio{suffix}"] = ratios
    return out


def to_target_markdown(table: pd.DataFrame) -> str:
    """:func:`trips_to_target_table` (with any paper columns) as a markdown table: trips to the
    target as mean ± std, or ">budget" where some seed missed it."""
    shown = table.copy()
    shown["trips_to_target"] = [
        f"{v:,.0f} ± {sd:,.0f}" if pd.notna(v) else f">{b:,}" + (f" ({d} diverged)" if d else "")
        for v, sd, b, d in zip(table["trips_to_target"], table["trips_std"], table["budget"], table["diverged"])
    ]
    if "vs_reference" in shown:
        shown["vs_reference"] = [f"{v:.2f}×" if pd.notna(v) else "–" for v in table["vs_reference"]]
    shown["resolution"] = [f"{v:,.0f}" if pd.notna(v) else "–" for v in table["resolution"]]
    shown["sim_time_to_target"] = [f"{v:,.1f}" if pd.notna(v) else "–" for v in table["sim_time_to_target"]]
    shown["client_times_to_target"] = [f"{v:,.1f}" if pd.notna(v) else "–" for v in table["client_times_to_target"]]
    shown["final_val_accuracy"] = shown["final_val_accuracy"].map("{:.3f}".format)
    return shown.drop(columns=["algorithm", "budget", "trips_std", "target_accuracy", "diverged"]).to_markdown(index=False)

def plot_concurrency(table: pd.DataFrame, path: Path) -> None:
    """FedBuff Fig. 3: client trips to target against concurrency, one line per method label without
    its trailing concurrency ("fedbuff c10" or "fedbuff [concurrency=10]" -> "fedbuff"; a point is
    missing where a seed missed)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    series = table["method"].str.replace(r"\s*(c\d+|\[concurrency=\d+\])$", "", regex=True)
    for algorithm, group in table.groupby(series, sort=False):
        group = group.sort_values("concurrency")
        ax.errorbar(group["concurrency"], group["trips_to_target"], yerr=group["trips_std"], marker="o",
                    capsize=3, label=algorithm)
    ax.set_xscale("log")
    ax.set_xlabel("concurrency")
    ax.set_ylabel("client trips to target")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path)



def _seeds(runs: pd.DataFrame) -> str:
    return ", ".join(map(str, sorted(runs["seed"].unique())))


def describe_to_target(runs: pd.DataFrame, table: pd.DataFrame, reference: str | None, measure: Measure,
                       arms: dict | None) -> str:
    """FedBuff Table 1's sentence: trips (or rounds) to the target, the budget a miss counts as, the ratio's
    meaning and the resolution of the evaluation grid at the crossing."""
    unit = "rounds" if measure.in_rounds else "client trips"
    target, budget = table["target_accuracy"].iloc[0], int(table["budget"].max())
    resolution = table["resolution"].max()
    if pd.isna(resolution):
        grid = "no method reached the target"
    else:
        relative = (table["resolution"] / table["trips_to_target"]).max()
        grid = f"at most {resolution:,.0f} {unit}, at most {relative:.1%} of the number it qualifies"
    return (f"{unit.capitalize()} to {target:.0%} validation accuracy (column trips_to_target), mean ± std over seeds "
            f"{_seeds(runs)} (\">{budget:,}\": some seed did not reach it within the budget of {budget:,} {unit})"
            f"{'; ratio: the ratio of mean ' + unit + ' (and time) to those of the arm it is compared with, ' + reference + ' unless the arm names another' if reference else ''}"
            f"; client_times_to_target: simulated time in mean client trip times. Resolution of {unit} to target: {grid} "
            f"(0 where every model was evaluated).")


def describe_accuracy(runs: pd.DataFrame, table: pd.DataFrame, reference: str | None, measure: Measure,
                      arms: dict | None) -> str:
    """FedLaAvg Table 2's sentence: best accuracy within the budget, the tail and group columns, and which
    model the evidence reads (one table for the best and the final model)."""
    budget = int(table["budget"].max())
    return (f"Best validation accuracy (%) within the budget ({budget:,} client trips, {int(table['rounds'].max()):,} "
            f"rounds), mean ± std over seeds {_seeds(runs)}; tail_accuracy: mean over each run's last "
            f"10% of evaluations{_group_note(runs)}"
            f"{'; the evidence below reads the final model accuracy (final_accuracy), not the best' if measure.reads_final else ''}"
            f"{'; difference: of the mean to that of the arm it is compared with, in points, ' + reference + ' unless the arm names another' if reference else ''}"
            f".")


def describe_costs(runs: pd.DataFrame, table: pd.DataFrame, reference: str | None, measure: Measure,
                   arms: dict | None) -> str:
    """FedGBO Table IV's sentence: max accuracy with its interval, and the upload and FLOPs spent to reach it."""
    return (f"FedGBO Table IV's layout: max validation accuracy (%) within the budget ({int(table['budget'].max()):,} "
            f"client trips, {int(table['rounds'].max()):,} rounds), mean over seeds {_seeds(runs)} with its "
            f"95% confidence interval; the upload (GB) and local-training FLOPs (10^12, FLOPs counted by torch's "
            f"FlopCounterMode, a multiply-add = 2) spent when each run first reached its max, and to first reach "
            f"{reference}'s mean max accuracy (mean over seeds, – unless every seed reached it)"
            f"{'; difference: of the mean to that of the arm it is compared with, in points' if arms is not None else ''}.")


def describe_privacy(runs: pd.DataFrame, table: pd.DataFrame, reference: str | None, measure: Measure,
                     arms: dict | None) -> str:
    """FedBuff Fig. 4's sentence: final accuracy after the budget at each privacy level."""
    return (f"FedBuff Fig. 4's measure: final validation accuracy (%) after the budget ({int(runs['client_trips'].max()):,} "
            f"client trips), mean ± std over seeds {_seeds(runs)}, at each privacy level (epsilon spent, "
            f"from dp-accounting, at delta {runs['dp_delta'].dropna().iloc[0] if 'dp_delta' in runs else 'n/a'})"
            f".")


def no_plots(table: pd.DataFrame) -> dict[str, Callable[[Path], None]]:
    """A section without plots of its own."""
    return {}


@dataclass(frozen=True)
class Section:
    """What a report page of one page kind shows between its title and its Evidence section, and the plots only
    that kind's pages add to the curves, staleness and examples every page shows:

    - ``table(runs, metrics, reference, measure)``: one row per method, written to ``<name>.csv``; ``runs`` as
      the verdict reads them (rounds in place of trips for a measure ``in_rounds``), ``metrics`` every
      evaluation, ``reference`` the method the others are compared with (or None);
    - ``describe(runs, table, reference, measure, arms)``: the sentence above the table, what its columns
      measure (``arms``: the sweep file's arms by label, None from the command line);
    - ``markdown(table)``: the table as the page shows it, from the table as ``<name>.csv`` keeps it (the
      scoreboard renders it again from that file);
    - ``compare(table, arms, reference)``: the table with each compared arm's ratio or difference of means to
      its ``vs`` beside the means, as data (None: no comparison; the Evidence section judges either way);
    - ``plots(table)``: the plots only this kind's pages show, name -> draw(path) (the page shows
      ``<name>_<plot>.png``)."""

    table: Callable[[pd.DataFrame, pd.DataFrame, str | None, Measure], pd.DataFrame]
    describe: Callable[[pd.DataFrame, pd.DataFrame, str | None, Measure, dict | None], str]
    markdown: Callable[[pd.DataFrame], str]
    compare: Callable[[pd.DataFrame, dict, str | None], pd.DataFrame] | None = None
    plots: Callable[[pd.DataFrame], dict[str, Callable[[Path], None]]] = no_plots


def _concurrency_plot(table: pd.DataFrame) -> dict[str, Callable[[Path], None]]:
    """FedBuff Fig. 3's trips against concurrency, where the table spans several concurrencies."""
    return {"concurrency": partial(plot_concurrency, table)} if table["concurrency"].nunique() > 1 else {}


# page kind -> its section (a measure's ``page``; ``fairness`` pages are fl_bench.analysis.fairness's own)
SECTIONS: dict[str, Section] = {
    # FedBuff Table 1 (client trips), FedLaAvg Table 3 (rounds): to the target, ratios of means
    "to_target": Section(table=lambda runs, metrics, reference, measure: trips_to_target_table(runs, reference),
                         describe=describe_to_target, markdown=to_target_markdown, compare=ratios_of_means,
                         plots=_concurrency_plot),
    # FedLaAvg Table 2: best (or final) accuracy within the budget, differences of means
    "accuracy": Section(table=lambda runs, metrics, reference, measure: best_accuracy_table(runs, reference, metrics),
                        describe=describe_accuracy, markdown=accuracy_markdown, compare=differences_of_means),
    # FedGBO Table IV: max accuracy, and the upload and computation spent to reach it
    "costs": Section(table=lambda runs, metrics, reference, measure: costs_table(runs, metrics, reference),
                     describe=describe_costs, markdown=costs_markdown, compare=differences_of_means),
    # FedBuff Fig. 4: final accuracy at each privacy level
    "privacy": Section(table=lambda runs, metrics, reference, measure: privacy_table(runs),
                       describe=describe_privacy, markdown=privacy_markdown,
                       plots=lambda table: {"privacy": partial(plot_privacy, table)}),
}


def report_measures() -> tuple[str, ...]:
    """The measures a page of run directories shows by itself (python -m fl_bench.analysis.report --measure):
    those whose page kind has a section."""
    return tuple(name for name, measure in MEASURES.items() if measure.page in SECTIONS)


def section_of(measure: str) -> Section:
    """The section of ``measure``'s page (a plugin's measure: its module imported first,
    :func:`fl_bench.analysis.measures.find`); ValueError naming the choices for a measure without one."""
    found = find(measure)
    if found is None or found.page not in SECTIONS:
        raise ValueError(f"measure {measure!r}: choose one of {', '.join(report_measures())}")
    return SECTIONS[found.page]


def register(measure: Measure, section: Section | None = None) -> Measure:
    """Add ``measure`` to the measures (:data:`fl_bench.analysis.measures.MEASURES`), and ``section`` as the
    section of its page kind where it brings one (a measure of an existing kind, ``accuracy`` say, brings none);
    ValueError where its name or page kind is another's already, or its page kind has no section. Called
    where its module is imported (docs/extending/measures.md); returns ``measure``."""
    if MEASURES.get(measure.name, measure) != measure:
        raise ValueError(f"measure {measure.name!r} is registered already, as another measure: choose another name")
    if section is not None and SECTIONS.get(measure.page, section) is not section:
        raise ValueError(f"page kind {measure.page!r} has its section already: choose another page kind, or "
                         f"register the measure without a section to show it as {measure.page!r} pages do")
    if section is None and measure.page not in SECTIONS:
        raise ValueError(f"page kind {measure.page!r} has no section: give one, or choose one of {', '.join(SECTIONS)}")
    if measure.judged_as is not None and measure.judged_as not in MEASURES:
        raise ValueError(f"measure {measure.name!r} is judged as {measure.judged_as!r}, which is no measure")
    MEASURES[measure.name] = measure
    if section is not None:
        SECTIONS[measure.page] = section
    return measure
