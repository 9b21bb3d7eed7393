"""How many report seeds a verdict needs, decided before the report runs from a registered pilot.

A verdict is decisive when the effect's 95% interval lies wholly on one side of an edge of the
no-difference band (fl_bench.analysis.verdict: ratio 1 +- 5%, difference 0 +- 0.5 points). If the paper's
effect is real, the expected effect sits at the paper's value (where the paper gives only a direction,
">0" or "<0", at twice the band's edge on that side: the smallest effect worth resolving), at a distance
``d`` from the nearest band edge. The interval's half-width at ``n`` seeds per arm is, by the normal
approximation to the percentile bootstrap of a difference of medians (the median's asymptotic variance
pi/2 sigma^2 / n for normal noise),

    h(n) = 1.96 * sqrt(pi / 2) * sqrt(sigma_a^2 + sigma_b^2) / sqrt(n),

with sigma the pilot seeds' standard deviation of each arm (ratios: of the log of the per-seed values,
so a ratio of medians is a difference of log medians). The paper's effect may not be real: a verdict
must also decide at the effect the pilot itself measured, whose interval has to clear the edge of the
paper's side (the upper band edge for a paper that says larger, the lower for smaller, the nearer edge
for "the same") to reproduce or to differ. A verdict needs the larger of the two n, the smallest with
h(n) < d for its distance d. The table's number of report seeds is the most its verdicts need, at
least the protocol's minimum and at most its cap;
a verdict whose n exceeds the cap is "underpowered at <cap> seeds" if its interval at the cap does not
decide it. A paper whose numbers lie on both sides of the band (two datasets disagreeing) states no
side to resolve: its rows are not counted (their verdict is "paper split").

Claims of a kind (fl_bench.analysis.verdict, above CLAIMS): a size claim is decided by its side first, so
the side's need above is its need (whether the interval then reaches the paper's band decides "reproduces"
against "same side, Nx the paper's", and an interval always does or does not). A closeness claim is a
one-sided test against its margin (the paper's gap plus the tolerance), so its need is its own: the
distance is the margin's from the paper's gap (the tolerance: if the paper's gap is real) and from the
pilot's effect; a closeness verdict whose n exceeds the cap is "underpowered at <cap> seeds" where its
interval at the cap straddles the margin.

This follows the practice of sizing a benchmark's seeds from measured variance rather than fixing
them (Bouthillier et al. 2021, "Accounting for variance in machine learning benchmarks"); the seeds
are set once, before the report runs, and never added after looking.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_bench.analysis.verdict import NO_DIFFERENCE, claim_band, paper_side

Z95 = 1.959963984540054
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # the median's standard error over the mean's, normal noise


@dataclass(frozen=True)
class Need:
    """Seeds one verdict needs: ``seeds`` (uncapped, the larger of ``paper_seeds`` and ``pilot_seeds``;
    None when the paper states no side), the paper's effect on the verdict's scale (a log ratio or points)
    and its distance to the band edge, the pilot's spread, the effect the pilot measured and the seeds
    that effect needs to clear the edge of the paper's side."""

    seeds: int | None
    effect: float
    distance: float
    spread: float
    paper_seeds: int | None = None
    pilot_effect: float = float("nan")
    pilot_seeds: int | None = None
    kind: str = "difference"  # or "ratio": effects are log ratios
    claim: str = "side"  # the claim's kind: a closeness claim's distances are to its margin


def expected_effect(paper: list, kind: str) -> float | None:
    """The effect to resolve on the verdict's scale (log ratio, or points): the paper's value nearest to
    the band (the hardest of its datasets to resolve), or twice the band's edge for a direction without a
    number; None when the paper's values lie on different sides of the band."""
    sides = {paper_side(value, kind) for value in paper}
    if len(sides) != 1:
        return None
    side = sides.pop()
    low, high = NO_DIFFERENCE[kind]
    values = []
    for value in paper:
        text = str(value)
        number = float(text.lstrip("<>"))
        if text[:1] in "<>" and low <= number <= high:  # a direction without a number ('>0', '<1'): the
            edge = high if side == ">" else low      # smallest effect worth resolving on that side
            values.append(edge ** 2 if kind == "ratio" else 2 * edge)
        else:  # a number, or a bound beyond the band ('>4.8': at least that)
            values.append(number)
    scaled = [math.log(v) if kind == "ratio" else v for v in values]
    return min(scaled, key=lambda v: _distance(v, kind))


def _distance(effect: float, kind: str) -> float:
    """How far an effect (log ratio or points) lies from the nearest edge of the band."""
    low, high = NO_DIFFERENCE[kind]
    if kind == "ratio":
        low, high = math.log(low), math.log(high)
    return min(abs(effect - low), abs(effect - high))


def _side_distance(effect: float, side: str, kind: str) -> float:
    """How far an effect lies from the edge an interval must clear to tell whether it is on ``side``."""
    low, high = NO_DIFFERENCE[kind]
    if kind == "ratio":
        low, high = math.log(low), math.log(high)
    return abs(effect - high) if side == ">" else abs(effect - low) if side == "<" else _distance(effect, kind)


def _seeds(spread: float, distance: float) -> int | float:
    """The smallest n with h(n) < distance (module docstring)."""
    if spread == 0:
        return 1
    if distance == 0 or not math.isfinite(spread):
        return math.inf
    return math.ceil((Z95 * MEDIAN_EFFICIENCY * spread / distance) ** 2)


def seeds_needed(pilot_a: np.ndarray, pilot_b: np.ndarray, paper: list, kind: str, claim: str = "side",
                 tolerance: float | None = None) -> Need:
    """Report seeds per arm for the effect of arm a against arm b to decide its verdict (module docstring),
    from their pilot values (trips or rounds for ``kind`` ratio, accuracy points for difference), for a
    claim of kind ``claim`` (a closeness claim against its margin, with the tolerance ``tolerance``)."""
    a, b = (np.log(np.asarray(x, float)) if kind == "ratio" else np.asarray(x, float) for x in (pilot_a, pilot_b))
    spread = float(math.sqrt(np.var(a, ddof=1) + np.var(b, ddof=1))) if min(len(a), len(b)) > 1 else float("inf")
    pilot_effect = float(np.median(a) - np.median(b))
    if claim == "closeness":
        scale = math.log if kind == "ratio" else float
        margin = scale(claim_band(list(paper), kind, claim, tolerance)[1])
        effect = float(np.median([scale(float(str(v).lstrip("<>"))) for v in paper]))
        paper_seeds, pilot_seeds = _seeds(spread, margin - effect), _seeds(spread, abs(pilot_effect - margin))
        return Need(max(paper_seeds, pilot_seeds), effect, margin - effect, spread, paper_seeds, pilot_effect,
                    pilot_seeds, kind, claim)
    effect = expected_effect(list(paper), kind)
    if effect is None:
        return Need(None, float("nan"), float("nan"), spread, kind=kind, claim=claim)
    distance = _distance(effect, kind)
    paper_seeds = _seeds(spread, distance)
    pilot_seeds = _seeds(spread, _side_distance(pilot_effect, _paper_side_of(paper, kind), kind))
    return Need(max(paper_seeds, pilot_seeds), effect, distance, spread, paper_seeds, pilot_effect, pilot_seeds, kind,
                claim)


def _paper_side_of(paper: list, kind: str) -> str:
    return paper_side(paper[0], kind)  # expected_effect checked that every value has this side


def table_seeds(needs: list[Need], minimum: int, cap: int) -> int:
    """The table's report seeds: what its most demanding decidable verdict needs, within [minimum, cap]."""
    wanted = [need.seeds for need in needs if need.seeds is not None]
    return int(min(cap, max([minimum, *wanted])))
