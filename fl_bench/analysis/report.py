"""Tables and plots from finished runs, in the layout of FedBuff Table 1.

    python -m fl_bench.analysis.report multirun/2026-11-22/10-00-00 [more dirs] --name fedbuff_table1_smoke \
        [--reference fedbuff] [--by algorithm.name] [--out results]
    python -m fl_bench.analysis.report --wandb entity/project --name ...      # runs logged with logger=wandb

Reads every run directory below the given paths (``summary.json``, ``metrics.csv``,
``trips.csv``, ``.hydra/config.yaml``), or the same from the W&B API, and writes into ``--out``:
  <name>.md / <name>.csv   client trips to the target accuracy, mean over seeds, and the ratio to
                           the reference method's (FedBuff Table 1: "FedAvgM needs 1.7x"),
                           simulated time to the target;
                           ">budget" where some seed missed the target; runs of one method that
                           differ in more than the seed get a row each (fl_bench.analysis.run_frames);
  <name>_curves.png        validation accuracy against client trips and against simulated time,
                           one line per method, a band from the lowest to the highest seed;
  <name>_staleness.png     histogram of staleness over all trips, per method.
"""

from __future__ import annotations

import argparse
import os
import platform
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fl_bench.analysis import blocks  # noqa: E402
from fl_bench.analysis.forest import normalised, plot_forest  # noqa: E402
from fl_bench.analysis.verdict import EVIDENCE_SOURCE, evidence, evidence_markdown, evidence_section  # noqa: E402
from fl_bench.analysis.measures import MEASURES, REPORT_MEASURES  # noqa: E402
from fl_bench.analysis.run_frames import Frames, load_runs, load_wandb_runs, rounds_view  # noqa: E402

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
    _save(fig, path)


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


def markdown(table: pd.DataFrame) -> str:
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


SUMMARY = "\x00summary\x00"  # where write_report's text takes the table, rendered from the file it writes


def summary_block(name: str, table: pd.DataFrame, measure: str) -> str:
    """The page's table (means and spreads, as data) as its ``<name>.csv`` keeps it (``table``, read back), as
    the table block: the reproduction writes it, the scoreboard renders it again into pages made before."""
    page = MEASURES[measure].page
    text_columns = [c for c in ("ratio", "ratio (time)", "difference") if c in table]
    table = table.assign(**{c: table[c].astype(object).fillna("") for c in text_columns})
    shown = {"privacy": privacy_markdown, "costs": costs_markdown, "accuracy": accuracy_markdown,
             "to_target": markdown}[page](table)
    return blocks.marked("table", shown, f"{name}.csv ({measure})")


def _read_found(path: Path) -> pd.DataFrame:
    """An evidence file as :func:`fl_bench.analysis.verdict.evidence` returns it (its text cells '', not NaN)."""
    found = pd.read_csv(path).drop(columns=["paper"]).rename(columns={"arm": "method", "paper_effect": "paper"})
    text = [c for c in ("method", "vs", "paper", "claim", "verdict", "guard") if c in found]
    return found.assign(**{c: found[c].astype(object).fillna("").astype(str) for c in text})


def refresh_page(out: Path, name: str, page: str, draw: bool = True) -> str:
    """``page`` (``out``/<name>.md) with its blocks rendered again from the table's files beside it: the table
    from ``<name>.csv``, the evidence section from ``<name>_evidence.csv``, with its forest plot drawn again
    (unless not ``draw``: a check of the page's text alone)."""
    source = blocks.source(page, "table")
    if source is not None:
        measure = source.rsplit("(", 1)[1].rstrip(")")
        page = blocks.replaced(page, "table", summary_block(name, pd.read_csv(out / f"{name}.csv"), measure))
    if blocks.has(page, "evidence") and (out / f"{name}_evidence.csv").is_file():
        found = _read_found(out / f"{name}_evidence.csv")
        measure = str(found["measure"].iloc[0]) if len(found) else "trips"
        drawn = plot_forest(found, out / f"{name}_forest.png", name) if draw else bool(len(normalised(found)))
        plot = f"{name}_forest.png" if drawn else ""
        page = blocks.replaced(page, "evidence", blocks.marked("evidence", evidence_section(found, measure, plot),
                                                               EVIDENCE_SOURCE))
    return page


def _save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


AXIS_LABELS = {"trips": "client trips", "sim_time": "simulated time", "server_step": "rounds (server steps)",
               "upload_gb": "uploaded (GB)", "tflops": "local training (TFLOPs)"}


def plot_curves(metrics: pd.DataFrame, target: float, path: Path, xs: tuple[str, str] = ("trips", "sim_time")) -> None:
    """Validation accuracy against each of the two metrics columns ``xs``, one line per method
    (mean over seeds, a band from the lowest to the highest), the target dotted; saved to ``path``."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, x in zip(axes, xs):
        for method, group in metrics.groupby("method", sort=False):
            # Evaluations happen at the same trip counts (or rounds) in every seed; simulated time
            # differs, so it is averaged at each evaluation.
            key = "server_step" if x == "server_step" else "trips"
            stats = group.groupby(key).agg(x=(x, "mean"), mean=("val_accuracy", "mean"),
                                               low=("val_accuracy", "min"), high=("val_accuracy", "max"))
            line = ax.plot(stats["x"], stats["mean"], label=method)[0]
            ax.fill_between(stats["x"], stats["low"], stats["high"], color=line.get_color(), alpha=0.2)
        ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel(AXIS_LABELS[x])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation accuracy")
    axes[0].legend(loc="lower right", fontsize="small")
    _save(fig, path)


def plot_staleness(trips: pd.DataFrame, path: Path) -> None:
    """Histogram of the staleness of used uploads, per method; saved to ``path``."""
    fig, ax = plt.subplots(figsize=(6, 4))
    used = trips[trips["used"] == 1]
    top = int(used["staleness"].max()) + 1
    # Integer bins, at most 100 of them (at concurrency 1000 staleness reaches the hundreds); one outline
    # per method, not a bar per bin: overlapping methods stay readable and the plot is drawn in ms.
    bins = np.unique(np.linspace(0, top, min(top, 100) + 1).round())
    for method, group in used.groupby("method", sort=False):
        ax.hist(group["staleness"], bins=bins, weights=np.full(len(group), 1 / len(group)), histtype="step",
                linewidth=1.5, label=method)  # a bar's height: the fraction of the method's uploads in it
    ax.set_xlabel("staleness (server steps between download and use)")
    ax.set_ylabel("fraction of trips")
    ax.legend(loc="upper right", fontsize="small")
    _save(fig, path)


def machine() -> str:
    """This machine in one line: CPU, cores, GPU, Python and torch versions (under every report)."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                    if line.startswith("model name")), cpu)
    import torch

    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    return f"{cpu}, {os.cpu_count()} cores{gpu}; Python {platform.python_version()}, torch {torch.__version__}"


def plot_examples(trips: pd.DataFrame, path: Path) -> None:
    """FedBuff Fig. 7: the example counts of the clients whose updates were used, per method (a
    method that drops slow clients shifts this towards small clients)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, group in trips[trips["used"] == 1].groupby("method", sort=False):
        counts = group["num_examples"].value_counts().sort_index()  # one step per distinct count
        ax.step(counts.index, counts.cumsum() / counts.sum(), where="post",
                label=f"{method} (mean {group['num_examples'].mean():.1f})")
    ax.set_xscale("log")
    ax.set_xlabel("examples of a participating client (used updates)")
    ax.set_ylabel("fraction of used updates (CDF)")
    ax.legend(loc="lower right", fontsize="small")
    _save(fig, path)


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
    _save(fig, path)


def write_report(frames: Frames, name: str, out: Path, reference: str | None, arms: dict | None = None,
                 title: str | None = None, extra_seconds: float = 0.0, notes: str = "",
                 measure: str = "trips", found: pd.DataFrame | None = None,
                 written: list[Path] | None = None) -> pd.DataFrame:
    """``name``.md/.csv and its plots (each file's path appended to ``written`` as it is written: the
    command prints them). ``measure``: client ``trips`` to the target (FedBuff),
    ``rounds`` to the target (round-based papers: FedLaAvg Table 3) or ``best_accuracy`` within the
    budget (FedLaAvg Table 2), or ``final_accuracy``, the same table with the evidence on the model each run
    ends with. With ``arms`` (label -> the sweep file's ArmSpec) the table gains each arm's ratio
    (or difference) of means to the arm it is compared with, as data (the evidence section judges); ``extra_seconds`` (tuning) is added to the
    stated wall time; ``notes`` (what was measured about a difference) follow the table; ``found``: the
    evidence (fl_bench.analysis.verdict.evidence) when the caller has computed it."""
    if measure not in REPORT_MEASURES:
        raise ValueError(f"measure {measure!r}: choose one of {', '.join(REPORT_MEASURES)}")
    read = MEASURES[measure]
    runs, metrics, trips = frames
    seeds = sorted(runs["seed"].unique())
    if read.page == "privacy":
        table = privacy_table(runs)
        body = (f"FedBuff Fig. 4's measure: final validation accuracy (%) after the budget ({int(runs['client_trips'].max()):,} "
                f"client trips), mean ± std over seeds {', '.join(map(str, seeds))}, at each privacy level (epsilon spent, "
                f"from dp-accounting, at delta {runs['dp_delta'].dropna().iloc[0] if 'dp_delta' in runs else 'n/a'})"
                f".\n\n{SUMMARY}")
    elif read.page == "costs":
        table = costs_table(runs, metrics, reference)
        if arms is not None:
            table = differences_of_means(table, arms, reference)
        body = (f"FedGBO Table IV's layout: max validation accuracy (%) within the budget ({int(table['budget'].max()):,} "
                f"client trips, {int(table['rounds'].max()):,} rounds), mean over seeds {', '.join(map(str, seeds))} with its "
                f"95% confidence interval; the upload (GB) and local-training FLOPs (10^12, FLOPs counted by torch's "
                f"FlopCounterMode, a multiply-add = 2) spent when each run first reached its max, and to first reach "
                f"{reference}'s mean max accuracy (mean over seeds, – unless every seed reached it)"
                f"{'; difference: of the mean to that of the arm it is compared with, in points' if arms is not None else ''}."
                f"\n\n{SUMMARY}")
    elif read.page == "accuracy":  # one table; the evidence reads the best or the final model
        table = best_accuracy_table(runs, reference, metrics)
        if arms is not None:
            table = differences_of_means(table, arms, reference)
        budget = int(table["budget"].max())
        body = (f"Best validation accuracy (%) within the budget ({budget:,} client trips, {int(table['rounds'].max()):,} "
                f"rounds), mean ± std over seeds {', '.join(map(str, seeds))}; tail_accuracy: mean over each run's last "
                f"10% of evaluations{_group_note(runs)}"
                f"{'; the evidence below reads the final model accuracy (final_accuracy), not the best' if read.reads_final else ''}"
                f"{'; difference: of the mean to that of the arm it is compared with, in points, ' + reference + ' unless the arm names another' if reference else ''}"
                f".\n\n{SUMMARY}")
    else:
        unit = "rounds" if read.in_rounds else "client trips"
        table = trips_to_target_table(rounds_view(runs) if read.in_rounds else runs, reference)
        if arms is not None:
            table = ratios_of_means(table, arms, reference)
        target, budget = table["target_accuracy"].iloc[0], int(table["budget"].max())
        resolution = table["resolution"].max()
        if pd.isna(resolution):
            grid = "no method reached the target"
        else:
            relative = (table["resolution"] / table["trips_to_target"]).max()
            grid = f"at most {resolution:,.0f} {unit}, at most {relative:.1%} of the number it qualifies"
        body = (f"{unit.capitalize()} to {target:.0%} validation accuracy (column trips_to_target), mean ± std over seeds "
                f"{', '.join(map(str, seeds))} (\">{budget:,}\": some seed did not reach it within the budget of {budget:,} {unit})"
                f"{'; ratio: the ratio of mean ' + unit + ' (and time) to those of the arm it is compared with, ' + reference + ' unless the arm names another' if reference else ''}"
                f"; client_times_to_target: simulated time in mean client trip times. Resolution of {unit} to target: {grid} "
                f"(0 where every model was evaluated).\n\n{SUMMARY}")
    written = [] if written is None else written
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{name}.csv", index=False)
    written.append(out / f"{name}.csv")
    # the page shows the table as its file keeps it (the scoreboard renders it again from that file)
    body = body.replace(SUMMARY, summary_block(name, pd.read_csv(out / f"{name}.csv"), measure))
    judged = rounds_view(runs) if read.in_rounds else runs
    found = evidence(judged, reference, arms or {}, measure) if found is None else found
    plot = f"{name}_forest.png" if plot_forest(found, out / f"{name}_forest.png", name) else ""
    written += [out / plot] if plot else []
    body += "\n\n" + evidence_markdown(judged, reference, arms or {}, measure, found, plot)
    # Fig. 3's trips against concurrency when the table spans several concurrencies
    plots = ["curves", "staleness", "examples", *read.plots]
    if "concurrency" in table and table["concurrency"].nunique() > 1:
        plots.append("concurrency")
    (out / f"{name}.md").write_text(
        f"# {name}\n\n{title + chr(10) * 2 if title else ''}{body}\n\n"
        f"{notes.strip() + chr(10) * 2 if notes.strip() else ''}{len(runs)} runs, {runs['wall_seconds'].sum() + extra_seconds:,.0f} s of wall time in all "
        f"({extra_seconds:,.0f} s of it tuning; largest run {runs['wall_seconds'].max():,.0f} s); report written on {machine()}.\n\n"
        + "".join(f"![{plot}]({name}_{plot}.png)\n\n" for plot in plots)
    )
    written.append(out / f"{name}.md")
    target = float(runs["target_accuracy"].iloc[0])
    axes = read.axes
    if read.page == "costs":  # FedGBO's curves: accuracy against what was uploaded and computed
        metrics = metrics.assign(upload_gb=metrics["bytes_up"] / 1e9, tflops=metrics["flops"] / 1e12)
    draw = {"curves": lambda path: plot_curves(metrics, target, path, axes), "staleness": partial(plot_staleness, trips),
            "privacy": partial(plot_privacy, table), "examples": partial(plot_examples, trips),
            "concurrency": partial(plot_concurrency, table)}
    for plot in plots:  # the plots the page shows, and only those
        draw[plot](out / f"{name}_{plot}.png")
        written.append(out / f"{name}_{plot}.png")
    return table


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the documented command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.analysis.report", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="run or multirun directories")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs from W&B instead")
    parser.add_argument("--name", default="report", help="file name stem of the outputs")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--by", nargs="+", default=["algorithm.name"], help="config keys that name a method")
    parser.add_argument("--reference", help="method the others are compared with")
    parser.add_argument("--title", help="a line under the table's name")
    parser.add_argument("--notes", default="", help="findings printed after the table")
    parser.add_argument("--measure", choices=REPORT_MEASURES, default="trips",
                        help="client trips or rounds to the target, best accuracy within the budget, or costs "
                             "(FedGBO Table IV: max accuracy, upload GB and TFLOPs to it and to the reference's)")
    parser.add_argument("--publish", metavar="ENTITY/PROJECT",
                        help="also publish the table as a W&B Report there, beside its runs (logger=wandb runs)")
    parser.add_argument("--dry-run", action="store_true",
                        help="with --publish: write the Report's specification (NAME_wandb_report.json) instead")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring): the report of run directories or a W&B project,
    optionally published as a W&B Report."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.dry_run and not args.publish:
        parser.exit(2, "fl_bench.analysis.report: error: --dry-run goes with --publish ENTITY/PROJECT\n")
    try:
        if bool(args.paths) == bool(args.wandb):
            raise ValueError("give run directories or --wandb ENTITY/PROJECT (one of the two)")
        frames = load_wandb_runs(args.wandb, args.by) if args.wandb else load_runs(args.paths, args.by)
        written: list[Path] = []
        table = write_report(frames, args.name, args.out, args.reference, title=args.title, notes=args.notes,
                             measure=args.measure, written=written)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"fl_bench.analysis.report: error: {error}\n")
    page = MEASURES[args.measure].page
    if page == "privacy":
        print(privacy_markdown(table))
    else:
        print({"accuracy": accuracy_markdown, "costs": costs_markdown, "to_target": markdown}[page](table))
    print(f"written to {args.out}: {', '.join(path.name for path in written)}")
    if args.publish:
        from fl_bench.analysis.wandb_report import publish
        from fl_bench.errors import ConfigError

        try:
            where = publish(args.publish, args.name, args.out / f"{args.name}.md", frames[0], args.by, args.dry_run)
        except ConfigError as error:
            parser.exit(2, f"fl_bench.analysis.report: error: {error}\n")
        print(f"W&B Report specification written to {where}" if args.dry_run else f"W&B Report: {where}")


if __name__ == "__main__":
    main()
