"""The documentation's prose that quotes a measured number (README.md, and the site's pages, docs/**/*.md)
says what the page that measured it says (results pages are generated; a number typed into a document is
checked here against its page). A command's elapsed time, which no generated page holds, is recorded in
results/times.md and quoted from there, in the README's reproduction table; counts of studies, runs and
seeds are checked against the sweep files, the tuned settings and the pages."""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _documented_paragraph(starts: str) -> str:
    """The paragraph that starts with ``starts``, in whichever document holds it (exactly one must)."""
    texts = [document.read_text() for document in DOCUMENTS]
    (text,) = [text for text in texts if starts in text]
    start = text.index(starts)
    end = text.find("\n\n", start)
    return text[start:end if end >= 0 else len(text)]  # (the last paragraph of a page ends with the page)


def test_the_pruner_paragraph_quotes_results_pruning_validation():
    paragraph = " ".join(_documented_paragraph("A sweep file's protocol names it in `tuner.pruner`").split())
    page = (REPO / "results" / "pruning_validation.md").read_text()
    held = re.search(r"- FedBuff \(fedbuff\): .*?\((\d+\.\d+)x less time.*?the pruner holds", page)
    assert held and f"at {held.group(1)}× less time" in paragraph
    assert page.count("the pruner does not hold") == 2 and "one of three validated" in paragraph
    summed = re.search(r"summed over studies, (\d+\.\d+)x", page)
    assert summed and f"about {round(float(summed.group(1)))}×" in paragraph
    worse = re.search(r"more than 5% worse on the tuning seeds for (\d+) of (\d+) studies", page)
    assert worse and f"all {worse.group(2)} of FedBuff's studies" in paragraph and f"left {worse.group(1)} studies" in paragraph
    # the 16 studies were FedBuff's before the amendment that made them the 23 the reproduction table tunes
    assert f"(before the 2026-11-27\namendment made them {len(_tuned_studies('fedbuff_smoke'))})" in _documented_paragraph(
        "A sweep file's protocol names it in `tuner.pruner`")


# ---------------------------------------------------------------- times: results/times.md and the pages

SWEEPS = REPO / "sweeps"
RESULTS = REPO / "results"
TIME = r"(?:about )?\d+ (?:h|min|s)(?: \d+ (?:min|s))*"


def _seconds(text: str) -> float:
    """'about 2 h 30 min', '10 min 32 s', '113 s' in seconds."""
    units = {"h": 3600, "min": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+) (h|min|s)\b", text))


def _markdown_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the markdown table whose header row starts with ``header``."""
    lines = text[text.index(header):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _times(section: str) -> list[dict[str, str]]:
    """The rows of results/times.md's table under ``## section``, by column name, latest first."""
    text = (RESULTS / "times.md").read_text()
    text = text[text.index(f"## {section}"):]
    header = next(line for line in text.splitlines() if line.startswith("| "))
    names = [cell.strip() for cell in header.strip().strip("|").split("|")]
    return [dict(zip(names, row)) for row in _markdown_rows(text, header)]


def _sweep(name: str) -> dict:
    return yaml.safe_load((SWEEPS / f"{name}.yaml").read_text())


def _tuned_studies(name: str) -> list[str]:
    """The sweep file's studies that are tuned (a search space of their own)."""
    return [study for study, spec in _sweep(name)["studies"].items() if "space" in spec]


def _page(table: str) -> dict:
    """What a generated page says of its runs: how many, their wall seconds summed, and the report seeds."""
    text = (RESULTS / f"{table}.md").read_text()
    runs = re.search(r"^([\d,]+) runs, ([\d,]+) s of wall time in all", text, re.M)
    seeds = re.search(r"over seeds (\d+(?:, \d+)*)", text)
    return {"runs": int(runs.group(1).replace(",", "")), "wall": int(runs.group(2).replace(",", "")),
            "seeds": len(seeds.group(1).split(", ")), "text": text}


def _reproduction_rows() -> dict[str, list[str]]:
    """The README's reproduction table, by sweep file."""
    rows = _markdown_rows((REPO / "README.md").read_text(), "| paper | command | tables | under the protocol |")
    return {re.search(r"sweeps/(\w+)\.yaml", row[1]).group(1): row for row in rows}


def test_the_set_up_section_quotes_the_suites_times_as_results_times_records_them():
    paragraph = " ".join(_documented_paragraph("The whole suite (").split())
    rows = _times("The test suite")
    whole = re.search(rf"The whole suite \((\d+) tests\) took ({TIME}) on 2 cores from a clean clone on (\S+), "
                      r"(over|within) its budget of 10 minutes", paragraph)
    latest = next(row for row in rows if row["command"] == "`python -m pytest`")
    assert whole and (whole.group(1), whole.group(2)) == (latest["tests"], latest["elapsed"])
    assert latest["when, and what the machine was doing"].startswith(f"{whole.group(3)}, from a clean clone")
    assert (whole.group(4) == "over") == (_seconds(latest["elapsed"]) > 600)
    every_arm = re.search(rf"`tests/analysis/test_sweep_files.py`, are ({TIME}) of one process.s time", paragraph)
    row = next(row for row in rows if "`tests/analysis/test_sweep_files.py`" in row["command"])
    assert every_arm and every_arm.group(1) == row["elapsed"]
    quick = re.search(rf"\(`-m \"not slow\"`, (\d+) tests\) took ({TIME}) that day", paragraph)
    row = next(row for row in rows if row["command"] == '`python -m pytest -m "not slow"`')
    assert quick and (quick.group(1), quick.group(2)) == (row["tests"], row["elapsed"])
    assert row["when, and what the machine was doing"].startswith(f"{whole.group(3)}, ")
    alone = re.search(rf"`-n 0` runs in one process, where its (\d+) tests took ({TIME})", paragraph)
    row = next(row for row in rows if row["command"] == "`python -m pytest -n 0`")
    assert alone and (alone.group(1), alone.group(2)) == (row["tests"], row["elapsed"])
    golden = re.search(rf"the golden and numerics tests ({TIME}) under each forced kernel", paragraph)
    row = next(row for row in rows if row["command"].startswith('`python -m pytest -m "golden or numerics"`'))
    assert golden and golden.group(1) == row["elapsed"]


def test_every_reproduction_has_a_row_whose_time_is_results_times_latest():
    rows, times = _reproduction_rows(), _times("Reproductions")
    documented = [*SWEEPS.glob("*_smoke.yaml"), *SWEEPS.glob("*_fmnist.yaml")]  # the stand-ins, the papers' own data
    assert sorted(rows) == sorted(path.stem for path in documented)  # every documented reproduction
    for sweep, row in rows.items():
        latest = next(t for t in times if t["sweep file"] == f"`sweeps/{sweep}.yaml`")  # latest first
        when = "when first made" if latest["when"] == "first made" else f"({latest['when']}"
        assert row[-1].startswith(f"{latest['elapsed']} {when}"), (sweep, row[-1], latest)
    # a time said elsewhere, in the README or the site's pages, refers to the table instead of quoting one of its own
    lines = [line for document in DOCUMENTS for line in document.read_text().splitlines()]
    assert sum("fl_bench.analysis.reproduce sweeps/" in line for line in lines) > len(rows)
    for line in lines:
        if "fl_bench.analysis.reproduce sweeps/" in line and not line.startswith("|"):
            assert not re.search(rf"\({TIME}\b|\b\d+ minutes\b", line), line


def test_the_reproduction_tables_counts_are_the_sweep_files_and_the_pages():
    for sweep, row in _reproduction_rows().items():
        spec, protocol, elapsed = _sweep(sweep), row[3], row[-1]
        pages = lambda: {table: _page(table) for table in spec["tables"]}  # noqa: E731 (read where a count needs them)
        tuned = _tuned_studies(sweep)
        assert ("confirmed tuning" in protocol) == bool(tuned and spec["protocol"]["tuner"].get("confirm")), sweep
        assert ("seeds by power" in protocol) == ("power" in spec["protocol"]), sweep
        assert ("untuned" in protocol) == (not tuned), sweep
        seeds = re.search(r"(\d+) report seeds(?:; Fig\. 7, which has no verdict, (\d+))?\)", protocol)
        if seeds:
            for table, page in pages().items():
                assert page["seeds"] == int(seeds.group(2) if seeds.group(2) and "fig7" in table else seeds.group(1)), table
        if sweep == "fedgbo_shakespeare_smoke":
            continue  # its cell is an estimate, checked below
        studies = re.search(r"all (\d+) studies searched", elapsed)  # (again, or when first made)
        reused = "the tuned settings reused" in elapsed  # a rerun of the report runs alone
        # an amendment registered and not run yet: the cell says so, and its studies are not all searched
        pending = re.search(r"the \d{4}-\d\d-\d\d amendment \([^)]*\) not run yet", elapsed)
        assert bool(studies or reused) == bool(tuned) and (not studies or pending or int(studies.group(1)) == len(tuned)), sweep
        assert not pending or int(studies.group(1)) < len(tuned), sweep
        runs = re.search(r"\b(\d[\d,]*) runs\b(?!')", elapsed)
        if runs:
            assert int(runs.group(1).replace(",", "")) == sum(page["runs"] for page in pages().values()), sweep
        arms = re.search(r"(\d+) arms × (\d+) report seeds", elapsed)
        if arms:
            assert int(arms.group(1)) == sum(len(table["arms"]) for table in spec["tables"].values())
            assert {int(arms.group(2))} == {page["seeds"] for page in pages().values()}
        summed = re.search(r"the (\d+) s on its page is its (\d+) runs' own times added up", elapsed)
        if summed:
            (page,) = pages().values()
            assert (int(summed.group(2)), int(summed.group(1))) == (page["runs"], page["wall"]), sweep


def test_the_shakespeare_rows_estimate_is_its_arithmetic_on_fedgbos_protocol_and_its_page():
    cell = _reproduction_rows()["fedgbo_shakespeare_smoke"][-1]
    found = re.search(r"(\d+) studies × (\d+) trials × (\d+) tuning seeds = (\d+) runs, ([\d.]+)× its (\d+) report runs: "
                      r"about (\d+) h on 2 cores", cell)
    tuner = _sweep("fedgbo_smoke")["protocol"]["tuner"]
    studies, trials, seeds, total, ratio, report, hours = found.groups()
    assert (int(studies), int(trials), int(seeds)) == (len(_tuned_studies("fedgbo_smoke")), tuner["trials"], len(tuner["seeds"]))
    assert int(total) == int(studies) * int(trials) * int(seeds) and int(report) == _page("fedgbo_shakespeare_smoke")["runs"]
    assert float(ratio) == round(int(total) / int(report), 1)
    first = next(t for t in _times("Reproductions") if t["sweep file"] == "`sweeps/fedgbo_shakespeare_smoke.yaml`")
    assert int(hours) == round(float(ratio) * _seconds(first["elapsed"]) / 3600)


def test_the_confirmations_counts_are_the_tuned_settings_and_the_scoreboard():
    paragraph = " ".join(_documented_paragraph("The confirmation (`tuner.confirm`").split())
    tuned = {path.stem: yaml.safe_load(path.read_text()) for path in (RESULTS / "tuned" / "fedbuff_smoke").glob("*.yaml")}
    studies = re.search(r": (\d+) studies, every one searched again", paragraph)
    assert studies and int(studies.group(1)) == len(_tuned_studies("fedbuff_smoke")) == len(tuned)
    changed = re.search(r"changed the kept setting in (\d+) of them", paragraph)
    assert changed and int(changed.group(1)) == sum(t["confirmed"]["best"]["params"] != t["best_params"] for t in tuned.values())
    unstable = re.search(r"Guard, unstable \(.*?\), on (\d+) arms?:", (RESULTS / "README.md").read_text())
    named = re.search(r"guard names (\d+) arms in the whole suite", paragraph)
    assert unstable and named and unstable.group(1) == named.group(1)
    missed = re.search(r"missed on (\d+) of the (\d+) confirmation seeds", paragraph)
    k1000 = tuned["fedbuff_k1000"]
    budget = int(re.search(r"within the budget of ([\d,]+) client trips", _page("fedbuff_table6_smoke")["text"]).group(1).replace(",", ""))
    registered = next(c for c in k1000["confirmed"]["candidates"] if c["params"] == k1000["best_params"])
    confirmation = k1000["confirmed"]["rule"]["seeds"]
    assert missed and (int(missed.group(1)), int(missed.group(2))) == (
        sum(registered["per_seed"][seed] > budget for seed in confirmation), len(confirmation))


def test_fedbuffs_protocol_paragraph_counts_are_its_sweep_file_and_pages():
    paragraph = " ".join(_documented_paragraph("The tables in `results/` were made under this protocol").split())
    protocol, words = _sweep("fedbuff_smoke")["protocol"], {"two": 2, "three": 3}
    found = re.search(r"(\d+) studies of (\d+) trials on (\w+) tuning seeds, each confirmed on (\w+) more, a pilot of (\d+) "
                      r"seeds, then (\d+) report seeds of every arm \(Fig\. 7's: (\d+)\); its time is in the reproduction table",
                      paragraph)
    studies, trials, tuning, confirmed, pilot, report, fig7 = found.groups()
    assert int(studies) == len(_tuned_studies("fedbuff_smoke")) and int(trials) == protocol["tuner"]["trials"]
    assert words[tuning] == len(protocol["tuner"]["seeds"]) and words[confirmed] == len(protocol["tuner"]["confirm"]["seeds"])
    assert int(pilot) == len(protocol["power"]["pilot_seeds"]) and int(report) == protocol["power"]["cap"]
    assert int(fig7) == _page("fedbuff_fig7_smoke")["seeds"]


def test_the_default_runs_times_are_results_benchmarks_threads_rows():
    text = (RESULTS / "benchmarks.md").read_text()
    section = text[text.index("## Threads"):]
    rows = {(row[0], row[1]): row for row in _markdown_rows(section, "| busy processes | threads |")}
    quoted = re.findall(r"about\s+(\d+) s", _documented_paragraph("Install and run the main job"))
    assert [int(q) for q in quoted] == [round(float(rows["0", "default"][2])), round(float(rows["2", "default"][2]))]


def test_a_lightning_modules_cost_is_results_benchmarks_lightning_cost_row():
    text = (RESULTS / "benchmarks.md").read_text()
    section = text[text.index("## A user's LightningModule batched over clients"):]
    rows = {row[0]: row for row in _markdown_rows(section, "| path | trips/s (median) |")}
    batched, alone = rows["(c) task=lightning, PlainMLP, batched"], rows["(e) task=lightning, PlainMLP, one trip at a time"]
    paragraph = " ".join(_documented_paragraph("- **Trips batched over clients**").split())
    assert f"batched takes {float(batched[5]):.1f}× the built-in task's batched time per trip" in paragraph
    assert f"and {float(batched[4]):.2f}× its one-at-a-time time" in paragraph
    assert f"one trip at a time it takes {float(alone[5]):.1f}× the former" in paragraph


def test_the_cluster_table_counts_what_each_reproduction_launches_from_its_sweep_file_and_pages():
    """Each reproduction's row on a cluster: its report runs (every arm once, on the most report seeds a page of
    it ran), its pilot (every arm on the pilot seeds) and its tuning (each tuned study's budget), and a SLURM
    command that searches every study at once."""
    rows = _markdown_rows((REPO / "docs" / "guides" / "long-runs.md").read_text(), "| paper | report runs | pilot runs | tuning runs |")
    rows = {re.search(r"sweeps/(\w+)\.yaml", row[-1]).group(1): row for row in rows}
    assert sorted(rows) == sorted(path.stem for path in SWEEPS.glob("*_smoke.yaml"))
    for sweep, (paper, report, pilot, tuning, command) in rows.items():
        spec, tuned = _sweep(sweep), _tuned_studies(sweep)
        assert paper == _reproduction_rows()[sweep][0], sweep
        seeds = {}  # an arm (its study and overrides: what it runs) -> its report seeds
        for table, arms in ((name, t["arms"]) for name, t in spec["tables"].items()):
            for arm in arms.values():
                key = (arm["study"], *arm.get("overrides", []))
                seeds[key] = max(seeds.get(key, 0), _page(table)["seeds"])
        assert report == f"{sum(seeds.values()):,}", sweep
        power, tuner = spec["protocol"].get("power"), spec["protocol"].get("tuner")
        assert pilot == (f"{len(seeds) * len(power['pilot_seeds']):,}" if power else "none"), sweep
        assert tuning == (f"{len(tuned) * tuner['trials'] * len(tuner['seeds']):,} ({len(tuned)} studies × {tuner['trials']} "
                          f"trials × {len(tuner['seeds'])} seeds), then each study's finalists on "
                          f"{len(tuner['confirm']['seeds'])} seeds" if tuned else "none"), sweep
        assert command.startswith(f"`python -m fl_bench.analysis.reproduce sweeps/{sweep}.yaml --launcher slurm "
                                  f"{f'--jobs {len(tuned)} ' if tuned else ''}--override hydra.launcher.partition="), sweep


# ------------------------------------------------------------ the README's one example per paper

def _paper_examples() -> list[tuple[str, list[str]]]:
    """Each item of the README's "One example per paper": its text, and its ``python -m fl_bench`` command's
    arguments."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## One example per paper"):]
    section = section[:section.index("\n## ")]
    items = [" ".join(item.split()) for item in re.split(r"\n- ", section)[1:]]
    return [(item, re.search(r"`python -m fl_bench ([^`]*)`", item).group(1).split()) for item in items]


def test_each_paper_example_runs_its_sweep_s_workload_with_the_setting_its_tables_run():
    """An example that names a tuned setting (``results/tuned/<sweep>/<study>.yaml``) runs its sweep file's
    workload, the study's overrides and the study's best setting (rounded, to the digits written); one that
    names its sweep file (``sweeps/<sweep>.yaml``) runs its workload, and that protocol tunes nothing."""
    examples = _paper_examples()
    assert len(examples) == 5
    for item, args in examples:
        tuned = re.findall(r"results/tuned/(\w+)/(\w+)\.yaml", item)
        named = re.findall(r"sweeps/(\w+)\.yaml", item)
        assert len(tuned) + len(named) == 1, f"{item}: names no tuned setting or sweep file (or several)"
        sweep_name = tuned[0][0] if tuned else named[0]
        sweep = _sweep(sweep_name)
        assert set(sweep["workload"]) <= set(args), f"{item}: not {sweep_name}'s workload {sweep['workload']}"
        if not tuned:
            assert sweep["protocol"]["tuner"] is None, f"{item}: {sweep_name} tunes its studies: name the tuned setting"
            continue
        study = tuned[0][1]
        assert set(sweep["studies"][study]["overrides"]) <= set(args), f"{item}: not study {study}'s overrides"
        best = yaml.safe_load((RESULTS / "tuned" / sweep_name / f"{study}.yaml").read_text())["best_params"]
        given = dict(arg.split("=", 1) for arg in args)
        for key, value in best.items():
            assert key in given, f"{item}: {key} of {study}'s tuned setting not given"
            written = given[key]
            decimals = len(written.partition(".")[2])
            assert float(written) == round(float(value), decimals) and abs(float(written) - value) <= 1e-3 * abs(value), \
                f"{item}: {key}={written}, the tuned setting's {value}"
