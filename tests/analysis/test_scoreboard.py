"""The scoreboard: every table's verdict rows gathered per paper from the evidence files reproduce
writes, a "differs" row with the verdict of the arm that tests its cause, or "unexplained"."""

import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fl_bench.analysis import scoreboard
from fl_bench.analysis.verdict import evidence, evidence_table, fill_notes
from fl_bench.analysis.protocol import Protocol
from fl_bench.analysis.sweep_file import load_sweep_file
from fl_bench.errors import ConfigError
from tests.helpers.arms import as_arms

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def _runs(trips: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"method": m, "seed": s, "trips_to_target": t, "max_trips": 1000, "eval_every": 10,
                          "best_val_accuracy": 0.5} for m, values in trips.items() for s, t in enumerate(values)])


def _toy_sweep(tmp_path: Path) -> Path:
    """A copy of a paper's sweep file under another name: one table, toy_table, of the paper Toy (2026)."""
    text = (SWEEPS / "fedstaleweight_smoke.yaml").read_text().replace("fedstaleweight_fig2_smoke:", "toy_table:")
    spec = tmp_path / "mine.yaml"
    spec.write_text(text.replace("paper: FedStaleWeight (Ma et al.)", "paper: Toy (2026)", 1))
    scoreboard.write_paper_record(tmp_path, spec, load_sweep_file(spec))  # as its reproduction would
    return spec


def test_the_scoreboard_gathers_every_verdict_per_paper_with_the_cause_of_each_difference(tmp_path):
    runs = _runs({"base": [100, 101, 99, 100, 102], "ahead": [300, 310, 305, 290, 300],
                  "same": [100, 99, 101, 100, 100], "plain": [150, 160, 155, 150, 151]})
    arms = {"base": {}, "ahead": {"vs": "base", "paper": {"trips": [2.0]}},  # 3.0x: the paper's side
            "same": {"vs": "base", "paper": {"trips": [2.0]}, "cause": {"arm": "plain", "changes": "no momentum"}},
            "plain": {"vs": "base", "paper": {"trips": [1.5]}}}  # 1.5x
    spec = _toy_sweep(tmp_path)
    found = evidence(runs, "base", as_arms(arms), "trips")
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms), tmp_path / "toy_table_evidence.csv")
    rows = scoreboard.write(tmp_path, [spec, SWEEPS / "fedgbo_smoke.yaml"])

    assert list(rows["arm"]) == ["ahead", "same", "plain"]  # the reference has no verdict: not a row
    assert list(rows["verdict"]) == ["reproduces", "differs", "reproduces"]
    assert rows.loc[rows["arm"] == "same", "cause"].item() == "no momentum (arm plain): 1.51× [1.48, 1.60] against base, reproduces"
    assert (rows["paper"] == "Toy (2026)").all() and (rows["seeds"] == 5).all()
    assert rows.loc[rows["arm"] == "ahead", "effect"].item() == found.set_index("method").loc["ahead", "effect"]
    assert pd.read_csv(tmp_path / "evidence.csv")["verdict"].tolist() == list(rows["verdict"])
    page = (tmp_path / "README.md").read_text()
    assert "All papers: 3 verdicts: 2 reproduces, 1 differs, 0 inconclusive (0% inconclusive)." in page
    assert "## Toy (2026)" in page and "| [toy_table](toy_table.md) | same " in page
    # a table never reproduced since evidence files exist is named, not dropped (linked where its page is)
    assert "No evidence file (the table has not been reproduced into this directory): " \
           "fedgbo_table4_smoke (no page yet)." in page

    assert "Guard, unstable (a tuned setting that collapsed on some report seeds), on 0 arms." in page
    csv = pd.read_csv(tmp_path / "toy_table_evidence.csv", dtype={"guard": str})
    csv.loc[csv["arm"] == "base", "guard"] = "unstable: collapsed on seed 2 of 5"  # an arm without a verdict counts too
    csv.to_csv(tmp_path / "toy_table_evidence.csv", index=False)
    scoreboard.write(tmp_path, [spec])
    assert "on 1 arm: toy_table: base." in (tmp_path / "README.md").read_text()

    del arms["same"]["cause"]
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms), tmp_path / "toy_table_evidence.csv")
    assert scoreboard.write(tmp_path, [spec])["cause"].tolist() == ["", "unexplained", ""]

    # what was tried, each arm with its verdict, when nothing explains it
    arms["same"]["tried"] = [{"arm": "plain", "changes": "no momentum"}, {"arm": "ahead", "changes": "more steps"}]
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms), tmp_path / "toy_table_evidence.csv")
    assert scoreboard.write(tmp_path, [spec])["cause"].tolist()[1] == \
        "unexplained; tried no momentum (arm plain): 1.51× [1.48, 1.60] against base, reproduces; more steps (arm ahead): 3.00× [2.90, 3.10] against base, reproduces"


def test_the_counts_name_each_kind_of_verdict_and_the_inconclusive_share():
    verdicts = pd.DataFrame({"verdict": ["reproduces", "not reached", "inconclusive", "underpowered at 30 seeds"]})
    assert scoreboard.counts(verdicts) == \
        "4 verdicts: 1 reproduces, 0 differs, 1 inconclusive, 1 underpowered, 1 not reached (25% inconclusive)"


def test_a_write_that_fails_midway_leaves_the_earlier_scoreboard_whole(tmp_path, monkeypatch, capsys):
    spec = tmp_path / "sweeps" / "hfl_smoke.yaml"  # one table, hfl_convex_smoke
    spec.parent.mkdir()
    spec.write_text((SWEEPS / "hfl_smoke.yaml").read_text())
    found = evidence(_runs({"base": [100, 101, 99], "ahead": [300, 310, 305]}), "base",
                     as_arms({"ahead": {"vs": "base", "paper": {"trips": [2.0]}}}), "trips")
    scoreboard.write_table_evidence(found, "hfl_convex_smoke", "HFL", {}, tmp_path / "hfl_convex_smoke_evidence.csv")
    scoreboard.write_paper_record(tmp_path, spec, load_sweep_file(spec))
    scoreboard.main(["--out", str(tmp_path), "--sweeps", str(spec.parent)])
    before = {name: (tmp_path / name).read_bytes() for name in ("README.md", "evidence.csv")}

    def full(descriptor):  # the disk fills up before a file is whole on it (tests run as root: no chmod)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(SystemExit) as stop:
        scoreboard.main(["--out", str(tmp_path), "--sweeps", str(spec.parent)])
    assert stop.value.code == 1
    assert capsys.readouterr().err == f"fl_bench.analysis.scoreboard: error: {tmp_path}: cannot write the scoreboard " \
                                      "there (No space left on device): give a directory you can write to\n"
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert not list(tmp_path.glob(".*.partial"))  # nor is the half-written file left behind


def test_a_censored_effect_keeps_its_bound_in_evidence_csv_and_on_the_scoreboard(tmp_path):
    """issue 54: an arm whose seeds missed the target (counted as the budget, 1000) has a lower bound for
    its effect: '>' on its page, and so in evidence.csv's censored column and on the scoreboard."""
    runs = _runs({"base": [100, 101, 99, 100, 102], "slow": [300, 1000, 1000, 1000, 290]})
    runs.loc[runs["trips_to_target"] == 1000, "trips_to_target"] = float("nan")  # never reached
    arms = {"base": {}, "slow": {"vs": "base", "paper": {"trips": [2.0]}}}
    spec = _toy_sweep(tmp_path)
    found = evidence(runs, "base", as_arms(arms), "trips")
    assert found.set_index("method").loc["slow", "effect_bound"]
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms), tmp_path / "toy_table_evidence.csv")
    scoreboard.write(tmp_path, [spec])
    written = pd.read_csv(tmp_path / "evidence.csv", keep_default_na=False)
    assert written.set_index("arm").loc["slow", "censored"] == ">"
    effect = found.set_index("method").loc["slow", "effect"]
    assert f"| >{effect:.2f}× [" in (tmp_path / "README.md").read_text()



def test_an_effect_against_an_arm_that_missed_the_target_is_an_upper_bound_wherever_it_is_printed(tmp_path):
    """The compared arm's misses count as the budget, so its median is a lower bound and the ratio an upper
    one: '<' on the page's evidence table, in a note's placeholder, in evidence.csv and on the scoreboard
    (it read as a measured ratio before)."""
    runs = _runs({"base": [300, 1000, 1000, 1000, 290], "fast": [100, 101, 99, 100, 102]})
    runs.loc[runs["trips_to_target"] == 1000, "trips_to_target"] = float("nan")  # never reached
    arms = {"base": {}, "fast": {"vs": "base", "paper": {"trips": [0.5]}}}
    found = evidence(runs, "base", as_arms(arms), "trips")
    fast = found.set_index("method").loc["fast"]
    assert not fast["effect_bound"] and fast["effect"] == pytest.approx(0.1)
    assert evidence_table(runs, "base", as_arms(arms), "trips", found).set_index("method").loc["fast", "effect [95% CI]"].startswith("<0.10× [")
    assert fill_notes("fast: {effect:fast}", found).startswith("fast: <0.10× [")
    spec = _toy_sweep(tmp_path)
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms), tmp_path / "toy_table_evidence.csv")
    scoreboard.write(tmp_path, [spec])
    written = pd.read_csv(tmp_path / "evidence.csv", keep_default_na=False)
    assert written.set_index("arm").loc["fast", "censored"] == "<"
    assert "| <0.10× [" in (tmp_path / "README.md").read_text()


def test_a_degenerate_arm_is_named_on_the_scoreboard_and_not_counted(tmp_path):
    runs = _runs({"base": [100, 101, 99, 100, 102], "plain": [300, 310, 305, 290, 300], "nested": [300, 310, 305, 290, 300]})
    arms = {"base": {}, "plain": {"vs": "base", "paper": {"trips": [2.0]}},
            "nested": {"vs": "base", "special_case": "plain", "paper": {"trips": [2.0]}}}
    spec = _toy_sweep(tmp_path)
    found = evidence(runs, "base", as_arms(arms), "trips", degenerate={"nested": "algorithm.beta = 0.0"})
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms),
                                    tmp_path / "toy_table_evidence.csv")
    rows = scoreboard.write(tmp_path, [spec])
    assert list(rows["arm"]) == ["plain"]  # one verdict, not two
    page = (tmp_path / "README.md").read_text()
    assert "on 1 arm: toy_table: nested (tuned to its special case plain (algorithm.beta = 0.0), so it runs that " \
           "method)." in page and "All papers: 1 verdicts" in page


def test_a_headline_is_answered_from_the_verdicts_of_its_rows():
    assert scoreboard.answer(["reproduces", "reproduces"]) == "holds"
    assert scoreboard.answer(["reproduces", "same side, 0.18x the paper's"]) == "holds in direction only"
    assert scoreboard.answer(["reproduces", "differs", "same side, 2x the paper's"]) == "does not hold"
    assert scoreboard.answer(["reproduces", "underpowered at 30 seeds"]) == "undecided"
    assert scoreboard.answer(["", "paper split"]) == "undecided"  # a degenerate row and a split paper: nothing tested
    assert scoreboard.answer(["reproduces", ""]) == "holds"  # a degenerate row is not counted


def _toy_spec(tmp_path: Path, headlines: str) -> Path:
    spec = tmp_path / "mine.yaml"
    spec.write_text((SWEEPS / "fedstaleweight_smoke.yaml").read_text().split("\nheadlines:\n")[0]
                    .replace("fedstaleweight_fig2_smoke:", "toy_table:").replace("paper: FedStaleWeight (Ma et al.)",
                                                                                  "paper: Toy (2026)") + "\n" + headlines)
    scoreboard.write_paper_record(tmp_path, spec, load_sweep_file(spec))
    return spec


def test_the_scoreboard_and_the_readme_answer_each_headline_and_name_stale_evidence(tmp_path):
    runs = _runs({"base": [100, 101, 99, 100, 102], "far": [3000, 3010, 2990, 3005, 2995],
                  "near": [120, 121, 119, 120, 122]})
    arms = {"base": {}, "far": {"vs": "base", "paper": {"trips": [1.1]}, "claim": "size"},
            "near": {"vs": "base", "paper": {"trips": [1.1]}, "claim": "size"}}
    # the toy file's arms are FedStaleWeight's; its headline names them, the evidence file names ours
    spec = _toy_spec(tmp_path, 'headlines:\n  - {quote: "it is 1.1x faster", where: abstract, '
                               'rows: ["toy_table: fedstaleweight", "toy_table: fedstaleweight alg1"]}\n')
    found = evidence(runs, "base", as_arms(arms), "trips").replace({"method": {"far": "fedstaleweight", "near": "fedstaleweight alg1"},
                                                          "vs": {"base": "buffered_fedavg"}})
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms), tmp_path / "toy_table_evidence.csv")
    readme = tmp_path / "README.md.project"
    readme.write_text(f"# Project\n\nbefore\n\n{scoreboard.README_BEGIN}\nold text\n{scoreboard.README_END}\n\nafter\n")
    scoreboard.write(tmp_path, [spec], readme=readme)

    page = (tmp_path / "README.md").read_text()
    line = ('- "it is 1.1x faster" (abstract): **holds in direction only** on stand-ins only (2 rows: 1 same side, 1 '
            "reproduces); from evidence older than its claims: toy_table (to be reproduced again). [toy_table](toy_table.md) "
            "fedstaleweight (stand-in): same side, 27x the paper's; [toy_table](toy_table.md) fedstaleweight alg1 (stand-in): reproduces.")
    assert line in page
    summary = readme.read_text()
    assert summary.startswith("# Project\n\nbefore\n\n" + scoreboard.README_BEGIN) and summary.endswith("after\n")
    assert ('- Toy (2026): "it is 1.1x faster" (abstract): **holds in direction only** on stand-ins only (2 rows: 1 same '
            "side, 1 reproduces); from evidence older than its claims: toy_table") in summary and "old text" not in summary
    # the file registers the toy arms as side claims: the evidence, made under size claims, is stale
    assert "Evidence older than its sweep file's claims" in page and "[toy_table](toy_table.md)." in page

    readme.write_text("# Project without the markers\n")
    with pytest.raises(ConfigError, match="has no headlines block"):
        scoreboard.write(tmp_path, [spec], readme=readme)
    assert readme.read_text() == "# Project without the markers\n"  # nothing written when the block is missing


def test_the_readme_summary_is_the_one_the_scoreboard_generates_from_the_shipped_evidence():
    """The README's block of headline answers is generated (python -m fl_bench.analysis.scoreboard), not typed."""
    board = scoreboard.gather(scoreboard.RESULTS, scoreboard.reproductions())
    text = scoreboard.README.read_text()
    begin, end = text.index(scoreboard.README_BEGIN), text.index(scoreboard.README_END)
    assert text[begin:end + len(scoreboard.README_END)] == scoreboard.readme_block(board)
    # every shipped table was made under its sweep file's current claims (issue 54: none older)
    assert "Evidence older" not in scoreboard.markdown(board)


def test_a_verdict_from_fewer_seeds_than_the_protocol_s_minimum_is_shown_apart_and_not_counted(tmp_path):
    runs = _runs({"base": [100, 101, 99, 100, 102], "ahead": [300, 310, 305, 290, 300], "plain": [60, 61, 59, 60, 62]})
    arms = {"base": {}, "ahead": {"vs": "base", "paper": {"trips": [2.0]}}, "plain": {"vs": "base", "paper": {"trips": [2.0]}}}
    spec = _toy_sweep(tmp_path)
    found = evidence(runs, "base", as_arms(arms), "trips")
    assert found.set_index("method").loc["plain", "verdict"] == "differs"
    found.loc[found["method"] == "plain", "seeds"] = 1  # as a --smoke point leaves it: one seed
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms), tmp_path / "toy_table_evidence.csv")
    rows = scoreboard.write(tmp_path, [spec])
    assert list(rows["arm"]) == ["ahead"]
    page = (tmp_path / "README.md").read_text()
    assert "All papers: 1 verdicts: 1 reproduces, 0 differs" in page
    assert (f"Not counted (a verdict from fewer report seeds than the protocol's minimum, {Protocol.MIN_REPORT_SEEDS}: a "
            "--smoke point or a partial reproduction; reproduce the table in full), 1 row: toy_table: plain (differs, "
            "1 seed).") in page
    board = scoreboard.gather(tmp_path, [spec])
    assert board.every.set_index("arm").loc["plain", "verdict"] == ""  # a headline reads no verdict from it


def test_the_scoreboard_reads_the_paper_records_and_the_sweep_files_only_for_stale_or_missing_tables(tmp_path):
    """issue 58: evidence one way. The page's paper, tables and headlines are the record's, written with the
    evidence; a sweep file edited since changes none of them, and one never reproduced only lists its tables."""
    runs = _runs({"base": [100, 101, 99, 100, 102], "ahead": [300, 310, 305, 290, 300]})
    arms = {"base": {}, "fedstaleweight": {"vs": "base", "paper": {"trips": [2.0]}}}
    spec = _toy_spec(tmp_path, 'headlines:\n  - {quote: "it is 2x faster", where: abstract, rows: ["toy_table: fedstaleweight"]}\n')
    found = evidence(runs.replace({"method": {"ahead": "fedstaleweight"}}), "base", as_arms(arms), "trips")
    scoreboard.write_table_evidence(found, "toy_table", "Toy (2026)", as_arms(arms), tmp_path / "toy_table_evidence.csv")
    record = yaml.safe_load((tmp_path / "mine_paper.yaml").read_text())
    fidelity = load_sweep_file(spec).tables["toy_table"].fidelity  # (fedstaleweight_smoke.yaml's: a stand-in)
    assert record == {"sweep_file": "mine.yaml", "paper": "Toy (2026)", "tables": ["toy_table"],
                      "fidelity": {"toy_table": {"level": fidelity.level, "note": fidelity.note}},
                      "headlines": [{"quote": "it is 2x faster", "where": "abstract", "rows": ["toy_table: fedstaleweight"],
                                     "readings": {}}]}
    alone = scoreboard.gather(tmp_path)  # no sweep file at all
    assert alone.tables == [("Toy (2026)", "toy_table", True)] and list(alone.rows["arm"]) == ["fedstaleweight"]
    assert [h["quote"] for h in alone.headlines] == ["it is 2x faster"]
    spec.write_text(spec.read_text().replace("it is 2x faster", "it is twice as fast").replace("paper: Toy (2026)", "paper: Renamed"))
    edited = scoreboard.gather(tmp_path, [spec])  # the edit is not evidence: the record's words stay
    assert [h["quote"] for h in edited.headlines] == ["it is 2x faster"] and edited.tables == alone.tables
    assert edited.stale == []  # the same claims as the evidence's
    other = scoreboard.gather(tmp_path, [spec, SWEEPS / "fedgbo_smoke.yaml"])  # registered, never reproduced here
    assert ("FedGBO (Mills et al.)", "fedgbo_table4_smoke", False) in other.tables and other.headlines == edited.headlines


def _record(out: Path, stem: str, table: str, level: str, headlines: list[dict]) -> None:
    """A paper record of the paper Toy with one table at ``level`` (as a reproduction writes it)."""
    (out / f"{stem}{scoreboard.RECORD}").write_text(yaml.safe_dump(
        {"sweep_file": f"{stem}.yaml", "paper": "Toy", "tables": [table],
         "fidelity": {table: {"level": level, "note": f"{level} workload"}}, "headlines": headlines}))


def test_a_headline_is_answered_from_its_rows_closest_to_the_paper_once_for_every_file_that_registers_it(tmp_path):
    """issue 68: a quote registered by two sweep files (the paper's data in one, a stand-in in the other) is one
    headline, answered from its rows at the level closest to the paper, the farther level's answer named after
    it; a headline of stand-in rows only says so."""
    runs = _runs({"base": [100, 101, 99, 100, 102], "ahead": [300, 310, 305, 290, 300], "behind": [50, 51, 49, 50, 52]})
    arms = {"base": {}, "ahead": {"vs": "base", "paper": {"trips": [2.0]}}, "behind": {"vs": "base", "paper": {"trips": [2.0]}}}
    found = evidence(runs, "base", as_arms(arms), "trips")  # ahead reproduces, behind differs
    quote, other = {"quote": "it is 2x faster", "where": "abstract"}, {"quote": "it is faster", "where": "Sec. 5"}
    for table in ("real_table", "stand_in_table"):
        scoreboard.write_table_evidence(found, table, "Toy", as_arms(arms), tmp_path / f"{table}_evidence.csv")
    _record(tmp_path, "real", "real_table", "paper data", [{**quote, "rows": ["real_table: ahead"]}])
    _record(tmp_path, "stand_in", "stand_in_table", "stand-in", [{**quote, "rows": ["stand_in_table: behind"]},
                                                                 {**other, "rows": ["stand_in_table: behind"],
                                                                  "readings": {"a looser reading": ["stand_in_table: ahead"]}}])
    readme = tmp_path / "README.md.project"
    readme.write_text(f"{scoreboard.README_BEGIN}\n{scoreboard.README_END}\n")
    (tmp_path / "real_table.md").write_text("# real_table\n\nIts title\n\nIts evidence.\n")
    rows = scoreboard.write(tmp_path, [], readme=readme)

    summary = readme.read_text()
    assert summary.count('"it is 2x faster"') == 1  # once, from both files' rows
    assert ('- Toy: "it is 2x faster" (abstract): **holds** on the paper\'s data (1 row: 1 reproduces); on stand-ins: '
            'does not hold (1 row: 1 differs)\n') in summary
    # a reading under which it holds is named with its rows' level
    assert ('- Toy: "it is faster" (Sec. 5): **does not hold** on stand-ins only (1 row: 1 differs); under another '
            'reading: holds under a looser reading (on stand-ins)\n') in summary
    page = (tmp_path / "README.md").read_text()
    assert ('"it is 2x faster" (abstract): **holds** on the paper\'s data (1 row: 1 reproduces); on stand-ins: does not '
            "hold (1 row: 1 differs). [real_table](real_table.md) ahead (paper data): reproduces; "
            "[stand_in_table](stand_in_table.md) behind (stand-in): differs.") in page
    assert "- [real_table](real_table.md), paper data: paper data workload" in page  # each table's fidelity
    assert "- stand_in_table (no page yet), stand-in: stand-in workload" in page
    # every row of evidence.csv with its table's fidelity
    written = pd.read_csv(tmp_path / "evidence.csv")
    assert written[["table", "fidelity", "fidelity_note"]].drop_duplicates().values.tolist() == [
        ["real_table", "paper data", "paper data workload"], ["stand_in_table", "stand-in", "stand-in workload"]]
    assert rows["fidelity"].tolist() == ["paper data", "paper data", "stand-in", "stand-in"]

    # the page made before records: its fidelity after its title, as the reproduction writes it, and written once
    block = scoreboard.page_fidelity("paper data", "paper data workload")
    assert (tmp_path / "real_table.md").read_text() == f"# real_table\n\nIts title\n\n{block}\n\nIts evidence.\n"
    assert "Fidelity to the paper: **paper data** (the paper's data set, " in block
    scoreboard.write(tmp_path, [], readme=readme)
    assert (tmp_path / "real_table.md").read_text() == f"# real_table\n\nIts title\n\n{block}\n\nIts evidence.\n"


def test_a_record_without_the_fidelity_of_a_table_with_verdicts_is_refused(tmp_path):
    found = evidence(_runs({"base": [100, 101, 99, 100, 102], "ahead": [300, 310, 305, 290, 300]}), "base",
                     as_arms({"ahead": {"vs": "base", "paper": {"trips": [2.0]}}}), "trips")
    scoreboard.write_table_evidence(found, "old_table", "Toy", {}, tmp_path / "old_table_evidence.csv")
    (tmp_path / f"old{scoreboard.RECORD}").write_text("paper: Toy\ntables: [old_table]\nheadlines: []\n")  # before issue 68
    with pytest.raises(ConfigError, match="old_paper.yaml gives no fidelity for old_table, which has verdicts or answers "
                                          "a headline"):
        scoreboard.gather(tmp_path)


# ----------------------------------------------------------------- pages that match the code (issue 70)
RESULTS = SWEEPS.parent / "results"


def test_every_committed_page_shows_what_today_s_code_renders_from_its_files():
    """Each page's generated blocks (its table from <table>.csv, its Evidence from <table>_evidence.csv) are what
    the code renders from the committed files now: a page written by an older page format fails here (run
    python -m fl_bench.analysis.scoreboard to render them again). Every evidence file has today's columns."""
    from fl_bench.analysis.report import refresh_page

    columns = ["arm", "seeds", "median", "median_low", "median_high", "missed", "vs", "effect", "effect_low",
               "effect_high", "effect_bound", "paper_effect", "claim", "band_low", "band_high", "verdict", "guard",
               "measure", "paper", "table", "cause"]
    evidence_files = sorted(RESULTS.glob("*_evidence.csv"))
    assert len(evidence_files) >= 27
    for path in evidence_files:
        assert list(pd.read_csv(path, nrows=0).columns) == columns, path.name
    pages = [p for p in sorted(RESULTS.glob("*.md")) if "<!-- evidence: " in p.read_text() or "<!-- table: " in p.read_text()]
    assert {p.stem for p in pages} >= {p.name.removesuffix("_evidence.csv") for p in evidence_files}
    for page in pages:
        text = page.read_text()
        assert refresh_page(RESULTS, page.stem, text, draw=False) == text, f"{page.name}: rendered by an older page format"
        assert "| direction" not in text and "margin / seed std" not in text  # one judgement: the evidence's
        if "_forest.png)" in text:
            assert (RESULTS / f"{page.stem}_forest.png").stat().st_size > 0


def test_the_scoreboard_renders_an_edited_or_older_block_again_from_the_table_s_files(tmp_path):
    import shutil

    from fl_bench.analysis import blocks

    name = "fedlaavg_table2_smoke"
    for suffix in (".md", ".csv", "_evidence.csv"):
        shutil.copy(RESULTS / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    page = (tmp_path / f"{name}.md").read_text()
    old = blocks.replaced(blocks.replaced(page, "table", blocks.marked("table", "| an old table |", "x.csv (best_accuracy)")),
                          "evidence", blocks.marked("evidence", "## Evidence\n\nan old verdict", "x"))
    from fl_bench.analysis.report import refresh_page

    assert refresh_page(tmp_path, name, old) == page  # both blocks from the files, the text around them kept
    assert (tmp_path / f"{name}_forest.png").stat().st_size > 0  # its forest plot drawn again beside it
    with pytest.raises(ValueError, match="the page has no table block"):
        blocks.replaced("# a page", "table", "x")


def test_long_guards_and_causes_go_to_numbered_notes_so_that_rows_stay_one_line_high():
    from fl_bench.analysis.verdict import LONG_CELL, numbered_notes

    long = "x" * (LONG_CELL + 1)
    shown, notes = numbered_notes(["short", long, "", long + "y"], ["a", "b", "c", "d"], start=3)
    assert shown == ["short", "note 3", "", "note 4"]
    assert notes == [f"3. **b**: {long}", f"4. **d**: {long}y"]
    board = (RESULTS / "README.md").read_text()
    rows = [line for line in board.splitlines() if line.startswith("| [")]
    assert rows and max(len(cell.strip()) for row in rows for cell in row.split("|")[8:]) <= LONG_CELL + 2


# ----------------------------------------------------------------- what the scoreboard reads is checked (issue 71)
def test_a_partial_reproduction_is_read_as_its_record_says_and_every_verdict_form_is_known(tmp_path):
    """The refusal rows (tests/test_refusals.py) show each bad record and evidence file stopped in one line; what
    they cannot show is what is let through. A record lists all its sweep file's tables while a reproduction may
    make some only: a table its sweep file registers without an evidence file is listed as such, and a headline's
    row naming an arm its sweep file registers that was not run reads no verdict, as before the checks."""
    import shutil

    shutil.copy(RESULTS / "hfl_smoke_paper.yaml", tmp_path)  # two tables; only the first made here
    made = pd.read_csv(RESULTS / "hfl_convex_smoke_evidence.csv", dtype=str, keep_default_na=False)
    made[made["arm"] != "digits S-SGD"].to_csv(tmp_path / "hfl_convex_smoke_evidence.csv", index=False)  # not run
    board = scoreboard.gather(tmp_path, [SWEEPS / "hfl_smoke.yaml"])
    assert board.tables == [("HFL (AD-SGD, 2021)", "hfl_convex_smoke", True),
                            ("HFL (AD-SGD, 2021)", "hfl_convex_smoke_final", False)]
    assert "[hfl_convex_smoke](hfl_convex_smoke.md) digits S-SGD (stand-in): no verdict (degenerate or not run)" in \
        scoreboard.headline_lines(board, "HFL (AD-SGD, 2021)")[0]
    # every verdict the rule gives (fl_bench.analysis.verdict.verdict), numbers and bounds included; nothing else
    for said in ("reproduces", "differs", "inconclusive", "not reached", "paper split", "tuning failed",
                 "underpowered at 30 seeds", "same side, 0.18x the paper's", "same side, more than 3.8x the paper's",
                 "same side, 27x the paper's gap", "same side, 1e+02x the paper's", "same side, infx the paper's"):
        assert scoreboard.VERDICT.fullmatch(said), said
    assert not any(scoreboard.VERDICT.fullmatch(said) for said in ("maybe", "same side", "underpowered", "Reproduces"))
