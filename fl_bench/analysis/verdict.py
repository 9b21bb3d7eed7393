"""The verdict of a table's evidence, computed rather than left to the reader: each arm's median over the
report seeds with a 95% interval, its effect against the arm it is compared with (a ratio of client trips
or rounds, a difference in accuracy points) with a 95% interval, and a verdict decided by that interval
(:func:`evidence`); the evidence as pages print it (:func:`evidence_table`, :func:`evidence_markdown`),
the findings' placeholders (:func:`fill_notes`) and whether a paper's headline holds
(:func:`headline_sentence`). The guards a verdict must pass before it is believed (saturated, unstable,
edge) are fl_bench.analysis.guards'.

Intervals are percentile bootstraps over seeds (scipy's ``bootstrap``, resampling each arm's seeds
independently, 2,000 resamples, a fixed generator: the same table every time). A seed that missed
the target counts as the budget, so its arm's trips are a lower bound (shown with ">").

Verdict: the effect's interval lies above the band of "no difference" (ratio 1 +- 5%, difference 0
+- 0.5 points), below it, or inside it, and that side is the paper's: "reproduces"; an interval that
excludes the paper's side (wholly on other sides, even where it straddles the edge between them: the
paper says larger and the interval says the same or smaller): "differs"; an interval that reaches into
the paper's side and beyond it: "inconclusive", or "underpowered at N seeds" when the protocol's power
rule (fl_bench.analysis.power) said before the runs that N seeds, its cap, could not resolve it. A paper whose numbers lie on both sides of the band (two datasets disagreeing) states no
side to test: "paper split".

Censored: trips (or rounds) of a seed that missed are the budget, a lower bound, so an end of an
effect's interval that rests on a median at the budget is open: where the arm's own interval reaches
the budget its effect may be larger than its upper end, where the compared arm's does, smaller than
its lower end; the verdict reads the interval with those ends open. Where both arms' medians are at
the budget, the budget cannot order them: "not reached" (a larger budget would).

Tuning failed: an arm declares the arm that runs its nested special case (``special_case:`` in the
sweep file: FedAvg is FedAvgM with momentum 0, FedAvg is FedProx with mu = 0); a method worse than
its own special case beyond the interval means its tuning failed, and that is its verdict.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from fl_bench.analysis.blocks import marked
from fl_bench.analysis.guards import COLLAPSE_POINTS, collapsed, saturated
from fl_bench.analysis.measures import MEASURES

NO_DIFFERENCE = {"ratio": (0.95, 1.05), "difference": (-0.5, 0.5)}  # the band of "the same"

# Claims of a kind (issue 54). A paper number is registered as the claim its sentence makes: "side" (only
# an order: A beats B), "size" (the effect is what is claimed: 3.3x fewer trips) or "closeness" (A comes
# within the paper's gap of B). Size and closeness are judged against one tolerance band around the
# paper's numbers, set here for every paper: ratios within a factor of 1.5 of the paper's range,
# differences within max(2 points, 25% of the paper's largest |number|). A table may only tighten it
# (``tolerance``, with its reason); a looser one is refused when the sweep file loads. Why this rule:
# equivalence testing (Lakens 2017, "Equivalence tests: a practical primer for t tests, correlations,
# and meta-analyses"; Lakens, Scheel and Isager 2018) judges a replication against a smallest effect of
# interest set before looking, and the ML Reproducibility Challenge's reports accept a number that lands
# "within the original's range" across datasets, not one that only shares its sign. A factor of 1.5 on
# a ratio of trips is the spread of the papers' own numbers for one method across datasets (FedBuff
# Table 1: FedAvgM 1.7x to 3.3x); 2 points of accuracy is the spread of a method across seeds and data
# splits on these workloads (the seeds' std, 0.5-2 points on every page), and 25% keeps a large gap
# (HFL's 11.49 points) from being held to 2.
#   side: the interval on the paper's side of the no-difference band (the rule of every table since 2026-11-25).
#   size: the side as above, and the interval reaching into the band (it is not ruled out that the effect
#     is the paper's); where the side holds and the interval lies wholly outside the band, "same side, Nx
#     the paper's"; wholly outside the band with the side undecided, the size is ruled out: "differs". A
#     paper whose datasets lie on both sides of the no-difference band claims its range, not a side:
#     the band alone decides.
#   closeness: the paper's gap is an upper bound (HFL "reaches 83.41" against S-SGD's 84.58: within 1.17
#     points); TOST's one-sided test against the margin (the paper's gap plus the tolerance): the claim
#     holds where the whole interval lies within it, fails where the whole interval lies beyond it ("same
#     side, Nx the paper's gap"), and is undecided where the interval straddles the margin (inconclusive,
#     or underpowered where the pilot said the cap could not resolve it: fl_bench.analysis.power).
CLAIMS = ("side", "size", "closeness")
RATIO_FACTOR = 1.5
DIFFERENCE_POINTS, DIFFERENCE_SHARE = 2.0, 0.25
RESAMPLES = 2000


def bootstrap_interval(statistic, *samples: np.ndarray) -> tuple[float, float]:
    """95% percentile-bootstrap interval of ``statistic(*samples)``, each sample resampled on its own."""
    from scipy import stats

    if any(len(sample) < 2 for sample in samples) or all(np.ptp(sample) == 0 for sample in samples):
        value = statistic(*samples)
        return value, value  # one seed, or no spread: nothing to resample
    result = stats.bootstrap(samples, statistic, n_resamples=RESAMPLES, confidence_level=0.95, method="percentile",
                             vectorized=False, random_state=np.random.default_rng(0))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def side(low: float, high: float, kind: str) -> str:
    """Where an interval (a point: low = high) lies against the no-difference band of ``kind``
    ("ratio": 1 +- 5%, "difference": 0 +- 0.5 points): '>', '<', '=' or '?' (straddles an edge)."""
    band_low, band_high = NO_DIFFERENCE[kind]
    if low > band_high:
        return ">"
    if high < band_low:
        return "<"
    return "=" if band_low <= low and high <= band_high else "?"


def paper_side(value: Any, kind: str = "ratio") -> str:
    """The side of one paper entry: a number, or '>x' for a lower bound ('>1': the text says larger,
    without a number; the paper's '>600' over the reference; '>0' for a difference the text states
    without a number) and '<x' for an upper bound ('<0': smaller, without a number)."""
    text = str(value)
    number, neutral = float(text.lstrip("<>")), 1 if kind == "ratio" else 0
    if text.startswith(">") and number >= neutral:
        return ">"
    if text.startswith("<") and number <= neutral:
        return "<"
    return side(number, number, kind)


def excludes(low: float, high: float, expected: str, kind: str) -> bool:
    """Whether an interval lies wholly outside the region of side ``expected`` ('>', '<' or '=')."""
    band_low, band_high = NO_DIFFERENCE[kind]
    if expected == ">":
        return high <= band_high
    if expected == "<":
        return low >= band_low
    return low > band_high or high < band_low


def _paper_side(values: list[Any], kind: str) -> str | None:
    """The side all the paper's numbers take; None when they disagree."""
    sides = {paper_side(value, kind) for value in values}
    return sides.pop() if len(sides) == 1 else None


def default_tolerance(values: list[Any], kind: str) -> float:
    """The default rule's tolerance for the paper's ``values``: a factor (ratios) or points (differences)."""
    if kind == "ratio":
        return RATIO_FACTOR
    return max(DIFFERENCE_POINTS, DIFFERENCE_SHARE * max(abs(float(str(v).lstrip("<>"))) for v in values))


def claim_band(values: list[Any], kind: str, claim: str, tolerance: float | None = None) -> tuple[float, float]:
    """Where an effect must reach for a size or closeness claim to hold: the paper's range widened by the
    tolerance (the default rule's, or a tighter ``tolerance``). Closeness: anything up to the paper's
    largest gap plus the tolerance (coming closer than the paper did still holds). A bound ('>4.8') opens
    its side of the band."""
    tolerance = default_tolerance(values, kind) if tolerance is None else tolerance
    numbers = [float(str(v).lstrip("<>")) for v in values]
    low, high = min(numbers), max(numbers)
    if any(str(v).startswith(">") for v in values):
        high = math.inf
    if any(str(v).startswith("<") for v in values):
        low = -math.inf
    if kind == "ratio":
        low, high = low / tolerance, high * tolerance
    else:
        low, high = low - tolerance, high + tolerance
    return (-math.inf if claim == "closeness" else low), high


def verdict(value: float, low: float, high: float, paper: list[Any], kind: str, claim: str = "side",
            tolerance: float | None = None, bound: bool = False, undecided: str = "inconclusive") -> str:
    """The verdict of an effect (``value``, its interval [low, high] as the verdict reads it, open ends
    already open: :func:`open_ends`) on a paper's claim of kind ``claim`` (the rules above the constants
    CLAIMS). ``bound``: the effect is a lower bound (censored), so a multiple of the paper's reads "more
    than"; ``undecided``: the word for an interval that decides nothing ("inconclusive", or "underpowered
    at N seeds" where the power rule said so before the runs)."""
    expected, found = _paper_side(list(paper), kind), side(low, high, kind)
    decided = expected is not None and (found == expected or excludes(low, high, expected, kind))
    on_side = ("paper split" if expected is None else "reproduces" if found == expected
               else "differs" if decided else undecided)
    if claim == "side":
        return on_side
    band_low, band_high = claim_band(list(paper), kind, claim, tolerance)
    numbers = [float(str(v).lstrip("<>")) for v in paper]
    paper_value = float(np.median(numbers))
    multiple = f"{'more than ' if bound else ''}{value / paper_value if paper_value else math.inf:.2g}x the paper's"
    if claim == "closeness":
        if high <= band_high:
            return "reproduces"
        if low > band_high:
            return f"same side, {multiple} gap" if found == expected else "differs"
        return undecided
    reaches = low <= band_high and high >= band_low
    if expected is None:  # a split paper claims its range
        return "reproduces" if reaches else "differs"
    if on_side == "reproduces":
        return "reproduces" if reaches else f"same side, {multiple}"
    return on_side if reaches else "differs"


def censored_at(runs: pd.DataFrame, method: str, measure: str) -> float:
    """The budget ``method``'s missed seeds count as (trips or rounds), inf where none missed."""
    group = runs[runs["method"] == method]
    if not MEASURES[measure].to_target or not MEASURES[measure].per_run(group).isna().any():
        return math.inf
    return float(group["max_trips"].min())


def open_ends(low: float, high: float, ours_at_budget: bool, base_at_budget: bool) -> tuple[float, float]:
    """An effect's interval as the verdict reads it (Censored above): the upper end open where the arm's
    own median interval reaches its budget, the lower end where the compared arm's does."""
    return (-math.inf if base_at_budget else low), (math.inf if ours_at_budget else high)


def samples(runs: pd.DataFrame, method: str, measure: str) -> tuple[np.ndarray, bool]:
    """One value per seed of ``method`` (trips with a miss counted as the budget), and whether a seed missed:
    what its measure reads of each run (fl_bench.analysis.measures.Measure.samples)."""
    return MEASURES[measure].samples(runs[runs["method"] == method])


def _effect(ours: np.ndarray, base: np.ndarray, kind: str) -> tuple[float, float, float]:
    statistic = ((lambda a, b: np.median(a) / np.median(b)) if kind == "ratio"
                 else (lambda a, b: np.median(a) - np.median(b)))
    return (statistic(ours, base), *bootstrap_interval(statistic, ours, base))


def shown_interval(value: float, low: float, high: float, kind: str, bound: bool = False, upper: bool = False) -> str:
    """An effect [95% interval] as pages print it ('>' before a lower bound, '<' before an upper one)."""
    mark = ">" if bound else "<" if upper else ""
    if kind == "ratio":
        return f"{mark}{value:.2f}× [{low:.2f}, {high:.2f}]"
    return f"{value:+.2f} [{low:+.2f}, {high:+.2f}]"


EVIDENCE_COLUMNS = ("method", "seeds", "median", "median_low", "median_high", "missed", "vs", "effect", "effect_low",
                    "effect_high", "effect_bound", "paper", "claim", "band_low", "band_high", "verdict", "guard")


def paper_effect(arm, vs_arm, measure: str) -> list | None:
    """The paper's effect of ``arm`` against ``vs_arm`` (the sweep file's arms, fl_bench.analysis.sweep_file.ArmSpec;
    ``vs_arm`` None where the table has no such arm): its ratios of trips (or rounds), or the difference of its
    accuracies, or the direction it states without numbers (``paper: {difference: ['>0']}``: FedStaleWeight);
    None where the paper has none. (``paper`` maps what a number measures to it: PAPER_KEYS.)"""
    paper = arm.paper or {}
    if MEASURES[measure].to_target:
        return paper.get("trips")
    if paper.get("accuracy") is not None:
        theirs = (vs_arm.paper or {}).get("accuracy") if vs_arm is not None else None
        return None if theirs is None else [float(paper["accuracy"]) - float(theirs)]
    return paper.get("difference")


def evidence(runs: pd.DataFrame, reference: str | None, arms: dict, measure: str,
             needs: dict | None = None, cap: int | None = None, degenerate: dict[str, str] | None = None) -> pd.DataFrame:
    """Per method (column ``method``, in the order of ``runs``): its median over seeds with the 95%
    interval (``missed``: some seed missed the target, so the median is a lower bound); per compared
    arm the effect against its ``vs`` (default ``reference``) with its interval (``effect_bound``: a
    lower bound), the paper's effect as text, the verdict; the guards' findings. Numbers, not text: the
    page's table (:func:`evidence_table`), the findings' placeholders (:func:`fill_notes`) and the
    scoreboard (fl_bench.analysis.scoreboard) all read it. ``arms``: the table's arms by label (the sweep
    file's, fl_bench.analysis.sweep_file.ArmSpec; a method without one is compared with none);
    ``degenerate``: the arms tuned to their special case, label -> the settings that make it so."""
    kind = MEASURES[measure].kind
    methods = list(dict.fromkeys(runs["method"]))
    median_intervals = {m: bootstrap_interval(np.median, samples(runs, m, measure)[0]) for m in methods}
    rows = []
    for method in methods:
        ours, bound = samples(runs, method, measure)
        low, high = median_intervals[method]
        arm = arms.get(method)
        row = {"method": method, "seeds": len(ours), "median": float(np.median(ours)), "median_low": low,
               "median_high": high, "missed": bound, "vs": "", "effect": np.nan, "effect_low": np.nan,
               "effect_high": np.nan, "effect_bound": False, "paper": "", "claim": "side", "band_low": np.nan,
               "band_high": np.nan, "verdict": "", "guard": ""}
        vs = arm.vs if arm is not None and arm.vs is not None else reference
        if vs in methods and vs != method and arm is not None and (arm.vs is not None or arm.paper is not None):
            base, base_bound = samples(runs, vs, measure)
            value, e_low, e_high = _effect(ours, base, kind)
            row.update(vs=vs, effect=value, effect_low=e_low, effect_high=e_high, effect_bound=bound and not base_bound)
            paper = paper_effect(arm, arms.get(vs), measure)
            if paper:
                row["paper"] = " / ".join(f"{v}×" if kind == "ratio" else str(v) if str(v)[:1] in "<>"
                                          else f"{float(v):+.2f}" for v in paper)
                budget, base_budget = censored_at(runs, method, measure), censored_at(runs, vs, measure)
                v_low, v_high = open_ends(e_low, e_high, high >= budget, median_intervals[vs][1] >= base_budget)
                need = (needs or {}).get(method)
                underpowered = (need is not None and need.seeds is not None and cap is not None and need.seeds > cap)
                claim = arm.claim
                split = claim == "side" and _paper_side(list(paper), kind) is None  # no side to test: said first
                if not split and np.median(ours) >= budget and np.median(base) >= base_budget:
                    row["verdict"] = "not reached"  # the budget cannot order them
                else:
                    row["verdict"] = verdict(value, v_low, v_high, list(paper), kind, claim, arm.tolerance,
                                             row["effect_bound"], f"underpowered at {len(ours)} seeds" if underpowered
                                             else "inconclusive")
                if claim != "side":
                    band = claim_band(list(paper), kind, claim, arm.tolerance)
                    row.update(claim=claim, band_low=band[0], band_high=band[1])
        fallen = collapsed(runs, method, measure) if "seed" in runs else []
        if fallen:
            row["guard"] = f"unstable: collapsed on seed{'s' if len(fallen) > 1 else ''} {', '.join(map(str, fallen))} of {len(ours)}"
        special = arm.special_case if arm is not None else None
        if special is not None and special not in arms:
            raise ValueError(f"arm {method!r}: special_case {special!r} is not an arm of this table: "
                             f"choose one of {', '.join(arms)}")
        if special in methods:  # (a smoke run may leave it out)
            base, _ = samples(runs, special, measure)
            _, e_low, e_high = _effect(ours, base, kind)
            worse = e_low > NO_DIFFERENCE["ratio"][1] if kind == "ratio" else e_high < NO_DIFFERENCE["difference"][0]
            if worse:
                row["guard"] = "; ".join(filter(None, [f"tuning failed: worse than its special case {special}", row["guard"]]))
                row["verdict"] = "tuning failed" if row["verdict"] else ""
        if method in (degenerate or {}):  # its tuned setting is its special case's: the special case's method, run again
            row["guard"] = "; ".join(filter(None, [f"degenerate: tuned to its special case {special} ({degenerate[method]}), "
                                                   "so it runs that method; no verdict of its own", row["guard"]]))
            row["verdict"] = ""
        rows.append(row)
    return pd.DataFrame(rows, columns=list(EVIDENCE_COLUMNS)).assign(measure=measure)


def shown_median(row: pd.Series) -> str:
    """An evidence row's median [95% interval] as the page prints it."""
    if MEASURES[row["measure"]].to_target:
        return f"{'>' if row['missed'] else ''}{row['median']:,.0f} [{row['median_low']:,.0f}, {row['median_high']:,.0f}]"
    return f"{row['median']:.2f} [{row['median_low']:.2f}, {row['median_high']:.2f}]"


def upper_bound(row: pd.Series, missed: set[str]) -> bool:
    """Whether an evidence row's effect is an upper bound: a ratio against an arm in ``missed`` (some seed
    missed the target and counts as the budget, so its median is a lower bound) where this arm missed none."""
    return row["vs"] in missed and str(row["missed"]) != "True" and MEASURES[row["measure"]].to_target


def shown_effect(row: pd.Series, found: pd.DataFrame | None = None) -> str:
    """An evidence row's effect [95% interval] as the page prints it ('' for an arm compared with none). With
    the table's evidence ``found``: a ratio against an arm that missed the target on some seed, where this arm
    did not, is an upper bound ('<': the compared arm's median counts its misses as the budget)."""
    if pd.isna(row["effect"]):
        return ""
    missed = set(found.loc[found["missed"].astype(bool), "method"]) if found is not None and len(found) else set()
    return shown_interval(row["effect"], row["effect_low"], row["effect_high"], MEASURES[row["measure"]].kind,
                          bool(row["effect_bound"]), upper_bound(row, missed))


def shown_paper(row: pd.Series, paper: str = "paper") -> str:
    """The paper's numbers as the page prints them, with the claim and its band where the claim is of
    size or closeness ('3.3× (size: 2.20× to 4.95×)')."""
    claim = row.get("claim", "side")
    if not isinstance(claim, str) or claim in ("", "side"):
        return row[paper]
    ratio = MEASURES[row["measure"]].to_target
    low, high = row["band_low"], row["band_high"]
    shown = (lambda v: f"{v:.2f}×") if ratio else (lambda v: f"{v:+.2f}")
    band = (f"up to {shown(high)}" if low == -math.inf else f"from {shown(low)}" if high == math.inf
            else f"{shown(low)} to {shown(high)}")
    return f"{row[paper]} ({claim}: {band})"


def evidence_table(runs: pd.DataFrame, reference: str | None, arms: dict, measure: str,
                   found: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`evidence` (``found``, when already computed) as the page shows it."""
    found = evidence(runs, reference, arms, measure) if found is None else found
    return pd.DataFrame({"method": found["method"], "seeds": found["seeds"],
                         "median [95% CI]": found.apply(shown_median, axis=1) if len(found) else [],
                         "vs": found["vs"], "effect [95% CI]": found.apply(shown_effect, axis=1, found=found) if len(found) else [],
                         "paper": found.apply(shown_paper, axis=1) if len(found) else [], "verdict": found["verdict"],
                         "guard": found["guard"]})


PLACEHOLDER = re.compile(r"\{(effect|median|verdict|seeds):([^{}]+)\}")
PLACEHOLDER_KINDS = ("effect", "median", "verdict", "seeds", "headline")  # {headline:N}: the file's N-th headline
HEADLINE = re.compile(r"\{headline:(\d+)\}")
ANSWERS = ("holds", "holds in direction only", "does not hold", "undecided")


def answer(verdicts: list[str]) -> str:
    """A headline's answer (one of ANSWERS) from the verdicts of the rows that test it ('' for a row with
    none: degenerate, or not run; "paper split" tests nothing): "does not hold" where any row differs (a
    headline states one claim for every row it names), else "undecided" where a row is undecided
    (inconclusive, underpowered, not reached, tuning failed) or none has a verdict, else "holds in
    direction only" where a row holds its side and not its size ("same side, ..."), else "holds"."""
    counted = [v for v in verdicts if v and v != "paper split"]
    if "differs" in counted:
        return "does not hold"
    if not counted or any(v != "reproduces" and not v.startswith("same side") for v in counted):
        return "undecided"
    return "holds in direction only" if any(v.startswith("same side") for v in counted) else "holds"


def tally(verdicts: list[str]) -> str:
    """'3 rows: 2 differs, 1 reproduces' for a headline's rows."""
    words = [("reproduces" if v == "reproduces" else "same side" if v.startswith("same side")
              else "underpowered" if v.startswith("underpowered") else v or "no verdict") for v in verdicts]
    counted = pd.Series(words, dtype=object).value_counts()
    return f"{len(verdicts)} row{'' if len(verdicts) == 1 else 's'}: " + ", ".join(f"{n} {w}" for w, n in counted.items())


def headline_sentence(headline, verdict_of: dict[str, str]) -> str:
    """One sentence: whether a headline (the sweep file's, fl_bench.analysis.sweep_file.Headline) holds here
    under the registered reading and under any of its ``readings`` (alternative rows that test the same
    sentence another way), from ``verdict_of`` ('TABLE: ARM' -> verdict; a row without one is '')."""
    def answered(rows: list[str]) -> tuple[str, str]:
        verdicts = [verdict_of.get(row, "") for row in rows]
        return answer(verdicts), tally(verdicts)

    registered, counts = answered(headline.rows)
    text = f"The paper's \"{headline.quote}\" ({headline.where}) {registered} here ({counts})"
    readings = {name: answered(rows) for name, rows in headline.readings.items()}
    if not readings:
        return text + "."
    holding = [name for name, (said, _) in readings.items() if said == "holds"]
    direction = [name for name, (said, _) in readings.items() if said == "holds in direction only"]
    shown = "; ".join(f"{name}: {said} ({counts})" for name, (said, counts) in readings.items())
    found = "; ".join(filter(None, (
        f"it holds under {', '.join(holding)}" if holding else f"it holds under none of the {len(readings)} other readings tried",
        f"in direction only under {', '.join(direction)}" if direction else "")))
    return f"{text}; {found} ({shown})."
TYPED_INTERVAL = re.compile(r"\[\s*[+-]?\d[\d.,]*\s*,\s*[+-]?\d[\d.,]*\s*\]")


def fill_notes(notes: str, found: pd.DataFrame, headlines: list = (), table: str = "",
               other_verdicts: dict[str, str] | None = None) -> str:
    """A table's findings with each placeholder ``{effect:ARM}``, ``{median:ARM}``, ``{verdict:ARM}`` or
    ``{seeds:ARM}`` replaced by that arm's evidence, and ``{headline:N}`` by the sentence that says
    whether the sweep file's N-th headline (of ``headlines``, its rows in ``table``) holds, so that prose
    quoting a number or a verdict cannot go stale when the table is rerun. An arm this table did not run (as at a smoke point) is said once,
    "(ARM: not run)", where it first appears: a placeholder of it in its own parentheses or right after
    another of it adds nothing ("FedAvgM {effect:fedavgm} ({verdict:fedavgm})" reads "FedAvgM (fedavgm:
    not run)"), and a later one elsewhere reads "(not run)"."""
    rows = found.set_index("method") if len(found) else pd.DataFrame()

    def value(match: re.Match) -> str:
        kind, arm = match.group(1), match.group(2)
        if arm not in rows.index:
            return f"\x00{arm}\x00"  # said below, once
        row = rows.loc[arm].copy()
        row["method"] = arm
        text = {"effect": lambda r: shown_effect(r, found), "median": shown_median,
                "verdict": lambda r: r["verdict"] or "no verdict", "seeds": lambda r: str(r["seeds"])}[kind](row)
        return text or "(no comparison)"

    # (a headline may name rows of the file's other tables: ``other_verdicts``, 'TABLE: ARM' -> verdict)
    verdict_of = {**(other_verdicts or {}), **{f"{table}: {arm}": rows.loc[arm, "verdict"] for arm in rows.index}}
    filled = HEADLINE.sub(lambda m: headline_sentence(headlines[int(m.group(1)) - 1], verdict_of), notes)
    filled = PLACEHOLDER.sub(value, filled)
    filled = re.sub(r"\(\s*(\x00[^\x00]*\x00)\s*\)", r"\1", filled)  # its own parentheses
    filled = re.sub(r"(\x00([^\x00]*)\x00)(?:[\s,;]*\x00\2\x00)+", r"\1", filled)  # right after itself
    said: set[str] = set()

    def not_run(match: re.Match) -> str:
        arm = match.group(1)
        if arm in said:
            return "(not run)"
        said.add(arm)
        return f"({arm}: not run)"

    return re.sub(r"\x00([^\x00]*)\x00", not_run, filled)


EVIDENCE_SOURCE = "the table's evidence (<table>_evidence.csv)"
LONG_CELL = 60  # a guard longer than this goes to a numbered note under the table: rows stay one line high


def numbered_notes(cells: list[str], labels: list[str], start: int = 1) -> tuple[list[str], list[str]]:
    """``cells`` with each longer than :data:`LONG_CELL` replaced by 'note N' (from ``start``), and the notes
    ('N. **label**: text') to print under the table."""
    shown, notes = [], []
    for cell, label in zip(cells, labels):
        if len(cell) > LONG_CELL:
            notes.append(f"{start + len(notes)}. **{label}**: {cell}")
            cell = f"note {start + len(notes) - 1}"
        shown.append(cell)
    return shown, notes


def evidence_section(found: pd.DataFrame, measure: str, plot: str = "") -> str:
    """A page's Evidence section from the table's evidence (:func:`evidence`) alone: what its columns mean,
    the forest plot (``plot``: its file name, where one was drawn), the table with long guards in numbered
    notes under it, and the guards its rows carry (tuning failed, unstable). The reproduction and the
    scoreboard (from ``<table>_evidence.csv``) render it alike."""
    table = evidence_table(pd.DataFrame(), None, {}, measure, found)
    table["guard"], notes = numbered_notes(list(table["guard"]), list(table["method"]))
    effect = ("ratio of medians (lower is better)" if MEASURES[measure].to_target
              else "difference of medians in points (higher is better)")
    lines = [f"## Evidence\n\nMedian {MEASURES[measure].unit} over the seeds with its 95% bootstrap interval; effect: {effect} against "
             "the arm in `vs`, with its interval; verdict by where that interval lies against the paper's side "
             "(fl_bench/analysis/verdict.py states the rules).\n"]
    if plot:
        lines.append(f"![Each compared arm's effect with its 95% interval against the paper's band]({plot})\n")
    lines += [table.to_markdown(index=False), ""]
    if notes:
        lines += ["\n".join(notes), ""]
    failed = table.loc[found["guard"].str.contains("tuning failed").to_numpy(), "method"].tolist()
    if failed:
        lines.append(f"Guard, tuning failed: {', '.join(failed)}: worse than its own special case: "
                     "a tuning failure, not a finding.\n")
    unstable = table.loc[found["guard"].str.contains("unstable").to_numpy(), "method"].tolist()
    if unstable:
        lines.append(f"Guard, unstable: {', '.join(unstable)}: the tuned setting collapsed on some report seeds "
                     "(diverged, missed the target its other seeds reached, or fell more than "
                     f"{COLLAPSE_POINTS:g} points below its median): a setting at the edge of stability that the "
                     "tuning seeds did not show; read its interval as the setting's, not the method's.\n")
    return "\n".join(lines)


def evidence_markdown(runs: pd.DataFrame, reference: str | None, arms: dict, measure: str,
                      found: pd.DataFrame | None = None, plot: str = "") -> str:
    """The evidence section of a report (``found``: :func:`evidence` when already computed; ``plot``: the forest
    plot's file), between the evidence markers, and after it the saturated guard, which reads the runs."""
    found = evidence(runs, reference, arms, measure) if found is None else found
    block = marked("evidence", evidence_section(found, measure, plot), EVIDENCE_SOURCE)
    why = saturated(runs, measure)
    return block + (f"\n\nGuard, saturated: {why}: this workload cannot show the effect, whatever the verdicts say.\n"
                    if why else "")
