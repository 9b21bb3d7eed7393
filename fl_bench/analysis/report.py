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
That is the page of ``--measure trips``; every measure's page has the table, the sentence above it and the
plots of its page kind's section (fl_bench.analysis.sections; a measure of a plugin: docs/extending/measures.md),
then its Evidence section.
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
from fl_bench.analysis.measures import MEASURES  # noqa: E402
from fl_bench.analysis.run_frames import Frames, load_runs, load_wandb_runs, rounds_view  # noqa: E402
from fl_bench.analysis.sections import report_measures, save_figure, section_of  # noqa: E402
from fl_bench.errors import ConfigError  # noqa: E402
from fl_bench.schema import load_plugins  # noqa: E402

def summary_block(name: str, table: pd.DataFrame, measure: str) -> str:
    """The page's table (means and spreads, as data) as its ``<name>.csv`` keeps it (``table``, read back), as
    the table block: the reproduction writes it, the scoreboard renders it again into pages made before, in the markdown of its measure's section (fl_bench.analysis.sections)."""
    text_columns = [c for c in ("ratio", "ratio (time)", "difference") if c in table]
    table = table.assign(**{c: table[c].astype(object).fillna("") for c in text_columns})
    return blocks.marked("table", section_of(measure).markdown(table), f"{name}.csv ({measure})")


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


AXIS_LABELS = {"trips": "client trips", "sim_time": "simulated time", "server_step": "rounds (server steps)",
               "upload_gb": "uploaded (GB)", "tflops": "local training (TFLOPs)"}
# axes computed from metrics.csv's columns
DERIVED_AXES = {"upload_gb": lambda metrics: metrics["bytes_up"] / 1e9, "tflops": lambda metrics: metrics["flops"] / 1e12}


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
    save_figure(fig, path)


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
    save_figure(fig, path)


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
    save_figure(fig, path)
def write_report(frames: Frames, name: str, out: Path, reference: str | None, arms: dict | None = None,
                 title: str | None = None, extra_seconds: float = 0.0, notes: str = "",
                 measure: str = "trips", found: pd.DataFrame | None = None,
                 written: list[Path] | None = None) -> pd.DataFrame:
    """``name``.md/.csv and its plots (each file's path appended to ``written`` as it is written: the
    command prints them). ``measure``: client ``trips`` to the target (FedBuff),
    ``rounds`` to the target (round-based papers: FedLaAvg Table 3) or ``best_accuracy`` within the
    budget (FedLaAvg Table 2), or ``final_accuracy``, the same table with the evidence on the model each run
    ends with, or any other measure whose page kind has a section: the section (fl_bench.analysis.sections)
    gives the table, the sentence above it, its markdown, the comparison of arms and its own plots. With ``arms`` (label -> the sweep file's ArmSpec) the table gains each arm's ratio
    (or difference) of means to the arm it is compared with, as data (the evidence section judges); ``extra_seconds`` (tuning) is added to the
    stated wall time; ``notes`` (what was measured about a difference) follow the table; ``found``: the
    evidence (fl_bench.analysis.verdict.evidence) when the caller has computed it."""
    section = section_of(measure)  # (ValueError naming the choices)
    read = MEASURES[measure]
    runs, metrics, trips = frames
    judged = rounds_view(runs) if read.in_rounds else runs  # the runs as the verdict reads them
    table = section.table(judged, metrics, reference, read)
    if arms is not None and section.compare is not None:
        table = section.compare(table, arms, reference)
    written = [] if written is None else written
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{name}.csv", index=False)
    written.append(out / f"{name}.csv")
    # the page shows the table as its file keeps it (the scoreboard renders it again from that file)
    body = (section.describe(runs, table, reference, read, arms) + "\n\n"
            + summary_block(name, pd.read_csv(out / f"{name}.csv"), measure))
    found = evidence(judged, reference, arms or {}, measure) if found is None else found
    plot = f"{name}_forest.png" if plot_forest(found, out / f"{name}_forest.png", name) else ""
    written += [out / plot] if plot else []
    body += "\n\n" + evidence_markdown(judged, reference, arms or {}, measure, found, plot)
    # every page's plots, then those of its section (FedBuff Fig. 3, Fig. 4); the curves against the measure's axes
    # (FedGBO's: what was uploaded and computed)
    curves = metrics.assign(**{axis: DERIVED_AXES[axis](metrics) for axis in read.axes if axis in DERIVED_AXES})
    draw = {"curves": partial(plot_curves, curves, float(runs["target_accuracy"].iloc[0]), xs=read.axes),
            "staleness": partial(plot_staleness, trips), "examples": partial(plot_examples, trips), **section.plots(table)}
    (out / f"{name}.md").write_text(
        f"# {name}\n\n{title + chr(10) * 2 if title else ''}{body}\n\n"
        f"{notes.strip() + chr(10) * 2 if notes.strip() else ''}{len(runs)} runs, {runs['wall_seconds'].sum() + extra_seconds:,.0f} s of wall time in all "
        f"({extra_seconds:,.0f} s of it tuning; largest run {runs['wall_seconds'].max():,.0f} s); report written on {machine()}.\n\n"
        + "".join(f"![{plot}]({name}_{plot}.png)\n\n" for plot in draw)
    )
    written.append(out / f"{name}.md")
    for plot, drawn in draw.items():  # the plots the page shows, and only those
        drawn(out / f"{name}_{plot}.png")
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
    parser.add_argument("--measure", choices=report_measures(), default="trips",
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
    try:
        load_plugins()  # a plugin's measure (fl_bench.analysis.sections.register) among --measure's choices
    except ConfigError as error:
        build_parser().exit(2, f"fl_bench.analysis.report: error: {error}\n")
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
    print(section_of(args.measure).markdown(table))
    print(f"written to {args.out}: {', '.join(path.name for path in written)}")
    if args.publish:
        from fl_bench.analysis.wandb_report import publish

        try:
            where = publish(args.publish, args.name, args.out / f"{args.name}.md", frames[0], args.by, args.dry_run)
        except ConfigError as error:
            parser.exit(2, f"fl_bench.analysis.report: error: {error}\n")
        print(f"W&B Report specification written to {where}" if args.dry_run else f"W&B Report: {where}")


if __name__ == "__main__":
    main()
