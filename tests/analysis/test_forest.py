"""Forest plots of verdicts (fl_bench.analysis.forest): a row per compared arm on the right scale, coloured by
its verdict, a censored end left open, the paper's band where the verdict read it, whole files or none."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from fl_bench.analysis import forest, scoreboard
from fl_bench.analysis.forest import (VERDICT_COLOURS, forest_figure, paper_forest_figure, plot_forest,
                                      plot_paper_forests)
from fl_bench.analysis.verdict import NO_DIFFERENCE

RESULTS = Path(__file__).resolve().parents[2] / "results"
NAN = math.nan


def _row(arm, effect, low, high, verdict, paper="", claim="side", band=(NAN, NAN), measure="trips", vs="fedbuff",
         bound=False, missed=False, table="t1"):
    """One row of a table's ``<table>_evidence.csv``."""
    return {"arm": arm, "seeds": 5, "median": 1.0, "median_low": 1.0, "median_high": 1.0, "missed": missed, "vs": vs,
            "effect": effect, "effect_low": low, "effect_high": high, "effect_bound": bound, "paper_effect": paper,
            "claim": claim, "band_low": band[0], "band_high": band[1], "verdict": verdict, "guard": "",
            "measure": measure, "paper": "Toy (2026)", "table": table, "cause": ""}


TABLE = pd.DataFrame([
    _row("fedbuff", NAN, NAN, NAN, "", vs=""),  # the reference: compared with none, no row
    _row("fedavgm", 2.3, 2.2, 2.5, "reproduces", "3.3× / 1.7×", "size", (1.13, 4.95)),
    _row("fedasync", 0.6, 0.55, 0.65, "differs", ">1×"),
    _row("fedavg", 3.9, 3.6, 4.2, "reproduces", "8.5× / >4.8×", "size", (3.2, math.inf), bound=True, missed=True),
])


def _drawn(fig: Figure, element: str) -> dict:
    """The artists of ``element`` (module docstring: the gids), by row label."""
    return {a.get_gid().split(":", 1)[1]: a for a in fig.findobj(lambda a: str(a.get_gid()).startswith(f"{element}:"))}


def _colour(line) -> str:
    return to_hex(line.get_color())


def test_a_ratio_table_is_a_row_per_compared_arm_on_a_log_axis_coloured_by_its_verdict():
    fig = forest_figure(TABLE, "Toy Table 1")
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and "ratio" in ax.get_xlabel() and "log" in ax.get_xlabel()
    labels = ["fedavgm vs fedbuff", "fedasync vs fedbuff", "fedavg vs fedbuff"]
    assert [t.get_text() for t in ax.get_yticklabels()] == labels  # the reference, without an effect, is no row
    assert sorted(_drawn(fig, "interval")) == sorted(labels) and sorted(_drawn(fig, "effect")) == sorted(labels)
    effects = _drawn(fig, "effect")
    assert _colour(effects["fedavgm vs fedbuff"]) == VERDICT_COLOURS["reproduces"].lower()
    assert _colour(effects["fedasync vs fedbuff"]) == VERDICT_COLOURS["differs"].lower()
    assert effects["fedasync vs fedbuff"].get_xdata()[0] == 0.6
    segments = _drawn(fig, "interval")["fedavgm vs fedbuff"].get_segments()[0]
    assert list(segments[:, 0]) == [2.2, 2.5]  # the 95% interval's ends
    # the no-difference band spans every row; the legend names the verdicts drawn and no other
    band = _drawn(fig, "no-difference") or fig.findobj(lambda a: a.get_gid() == "no-difference")
    assert len(band) == 1
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"reproduces", "differs"} <= set(legend) and "inconclusive" not in legend and "no verdict" not in legend
    assert fig._suptitle.get_text() == "Toy Table 1"


def test_a_lower_bound_is_open_toward_larger_effects_and_an_upper_bound_toward_smaller():
    # fedavg missed the target on some seed (effect_bound): '>'; a row against an arm that missed, where its own
    # seeds did not, is an upper bound ('<', verdict.upper_bound)
    rows = pd.concat([TABLE, pd.DataFrame([_row("fedprox", 0.5, 0.45, 0.6, "inconclusive", "<1×", vs="fedavg")])])
    fig = forest_figure(rows)
    opened_high, opened_low = _drawn(fig, "open-high"), _drawn(fig, "open-low")
    assert list(opened_high) == ["fedavg vs fedbuff"] and list(opened_low) == ["fedprox vs fedavg"]
    (start, _), (tip, _) = opened_high["fedavg vs fedbuff"]._posA_posB
    assert start == 4.2 and tip > 4.2  # from the interval's end outward
    (start, _), (tip, _) = opened_low["fedprox vs fedavg"]._posA_posB
    assert start == 0.45 and tip < 0.45
    caps_high, caps_low = _drawn(fig, "cap-high"), _drawn(fig, "cap-low")
    assert "fedavg vs fedbuff" not in caps_high and "fedavg vs fedbuff" in caps_low  # open above, closed below
    assert "fedprox vs fedavg" not in caps_low and "fedprox vs fedavg" in caps_high
    assert {"fedavgm vs fedbuff", "fedasync vs fedbuff"} <= set(caps_high) & set(caps_low)  # measured: closed
    words = _drawn(fig, "words")
    assert words["fedavg vs fedbuff"].get_text() == ">3.90× [3.60, 4.20]"
    assert words["fedprox vs fedavg"].get_text() == "<0.50× [0.45, 0.60]"
    # the scoreboard's evidence.csv says it in its censored column; verdict.evidence's own frame names the arm
    # method and the paper's effect paper
    gathered = TABLE.drop(columns=["effect_bound", "missed"]).assign(censored=["", "", "", ">"])
    assert list(_drawn(forest_figure(gathered), "open-high")) == ["fedavg vs fedbuff"]
    found = TABLE.drop(columns=["paper", "table", "cause"]).rename(columns={"arm": "method", "paper_effect": "paper"})
    assert list(_drawn(forest_figure(found), "open-high")) == ["fedavg vs fedbuff"]
    assert len(_drawn(forest_figure(found), "paper")) == 2  # (one gid a row: fedavgm's and fedavg's numbers)


def test_the_paper_band_is_the_band_the_verdict_read_and_an_open_side_reaches_the_axis_edge():
    fig = forest_figure(TABLE)
    (ax,) = fig.axes
    left, right = ax.get_xlim()
    bands = _drawn(fig, "band")
    size = bands["fedavgm vs fedbuff"]
    assert (size.get_x(), size.get_x() + size.get_width()) == pytest.approx((1.13, 4.95))
    bounded = bands["fedavg vs fedbuff"]  # band_high inf (the paper's '>4.8'): shaded to the edge
    assert (bounded.get_x(), bounded.get_x() + bounded.get_width()) == pytest.approx((3.2, right))
    side = bands["fedasync vs fedbuff"]  # a claim of side, '>1x': the paper's side of the no-difference band
    assert (side.get_x(), side.get_x() + side.get_width()) == pytest.approx((NO_DIFFERENCE["ratio"][1], right))
    assert left < 0.55 and right > 4.2 * 1.05  # every interval, and room for the open end's arrow
    # the paper's numbers: a diamond each, a caret for the bound; '>1' (a side without a number) none
    points = [a for a in fig.findobj(lambda a: str(a.get_gid()).startswith("paper:"))]
    shown = sorted((a.get_gid(), a.get_xdata()[0], a.get_marker()) for a in points)
    assert shown == [("paper:fedavg vs fedbuff", 4.8, 5), ("paper:fedavg vs fedbuff", 8.5, "D"),
                     ("paper:fedavgm vs fedbuff", 1.7, "D"), ("paper:fedavgm vs fedbuff", 3.3, "D")]


def test_a_difference_is_drawn_on_a_linear_axis_with_the_papers_side_below():
    rows = pd.DataFrame([_row("fedbuff against ca2fl", 7.9, 7.0, 8.9, "differs", "<0", measure="costs", vs="ca2fl"),
                         _row("S-SGD", 1.9, 1.4, 2.7, "underpowered at 30 seeds", "+0.61", "closeness",
                              (-math.inf, 2.61), measure="best_accuracy", vs="fedlaavg ICA")])
    fig = forest_figure(rows)
    (ax,) = fig.axes
    left, _ = ax.get_xlim()
    assert ax.get_xscale() == "linear" and "difference" in ax.get_xlabel() and "points" in ax.get_xlabel()
    bands = _drawn(fig, "band")
    below = bands["fedbuff against ca2fl vs ca2fl"]
    assert (below.get_x(), below.get_x() + below.get_width()) == pytest.approx((left, NO_DIFFERENCE["difference"][0]))
    closeness = bands["S-SGD vs fedlaavg ICA"]
    assert (closeness.get_x(), closeness.get_x() + closeness.get_width()) == pytest.approx((left, 2.61))
    assert _colour(_drawn(fig, "effect")["S-SGD vs fedlaavg ICA"]) == VERDICT_COLOURS["underpowered"].lower()


def test_nothing_is_written_where_no_row_has_an_effect(tmp_path):
    rows = TABLE[TABLE["effect"].isna()]
    assert forest_figure(rows) is None
    assert plot_forest(rows, tmp_path / "plot.png") is False
    assert plot_paper_forests(rows, None, tmp_path / "paper.png", "Toy") is False
    assert list(tmp_path.iterdir()) == []


def test_a_failed_save_leaves_the_earlier_file_and_no_partial_one(tmp_path, monkeypatch):
    path = tmp_path / "forest.png"
    path.write_bytes(b"the earlier plot")

    def broken(self, file, **kwargs):
        file.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(OSError, match="disk full"):
        plot_forest(TABLE, path)
    assert path.read_bytes() == b"the earlier plot" and list(tmp_path.iterdir()) == [path]


def test_a_papers_rows_are_grouped_under_headings_with_a_panel_per_kind():
    rows = pd.concat([TABLE, pd.DataFrame([
        _row("S-SGD", 1.9, 1.4, 2.7, "same side, 4.3x the paper's gap", "+0.61", "closeness", (-math.inf, 2.61),
             measure="best_accuracy", vs="HFL", table="t2"),
        _row("FedAvg", -1.0, -2.0, 0.1, "", "-11.49", "size", (-14.4, -8.6), measure="best_accuracy", vs="HFL",
             table="t2")])])
    groups = {"\"FedBuff is 3.3x more efficient\"": ["t1: fedavgm", "t2: S-SGD"], "second": ["t1: fedavgm"],
              "named, not run": ["t9: nothing"]}
    fig = paper_forest_figure(rows, groups, "Toy (2026)")
    ratio, difference = fig.axes
    assert (ratio.get_xscale(), difference.get_xscale()) == ("log", "linear")
    headings = lambda ax: [t.get_text() for t in ax.texts if t.get_gid() == "heading"]  # noqa: E731
    assert headings(ratio) == ["\"FedBuff is 3.3x more efficient\"", "second", "other rows"]
    assert headings(difference) == ["\"FedBuff is 3.3x more efficient\"", "other rows"]
    ticks = [t.get_text() for t in ratio.get_yticklabels()]  # rows span two tables: each labelled with its own
    assert ticks == ["", "t1: fedavgm vs fedbuff", "", "t1: fedavgm vs fedbuff", "",
                     "t1: fedasync vs fedbuff", "t1: fedavg vs fedbuff"]
    assert [t.get_text() for t in difference.get_yticklabels()] == ["", "t2: S-SGD vs HFL", "", "t2: FedAvg vs HFL"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"reproduces", "differs", "same side (not the size)", "no verdict"} <= set(legend)
    # without groups, a heading per table and the table left out of the labels
    by_table = paper_forest_figure(rows, None, "Toy (2026)")
    assert [t.get_text() for t in by_table.axes[0].texts if t.get_gid() == "heading"] == ["t1"]
    assert "fedavgm vs fedbuff" in [t.get_text() for t in by_table.axes[0].get_yticklabels()]


def test_every_verdict_has_its_own_colour_and_the_tables_short_names():
    assert set(VERDICT_COLOURS) == {*scoreboard.VERDICTS, ""}
    assert len(set(VERDICT_COLOURS.values())) == len(VERDICT_COLOURS)
    assert [forest.verdict_key(v) for v in ("same side, more than 3.8x the paper's", "underpowered at 30 seeds",
                                            "differs", "", np.nan)] == ["same side", "underpowered", "differs", "", ""]
    assert forest.table_tags(["fedbuff_table1_smoke", "fedbuff_fig3_smoke"]) == {
        "fedbuff_table1_smoke": "table1", "fedbuff_fig3_smoke": "fig3"}


def test_the_committed_evidence_is_drawn(tmp_path):
    table = pd.read_csv(RESULTS / "fedbuff_table1_smoke_evidence.csv")
    assert plot_forest(table, tmp_path / "table1.png", "FedBuff Table 1 (smoke)")
    every = pd.read_csv(RESULTS / "evidence.csv")
    fedbuff = every[every["paper"] == "FedBuff (Nguyen et al. 2022)"]
    record = yaml.safe_load((RESULTS / "fedbuff_smoke_paper.yaml").read_text())
    groups = {headline["quote"]: headline["rows"] for headline in record["headlines"]}
    assert plot_paper_forests(fedbuff, groups, tmp_path / "fedbuff.png", record["paper"])
    for name in ("table1.png", "fedbuff.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fedbuff.png", "table1.png"]  # no partial file left
