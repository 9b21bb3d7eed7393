"""Forest plots of verdicts: each compared arm's effect with its 95% interval, drawn against the paper's band.

    plot_forest(rows, path, title)                   # one table's evidence (``<table>_evidence.csv``)
    plot_paper_forests(rows, groups, path, title)    # one paper's rows across its tables (``evidence.csv``)

One horizontal row per arm that has an effect (an arm compared with none is left out), labelled "ARM vs
COMPARED" ("TABLE: ARM vs COMPARED" where the rows span several tables). On each row:

- a mark at the effect and a line over its 95% bootstrap interval, with a tick closing each end, coloured by
  the verdict and the mark shaped by it (:data:`VERDICT_COLOURS`, :data:`VERDICT_MARKERS`: a circle
  reproduces, a cross differs, ...; the legend names the verdicts present);
- an end that censoring leaves open (fl_bench.analysis.verdict's "Censored") is an arrow instead of a tick:
  toward larger effects for a lower bound ('>': some of the arm's seeds never reached the target and count
  as the budget), toward smaller ones for an upper bound ('<': the compared arm's seeds did);
- the paper's band, shaded: for a claim of size or closeness the band the verdict read (``band_low`` to
  ``band_high``, verdict.claim_band; an open end shaded to the axis' edge), for a claim of side the paper's
  side of the no-difference band (above it where every number of the paper is larger, ...: verdict.paper_side),
  nothing for a paper split across both sides;
- the paper's numbers as small black diamonds (a bound such as '>4.8' as a caret pointing its way; a bare
  direction such as '>1' or '>0' has no number to draw: its shaded side says it);
- at the right, the effect and its interval as the page prints it (the verdict's own words are the page's
  table's, beside the plot).

A grey vertical band over every row is the band of "no difference" (verdict.NO_DIFFERENCE: a ratio within
5% of 1, a difference within 0.5 points). The x axis is the ratio to the compared arm's median on a log
scale for measures counted to a target (trips, rounds: lower is better), the difference in accuracy points
on a linear one otherwise; a figure whose rows mix the two gets one panel per kind, one above the other.

The figures are built by :func:`forest_figure` and :func:`paper_forest_figure` (returned, not saved, so that
they can be inspected); each drawn element carries a gid, ``"ELEMENT:LABEL"`` with ELEMENT one of effect,
interval, cap-low, cap-high, open-low, open-high, band, paper, words, and LABEL the row's label. The writers save a
figure whole or not at all (fl_bench.runs.atomic).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from fl_bench.analysis.measures import MEASURES  # noqa: E402
from fl_bench.analysis.verdict import NO_DIFFERENCE, claim_band, paper_side, shown_interval, upper_bound  # noqa: E402
from fl_bench.runs.atomic import write_partial  # noqa: E402

# One colour per verdict (the words of fl_bench.analysis.scoreboard.VERDICTS, "same side, 2.3x the paper's"
# read as "same side", "underpowered at 30 seeds" as "underpowered"), and "" for a row without one
# (degenerate, or not judged). The Okabe-Ito palette: told apart under the common colour blindnesses.
VERDICT_COLOURS = {
    "reproduces": "#009E73",  # bluish green
    "same side": "#56B4E9",  # sky blue: holds in direction, not in size
    "differs": "#D55E00",  # vermillion
    "inconclusive": "#E69F00",  # orange
    "underpowered": "#CC79A7",  # reddish purple
    "not reached": "#0072B2",  # blue
    "paper split": "#8C7E00",  # a darkened yellow (Okabe-Ito's is unreadable on white)
    "tuning failed": "#000000",
    "": "#9A9A9A",  # no verdict
}
VERDICT_LEGEND = {"same side": "same side (not the size)", "underpowered": "underpowered at its seeds",
                  "": "no verdict"}
# and a marker each, so that a verdict reads without its colour (in greyscale, or to a colour-blind reader)
VERDICT_MARKERS = {"reproduces": "o", "same side": "s", "differs": "X", "inconclusive": "^", "underpowered": "v",
                   "not reached": "P", "paper split": "h", "tuning failed": "*", "": "o"}
NO_DIFFERENCE_COLOUR = "#D9D9D9"
BAND_COLOUR = "#F3DFB4"  # the paper's band: a pale wheat, under the grey so that both read where they overlap
PAPER_COLOUR = "#222222"
AXIS_LABELS = {"ratio": "ratio to the compared arm's median (log scale; below 1: fewer trips or rounds)",
               "difference": "difference to the compared arm's median in accuracy points (above 0: better)"}
OTHER_ROWS = "other rows"  # the heading of a paper's rows that no group names
WIDTH, DPI, FONT = 9.5, 110, 8.5  # inches, dots per inch (1,045 pixels) and points: read at a docs page's width
ROW_INCHES, HEADING_CHARS, LABEL_CHARS = 0.27, 118, 52
# the log axis' labelled ticks, per power of ten: the coarsest set that labels four
RATIO_TICKS = [(1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9),
               tuple(round(1 + 0.1 * i, 1) for i in range(90))]


def verdict_key(text: str) -> str:
    """The colour key of a verdict as evidence files write it ('same side, 3.8x the paper's' -> 'same side',
    'underpowered at 30 seeds' -> 'underpowered'; a word not in :data:`VERDICT_COLOURS` -> '')."""
    text = str(text or "")
    if text.startswith("same side"):
        return "same side"
    if text.startswith("underpowered"):
        return "underpowered"
    return text if text in VERDICT_COLOURS else ""


def paper_values(text: str) -> list[str]:
    """The paper's numbers of an evidence row's ``paper_effect`` ('8.5× / >4.8× / 5.7×' -> ['8.5', '>4.8',
    '5.7']; '+1.50' -> ['+1.50']; '' -> []), each as verdict.paper_side reads it."""
    parts = [part.strip().rstrip("×x").strip() for part in str(text or "").split("/")]
    return [part for part in parts if _number(part.lstrip("<>")) is not None]


def _number(text: str) -> float | None:
    """``text`` as a finite number, or None (a cell that holds none: '', 'nan')."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def paper_region(row: pd.Series) -> tuple[float, float] | None:
    """Where an effect must lie for the paper's claim, as the verdict reads it: the band ``band_low`` to
    ``band_high`` for a claim of size or closeness (from verdict.claim_band where the file has none), the
    paper's side of the no-difference band for a claim of side; None where the paper states no side (its
    numbers lie on both sides, or it has none). An end may be infinite (open)."""
    kind, values = MEASURES[row["measure"]].kind, paper_values(row["paper_effect"])
    if not values:
        return None
    claim = row["claim"] or "side"
    if claim != "side":
        low, high = row.get("band_low", np.nan), row.get("band_high", np.nan)
        if pd.isna(low) or pd.isna(high):  # (an evidence file from before the bands were written)
            low, high = claim_band(values, kind, claim)
        return float(low), float(high)
    sides = {paper_side(value, kind) for value in values}
    if len(sides) != 1:
        return None  # a paper split: no side to shade
    low, high = NO_DIFFERENCE[kind]
    return {">": (high, math.inf), "<": (-math.inf, low), "=": (low, high), "?": None}[sides.pop()]


def normalised(rows: pd.DataFrame) -> pd.DataFrame:
    """Evidence rows in one shape, whichever file (or frame) they come from, keeping the rows with an effect:
    arm, vs, table, measure, effect, effect_low, effect_high, censored ('>', '<' or ''), paper_effect, claim,
    band_low, band_high, verdict. Reads a table's ``<table>_evidence.csv`` (arm, paper_effect, effect_bound,
    missed), the scoreboard's ``evidence.csv`` (censored) and verdict.evidence's own frame (method, paper)."""
    frame = rows.reset_index(drop=True)  # (rows concatenated from several files repeat their index)
    if "arm" not in frame.columns and "method" in frame.columns:
        frame = frame.rename(columns={"method": "arm"})
    if "paper_effect" not in frame.columns and "paper" in frame.columns:  # verdict.evidence: paper is the effect
        frame = frame.rename(columns={"paper": "paper_effect"})
    for column in ("vs", "table", "paper_effect", "claim", "verdict", "censored"):
        frame[column] = frame[column].fillna("").astype(str) if column in frame.columns else ""
    frame["claim"] = frame["claim"].replace("", "side")
    for column in ("effect", "effect_low", "effect_high", "band_low", "band_high"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce") if column in frame.columns else np.nan
    if "effect_bound" in frame.columns and "missed" in frame.columns:
        # a table's file: '>' from effect_bound, '<' where the compared arm missed the target and this one did
        # not (verdict.upper_bound); the scoreboard's file says it in censored already
        for table, same in frame.groupby("table", sort=False):
            missed = set(same.loc[same["missed"].astype(str) == "True", "arm"])
            for index, row in same.iterrows():
                if not frame.at[index, "censored"] and pd.notna(row["effect"]):
                    frame.at[index, "censored"] = (">" if str(row["effect_bound"]) == "True"
                                                   else "<" if upper_bound(row, missed) else "")
    return frame[frame["effect"].notna()].reset_index(drop=True)


def table_tags(tables: list[str]) -> dict[str, str]:
    """Each table's name without the words all of ``tables`` share at its start and end ('fedbuff_table1_smoke'
    and 'fedbuff_fig3_smoke' -> 'table1', 'fig3'): the row labels' room goes to what tells them apart."""
    words = [table.split("_") for table in dict.fromkeys(tables)]
    if len(words) < 2:
        return {table: table for table in tables}
    shortest = min(len(w) for w in words)
    head = next((n for n in range(shortest) if len({tuple(w[:n + 1]) for w in words}) > 1), shortest)
    tail = next((n for n in range(shortest) if len({tuple(w[len(w) - n - 1:]) for w in words}) > 1), shortest)
    head, tail = min(head, shortest - 1), min(tail, shortest - 1 - min(head, shortest - 1))  # a word is left
    return {"_".join(w): "_".join(w[head:len(w) - tail]) or "_".join(w) for w in words}


def row_label(row: pd.Series, tags: dict[str, str] | None = None) -> str:
    """'ARM vs COMPARED', after 'TABLE: ' where ``tags`` (the figure's rows span several tables) gives the
    table its short name (:func:`table_tags`); a long one shortened in its arm's name, so that the compared
    arm is still read."""
    table = f"{tags.get(row['table'], row['table'])}: " if tags and row["table"] else ""
    against = f" vs {row['vs']}" if row["vs"] else ""
    arm, room = str(row["arm"]), LABEL_CHARS - len(table) - len(against)
    return table + (arm if len(arm) <= room else arm[:max(room - 1, 8)] + "…") + against


def forest_figure(rows: pd.DataFrame, title: str = "") -> Figure | None:
    """One table's (or any rows') forest plot (module docstring), or None where no row has an effect. Rows of
    several tables are labelled with their table."""
    found = normalised(rows)
    if not len(found):
        return None
    return _figure([(None, found)], title, _tags(found))


def paper_forest_figure(rows: pd.DataFrame, groups: dict[str, list[str]] | None = None,
                        title: str = "") -> Figure | None:
    """One paper's forest plot (module docstring) across its tables, its rows under a heading per group:
    ``groups`` maps a heading (a headline) to the rows it names ('TABLE: ARM', in that order; a row may be under
    several), and rows no group names go under "other rows"; without ``groups``, a heading per table. None
    where no row has an effect."""
    found = normalised(rows)
    if not len(found):
        return None
    keys = found["table"] + ": " + found["arm"]
    if groups is None:
        sections = [(table, found[found["table"] == table]) for table in dict.fromkeys(found["table"])]
        return _figure(sections, title, None)  # (each heading names its table)
    sections, named = [], set()
    for heading, wanted in groups.items():
        index = [i for key in wanted for i in found.index[keys == key]]
        named.update(index)
        if index:
            sections.append((heading, found.loc[index]))
    rest = found[~found.index.isin(named)]
    if len(rest):
        sections.append((OTHER_ROWS, rest))
    return _figure(sections, title, _tags(found))


def plot_forest(rows: pd.DataFrame, path: Path, title: str = "") -> bool:
    """:func:`forest_figure` saved to ``path`` (a PNG, written whole or not at all); False, and nothing
    written, where no row has an effect."""
    return _save(forest_figure(rows, title), Path(path))


def plot_paper_forests(rows: pd.DataFrame, groups: dict[str, list[str]] | None, path: Path, title: str) -> bool:
    """:func:`paper_forest_figure` saved to ``path`` (a PNG, written whole or not at all); False, and nothing
    written, where no row has an effect."""
    return _save(paper_forest_figure(rows, groups, title), Path(path))


def _save(fig: Figure | None, path: Path) -> bool:
    if fig is None:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    # a partial file beside it, renamed over it: a kill or a full disk mid-way leaves the old PNG, or none
    partial = write_partial(path, lambda file: fig.savefig(file, format="png", dpi=DPI))
    try:
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return True


# ------------------------------------------------------------------------------------------ drawing

def _tags(found: pd.DataFrame) -> dict[str, str] | None:
    """The tables' short names where the rows span several tables (their labels name them), else None."""
    return table_tags(list(found["table"])) if found["table"].nunique() > 1 else None


def _figure(sections: list[tuple[str | None, pd.DataFrame]], title: str, tags: dict[str, str] | None) -> Figure:
    """The figure of ``sections`` (a heading, or None, and its rows): a panel per kind of effect present."""
    kinds = [kind for kind in ("ratio", "difference")
             if any((frame["measure"].map(lambda m: MEASURES[m].kind) == kind).any() for _, frame in sections)]
    panels = []
    for kind in kinds:
        items: list[tuple[str, object]] = []
        for heading, frame in sections:
            mine = frame[frame["measure"].map(lambda m: MEASURES[m].kind) == kind]
            if not len(mine):
                continue
            if heading is not None:
                items.append(("heading", heading))
            items += [("row", row) for _, row in mine.iterrows()]
        panels.append((kind, items))
    heights = [len(items) * ROW_INCHES + 0.75 for _, items in panels]  # rows, then the axis' ticks and label
    fig = Figure(figsize=(WIDTH, sum(heights) + 0.6 + (0.3 if title else 0)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights)[:, 0]
    drawn: set[str] = set()
    for ax, (kind, items) in zip(axes, panels):
        drawn |= _panel(fig, ax, kind, items, tags)
    if title:
        fig.suptitle(title, fontsize=FONT + 2)
    fig.legend(handles=_legend(drawn, kinds), loc="outside lower center", ncol=3, fontsize=FONT,
               frameon=False)
    return fig


def _panel(fig: Figure, ax, kind: str, items: list[tuple[str, object]],
           tags: dict[str, str] | None) -> set[str]:
    """Draw one panel's rows (top to bottom); what it drew, for the legend (:func:`_row`)."""
    left, right = _limits([item for what, item in items if what == "row"], kind)
    ax.set_xscale("log" if kind == "ratio" else "linear")
    ax.set_xlim(left, right)
    ax.set_ylim(len(items) - 0.5, -0.5)  # the first item on top
    band_low, band_high = NO_DIFFERENCE[kind]
    ax.axvspan(band_low, band_high, color=NO_DIFFERENCE_COLOUR, alpha=0.7, lw=0, zorder=1, gid="no-difference")
    ax.axvline(1 if kind == "ratio" else 0, color="#808080", lw=0.8, zorder=1.5)
    drawn, labels = set(), []
    for y, (what, item) in enumerate(items):
        if what == "heading":
            if y:
                ax.axhline(y - 0.5, color="#BBBBBB", lw=0.6, zorder=1.5)
            # across the figure from its left edge (a headline's quote is longer than the label column), over
            # the bands; out of the layout, which would otherwise make room for it beside the axes
            text = str(item) if len(str(item)) <= HEADING_CHARS else str(item)[:HEADING_CHARS - 1] + "…"
            ax.text(0.01, y, text, transform=blended_transform_factory(fig.transFigure, ax.transData), ha="left",
                    va="center", fontsize=FONT, weight="bold", zorder=5, in_layout=False, clip_on=False,
                    parse_math=False, bbox=dict(facecolor="white", edgecolor="none", pad=1.5), gid="heading")
            labels.append("")
            continue
        label = row_label(item, tags)
        labels.append(label)
        drawn |= _row(ax, y, item, label, kind, (left, right))
    ax.set_yticks(range(len(items)), labels, fontsize=FONT, parse_math=False)  # ('$' in a name is text)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.set_xlabel(AXIS_LABELS[kind], fontsize=FONT)
    if kind == "ratio":  # labelled ticks at round ratios: a reader reads 2x, not 10^0.3
        ax.xaxis.set_major_locator(FixedLocator(_ratio_ticks(left, right)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(axis="x", color="#EEEEEE", lw=0.6, zorder=0)
    ax.set_axisbelow(True)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    return drawn


def _row(ax, y: float, row: pd.Series, label: str, kind: str, limits: tuple[float, float]) -> set[str]:
    """One row: the paper's band and numbers, the effect with its interval (an open end an arrow), and the
    effect in words at the right; what it drew, for the legend: 'verdict:KEY' and any of "band", "paper",
    "paper-bound", "open"."""
    drawn = {f"verdict:{verdict_key(row['verdict'])}"}
    left, right = limits
    region = paper_region(row)
    if region is not None:
        low, high = max(region[0], left), min(region[1], right)  # an open end reaches the axis' edge
        if high > low:
            ax.add_patch(Rectangle((low, y - 0.38), high - low, 0.76, facecolor=BAND_COLOUR, edgecolor="none",
                                   zorder=0.5, gid=f"band:{label}"))
            drawn.add("band")
    neutral = 1.0 if kind == "ratio" else 0.0
    for value in paper_values(row["paper_effect"]):
        number, mark = float(value.lstrip("<>")), value[:1] if value[:1] in "<>" else ""
        if mark and number == neutral:
            continue  # a direction without a number ('>1', '>0'): the shaded side says it
        ax.plot([number], [y], linestyle="none", marker={">": 5, "<": 4}.get(mark, "D"), markersize=4.5,
                color=PAPER_COLOUR, zorder=4, gid=f"paper:{label}")
        drawn.add("paper-bound" if mark else "paper")
    key = verdict_key(row["verdict"])
    colour = VERDICT_COLOURS[key]
    value = row["effect"]
    low = row["effect_low"] if pd.notna(row["effect_low"]) else value
    high = row["effect_high"] if pd.notna(row["effect_high"]) else value
    ax.hlines(y, low, high, color=colour, lw=2.0, zorder=3, gid=f"interval:{label}")
    # a censored end is open: the effect may lie beyond it, so an arrow, not a tick that would close it
    open_end = {">": "high", "<": "low"}.get(row["censored"], "")
    for end, x in (("low", low), ("high", high)):
        if end == open_end:
            tip = min(max(_beyond(x, kind, limits, +1 if end == "high" else -1), left), right)
            ax.add_patch(FancyArrowPatch((x, y), (tip, y), arrowstyle="-|>", mutation_scale=9, color=colour,
                                         lw=2.0, shrinkA=0, shrinkB=0, zorder=3, gid=f"open-{end}:{label}"))
            drawn.add("open")
        else:
            ax.plot([x], [y], linestyle="none", marker="|", markersize=8, markeredgewidth=1.6, color=colour,
                    zorder=3, gid=f"cap-{end}:{label}")
    ax.plot([value], [y], linestyle="none", marker=VERDICT_MARKERS[key], markersize=_size(key), color=colour,
            markeredgecolor="white", markeredgewidth=0.5, zorder=4.5, gid=f"effect:{label}")
    # the effect as the page prints it (the verdict's words are the page's table's, beside the plot)
    words = shown_interval(value, low, high, kind, row["censored"] == ">", row["censored"] == "<")
    ax.text(1.01, y, words, transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=FONT - 0.5,
            color=colour, clip_on=False, gid=f"words:{label}")
    return drawn


def _ratio_ticks(left: float, right: float) -> list[float]:
    """Round ratios between ``left`` and ``right``: the coarsest of :data:`RATIO_TICKS`' sets that puts at
    least four there (a narrow range gets 0.9, 1, 1.1, ...)."""
    for mantissas in RATIO_TICKS:
        candidates = {round(m * 10.0 ** e, 6) for e in range(-4, 5) for m in mantissas}
        ticks = sorted(t for t in candidates if left <= t <= right)
        if len(ticks) >= 4:
            return ticks
    return ticks


def _beyond(x: float, kind: str, limits: tuple[float, float], direction: int) -> float:
    """Where an open end's arrow points to: 6% of the axis' width past ``x`` (in log units on a log axis)."""
    left, right = limits
    if kind == "ratio":
        return x * (right / left) ** (0.06 * direction)
    return x + 0.06 * (right - left) * direction


def _limits(rows: list[pd.Series], kind: str) -> tuple[float, float]:
    """The x range that shows every effect, interval, open end's arrow, finite band edge and paper number, and
    the no-difference band, with a margin."""
    values = list(NO_DIFFERENCE[kind])
    for row in rows:
        values += [row["effect"], row["effect_low"], row["effect_high"]]
        region = paper_region(row)
        values += [edge for edge in (region or ()) if math.isfinite(edge)]
        values += [float(value.lstrip("<>")) for value in paper_values(row["paper_effect"])]
    values = [v for v in values if pd.notna(v) and math.isfinite(v) and (kind != "ratio" or v > 0)]
    low, high = min(values), max(values)
    if kind == "ratio":
        span = math.log(high / low)
        low, high = low * math.exp(-0.08 * span - 0.05), high * math.exp(0.08 * span + 0.05)
    else:
        span = high - low
        low, high = low - 0.08 * span - 0.5, high + 0.08 * span + 0.5
    arrows = (low, high)
    for row in rows:  # room for the arrows of open ends
        if row["censored"] in (">", "<"):
            direction = +1 if row["censored"] == ">" else -1
            end = row["effect_high" if direction > 0 else "effect_low"]
            tip = _beyond(row["effect"] if pd.isna(end) else end, kind, arrows, 1.3 * direction)
            low, high = min(low, tip), max(high, tip)
    return low, high


def _size(key: str) -> float:
    """A verdict's marker size: a star is drawn smaller than the others at the same size."""
    return 10.0 if VERDICT_MARKERS[key] == "*" else 7.0


def _legend(drawn: set[str], kinds: list[str]) -> list:
    """The verdicts drawn (in :data:`VERDICT_COLOURS`' order), the no-difference band, and the marks drawn."""
    handles = [Line2D([], [], color=colour, marker=VERDICT_MARKERS[key], markersize=_size(key), lw=2.0,
                      markeredgecolor="white", markeredgewidth=0.5, label=VERDICT_LEGEND.get(key, key))
               for key, colour in VERDICT_COLOURS.items() if f"verdict:{key}" in drawn]
    bands = " / ".join(f"ratio {NO_DIFFERENCE['ratio'][0]:g}–{NO_DIFFERENCE['ratio'][1]:g}" if kind == "ratio"
                       else f"±{NO_DIFFERENCE['difference'][1]:g} points" for kind in kinds)
    handles.append(Patch(facecolor=NO_DIFFERENCE_COLOUR, label=f"no difference ({bands})"))
    marks = {"band": Patch(facecolor=BAND_COLOUR, label="the paper's claim (band or side)"),
             "paper": Line2D([], [], color=PAPER_COLOUR, marker="D", markersize=4.5, linestyle="none",
                             label="the paper's numbers"),
             "paper-bound": Line2D([], [], color=PAPER_COLOUR, marker=5, markersize=4.5, linestyle="none",
                                   label="the paper's bound (>x, <x)"),
             "open": Line2D([], [], color="#555555", marker=5, markersize=6, lw=2.0,
                            label="censored: open end")}
    return handles + [handle for mark, handle in marks.items() if mark in drawn]
