"""Guards a table's evidence must pass before its verdict is believed, computed rather than left to
the reader.

Edge: a tuned value at the edge of its search space (``conf/hparams_search/<space>.yaml``) says the
optimum may lie beyond what was searched: widen the space and tune again, or the table says
"edge". A value is at an edge when it is the smallest or largest of a numeric ``choice``, or lies
within 5% of an ``interval``'s width of either end (measured in log space for ``tag(log, ...)``).
A bound of 0 or 1 on a linear scale is a natural limit, not an edge: momentum 0 or mu = 0 (the
nested special case), a decay or mixing weight of 1. A numeric choice whose values are all positive
and span two decades or more counts as a log scale (a grid of learning rates), where no bound is
natural.

    python -m fl_bench.guards results/tuned/*/*.yaml --markdown results/tuning_edges.md
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

SPACES = Path(__file__).resolve().parent.parent / "conf" / "hparams_search"
EDGE_FRACTION = 0.05  # of an interval's width (log width for log intervals)


@dataclass(frozen=True)
class Edge:
    study: str
    key: str
    value: float
    low: float
    high: float
    side: str  # "lower" | "upper"

    def __str__(self) -> str:
        return f"{self.study}: {self.key}={self.value:.4g} at the {self.side} edge of [{self.low:g}, {self.high:g}]"


def search_space(space: str, spaces: Path = SPACES) -> dict[str, Any]:
    """The sweeper's ``params`` of ``space``, each parsed by Hydra's override grammar (the
    ChoiceSweep / IntervalSweep / RangeSweep objects the sweeper itself reads)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = spaces / f"{space}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"search space {space!r}: no {path}")
    params = OmegaConf.load(path).hydra.sweeper.params
    parser = OverridesParser.create()
    return {key: parser.parse_override(f"{key}={value}").value() for key, value in params.items()}


def _bounds(sweep: Any) -> tuple[float, float, bool, bool] | None:
    """(low, high, log scale, discrete) of a numeric sweep; None for a non-numeric one."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    if isinstance(sweep, IntervalSweep):
        return float(sweep.start), float(sweep.end), "log" in sweep.tags, False
    if isinstance(sweep, RangeSweep):
        return float(sweep.start), float(sweep.stop - sweep.step), False, True
    if isinstance(sweep, ChoiceSweep):
        values = [v for v in sweep.list if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(values) == len(sweep.list) and len(values) > 1:
            low, high = float(min(values)), float(max(values))
            return low, high, low > 0 and high / low >= 100, True
    return None


def edge_side(value: float, low: float, high: float, log: bool, discrete: bool) -> str | None:
    """"lower" / "upper" when ``value`` is at that edge of [low, high], else None."""
    if discrete:
        side = "lower" if value <= low else "upper" if value >= high else None
    else:
        scale = math.log if log else float
        position = (scale(value) - scale(low)) / (scale(high) - scale(low))
        side = "lower" if position <= EDGE_FRACTION else "upper" if position >= 1 - EDGE_FRACTION else None
    if not log and (low if side == "lower" else high) in (0.0, 1.0):
        return None  # a natural limit: the nested special case (momentum 0, mu = 0), no decay
    return side


def tuned_edges(tuned: dict[str, Any], spaces: Path = SPACES) -> list[Edge]:
    """The edges among a tuned study's best setting (a ``results/tuned/.../<study>.yaml``)."""
    if not tuned.get("space") or not tuned.get("best_params"):
        return []
    space = search_space(tuned["space"], spaces)
    edges = []
    for key, value in tuned["best_params"].items():
        bounds = _bounds(space[key]) if key in space else None
        if bounds is None or not isinstance(value, (int, float)):
            continue
        side = edge_side(float(value), *bounds)
        if side:
            edges.append(Edge(tuned.get("study", tuned["space"]), key, float(value), bounds[0], bounds[1], side))
    return edges


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fl_bench.guards", description=__doc__.splitlines()[0])
    parser.add_argument("tuned", nargs="+", type=Path, help="tuned settings, e.g. results/tuned/fedbuff_smoke/*.yaml")
    parser.add_argument("--markdown", type=Path, help="also write the edges as a table to this file")
    args = parser.parse_args(argv)
    rows = []
    for path in args.tuned:
        tuned = OmegaConf.to_container(OmegaConf.load(path))
        tuned.setdefault("study", path.stem)
        try:
            edges = tuned_edges(tuned)
        except FileNotFoundError as error:
            parser.exit(2, f"fl_bench.guards: error: {path}: {error}\n")
        for edge in edges:
            print(f"{path}: edge: {edge}")
            rows.append(f"| {path} | {tuned['space']} | {edge.key} | {edge.value:.4g} | [{edge.low:g}, {edge.high:g}] | {edge.side} |")
    if args.markdown:
        header = ("# Tuned values at the edge of their search space\n\nMade by `python -m fl_bench.guards "
                  f"<tuned settings> --markdown {args.markdown}` (fl_bench/guards.py says what an edge is): "
                  f"{len(rows)} edges in {len(args.tuned)} tuned settings. Each says the optimum may lie beyond "
                  "what was searched: widen the space and tune again before reading the arms that use it.\n\n"
                  "| tuned setting | space | key | value | searched | edge |\n|:--|:--|:--|--:|:--|:--|\n")
        args.markdown.write_text(header + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
