"""Guards a table's evidence must pass before its verdict is believed (fl_bench.analysis.verdict): a
workload that cannot tell its arms apart, a tuned setting that collapses on some report seeds, a tuned
value at the edge of its search space. (Tuning failed, a method worse than its own special case, is a
verdict; held-out, a setting that does not carry over to the report seeds, is the reproduction's:
fl_bench.analysis.reproduce.)

Saturated: the table cannot tell its arms apart because the workload sits at a ceiling or floor:
every arm reached the target at its first evaluation, or none reached it, or (accuracy tables)
every arm's median lies within the seeds' noise of the best one. The noise is the typical arm's
seed std (the median over arms), so that one unstable arm's spread does not make the table look flat.

Unstable: a tuned setting that collapses on some report seeds, which the mean over the tuning seeds
could not see (a setting at the edge of stability): a seed that diverged, or missed the target where
the arm's median seed reached it, or whose accuracy lies more than COLLAPSE_POINTS below the arm's
median. The arm's median still stands; its spread is the setting's, not the method's noise.

Edge: a tuned value at the edge of its search space (``conf/hparams_search/<space>.yaml``) says the
optimum may lie beyond what was searched: widen the space and tune again, or the table says
"edge". A value is at an edge when it is the smallest or largest of a numeric ``choice``, or lies
within 5% of an ``interval``'s width of either end (measured in log space for ``tag(log, ...)``).
A bound of 0 is a natural limit, not an edge: momentum 0 or mu = 0 (the nested special case); so is
1 on a linear scale: a decay or mixing weight of 1. A numeric choice whose positive values span two
decades or more counts as a log scale (a grid of learning rates, or FedProx's mu grid with 0 beside
it), where 1 is no natural bound.

    python -m fl_bench.analysis.guards results/tuned/*/*.yaml --markdown results/tuning_edges.md
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from omegaconf import OmegaConf

from fl_bench.analysis.measures import MEASURES
from fl_bench.analysis.search_spaces import SPACES, numeric_range, search_space

EDGE_FRACTION = 0.05  # of an interval's width (log width for log intervals)
COLLAPSE_POINTS = 10.0  # accuracy this far below its arm's median is a collapsed seed, not noise


@dataclass(frozen=True)
class Edge:
    """A tuned value at the ``side`` ("lower" or "upper") edge of its searched range [low, high]."""

    study: str
    key: str
    value: float
    low: float
    high: float
    side: str  # "lower" | "upper"

    def __str__(self) -> str:
        return f"{self.study}: {self.key}={self.value:.4g} at the {self.side} edge of [{self.low:g}, {self.high:g}]"


def edge_side(value: float, low: float, high: float, log: bool, discrete: bool) -> str | None:
    """"lower" / "upper" when ``value`` is at that edge of [low, high], else None."""
    if discrete:
        side = "lower" if value <= low else "upper" if value >= high else None
    else:
        scale = math.log if log else float
        position = (scale(value) - scale(low)) / (scale(high) - scale(low))
        side = "lower" if position <= EDGE_FRACTION else "upper" if position >= 1 - EDGE_FRACTION else None
    limit = low if side == "lower" else high
    if limit == 0.0 or (not log and limit == 1.0):
        return None  # a natural limit: the nested special case (momentum 0, mu = 0), no decay
    return side


def tuned_edges(tuned: dict[str, Any], spaces: Path | Sequence[Path] = SPACES) -> list[Edge]:
    """The edges among a tuned study's best setting (a ``results/tuned/.../<study>.yaml``)."""
    if not tuned.get("space") or not tuned.get("best_params"):
        return []
    space = search_space(tuned["space"], spaces)
    edges = []
    for key, value in tuned["best_params"].items():
        bounds = numeric_range(space[key]) if key in space else None
        if bounds is None or not isinstance(value, (int, float)):
            continue
        side = edge_side(float(value), *bounds)
        if side:
            edges.append(Edge(tuned.get("study", tuned["space"]), key, float(value), bounds[0], bounds[1], side))
    return edges


def saturated(runs: pd.DataFrame, measure: str) -> str:
    """Why the table's workload cannot tell its arms apart ('' when it can)."""
    read = MEASURES[measure]
    values = read.per_run(runs)
    if read.to_target:
        first = runs.get("eval_every", pd.Series(dtype=float))  # (in client trips)
        if values.isna().all():
            return "no arm reached the target within the budget"
        if not read.in_rounds and len(first) and (values <= first).all():
            return "every arm reached the target at its first evaluation"
        return ""
    medians = values.groupby(runs["method"]).median() * 100
    noise = 100 * values.groupby(runs["method"]).std(ddof=1).median()
    if len(medians) > 1 and pd.notna(noise) and medians.max() - medians.min() <= noise:
        return (f"every arm's median {read.unit.removesuffix(' (%)')} lies within {medians.max() - medians.min():.2f} points of the best, "
                f"inside the seeds' noise ({noise:.2f} points)")
    return ""


def collapsed(runs: pd.DataFrame, method: str, measure: str) -> list[int]:
    """The seeds on which ``method``'s setting collapsed (see Unstable above)."""
    group = runs[runs["method"] == method]
    bad = group.get("status", pd.Series("", index=group.index)) == "diverged"
    if MEASURES[measure].to_target:
        missed = MEASURES[measure].per_run(group).isna()
        bad |= missed & (missed.mean() < 0.5)
    else:
        accuracy = 100 * MEASURES[measure].per_run(group)
        bad |= accuracy < accuracy.median() - COLLAPSE_POINTS
    return sorted(int(seed) for seed in group.loc[bad, "seed"])


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the documented command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.analysis.guards", description=__doc__.splitlines()[0])
    parser.add_argument("tuned", nargs="+", type=Path, help="tuned settings, e.g. results/tuned/fedbuff_smoke/*.yaml")
    parser.add_argument("--markdown", type=Path, help="also write the edges as a table to this file")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Command line: print every edge of the given tuned settings; ``--markdown`` also writes them as
    a table."""
    parser = build_parser()
    args = parser.parse_args(argv)
    rows = []
    for path in args.tuned:
        tuned = OmegaConf.to_container(OmegaConf.load(path))
        tuned.setdefault("study", path.stem)
        try:
            edges = tuned_edges(tuned)
        except FileNotFoundError as error:
            parser.exit(2, f"fl_bench.analysis.guards: error: {path}: {error}\n")
        for edge in edges:
            print(f"{path}: edge: {edge}")
            rows.append(f"| {path} | {tuned['space']} | {edge.key} | {edge.value:.4g} | [{edge.low:g}, {edge.high:g}] | {edge.side} |")
    if args.markdown:
        header = ("# Tuned values at the edge of their search space\n\nMade by `python -m fl_bench.analysis.guards "
                  f"<tuned settings> --markdown {args.markdown}` (fl_bench/analysis/guards.py says what an edge is): "
                  f"{len(rows)} edges in {len(args.tuned)} tuned settings. Each says the optimum may lie beyond "
                  "what was searched: widen the space and tune again before reading the arms that use it.\n\n"
                  "| tuned setting | space | key | value | searched | edge |\n|:--|:--|:--|--:|:--|:--|\n")
        args.markdown.write_text(header + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
