"""The table of refusals: every bad input a user can give fl_bench's commands stops with exit 1 and one
line naming the value and what is allowed, never a traceback or a silent acceptance; and a bad run
into a directory that holds a finished run leaves that run byte for byte as it was.

Add a row whenever a knob, file format or command lands. A row is (command, arguments, environment,
the line's first words). ``{tmp}`` in arguments and words is the test's directory, where ``files``
below are written; ``{run}`` is a directory holding a finished run. The commands run in this process
(``python -m fl_bench`` is ``fl_bench.runs.cli.main`` with its sys.argv), which is what they run in a
new one, without the start-up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import pickle
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "tests" / "example_plugin"
MODULES = "my_fl_extensions.lightning_modules"
MISTAKES = "my_fl_extensions.mistakes"  # modules and DataModules written wrongly, as users do
DOCS = "my_fl_extensions.docs_modules_69"  # modules as Lightning's docs write them
HOOKED = "my_fl_extensions.hook_modules_69"  # modules overriding Lightning's hooks as its docs do
USER_DATA = ("dataset=datamodule", "partition.num_clients=20", "concurrency=10", "model=mlp")
PLUGIN_CONF = f"hydra.searchpath=[file://{PLUGIN / 'conf'}]"
LIGHTNING = ("dataset=digits", "algorithm=fedavg", "task=lightning", "max_trips=40", "eval_every=20")
GOOD_RUN = ("max_trips=60", "eval_every=30")  # what {run} holds
# duplicate_key.yaml (below) adds 'readings: {}' under HFL's first headline's 'where': the line of that
# headline's own 'readings', after its 'rows', is where the YAML reader finds the key twice
DUPLICATE_LINE = (REPO / "sweeps" / "hfl_smoke.yaml").read_text().splitlines().index(
    "    where: Sec. 6, comparison to benchmarks") + 4
# A raw file that is not the original: an IDX file of one label, as Fashion-MNIST's training images (gunzipped,
# and gzipped as the .gz) and as MNIST's .gz (checked by its bytes)
WRONG_IDX = bytes([0, 0, 8, 1, 0, 0, 0, 1, 7])
WRONG_IDX_SHA256 = hashlib.sha256(WRONG_IDX).hexdigest()


def _sweep(tmp: Path, edit) -> None:
    """A copy of sweeps/hfl_smoke.yaml changed by ``edit`` (a function of its text)."""
    text = (REPO / "sweeps" / "hfl_smoke.yaml").read_text()
    (tmp / "sweep.yaml").write_text(edit(text))


def _replace(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced; a test whose edit no longer applies fails here rather than
    running the unedited file (a whole reproduction)."""
    assert old in text, f"the refusal's edit no longer applies: {old!r}"
    return text.replace(old, new, 1)


def _edit(sweep: str, old: str, new: str) -> str:
    return _replace((REPO / "sweeps" / f"{sweep}.yaml").read_text(), old, new)


def write_files(tmp: Path) -> None:
    (tmp / "empty.csv").write_text("")
    (tmp / "binary.dat").write_bytes(bytes(range(256)) * 4)
    (tmp / "past.csv").write_text("client,start,end\n" + "".join(f"{c},0,0.5\n" for c in range(1000)))
    (tmp / "bad.yaml").write_text("studies: [1,\ntables: }")
    (tmp / "misspelt.yaml").write_text(_edit("hfl_smoke", "fedavg:       {overrides:", "fedavg:       {overides:"))
    (tmp / "unknown_key.yaml").write_text("runz_dir: x\n" + (REPO / "sweeps" / "hfl_smoke.yaml").read_text())
    pool = "report_seeds: [" + ", ".join(map(str, range(1, 31))) + "]"  # seeds by power: a pool of 30
    (tmp / "five.yaml").write_text(_edit("hfl_smoke", pool, "report_seeds: five"))
    (tmp / "arms_list.yaml").write_text(_edit("hfl_smoke", "    arms:\n", "    arms: [1]\n    old_arms:\n"))
    (tmp / "nested_seed.yaml").write_text(_edit("hfl_smoke", "report_seeds: [1, ", "report_seeds: [[1], "))
    for name, item in (("mapping", "{a: 1}"), ("override", "7")):  # a workload item that is no override
        (tmp / f"workload_{name}.yaml").write_text(_edit("hfl_smoke", "workload: [", f"workload: [{item}, "))
    (tmp / "no_reference.yaml").write_text(_edit("hfl_smoke", "reference: (0,1) HFL", "reference: (0,1) HFLL"))
    (tmp / "arm_key.yaml").write_text(_edit("hfl_smoke", "(0,1) HFL: {study: hfl,", "(0,1) HFL: {study: hfl, overides: [seed=1],"))
    (tmp / "bad_pruner.yaml").write_text(_edit("fedgbo_smoke", "direction: maximize,", "direction: maximize, pruner: {name: bogus, min_resource: 100},"))
    (tmp / "hyperband_budget.yaml").write_text(_edit("fedgbo_smoke", "direction: maximize,",
                                                     "direction: maximize, pruner: {name: hyperband, min_resource: 100, max_resource: 50},"))
    (tmp / "pruner_type.yaml").write_text(_edit("fedgbo_smoke", "direction: maximize,", "direction: maximize, pruner: {name: successive_halving, min_resource: abc},"))
    gbo = _edit("fedgbo_smoke", "  " + pool + "\n  power: {pilot_seeds: [201, 202, 203, 204, 205], cap: 30}\n",
                "  report_seeds: [1, 2, 3, 4, 5]\n")  # the registered file, without its power rule
    (tmp / "power_cap.yaml").write_text(_replace(gbo, "  report_seeds: [1, 2, 3, 4, 5]\n",
                                                    "  report_seeds: [1, 2, 3, 4, 5]\n  power: {pilot_seeds: [201, 202, 203]}\n"))
    (tmp / "power_pilot.yaml").write_text(_replace(gbo, "  report_seeds: [1, 2, 3, 4, 5]\n",
                                                      "  report_seeds: [1, 2, 3, 4, 5]\n  power: {pilot_seeds: [1, 202, 203], cap: 5}\n"))
    (tmp / "power_type.yaml").write_text(_replace(gbo, "  report_seeds: [1, 2, 3, 4, 5]\n",
                                                     "  report_seeds: [1, 2, 3, 4, 5]\n  power: {pilot_seeds: many}\n"))
    (tmp / "power_no_pilot.yaml").write_text(_replace(gbo, "  report_seeds: [1, 2, 3, 4, 5]\n",
                                                       "  report_seeds: [1, 2, 3, 4, 5]\n  power: {cap: 5}\n"))
    (tmp / "power_low_cap.yaml").write_text(_replace(gbo, "  report_seeds: [1, 2, 3, 4, 5]\n",
                                                       "  report_seeds: [1, 2, 3, 4, 5]\n  power: {pilot_seeds: [201, 202, 203], cap: 3}\n"))
    for kind, content in (("empty", b""), ("binary", bytes(range(256))), ("type", b'{"fig2": [1, 2]}'), ("dir", None),
                          ("old", b'{"fedstaleweight_fig2": {"seeds": [1, 2, 3, 4, 5], "amendments": 0}}')):
        (tmp / f"ledger_{kind}" / "runs").mkdir(parents=True)  # a reproduction's report-seed ledger, damaged
        ledger = tmp / f"ledger_{kind}" / "runs" / "report_seeds.json"
        ledger.mkdir() if content is None else ledger.write_bytes(content)
        (tmp / f"ledger_{kind}.yaml").write_text(_edit("fedstaleweight_smoke", "runs_dir: multirun/fedstaleweight_smoke",
                                                       f"runs_dir: {tmp / f'ledger_{kind}' / 'runs'}"))
    for kind, content in (("binary", bytes(range(256))), ("type", b"- 1\n- 2\n")):  # a study's tuned file, damaged
        (tmp / f"tuned_{kind}").mkdir()
        (tmp / f"tuned_{kind}" / "fedavg.yaml").write_bytes(content)
        (tmp / f"tuned_{kind}.yaml").write_text(_edit("fedgbo_smoke", "tuned_dir: results/tuned/fedgbo_smoke",
                                                      f"tuned_dir: {tmp / f'tuned_{kind}'}"))
    (tmp / "bad_aggregate.yaml").write_text(_edit("fedgbo_smoke", "direction: maximize,", "direction: maximize, aggregate: max,"))
    confirm = "confirm: {finalists: 4, seeds: [102, 103, 104]}"
    for name, bad in (("one", "confirm: {finalists: 1, seeds: [102]}"), ("pilot", "confirm: {finalists: 4, seeds: [102, 201]}"),
                      ("type", "confirm: {finalists: four, seeds: [102]}")):
        (tmp / f"confirm_{name}.yaml").write_text(_edit("fedlaavg_smoke", confirm, bad))
    hfl = (REPO / "sweeps" / "hfl_smoke.yaml").read_text()
    (tmp / "typed_interval.yaml").write_text(_replace(hfl, "    notes: >-\n", "    notes: >-\n      ahead by 2.1 [1.0, 3.2]\n"))
    (tmp / "placeholder.yaml").write_text(_replace(hfl, "    notes: >-\n", "    notes: >-\n      {effect:(0,1) FedAvgg}\n"))
    (tmp / "brace.yaml").write_text(_replace(hfl, "    notes: >-\n", "    notes: >-\n      {gap:(0,1) FedAvg}\n"))
    (tmp / "cause.yaml").write_text(_replace(hfl, "(0,1) HFL: {study: hfl,",
                                             "(0,1) HFL: {study: hfl, cause: {arm: '(0,1) FedAvgg', changes: waits},"))
    ssgd = 'paper: {accuracy: 84.58}, claim: closeness,'  # (0,0) S-SGD's claim, the first in the file
    for name, claim in (("kind", "claim: gap,"), ("loose", "claim: closeness, tolerance: 5, tolerance_why: wide,"),
                        ("why", "claim: closeness, tolerance: 1,"), ("side", "claim: side, tolerance: 1, tolerance_why: tight,"),
                        ("type", "claim: closeness, tolerance: wide, tolerance_why: x,")):
        (tmp / f"claim_{name}.yaml").write_text(_replace(hfl, ssgd, f"paper: {{accuracy: 84.58}}, {claim}"))
    headline = '    rows: ["hfl_convex_smoke: (0,0) S-SGD", '
    for name, rows in (("arm", '    rows: ["hfl_convex_smoke: (0,0) S-SGDD", '),
                       ("table", '    rows: ["hfl_convex: (0,0) S-SGD", '),
                       ("colon", '    rows: ["hfl_convex_smoke (0,0) S-SGD", '),
                       ("no_paper", '    rows: ["hfl_convex_smoke: (0,1) S-SGD matched work", '),
                       ("twice", '    rows: ["hfl_convex_smoke: (0,1) S-SGD", ')):
        (tmp / f"headline_{name}.yaml").write_text(_replace(hfl, headline, rows))
    # a table's fidelity (hfl_convex_smoke's, the first in the file), missing or mistyped
    fidelity = next(line for line in hfl.splitlines(keepends=True) if line.startswith("    fidelity: "))
    (tmp / "fidelity_missing.yaml").write_text(_replace(hfl, fidelity, ""))
    for name, given in (("level", '{level: standin, note: "x"}'), ("note", "{level: paper data, note: ' '}"),
                        ("list", "{level: stand-in, note: [digits, synthetic]}"), ("text", "stand-in")):
        (tmp / f"fidelity_{name}.yaml").write_text(_replace(hfl, fidelity, f"    fidelity: {given}\n"))
    (tmp / "headline_placeholder.yaml").write_text(_replace(hfl, "    notes: >-\n", "    notes: >-\n      {headline:9}\n"))
    (tmp / "headline_reading.yaml").write_text(_replace(hfl, '["hfl_convex_smoke: (0,0) centres S-SGD"]',
                                                        '["hfl_convex_smoke: (0,1) HFLL"]'))
    (tmp / "duplicate_key.yaml").write_text(_replace(hfl, '    where: Sec. 6, comparison to benchmarks\n',
                                                     '    where: Sec. 6, comparison to benchmarks\n    readings: {}\n'))
    (tmp / "headline_empty.yaml").write_text(_replace(hfl, '    rows: ["hfl_convex_smoke: (0,0) S-SGD", "hfl_convex_smoke: (0,1) '
                                                      'S-SGD", "hfl_convex_smoke: digits S-SGD"]', "    rows: []"))
    (tmp / "arm_typo.yaml").write_text(_replace(hfl, "(0,0) S-SGD matched work: {study: ssgd_matched, overrides: [dataset.gamma=0",
                                                "(0,0) S-SGD matched work: {study: ssgd_matched, overrides: [dataset.gama=0"))
    (tmp / "undated.yaml").write_text(_replace(hfl, "  amended:\n", "  amended:\n    - more seeds\n"))
    (tmp / "amended_before.yaml").write_text(_replace(hfl, "  amended:\n", "  amended:\n    - '2026-11-01: more seeds'\n"))
    for name, entry in (("future", "'2099-01-01: more seeds'"), ("no_day", "'2026-13-45: more seeds'"),
                        ("order", "'2026-11-27: more seeds'"), ("mapping", "2026-11-27: more seeds")):  # (mapping: unquoted)
        (tmp / f"amended_{name}.yaml").write_text(_replace(hfl, "  amended:\n", f"  amended:\n    - {entry}\n"))
    for name, day in (("word", "yesterday"), ("no_day", "2026-13-45"), ("future", "2099-01-01")):
        (tmp / f"registered_{name}.yaml").write_text(_replace(hfl, "registered: 2026-11-25", f"registered: {day}"))
    (tmp / "report_seed.yaml").write_text(_replace(hfl, pool, pool.replace("[1,", "[-1,")))
    (tmp / "pilot_seed.yaml").write_text(_replace(hfl, "pilot_seeds: [201,", "pilot_seeds: [-201,"))
    (tmp / "tuner_seed.yaml").write_text(_edit("fedlaavg_smoke", "seeds: [100, 101]", "seeds: [100, -101]"))
    (tmp / "confirm_seed.yaml").write_text(_edit("fedlaavg_smoke", confirm, "confirm: {finalists: 4, seeds: [102, -103, 104]}"))
    (tmp / "confirm_many.yaml").write_text(_edit("fedlaavg_smoke", confirm, "confirm: {finalists: 1000, seeds: [102, 103, 104]}"))
    (tmp / "objective.yaml").write_text(_edit("fedlaavg_smoke", "objective: best_val_accuracy", "objective: best_val_acuracy"))
    (tmp / "direction.yaml").write_text(_edit("fedlaavg_smoke", "direction: maximize", "direction: maximise"))
    for name, paper in (("text", '{accuracy: "about 75"}'), ("key", "{acc: 84.58}")):
        (tmp / f"paper_{name}.yaml").write_text(_replace(hfl, "paper: {accuracy: 84.58}", f"paper: {paper}"))
    for name, paper in (("zero", "{trips: [0]}"), ("number", "{trips: 2}")):
        (tmp / f"paper_{name}.yaml").write_text(_edit("fedlaavg_smoke", "paper: {trips: [3.32]}", f"paper: {paper}"))
    stale = "fedstaleweight:      {study: fedstaleweight,"  # its paper: {difference: [">0"]}
    (tmp / "vs_itself.yaml").write_text(_edit("fedstaleweight_smoke", stale, stale + " vs: fedstaleweight,"))
    (tmp / "cause_itself.yaml").write_text(_replace(hfl, "(0,1) HFL: {study: hfl,",
                                                    "(0,1) HFL: {study: hfl, cause: {arm: '(0,1) HFL', changes: waits},"))
    (tmp / "tried_itself.yaml").write_text(_replace(hfl, "(0,1) HFL: {study: hfl,",
                                                    "(0,1) HFL: {study: hfl, tried: [{arm: '(0,1) HFL', changes: waits}],"))
    for name, table in (("path", "../../escaped_table"), ("dot", ".hidden"), ("nul", '"a\\0b"')):
        (tmp / f"table_{name}.yaml").write_text(_replace(hfl, "  hfl_convex_smoke:", f"  {table}:"))
    # issue 71: sweep files that were read silently or refused vaguely. A claim's reason: blank, without a
    # tolerance, misspelt (the reason's key, not tolerance)
    for name, claim in (("why_blank", "claim: closeness, tolerance: 1, tolerance_why: '   ',"),
                        ("why_alone", "claim: closeness, tolerance_why: tight,"),
                        ("why_misspelt", "claim: closeness, tolerance: 1, tolerence_why: tight,"),
                        ("why_reason", "claim: closeness, tolerance: 1, tolerance_reason: tight,")):
        (tmp / f"claim_{name}.yaml").write_text(_replace(hfl, ssgd, f"paper: {{accuracy: 84.58}}, {claim}"))
    # a headline's reading naming a row twice; rows and a reading given as one string
    centres = '["hfl_convex_smoke: (0,0) centres S-SGD"]'
    (tmp / "reading_twice.yaml").write_text(_replace(hfl, centres, centres[:-1] + ', "hfl_convex_smoke: (0,0) centres S-SGD"]'))
    (tmp / "reading_text.yaml").write_text(_replace(hfl, centres, "x"))
    (tmp / "rows_text.yaml").write_text(_replace(hfl, headline, '    rows: x\n    old_rows: ["hfl_convex_smoke: (0,0) S-SGD", '))
    # YAML's booleans (true, yes, on) where a name or a text belongs: OmegaConf made them 'True'
    (tmp / "paper_true.yaml").write_text(_replace(hfl, "paper: HFL (AD-SGD, 2021)", "paper: true"))
    (tmp / "arm_yes.yaml").write_text(_replace(hfl, "      (0,1) HFL: {study: hfl,", "      yes: {study: hfl}\n      (0,1) HFL: {study: hfl,"))
    (tmp / "arm_paper_true.yaml").write_text(_replace(hfl, "paper: {accuracy: 84.58}", "paper: true"))
    # an arm compared with itself (its vs, or the reference without one) whose paper or claim nothing reads
    (tmp / "vs_itself_accuracy.yaml").write_text(_replace(hfl, 'vs: "(0,0) HFL", ' + ssgd, 'vs: "(0,0) S-SGD", paper: {accuracy: 84.58},'))
    hfl_base = '(0,0) HFL: {study: hfl, overrides: [dataset.gamma=0, dataset.xi=0], vs: "(0,0) HFL", paper: {accuracy: 83.41}'
    (tmp / "vs_itself_claim.yaml").write_text(_replace(hfl, hfl_base + "}", hfl_base + ", claim: closeness}"))
    (tmp / "reference_difference.yaml").write_text(_edit("fedstaleweight_smoke", "buffered_fedavg:     {study: buffered_fedavg}",
                                                         'buffered_fedavg:     {study: buffered_fedavg, paper: {difference: [">0"]}}'))
    # a report seed listed twice
    (tmp / "report_twice.yaml").write_text(_replace(hfl, pool, pool.replace("[1, 2,", "[1, 1,")))
    with open(tmp / "list.pkl", "wb") as f:
        pickle.dump([1, 2, 3], f)
    board = tmp / "board"  # the scoreboard's: sweep directories (one table, hfl_convex_smoke) and --out directories
    (board / "nothing").mkdir(parents=True)
    for name, extra in (("sweeps", None), ("sweeps_broken", "bad.yaml"), ("sweeps_binary", "binary.dat")):
        (board / name).mkdir()
        (board / name / "hfl_smoke.yaml").write_text(hfl)
        if extra:
            shutil.copy(tmp / extra, board / name / "zz.yaml")
    record = b"paper: HFL\ntables: [hfl_convex_smoke]\nheadlines: []\n"  # hfl_smoke.yaml's paper record
    for name, content in (("empty", b""), ("columns", b"a,b\n1,2\n"), ("binary", bytes(range(256)) * 4)):
        (board / f"evidence_{name}").mkdir()
        (board / f"evidence_{name}" / "hfl_convex_smoke_evidence.csv").write_bytes(content)
        (board / f"evidence_{name}" / "hfl_smoke_paper.yaml").write_bytes(record)
    for name, content in (("yaml", b"paper: [HFL\n"), ("binary", bytes(range(256)) * 4), ("keys", b"paper: HFL\n"),
                          ("empty", b""), ("type", b"paper: 3\ntables: hfl_convex_smoke\nheadlines: []\n")):
        (board / f"record_{name}").mkdir()
        (board / f"record_{name}" / "hfl_smoke_paper.yaml").write_bytes(content)
    for name, content in (("no_fidelity", record), ("fidelity_type", record + b"fidelity: [stand-in]\n")):
        (board / f"record_{name}").mkdir()  # a record written before issue 68 (no table's fidelity), or mistyped
        (board / f"record_{name}" / "hfl_smoke_paper.yaml").write_bytes(content)
        shutil.copy(REPO / "results" / "hfl_convex_smoke_evidence.csv", board / f"record_{name}")
    # the scoreboard's checks of what it reads (issue 71, item 3): the committed HFL record and its two tables'
    # evidence in board/check_NAME, one thing changed in each (a file given as None is left out)
    kept = (REPO / "results" / "hfl_smoke_paper.yaml").read_text()
    made = {f"{t}_evidence.csv": (REPO / "results" / f"{t}_evidence.csv").read_text()
            for t in ("hfl_convex_smoke", "hfl_convex_smoke_final")}
    first_rows = ("  rows:\n  - 'hfl_convex_smoke: (0,0) S-SGD'\n  - 'hfl_convex_smoke: (0,1) S-SGD'\n"
                  "  - 'hfl_convex_smoke: digits S-SGD'\n")
    second_row = "  - 'hfl_convex_smoke: (0,1) S-SGD'\n"
    for name, record, files in (
            ("rows_text", _replace(kept, first_rows, "  rows: 'hfl_convex_smoke: (0,0) S-SGD'\n"), {}),
            ("headlines_numbers", kept.split("headlines:\n")[0] + "headlines: [1, 2]\n", {}),
            ("no_rows", _replace(kept, first_rows, ""), {}),
            ("rows_key", _replace(kept, first_rows, first_rows.replace("rows:", "rowz:")), {}),
            ("rows_empty", _replace(kept, first_rows, "  rows: []\n"), {}),
            ("row_no_arm", _replace(kept, second_row, "  - 'hfl_convex_smoke'\n"), {}),
            ("row_arm", _replace(kept, second_row, "  - 'hfl_convex_smoke: (0,1) SGD'\n"), {}),
            ("row_table", _replace(kept, second_row, "  - 'hfl_convx_smoke: (0,1) S-SGD'\n"), {}),
            ("row_twice", _replace(kept, second_row, "  - 'hfl_convex_smoke: (0,0) S-SGD'\n"), {}),
            ("key_twice", _replace(kept, "paper: HFL (AD-SGD, 2021)\n", "paper: HFL (AD-SGD, 2021)\npaper: HFL\n"), {}),
            ("fidelity_level", _replace(kept, "level: stand-in", "level: standin"), {}),
            ("table_misspelt", _replace(kept, "- hfl_convex_smoke\n", "- hfl_convx_smoke\n"), {}),
            ("copy", kept, {"hfl_smoke_copy_paper.yaml": kept}),  # (hfl_smoke_copy_ sorts before hfl_smoke_paper)
            ("copy_old", kept, {"hfl_smoke_copy_paper.yaml": _replace(kept, "sweep_file: hfl_smoke.yaml\n", "")}),
            ("renamed", None, {"hfl_paper.yaml": kept}),
            ("no_record", None, {}),
            ("partial", kept, {"hfl_convex_smoke_final_evidence.csv": None}),
            ("verdict", kept, {"hfl_convex_smoke_evidence.csv": _replace(
                made["hfl_convex_smoke_evidence.csv"], "\"same side, 34x the paper's gap\"", "maybe")}),
            ("measure", kept, {"hfl_convex_smoke_evidence.csv": _replace(
                made["hfl_convex_smoke_evidence.csv"], ",best_accuracy,", ",tripz,")}),
            ("table_column", kept, {"hfl_convex_smoke_final_evidence.csv": _replace(
                made["hfl_convex_smoke_final_evidence.csv"], ",hfl_convex_smoke_final,", ",hfl_convex_smoke,")})):
        (board / f"check_{name}").mkdir()
        for file, text in {"hfl_smoke_paper.yaml": record, **made, **files}.items():
            if text is not None:
                (board / f"check_{name}" / file).write_text(text)
    (board / "sweeps_fedgbo").mkdir()  # a sweep directory without hfl_smoke.yaml
    shutil.copy(REPO / "sweeps" / "fedgbo_smoke.yaml", board / "sweeps_fedgbo")
    for root, files in (("wrong_plain", {"fmnist/train-images-idx3-ubyte": WRONG_IDX}),
                        ("wrong_gz", {"fmnist/train-images-idx3-ubyte.gz": gzip.compress(WRONG_IDX),
                                      "mnist/train-images-idx3-ubyte.gz": WRONG_IDX})):
        for name, content in files.items():
            (tmp / root / "raw" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / root / "raw" / name).write_bytes(content)


FL_BENCH, TRACES, REPRODUCE, DATA = "fl_bench", "fl_bench.traces", "fl_bench.analysis.reproduce", "fl_bench.data"
SCOREBOARD = "fl_bench.analysis.scoreboard"
OUTAGE = "behaviour=unreliable"

# (command, arguments, environment, first words after "<command>: error: ")
REFUSALS = [
    # the run's own knobs and config groups
    (FL_BENCH, ["concurrency=0"], {}, "concurrency=0 is not allowed"),
    (FL_BENCH, ["algorithm=nope"], {}, "unknown algorithm 'nope': choose one of adaptive_fedopt, buffered_fedavg"),
    (FL_BENCH, ["algorithm.buffer_size=-1"], {}, "algorithm.buffer_size=-1 is not allowed"),
    # a key no schema has, also where Hydra's +key= and ++key= would add it: one line with the nearest real key and all
    *[(FL_BENCH, [f"{plus}algorithm.bufer_size=3"], {}, "algorithm.bufer_size is not a key of algorithm=fedbuff: did you "
       "mean buffer_size? (its keys: client_lr, batch_size,") for plus in ("", "+", "++")],
    (FL_BENCH, ["dp=ftrl", "+dp.target_epsilom=12"], {}, "dp.target_epsilom is not a key of dp=ftrl: did you mean "
                                                          "target_epsilon?"),
    (FL_BENCH, ["+task.accuracy_key=val_acc"], {}, "task.accuracy_key is not a key of task=builtin (its keys: name)"),
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.DocsClassifier", "+task.acuracy_key=val_acc"], {},
     "task.acuracy_key is not a key of task=lightning: did you mean accuracy_key?"),
    (FL_BENCH, ["+seedd=1"], {}, "seedd is not a key of the run config: did you mean seed? (its keys: dataset, partition,"),
    (FL_BENCH, [PLUGIN_CONF, "algorithm=trimmed_fedavg", "+algorithm.trim_fractoin=0.2"], {"FL_BENCH_PLUGINS": "my_fl_extensions"},
     "algorithm.trim_fractoin is not a key of algorithm=trimmed_fedavg: did you mean trim_fraction?"),
    (FL_BENCH, ["experiment=nope"], {}, "unknown experiment 'nope': choose one of fedbuff_fig4, fedbuff_fig4_smoke, fedbuff_smoke"),
    (FL_BENCH, ["hparams_search=nah"], {}, "unknown hparams_search 'nah': choose one of"),
    (FL_BENCH, ["seed=-1"], {}, "seed=-1 is not allowed: must be >= 0"),
    (FL_BENCH, ["partition.seed=-1"], {}, "partition.seed=-1 is not allowed: must be >= 0"),
    (FL_BENCH, ["dataset=datamodule", "dataset.datamodule=5"], {}, "Error merging override dataset.datamodule=5: Cannot assign int"),
    (FL_BENCH, ["task=lightning", "task.module._target_=my_fl_extensions.lightning_modules.DocsClassifier",
                "algorithm=centralized", "task.buffers=local"], {}, "task.buffers=local is not allowed with algorithm=centralized"),
    # the pooled reference has no clock: a round's timing is refused, not ignored (issue 72)
    (FL_BENCH, ["algorithm=centralized", "algorithm.deadline=2.5"], {},
     "algorithm.deadline=2.5 is not allowed with algorithm=centralized: a round of the pooled reference is one trip"),
    (FL_BENCH, ["algorithm=centralized", "algorithm.fixed_rounds=maybe"], {},
     "Error merging override algorithm.fixed_rounds=maybe: Value 'maybe' is not a valid bool"),
    (FL_BENCH, ["dataset=datamodule"], {}, "dataset.datamodule._target_=None is not allowed: name your LightningDataModule"),
    (FL_BENCH, ["task=lightning", "task.module._target_=my_fl_extensions.lightning_modules.DocsClassifier",
                "task.batch=tokens"], {}, "task.batch='tokens' is not allowed: choose one of pair, inputs, next_token"),
    (FL_BENCH, ["task=lightning", "task.module._target_=my_fl_extensions.lightning_modules.DocsClassifier",
                "task.evaluation=val"], {}, "task.evaluation='val' is not allowed: choose one of auto, steps, logits"),
    (FL_BENCH, ["task=lightning", "task.module._target_=my_fl_extensions.lightning_modules.DocsClassifier",
                "task.batch=next_token"], {}, "task.batch=next_token needs token sequences (integer inputs of shape"),
    (FL_BENCH, ["dataset=datamodule", "dataset.datamodule._target_=my_fl_extensions.datamodules.Unlabelled"], {},
     "dataset.datamodule._target_=my_fl_extensions.datamodules.Unlabelled's items are Tensors, not (input, label) pairs: "
     "every example needs an integer label as its second element (validation accuracy compares"),
    # a partition refused for what the data lacks suggests only the options the data can take
    (FL_BENCH, ["dataset=digits", "partition=natural"], {}, "partition=natural needs a dataset with natural clients (LEAF "
     "datasets, synthetic), and this one has none: choose one of iid, dirichlet, one_class, two_labels, label_groups"),
    (FL_BENCH, ["dataset=digits", "partition=pachinko", "partition.num_clients=10"], {}, "partition=pachinko needs coarse "
     "labels (CIFAR-100), and this dataset has none: choose one of iid, dirichlet, one_class, two_labels, label_groups"),
    (FL_BENCH, ["task=lightning", "task.module._target_=my_fl_extensions.lightning_modules.DocsClassifier",
                "task.buffers=global"], {}, "task.buffers='global' is not allowed: choose one of federated, local, reset"),
    (FL_BENCH, ["task=lightning", "task.module._target_=my_fl_extensions.lightning_modules.DocsClassifier", "dp=ftrl"],
     {}, "task.buffers=federated is not allowed with dp=ftrl: the clients' buffers"),
    (FL_BENCH, ["concurrency=5000"], {}, "concurrency=5000 is impossible"),
    (FL_BENCH, ["dp=ftrl", "dp.max_participations=0"], {}, "dp.max_participations=0 is not allowed: must be >= 1 or null"),
    (FL_BENCH, ["dp=ftrl", "dp.max_participations=abc"], {}, "Error merging override dp.max_participations=abc"),
    (FL_BENCH, ["dp=dpsgd", "dp.max_participations=2"], {}, "dp.max_participations is not a key of dp=dpsgd"),
    (FL_BENCH, ["dp=ftrl", "dp.target_epsilon=12", "dp.max_participations=null"], {},
     "dp.max_participations=None is not allowed: must be set with dp.target_epsilon"),
    (FL_BENCH, ["dp=ftrl", "dp.target_epsilon=12", "max_trips=2000"], {},
     "dp.max_participations=1 lets 1000 clients upload 1000 times, and this run's budget is 2000 uploads"),
    # a target epsilon DP's calibration cannot reach: above the epsilon at the least noise it searches (dp-accounting's
    # NoBracketIntervalFoundError, or for DP-SGD its accountant's math domain error, before), or not finite
    (FL_BENCH, ["dp=ftrl", "dp.target_epsilon=1e9"], {}, "dp.target_epsilon=1000000000.0 is not allowed: for this run "
     "(6 server steps, dp.delta=1e-07) sigma can be calibrated for a target epsilon of at most 1.65e+06, the epsilon at "
     "noise multiplier 0.001, the least noise the calibration searches: give a smaller dp.target_epsilon, or set "
     "dp.noise_multiplier with dp.target_epsilon=null"),
    (FL_BENCH, ["dp=dpsgd", "algorithm=fedavg", "algorithm/weighting=uniform", "dp.target_epsilon=1e9"], {},
     "dp.target_epsilon=1000000000.0 is not allowed: for this run (1 server step, dp.delta=1e-07) sigma can be "
     "calibrated for a target epsilon of at most 4e+06, the epsilon at noise multiplier 0.001, the least noise the "
     "calibration searches"),
    *[(FL_BENCH, [dp, "dp.target_epsilon=inf"], {}, "dp.target_epsilon=inf is not allowed: must be > 0 and finite, or "
       "null (dp.noise_multiplier sets the noise)") for dp in ("dp=ftrl", "dp=dpsgd")],
    # data on first use: a download that fails (no network; here a mirror without the file), the files no
    # script can fetch, and a mirror that is no http(s):// or file:// URL, from the key or the environment
    (FL_BENCH, ["dataset=sent140", "data_root={tmp}/data", "data_mirror=file://{tmp}/no_mirror"], {},
     "dataset 'sent140' is not prepared: cannot download file://{tmp}/no_mirror/cs.stanford.edu/people/alecmgo/"
     "trainingandtestdata.zip (No such file or directory): download http://cs.stanford.edu/people/alecmgo/"
     "trainingandtestdata.zip by hand to {tmp}/data/raw/sent140/trainingandtestdata.zip and run again, or run "
     "`python -m fl_bench.data prepare sent140 data_root={tmp}/data "),
    (FL_BENCH, ["dataset=celeba", "data_root={tmp}/data"], {}, "dataset 'celeba' is not prepared: CelebA file "
     "{tmp}/data/raw/celeba/identity_CelebA.txt is missing: download img_align_celeba.zip (unzip it)"),
    (FL_BENCH, ["dataset=femnist", "data_root={tmp}/data"], {}, "dataset 'femnist' is not prepared: {tmp}/data/raw/"
     "femnist/all_data holds no LEAF all_data JSON, which femnist is made from: run LEAF's data/femnist/preprocess.sh"),
    # raw files that are not the originals, each named with its digest and the expected one: a gunzipped Fashion-MNIST
    # file is read before its .gz, so it stops the run; a wrong .gz is replaced by a download, which fails here
    (FL_BENCH, ["dataset=fmnist", "data_root={tmp}/wrong_plain"], {}, "dataset 'fmnist' is not prepared: {tmp}/"
     "wrong_plain/raw/fmnist/train-images-idx3-ubyte is refused (its content has SHA-256 " + WRONG_IDX_SHA256 + ", not "
     "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888), and it is read before "
     "train-images-idx3-ubyte.gz: delete it or replace it with http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
     "train-images-idx3-ubyte.gz's file gunzipped, and run again"),
    (FL_BENCH, ["dataset=fmnist", "data_root={tmp}/wrong_gz", "data_mirror=file://{tmp}/no_mirror"], {},
     "dataset 'fmnist' is not prepared: {tmp}/wrong_gz/raw/fmnist/train-images-idx3-ubyte.gz is refused (its content "
     "gunzipped has SHA-256 " + WRONG_IDX_SHA256 + ", not c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888) "
     "and cannot download file://{tmp}/no_mirror/fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
     "train-images-idx3-ubyte.gz (No such file or directory): delete it or replace it with a faithful copy of "
     "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/train-images-idx3-ubyte.gz (gzip-compressed in any "
     "way, or gunzipped), and run again"),
    # a file checked by its bytes (MNIST's .gz) is refused saying that only the published bytes pass, so that a copy
    # of its content gzipped again is not put back as "a faithful copy"
    (FL_BENCH, ["dataset=mnist", "data_root={tmp}/wrong_gz", "data_mirror=file://{tmp}/no_mirror"], {},
     "dataset 'mnist' is not prepared: {tmp}/wrong_gz/raw/mnist/train-images-idx3-ubyte.gz is refused (its bytes have "
     "SHA-256 " + WRONG_IDX_SHA256 + ", not 440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609) and "
     "cannot download file://{tmp}/no_mirror/ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz (No "
     "such file or directory): delete it or replace it with a faithful copy of https://ossci-datasets.s3.amazonaws.com/"
     "mnist/train-images-idx3-ubyte.gz, and run again, or run `python -m fl_bench.data prepare mnist "
     "data_root={tmp}/wrong_gz` where the network is reachable (train-images-idx3-ubyte.gz is checked by its bytes: "
     "only the file as published passes, not its content compressed again)"),
    (FL_BENCH, ["data_mirror=ftp://mirror.example/data"], {}, "data_mirror='ftp://mirror.example/data' is not allowed: "
     "give an http://HOST/..., https://HOST/... or file:///ABSOLUTE/PATH URL (data_mirror= or FL_BENCH_DATA_MIRROR)"),
    (FL_BENCH, ["data_mirror=file://data/mirror"], {}, "data_mirror='file://data/mirror' is not allowed"),
    (FL_BENCH, [], {"FL_BENCH_DATA_MIRROR": "mirror.example/data"}, "data_mirror='mirror.example/data' is not allowed"),
    *[(FL_BENCH, ["dataset.num_clients=40", f"dataset.num_centres={k}"], {}, f"dataset.num_centres={k} is not allowed: "
       "must be null (a centre per device) or an integer in [1, num_clients = 40]") for k in (0, 41)],
    (FL_BENCH, ["dataset.num_centres=abc"], {}, "Error merging override dataset.num_centres=abc"),
    (FL_BENCH, ["algorithm=hfl", "speed=stragglers", "algorithm.lambda_schedule=5"], {},
     "algorithm.lambda_schedule='5' is not allowed: choose one of printed, decay_with_staleness, delay, since_merge, constant"),
    (FL_BENCH, ["algorithm=hfl", "speed=stragglers", "algorithm.lambda_0=0", "algorithm.lambda_schedule=constant"], {},
     "algorithm.lambda_schedule='constant' is not allowed: reads lambda for late merges, and algorithm.lambda_0=0 merges "
     "nothing late"),
    *[(FL_BENCH, ["algorithm=hfl", "speed=stragglers", "speed.fraction=0", reading], {}, f"{shown} is not allowed: "
       "speed.fraction=0.0 makes none of the 1000 devices a straggler, so nothing merges late")
      for reading, shown in (("algorithm.lambda_schedule=constant", "algorithm.lambda_schedule='constant'"),
                             ("algorithm.kernel_only_until_tau_max=true", "algorithm.kernel_only_until_tau_max=True"))],
    # CA2FL's and FADAS's knobs (issue 60), and DP, which neither has a private form for
    (FL_BENCH, ["algorithm=ca2fl", "algorithm.server_lr=0"], {}, "algorithm.server_lr=0.0 is not allowed: must be > 0"),
    (FL_BENCH, ["algorithm=ca2fl", "algorithm.cache_mean_over=seen_clients"], {},
     "algorithm.cache_mean_over='seen_clients' is not allowed: must be all (every client, unseen ones zero) or seen"),
    (FL_BENCH, ["algorithm=ca2fl", "dp=ftrl"], {}, "dp=ftrl is not allowed with algorithm=ca2fl: its aggregation has no "
                                                   "private form"),
    (FL_BENCH, ["algorithm=fadas", "algorithm.tau_c=-1"], {}, "algorithm.tau_c=-1 is not allowed: must be an integer >= 0 or null"),
    (FL_BENCH, ["algorithm=fadas", "algorithm.server_optimizer.bias_correction=maybe"], {},
     "Error merging override algorithm.server_optimizer.bias_correction=maybe: Value 'maybe' is not a valid bool"),
    (FL_BENCH, ["algorithm=fedbuff", "algorithm.server_optimizer.bias_correction=true"], {},
     "algorithm.server_optimizer.bias_correction is not a key of algorithm.server_optimizer=sgd (its keys: name, lr)"),
    (FL_BENCH, ["algorithm=fadas", "algorithm.delay_rule=half"], {},
     "algorithm.delay_rule='half' is not allowed: choose one of min, divide"),
    (FL_BENCH, ["algorithm=fadas", "algorithm.tau_c=null", "algorithm.delay_rule=divide"], {},
     "algorithm.delay_rule='divide' is not allowed: is read only with a delay threshold"),
    (FL_BENCH, ["algorithm=fadas", "algorithm.server_optimizer.betas=[0.9,1.0]"], {},
     "algorithm.server_optimizer.betas=[0.9, 1.0] is not allowed: need [beta1, beta2], each in [0, 1)"),
    (FL_BENCH, ["algorithm=fadas", "dp=ftrl"], {}, "dp=ftrl is not allowed with algorithm=fadas: its delay-adaptive rate "
                                                   "reads each upload's delay"),
    # work schedules and FedCompass (issue 72): a schedule only its step policy honours, its knobs, what Compass ignores
    (FL_BENCH, ["algorithm=fedbuff", "algorithm/work_schedule=compass"], {}, "algorithm/work_schedule=compass is not allowed "
     "with algorithm=fedbuff: its trips are scheduled for the Compass step policy's server steps"),
    (FL_BENCH, ["algorithm=fedcompass", "algorithm/work_schedule=fixed"], {}, "algorithm/work_schedule=fixed is not allowed "
     "with algorithm=fedcompass: its groups are the Compass schedule's"),
    (FL_BENCH, ["algorithm=centralized", "+algorithm/work_schedule=compass"], {},
     "algorithm/work_schedule='compass' is not allowed: must be fixed"),
    (FL_BENCH, ["algorithm=fedbuff", "algorithm.work_schedule.q_min=3"], {},
     "algorithm.work_schedule.q_min is not a key of algorithm.work_schedule=fixed (its keys: name)"),
    *[(FL_BENCH, ["algorithm=fedcompass", bad], {}, words) for bad, words in (
        ("algorithm.work_schedule.q_min=0", "algorithm.work_schedule.q_min=0 is not allowed: must be >= 1"),
        ("algorithm.work_schedule.q_max=10", "algorithm.work_schedule.q_max=10 is not allowed: must be >= q_min (20)"),
        ("algorithm.work_schedule.latest_time_factor=0.5",
         "algorithm.work_schedule.latest_time_factor=0.5 is not allowed: must be >= 1"),
        ("algorithm.work_schedule.speed_momentum=0", "algorithm.work_schedule.speed_momentum=0.0 is not allowed: must be in (0, 1]"),
        ("algorithm.work_schedule.first_trip_steps=mean", "algorithm.work_schedule.first_trip_steps='mean' is not allowed: "
         "must be min (Q_min, the paper's Figure 1) or max"),
        ("algorithm.concurrent_clients=0", "algorithm.concurrent_clients=0 is not allowed: must be >= 1"),
        ("arrival_rate=2", "arrival_rate=2.0 is not allowed with algorithm=fedcompass: Compass starts every trip at once"),
        ("selection=all_available", "selection=all_available is not allowed with algorithm=fedcompass"),
        ("dp=ftrl", "dp=ftrl is not allowed with algorithm=fedcompass: its aggregation has no private form"),
        # the wrong type
        ("algorithm.work_schedule.q_min=abc", "Error merging override algorithm.work_schedule.q_min=abc: Value 'abc' of "
         "type 'str' could not be converted to Integer"),
        ("algorithm.work_schedule.latest_time_factor=[1]", "Error merging override "
         "algorithm.work_schedule.latest_time_factor=[1]: Value '[1]' of type 'list' could not be converted to Float"))],
    (FL_BENCH, ["accelerator=cpu", "devices=[5]"], {}, "devices=[5] lists GPU indices, but the run trains on the CPU"),
    # (seed=1: devices alone does not change the finished run's result, which would be "nothing to do")
    (FL_BENCH, ["devices=[5]", "seed=1"], {}, "devices=[5] lists GPU indices, but the run trains on the CPU (accelerator=auto)"),
    # plugins
    (FL_BENCH, [], {"FL_BENCH_PLUGINS": "no_such_module"}, "plugin module 'no_such_module' (from FL_BENCH_PLUGINS) "
                                                           "cannot be imported"),
    # (tests/example_plugin/broken: a module that cannot be imported, one way each)
    (FL_BENCH, [], {"FL_BENCH_PLUGINS": "broken.syntax"}, "plugin module 'broken.syntax' (from FL_BENCH_PLUGINS) "
                                                          "cannot be imported: SyntaxError: invalid"),
    (FL_BENCH, [], {"FL_BENCH_PLUGINS": ".components"}, "plugin module '.components' (from FL_BENCH_PLUGINS) is not "
                                                        "allowed: give its full dotted name"),
    (FL_BENCH, [], {"FL_BENCH_PLUGINS": "broken.mutable_default"}, "plugin module 'broken.mutable_default' (from "
                                                                   "FL_BENCH_PLUGINS) cannot be imported: ValueError"),
    (FL_BENCH, [], {"FL_BENCH_PLUGINS": "broken.exits"}, "plugin module 'broken.exits' (from FL_BENCH_PLUGINS) cannot "
                                                         "be imported: it called sys.exit(0)"),
    # (tests/example_plugin/broken/misspelt_group.py: a schema registered under 'algoritm')
    (FL_BENCH, [], {"FL_BENCH_PLUGINS": "broken.misspelt_group"}, "plugin module 'broken.misspelt_group' (from "
     "FL_BENCH_PLUGINS) registers MisspeltGroupConfig under group 'algoritm', which is not a config group: did you "
     "mean algorithm? (the groups: algorithm, availability, behaviour, dataset, delay, dp, experiment, hparams_search, "
     "model, partition, selection, server_optimizer, speed, staleness, task, weighting, work_schedule; a group of the plugin's own needs its options in "
     "conf/<group>/ inside its package)"),
    (DATA, ["prepare", "sent140"], {"FL_BENCH_PLUGINS": "broken.raises"}, "plugin module 'broken.raises' (from "
                                                                          "FL_BENCH_PLUGINS) cannot be imported: RuntimeError"),
    # a server knob an algorithm's code does not read is not a key of its config (fl_bench.algorithms.base's mixins),
    # a plugin's as a built-in's: a sweep over it must not give identical runs of a method that ignores it
    *[(FL_BENCH, [PLUGIN_CONF, "algorithm=trimmed_fedavg", f"algorithm.{key}={value}"], {"FL_BENCH_PLUGINS": "my_fl_extensions"},
       f"algorithm.{key} is not a key of algorithm=trimmed_fedavg (its keys: client_lr") for key, value in (
        ("weighting", "{name: examples}"), ("staleness", "{exponent: 2}"), ("reduction", "sum"),
        ("server_optimizer", "{lr: 2}"))],
    *[(FL_BENCH, [f"algorithm={name}", f"algorithm.{key}={value}"], {}, f"algorithm.{key.split('.')[0]} is not a key of "
       f"algorithm={name} (its keys: client_lr") for name, key, value in (
        ("ca2fl", "staleness.exponent", "2"), ("ca2fl", "weighting.name", "examples"), ("centralized", "staleness.exponent", "2"),
        ("centralized", "weighting.name", "examples"), ("fedstaleweight", "step_normalisation", "fednova"),
        ("fedgbo", "reduction", "sum"), ("fedcompass", "reduction", "sum"), ("hfl", "server_optimizer", "{lr: 2}"))],
    # the weighting and the staleness function: components (fl_bench.algorithms.weightings), chosen as groups
    (FL_BENCH, ["algorithm=fedbuff", "algorithm.weighting=examples"], {}, "algorithm.weighting=examples is not allowed: "
     "algorithm.weighting is a component, chosen as its group: algorithm/weighting=examples"),
    (FL_BENCH, ["algorithm=fedbuff", "algorithm/weighting=lrnorm"], {}, "unknown algorithm/weighting 'lrnorm': choose "
     "one of examples, uniform"),
    (FL_BENCH, ["algorithm=fedbuff", "algorithm/staleness=hinge"], {}, "unknown algorithm/staleness 'hinge': choose "
     "one of constant, polynomial"),
    (FL_BENCH, ["algorithm=ca2fl", "algorithm/weighting=examples"], {}, "Could not override 'algorithm/weighting'. No "
     "match in the defaults list"),
    (FL_BENCH, ["algorithm=fedbuff", "algorithm.weighting.name=examples"], {}, "algorithm.weighting.name='examples' is "
     "not allowed: is set by the option: choose it with algorithm/weighting=<name>"),
    (FL_BENCH, ["algorithm=fedbuff", "algorithm.staleness.exponent=-1"], {}, "algorithm.staleness.exponent=-1.0 is not "
     "allowed: must be >= 0"),
    (FL_BENCH, ["algorithm=fedbuff", "algorithm.staleness.exponent=abc"], {}, "Error merging override "
     "algorithm.staleness.exponent=abc: Value 'abc' of type 'str' could not be converted to Float"),
    (FL_BENCH, ["algorithm=fedbuff", "algorithm/staleness=constant", "algorithm.staleness.exponent=1"], {},
     "algorithm.staleness.exponent is not a key of algorithm.staleness=constant (its keys: name)"),
    # device behaviour
    (FL_BENCH, [OUTAGE, "behaviour.outages=[{clients: 3, start: 1, end: 2}]"], {},
     "behaviour.outages[0].clients=3 is not allowed: must be a non-empty list of integer client ids"),
    (FL_BENCH, [OUTAGE, "behaviour.outages=[{clients: [1.5], start: 1, end: 2}]"], {},
     "behaviour.outages[0].clients=[1.5] is not allowed"),
    (FL_BENCH, [OUTAGE, "behaviour.outages=[{clients: [1], start: abc, end: 2}]"], {},
     "behaviour.outages[0].start='abc' is not allowed: must be a number"),
    (FL_BENCH, [OUTAGE, "behaviour.outages=[{labels: [1], start: 3, end: 2}]"], {},
     "behaviour.outages[0]={'labels': [1], 'start': 3, 'end': 2} is not allowed: needs 0 <= start < end"),
    (FL_BENCH, [OUTAGE, "behaviour.outages=[{label: [1], start: 1, end: 2}]"], {},
     "behaviour.outages[0]={'label': [1], 'start': 1, 'end': 2} is not allowed: give labels (or clients)"),
    (FL_BENCH, [OUTAGE, "behaviour.failure_trace={tmp}/empty.csv"], {},
     "behaviour.failure_trace={tmp}/empty.csv is empty: give a CSV file with columns client,time"),
    (FL_BENCH, [OUTAGE, "behaviour.failure_trace={tmp}/binary.dat"], {},
     "behaviour.failure_trace={tmp}/binary.dat is not a CSV text file"),
    (FL_BENCH, [OUTAGE, "behaviour.failure_rate=1.0"], {},
     "behaviour.failure_rate=1.0 is not allowed: must be in [0, 1): at 1 every trip fails"),
    (FL_BENCH, [OUTAGE, "behaviour.failure_rate=null", "behaviour.groups=[[0,1,2,3,4],[5,6,7,8,9]]",
                "behaviour.group_failure_rates=[1,1]"], {}, "behaviour.group_failure_rates=[1.0, 1.0] is not allowed"),
    (FL_BENCH, [OUTAGE, "behaviour.failure_hazard=1000"], {},
     "the run made no server step, so its model never changed: every one of its 60 client trips failed"),
    (FL_BENCH, [OUTAGE, "behaviour.bandwidth=1", "behaviour.bandwidth_trace={tmp}/list.pkl"], {},
     "behaviour.bandwidth_trace={tmp}/list.pkl holds a list, not a dict"),
    # availability traces
    (FL_BENCH, ["availability=trace", "availability.path={tmp}/binary.dat"], {},
     "availability.path={tmp}/binary.dat is not a CSV text file"),
    (FL_BENCH, ["availability=trace", "availability.path={tmp}/empty.csv"], {}, "availability.path={tmp}/empty.csv is empty"),
    (FL_BENCH, ["availability=trace", "availability.path={tmp}/binary.dat", "availability.format=flgo_pings"], {},
     "availability.path={tmp}/binary.dat is not a CSV text file"),
    (FL_BENCH, ["availability=trace", "availability.path={tmp}/binary.dat", "availability.format=fedscale"], {},
     "availability.path={tmp}/binary.dat is not a pickled trace"),
    (FL_BENCH, ["availability=trace", "availability.path={tmp}/past.csv", "max_trips=300"], {}, "the run is stuck at time"),
    # a run that cannot step
    (FL_BENCH, ["max_trips=5"], {}, "the run made no server step, so its model never changed: its 5 client trips"),
    # a user's LightningModule
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.NoConfigureOptimizers"], {},
     "NoConfigureOptimizers has no configure_optimizers"),
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.NoTrainingStep"], {},
     f"task.module._target_={MODULES}.NoTrainingStep has no training_step"),
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.SkipsEveryBatch"], {},
     "SkipsEveryBatch.training_step returned None"),
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.NotALightningModule"], {},
     f"task.module._target_={MODULES}.NotALightningModule is not a LightningModule class"),
    # ... whose loss is NaN from the start: the initial model is to blame, not a learning rate; refused before any
    # trip (a NaN training loss), or diverged at trip 0 (a NaN validation loss), the finished run in the directory
    # staying in its place, the diverged one beside it
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.LogOfZero"], {}, "the training loss on the first 32 training "
     "examples is nan for the initial model, before any training step, which no learning rate causes: check the task's "
     "loss (the model's output and the loss function on it, e.g. a log of 0) and the data's inputs"),
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.ValidationLogOfZero"], {}, "training diverged (validation "
     "loss nan) after 0 trips, server step 0: the loss was not finite before any training step, on the initial model, "
     "which no learning rate causes: check the task's loss (the model's output and the loss function on it, e.g. a log "
     "of 0); {tmp}/run keeps the completed run it held (another config's), and this diverged run is in {tmp}/run/.diverged"),
    # ... written wrongly in the ways users do: refused while the run is built, before its first trip
    *[(FL_BENCH, [*LIGHTNING, f"task.module._target_={MISTAKES}.{name}", *extra], {}, words) for name, extra, words in (
        ("DetachedLoss", [], "DetachedLoss.training_step returned a loss that does not require grad"),
        ("IntLoss", [], "IntLoss.training_step returned int: return the loss as a scalar tensor"),
        ("LogsAString", [], "LogsAString.training_step: self.log('phase', ...) got str: log a number"),
        ("LogMisspelt", [], "LogMisspelt.training_step: self.log(..., on_epochs=...): on_epochs is not an argument of "
                            "LightningModule.log (did you mean on_epoch?)"),
        ("NoOptimizer", [], "NoOptimizer.configure_optimizers returned None: return an optimizer, a list of them"),
        ("IntOptimizer", [], "IntOptimizer.configure_optimizers returned 1: return an optimizer"),
        ("DictWithoutOptimizer", [], "DictWithoutOptimizer.configure_optimizers returned a dict with keys "
                                     "['lr_scheduler']: return an optimizer"),
        ("TwoOptimizers", [], "TwoOptimizers.configure_optimizers returned 2 optimizers: a client trip steps one"),
        ("Lbfgs", [], "Lbfgs.configure_optimizers returned LBFGS, whose step needs a closure"),
        ("OneCycle", [], "OneCycle.configure_optimizers reads self.trainer.estimated_stepping_batches, which fl_bench "
                         "cannot give: it runs no lightning.Trainer, and a client trip is a fit of its own whose length "
                         "varies by client: here a trip has 1 to 3 steps in at most 1 epoch(s); give what it sizes as an "
                         "argument of the module's (for OneCycleLR, total_steps of at least 3), or run the module without "
                         "its lr scheduler with task.lr_scheduler=off"),
        ("FortnightScheduler", [], "FortnightScheduler.configure_optimizers: The \"interval\" key in lr scheduler dict "
                                   "must be \"step\" or \"epoch\" but is \"fortnight\""),
        ("NoParameters", [], f"task.module._target_={MISTAKES}.NoParameters has no trainable parameters"),
        ("DictWithoutLoss", [], "DictWithoutLoss.training_step returned a dict without 'loss' (its keys: 'train_loss', "
                                "'logits'): return the loss as a scalar tensor, a dict with it under 'loss', or None to "
                                "skip the batch"),
        ("TupleForward", ["task.evaluation=logits"], "TupleForward.forward returned a tuple: task.evaluation=logits "
                                                     "scores its forward's class logits, of shape [batch, 10]; return "
                                                     "them, add a validation_step, or set task.evaluation=training_step"),
        ("Classifier", ["+task.module.lr=-1"], "Classifier.configure_optimizers raised ValueError: Invalid learning "
                                               "rate: -1 (task.module's arguments: {'lr': -1})"),
        ("Classifier", ["+task.module.lr=abc"], "Classifier.configure_optimizers raised TypeError: '<' not supported "
                                                "between instances of 'str' and 'float' (task.module's arguments: "
                                                "{'lr': 'abc'})"))],
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.EpochStepLR"], {},
     "EpochStepLR's lr scheduler StepLR (interval epoch, frequency 1) never changes the lr within a trip, and each "
     "trip starts a fresh optimizer and scheduler"),
    # ... written as Lightning's docs write them (issue 69): the true reason, and the working option
    *[(FL_BENCH, [*LIGHTNING, f"task.module._target_={DOCS}.{name}", *extra], {}, words) for name, extra, words in (
        ("StepLRPerEpoch", [], "StepLRPerEpoch's lr scheduler StepLR (interval epoch, frequency 1) never changes the lr "
                               "within a trip, and each trip starts a fresh optimizer and scheduler: the longest trip has "
                               "3 steps in 1 epoch(s) (algorithm.local_epochs=1); let it act within a trip (interval "
                               "step, more local epochs), run the module without it with task.lr_scheduler=off"),
        ("PlateauOnTrainLoss", [], "PlateauOnTrainLoss's lr scheduler ReduceLROnPlateau monitors 'train_loss', to act "
                                   "when it stops improving over epochs, but each trip starts a fresh scheduler and trains "
                                   "1 local epoch(s) (algorithm.local_epochs=1), no more than its patience of 10, so it "
                                   "could never act, and fl_bench steps no lr scheduler on a metric: run the module "
                                   "without it with task.lr_scheduler=off"),
        ("OneCycleOverTheFit", [], "OneCycleOverTheFit.configure_optimizers reads self.trainer.estimated_stepping_batches, "
                                   "which fl_bench cannot give: it runs no lightning.Trainer"),
        ("StepLRPerEpoch", ["task.lr_scheduler=never"], "task.lr_scheduler='never' is not allowed: choose one of on, off"),
        ("LitAutoEncoder", ["task.evaluation=logits"], "LitAutoEncoder.forward raised RuntimeError: mat1 and mat2 shapes "
                                                       "cannot be multiplied (64x8 and 64x128): task.evaluation=logits "
                                                       "scores its forward's class logits; set "
                                                       "task.evaluation=training_step"),
        ("LogsValAccuracy", ["task.accuracy_key=val_accurcy"], "task.accuracy_key=val_accurcy is not among what "
                                                               "LogsValAccuracy.validation_step logs (val_accuracy, "
                                                               "val_loss): set task.accuracy_key=val_accuracy"))],
    # ... overriding Lightning's hooks (issue 69): what no run calls, or a trip cannot honour; the clipping knobs
    *[(FL_BENCH, [*LIGHTNING, f"task.module._target_={HOOKED}.{name}", *extra], {}, words) for name, extra, words in (
        ("LinearClassifier", ["task.gradient_clip_val=-1"], "task.gradient_clip_val=-1.0 is not allowed: a number >= 0 "
                                                            "(0 or null: no clipping)"),
        ("LinearClassifier", ["task.gradient_clip_algorithm=l2"], "task.gradient_clip_algorithm='l2' is not allowed: norm "
                                                                  "or value (null: norm, as lightning.Trainer)"),
        ("WarmUpClassifier", ["algorithm=fedgbo"], "WarmUpClassifier overrides optimizer_step, which fl_bench cannot call "
                                                   "under this algorithm"),
        ("SkipsEpochTails", ["algorithm.batch_size=4"], "SkipsEpochTails.on_train_batch_start returned -1, with which "
                                                        "lightning.Trainer skips the rest of the epoch"),
        ("ClippedClassifier", ["task.gradient_clip_val=0.5"], "ClippedClassifier.clip_gradients(gradient_clip_val=1e-09) "
                                                              "contradicts task.gradient_clip_val=0.5: use only one of "
                                                              "them"),
        # knobs this run would not read: one line, not ignored
        ("LinearClassifier", ["task.gradient_clip_algorithm=value"], "task.gradient_clip_algorithm=value clips nothing "
                                                                     "without task.gradient_clip_val"),
        ("LinearClassifier", ["algorithm=fedgbo", "task.lr_scheduler=off"], "task.lr_scheduler=off is not allowed here: "
                                                                            "under this algorithm trips step with its own "
                                                                            "rule"))],
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.BatchNormClassifier", "task.drop_last=false"], {},
     "client 21's minibatches include one of a single example (33 examples in batches of 32, drop_last=False), and "
     "the task's loss fails on it (BatchNormClassifier.training_step raised ValueError: Expected more than 1 value "
     "per channel when training, got input size torch.Size([1, 64])): set task.drop_last=true"),
    (FL_BENCH, [*LIGHTNING, f"task.module._target_={MODULES}.BatchNormClassifier", "algorithm.batch_size=1"], {},
     "client 0's minibatches include one of a single example (20 examples in batches of 1, drop_last=True), and the "
     "task's loss fails on it (BatchNormClassifier.training_step raised ValueError: Expected more than 1 value per "
     "channel when training, got input size torch.Size([1, 64])): use algorithm.batch_size >= 2"),
    # a user's DataModule or Dataset written wrongly
    *[(FL_BENCH, [*USER_DATA, f"dataset.datamodule._target_={MISTAKES}.{name}"], {},
       f"dataset.datamodule._target_={MISTAKES}.{name}{words}") for name, words in (
        ("FailingPrepare", "'s prepare_data() raised RuntimeError: cannot download the data: no network"),
        ("NoTrainLoader", "'s train_dataloader() returned None: return a DataLoader over a map-style Dataset"),
        ("TextClasses", "'s num_classes='4' is not allowed: an integer >= 1"),
        ("ZeroClasses", "'s num_classes=0 is not allowed: an integer >= 1"),
        ("Words", "'s inputs are strs (e.g. 'sentence 0'), not numbers"),
        ("LongerThanItsData", "[600] raised IndexError: index 600 is out of bounds for dimension 0 with size 600 (its "
                              "len() is 610)"),
        ("ThreeExamples", " has 3 examples: too few to hold out dataset.val_fraction=0.2 of every label"),
        ("NoExamples", " is empty: the partition needs examples"))],
    (FL_BENCH, [*USER_DATA, "dataset.datamodule._target_=my_fl_extensions.datamodules.NoisyBlobs"], {},
     "dataset.datamodule._target_=my_fl_extensions.datamodules.NoisyBlobs's training items differ between two reads "
     "(item 0: random augmentation in __getitem__?) and it has no validation set of its own"),
    (FL_BENCH, [*USER_DATA, "dataset.datamodule._target_=my_fl_extensions.datamodules.NoisyBlobsDataModule"], {},
     "dataset.datamodule's training items differ between reads (random augmentation in __getitem__), and "
     "task=builtin trains on stored examples: its first draw would be frozen; use task=lightning"),
    (FL_BENCH, [*USER_DATA, "dataset.datamodule._target_=my_fl_extensions.datamodules.NoisyBlobsDataModule",
                "+dataset.datamodule.noisy_validation=true"], {},
     "dataset.datamodule._target_=my_fl_extensions.datamodules.NoisyBlobsDataModule's val_dataloader().dataset[0] "
     "differs between two reads (random augmentation in __getitem__?): evaluation needs fixed items"),
    # tuning with a pruner (hydra_plugins/fl_bench_optuna)
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr", "hydra.sweeper.pruner.name=bogus",
                "hydra.sweeper.storage=sqlite:///{tmp}/o.db", "hydra.sweep.dir={tmp}/sweep"], {},
     "hydra.sweeper.pruner.name='bogus' is not allowed: choose one of successive_halving, hyperband, or null"),
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr", "hydra.sweeper.pruner.name=successive_halving",
                "hydra.sweeper.storage=sqlite:///{tmp}/o.db", "hydra.sweep.dir={tmp}/sweep"], {},
     "hydra.sweeper.pruner.min_resource=None is not allowed: the first rung"),
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr", "hydra.sweeper.pruner={name:hyperband,min_resource:100}",
                "hydra.sweeper.objective=final_val_loss", "hydra.sweeper.storage=sqlite:///{tmp}/o.db",
                "hydra.sweep.dir={tmp}/sweep"], {}, "hydra.sweeper.pruner needs an objective with a value so far"),
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr", "hydra.sweeper.pruner={name:successive_halving,min_resource:100,"
                "max_resource:900}", "hydra.sweeper.storage=sqlite:///{tmp}/o.db", "hydra.sweep.dir={tmp}/sweep"], {},
     "hydra.sweeper.pruner.max_resource=900 is not allowed with hydra.sweeper.pruner.name=successive_halving"),
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr", "hydra.sweeper.aggregate=max", "hydra.sweeper.storage=sqlite:///{tmp}/o.db",
                "hydra.sweep.dir={tmp}/sweep"], {}, "hydra.sweeper.aggregate='max' is not allowed: choose one of mean, worst, median"),
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr", "hydra.sweeper.aggregate=worst", "hydra.sweeper.storage=sqlite:///{tmp}/o.db",
                "hydra.sweep.dir={tmp}/sweep"], {}, "hydra.sweeper.aggregate=worst needs at least 2 hydra.sweeper.seeds, not []"),
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr", "hydra.sweeper.pruner.min_resource=100",
                "hydra.sweeper.storage=sqlite:///{tmp}/o.db", "hydra.sweep.dir={tmp}/sweep"], {},
     "hydra.sweeper.pruner.min_resource=100 is not allowed: it needs hydra.sweeper.pruner.name"),
    (FL_BENCH, ["pruning.study=s"], {}, "pruning.storage=None is not allowed: needs the database URL of pruning.study"),
    (FL_BENCH, ["pruning.objective=final_val_loss"], {}, "pruning.objective='final_val_loss' is not allowed"),
    (FL_BENCH, ["pruning.objective=best_val_accuracy"], {}, "pruning.objective='best_val_accuracy' is not allowed: "
                                                            "needs pruning.study"),
    (FL_BENCH, ["pruning.storage=sqlite:///x.db"], {}, "pruning.storage='sqlite:///x.db' is not allowed: needs pruning.study"),
    (FL_BENCH, ["pruning.study=s", "pruning.storage=sqlite:///x.db", "devices=2"], {},
     "pruning.study='s' is not allowed: a tuning run reports from one process"),
    # the sweeper's own knobs, its search space and what it enqueues: refused before any trial runs
    *[(FL_BENCH, ["-m", "hparams_search=synthetic_lr", bad, "hydra.sweeper.storage=sqlite:///{tmp}/o.db",
                  "hydra.sweep.dir={tmp}/sweep"], {}, words) for bad, words in (
        ("hydra.sweeper.n_trials=0", "hydra.sweeper.n_trials=0 is not allowed: must be >= 1"),
        ("hydra.sweeper.n_startup_trials=-1", "hydra.sweeper.n_startup_trials=-1 is not allowed: must be >= 0"),
        ("hydra.sweeper.direction=sideways", "hydra.sweeper.direction='sideways' is not allowed: choose one of minimize, "
                                             "maximize"),
        ("hydra.sweeper.objective=bogus_key", "hydra.sweeper.objective='bogus_key' is not allowed: choose one of "
                                              "trips_to_target_or_shortfall"),
        ("hydra.sweeper.params={algorithm.client_lr:'tag(log, interval(0, 1))'}",
         "hydra.sweeper.params.algorithm.client_lr='tag(log, interval(0, 1))' is not allowed: a log-scale"),
        ("hydra.sweeper.enqueue=[{algorithm.client_lr:99}]", "hydra.sweeper.enqueue[0].algorithm.client_lr=99 is not "
                                                             "allowed: outside the searched interval"),
        ("hydra.sweeper.pruner={name:hyperband,min_resource:100,max_resource:50}",
         "hydra.sweeper.pruner.max_resource=50 is not allowed: the budget, in client trips, must exceed"))],
    (REPRODUCE, ["{tmp}/hyperband_budget.yaml"], {}, "protocol.tuner.pruner.max_resource=50 is not allowed: the budget"),
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr", "hydra.sweeper.storage=sqlite:///{tmp}/binary.dat/db/o.db",
                "hydra.sweep.dir={tmp}/sweep"], {}, "hydra.sweeper.storage='sqlite:///{tmp}/binary.dat/db/o.db' is not "
                                                    "allowed: its directory"),
    (FL_BENCH, ["pruning.study=s", "pruning.storage=sqlite:///{tmp}/no_such_dir/o.db"], {},
     "pruning.storage='sqlite:///{tmp}/no_such_dir/o.db' is not allowed: its directory"),
    (FL_BENCH, ["pruning.study=s", "pruning.storage=sqlite:///{tmp}/o.db"], {},
     "pruning.study='s' is not allowed: pruning.storage='sqlite:///{tmp}/o.db' holds no such study"),
    # every trial failed (FedAsync's staleness exponent is refused in each run): the command failed
    (FL_BENCH, ["-m", "hparams_search=synthetic_lr_fedasync", "hydra.sweeper.n_trials=2", "algorithm.staleness.exponent=-1",
                "hydra.sweeper.storage=sqlite:///{tmp}/o.db", "hydra.sweep.dir={tmp}/sweep"], {},
     "no trial of study 'synthetic_lr_fedasync' completed (2 failed, 0 pruned): trial 0 failed: algorithm"),
    # python -m fl_bench.traces
    (TRACES, ["summarise", "{tmp}/binary.dat", "--format", "fedscale"], {}, "trace={tmp}/binary.dat is not a pickled trace"),
    (TRACES, ["summarise", "{tmp}/empty.csv"], {}, "trace={tmp}/empty.csv is empty"),
    (TRACES, ["summarise", "{tmp}/binary.dat"], {}, "trace={tmp}/binary.dat is not a CSV text file"),
    (TRACES, ["summarise", "{tmp}/binary.dat", "--format", "flgo_pings"], {}, "trace={tmp}/binary.dat is not a CSV text file"),
    (TRACES, ["summarise", "{tmp}/empty.csv", "--format", "flgo_pings"], {}, "trace={tmp}/empty.csv is empty"),
    (TRACES, ["summarise", "{tmp}/list.pkl", "--format", "fedscale_capacity"], {}, "trace={tmp}/list.pkl holds a list"),
    (TRACES, ["generate", "{tmp}/no_such_dir/week.csv"], {},
     "{tmp}/no_such_dir/week.csv: its directory {tmp}/no_such_dir does not exist"),
    # python -m fl_bench.analysis.reproduce: sweep files checked whole before any run
    (REPRODUCE, ["{tmp}/bad.yaml"], {}, "{tmp}/bad.yaml is not valid YAML: expected the node content, but found '}' at line 2"),
    (REPRODUCE, ["{tmp}/misspelt.yaml"], {},
     "{tmp}/misspelt.yaml: studies.fedavg.overides is not a key of a study: did you mean overrides?"),
    (REPRODUCE, ["{tmp}/unknown_key.yaml"], {}, "{tmp}/unknown_key.yaml: runz_dir is not a key of a sweep file: did you "
                                                "mean runs_dir?"),
    (REPRODUCE, ["{tmp}/five.yaml"], {},
     "{tmp}/five.yaml: protocol.report_seeds='five' is not allowed: it must be a list of integers"),
    (REPRODUCE, ["{tmp}/arms_list.yaml"], {}, "{tmp}/arms_list.yaml: tables.hfl_convex_smoke.arms=[1] is not allowed: it "
                                              "must be a mapping of names to arms"),
    (REPRODUCE, ["{tmp}/nested_seed.yaml"], {}, "{tmp}/nested_seed.yaml: protocol.report_seeds[0]=[1] is not allowed: it "
                                                "must be an integer"),
    (REPRODUCE, ["{tmp}/workload_mapping.yaml"], {}, "{tmp}/workload_mapping.yaml: workload[0]={'a': 1} is not allowed"),
    (REPRODUCE, ["{tmp}/workload_override.yaml"], {}, "{tmp}/workload_override.yaml: workload[0]='7' is not allowed: it "
                                                      "must be a command-line override"),
    (REPRODUCE, ["{tmp}/no_reference.yaml"], {},
     "{tmp}/no_reference.yaml: tables.hfl_convex_smoke.reference='(0,1) HFLL' is not defined: did you mean (0,1) HFL?"),
    (REPRODUCE, [str(REPO / "sweeps" / "fedbuff_sent140_wandb.yaml")], {}, f"{REPO}/sweeps/fedbuff_sent140_wandb.yaml is "
                                                                          "a W&B sweep"),
    (REPRODUCE, ["{tmp}/no_such.yaml"], {}, "{tmp}/no_such.yaml does not exist"),
    # every arm's command composed before the first run (here a smoke point's, whose reference arm is another)
    (REPRODUCE, ["{tmp}/arm_typo.yaml", "--smoke", "--runs-dir", "{tmp}/typo_runs", "--out", "{tmp}/typo_out"], {},
     "arm '(0,0) S-SGD matched work' (ssgd_matched) does not run: dataset.gama is not a key of dataset="),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--every-arm"], {}, "--every-arm is a smoke check"),
    # a held-out check: seeds it can read, none the protocol used, not at a smoke point
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--held-out-seeds", "721-"], {},
     "--held-out-seeds '721-': give seeds as FIRST-LAST or a comma-separated list of seeds and ranges"),
    (REPRODUCE, [str(REPO / "sweeps" / "fedbuff_smoke.yaml"), "--held-out-seeds", "1-20"], {},
     "--held-out-seeds: seeds [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20] are the protocol's own"),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--registered", "{tmp}"], {},
     "--registered {tmp}: it names the registered results a held-out check compares with: use it with --held-out-seeds"),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--smoke", "--held-out-seeds", "721-740"], {},
     "--held-out-seeds reruns the registered protocol on new report seeds: use it without --smoke"),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--in-process", "--jobs", "2"], {},
     "--in-process runs one command at a time in this process: use --jobs 1, not 2"),
    # a reproduction's stage by hand: its jobs file (hydra_plugins/fl_bench_jobs)
    (FL_BENCH, ["-m", "hydra/sweeper=fl_bench_jobs", "hydra.sweeper.jobs={tmp}/empty.csv"], {},
     "hydra.sweeper.jobs={tmp}/empty.csv holds no list of jobs: give a YAML file listing the jobs"),
    (FL_BENCH, ["-m", "hydra/sweeper=fl_bench_jobs", "hydra.sweeper.jobs={tmp}/no_jobs.yaml"], {},
     "hydra.sweeper.jobs={tmp}/no_jobs.yaml: No such file or directory: give a YAML file listing the jobs"),
    # the launcher: a config of conf/hydra/launcher/ or a launcher plugin's, set only in the keys it has
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--launcher", "slurmm"], {},
     "--launcher 'slurmm' is not a launcher: choose one of basic, joblib, local_cores, slurm, submitit_local, submitit_slurm"),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--launcher", "slurm", "--override", "hydra.launcher.partitionn=gpu"],
     {}, "--override hydra.launcher.partitionn=gpu: --launcher slurm has no key 'partitionn': choose one of account, "
         "additional_parameters, array_parallelism,"),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--launcher", "slurm", "--override", "hydra.launcher.timeout_min=4h"],
     {}, "--override hydra.launcher.timeout_min=4h is not allowed for --launcher slurm: Error merging override "
         "hydra.launcher.timeout_min=4h: Value '4h' of type 'str' could not be converted to Integer"),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--override", "hydra/launcher=slurm"], {},
     "--override hydra/launcher=slurm: choose the launcher with --launcher slurm"),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--in-process", "--launcher", "submitit_local"], {},
     "--in-process runs every run in this process: use the default --launcher local_cores, without hydra.launcher "
     "overrides (not submitit_local)"),
    (REPRODUCE, ["{tmp}/empty.csv"], {}, "{tmp}/empty.csv is empty: give a sweep file"),
    (REPRODUCE, ["{tmp}/binary.dat"], {}, "{tmp}/binary.dat is not a text file"),
    (REPRODUCE, ["{tmp}/pruner_type.yaml"], {}, "{tmp}/pruner_type.yaml: protocol.tuner.pruner.min_resource='abc' is "
                                                "not allowed: it must be an integer"),
    (REPRODUCE, ["{tmp}/bad_pruner.yaml"], {}, "protocol.tuner.pruner.name='bogus' is not allowed: choose one of "
                                              "successive_halving, hyperband"),
    (REPRODUCE, ["{tmp}/arm_key.yaml"], {}, "{tmp}/arm_key.yaml: tables.hfl_convex_smoke.arms.(0,1) HFL.overides is "
                                            "not a key of an arm: did you mean overrides?"),
    (REPRODUCE, ["{tmp}/bad_aggregate.yaml"], {}, "{tmp}/bad_aggregate.yaml: protocol.tuner.aggregate='max': choose one of mean, worst, median"),
    (REPRODUCE, ["{tmp}/power_cap.yaml"], {}, "{tmp}/power_cap.yaml: protocol.power.cap=30: must be at least 5 and at most the 5 report seeds listed"),
    *[(REPRODUCE, [f"{{tmp}}/tuned_{kind}.yaml", "--smoke", "--runs-dir", "{tmp}/runs"], {},
       f"{{tmp}}/tuned_{kind}/fedavg.yaml is not a study's tuned file") for kind in ("binary", "type")],
    (REPRODUCE, ["{tmp}/confirm_one.yaml"], {}, "{tmp}/confirm_one.yaml: protocol.tuner.confirm.finalists=1: at least 2"),
    (REPRODUCE, ["{tmp}/confirm_pilot.yaml"], {}, "{tmp}/confirm_pilot.yaml: protocol.tuner.confirm.seeds [201] are also tuning, report or pilot seeds"),
    (REPRODUCE, ["{tmp}/confirm_type.yaml"], {}, "{tmp}/confirm_type.yaml: protocol.tuner.confirm.finalists='four' is not "
                                                 "allowed: it must be an integer"),
    *[(REPRODUCE, [f"{{tmp}}/ledger_{kind}.yaml"], {}, f"{{tmp}}/ledger_{kind}/runs/report_seeds.json is not a ledger "
       "of report seeds") for kind in ("empty", "binary", "type", "dir")],
    (REPRODUCE, ["{tmp}/ledger_old.yaml"], {}, "{tmp}/ledger_old/runs/report_seeds.json was written by an older fl_bench"),
    # where a reproduction writes: checked before any run
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--smoke", "--out", "{tmp}/empty.csv"], {},
     "--out {tmp}/empty.csv is not a directory: give a directory"),
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--smoke", "--runs-dir", "{tmp}/empty.csv/runs"], {},
     "cannot write {tmp}/empty.csv/runs: Not a directory; the runs directory"),
    (REPRODUCE, ["{tmp}/power_no_pilot.yaml"], {}, "{tmp}/power_no_pilot.yaml: protocol.power.pilot_seeds"),
    (REPRODUCE, ["{tmp}/power_low_cap.yaml"], {}, "{tmp}/power_low_cap.yaml: protocol.power.cap=3: must be at least 5"),
    (REPRODUCE, ["{tmp}/power_pilot.yaml"], {}, "{tmp}/power_pilot.yaml: protocol.power.pilot_seeds [1] are also tuning or report seeds"),
    (REPRODUCE, ["{tmp}/power_type.yaml"], {}, "{tmp}/power_type.yaml: protocol.power.pilot_seeds='many' is not allowed: "
                                               "it must be a list of integers"),
    # findings quote measured numbers through placeholders only (they would go stale); causes name an arm
    (REPRODUCE, ["{tmp}/typed_interval.yaml"], {}, "{tmp}/typed_interval.yaml: tables.hfl_convex_smoke.notes types the "
                                                   "interval '[1.0, 3.2]': quote measured numbers as placeholders"),
    (REPRODUCE, ["{tmp}/placeholder.yaml"], {}, "{tmp}/placeholder.yaml: tables.hfl_convex_smoke.notes placeholder "
                                                "{effect:(0,1) FedAvgg}='(0,1) FedAvgg' is not defined: did you mean (0,1) FedAvg?"),
    (REPRODUCE, ["{tmp}/brace.yaml"], {}, "{tmp}/brace.yaml: tables.hfl_convex_smoke.notes: '{gap:(0,1) FedAvg}' is not "
                                          "a placeholder: write {KIND:ARM} with KIND one of effect, median, verdict, seeds"),
    (REPRODUCE, ["{tmp}/undated.yaml"], {}, "{tmp}/undated.yaml: protocol.amended[0]='more seeds' is not allowed: write "
                                            "'YYYY-MM-DD: what changed and why', with a real date"),
    (REPRODUCE, ["{tmp}/amended_before.yaml"], {}, "{tmp}/amended_before.yaml: protocol.amended[0]='2026-11-01: more seeds' is "
                                                   "not allowed: dated before registered (2026-11-25)"),
    (REPRODUCE, ["{tmp}/amended_future.yaml"], {}, "{tmp}/amended_future.yaml: protocol.amended[0]='2099-01-01: more seeds' "
                                                   "is not allowed: dated after today"),
    (REPRODUCE, ["{tmp}/amended_no_day.yaml"], {}, "{tmp}/amended_no_day.yaml: protocol.amended[0]='2026-13-45: more seeds' "
                                                   "is not allowed: write 'YYYY-MM-DD: what changed and why', with a real date"),
    (REPRODUCE, ["{tmp}/amended_order.yaml"], {}, "{tmp}/amended_order.yaml: protocol.amended[1]='2026-11-26: the verdict. "
                                                  "An interval who...' is not allowed: dated before the entry above it "
                                                  "(2026-11-27): entries go in date order"),
    (REPRODUCE, ["{tmp}/amended_mapping.yaml"], {}, "{tmp}/amended_mapping.yaml: protocol.amended[0]={'2026-11-27': 'more "
                                                    "seeds'} is not allowed: quote the entry as a string, - '2026-11-27: more seeds'"),
    *[(REPRODUCE, [f"{{tmp}}/registered_{name}.yaml"], {}, f"{{tmp}}/registered_{name}.yaml: protocol.registered='{day}' is "
       "not allowed: it must be a date YYYY-MM-DD, not after today")
      for name, day in (("word", "yesterday"), ("no_day", "2026-13-45"), ("future", "2099-01-01"))],
    *[(REPRODUCE, [f"{{tmp}}/{name}_seed.yaml"], {}, f"{{tmp}}/{name}_seed.yaml: protocol.{key}={seed} is not allowed: "
       "seeds are integers >= 0") for name, key, seed in (("report", "report_seeds[0]", -1), ("pilot", "power.pilot_seeds[0]", -201),
                                                          ("tuner", "tuner.seeds[1]", -101), ("confirm", "tuner.confirm.seeds[1]", -103))],
    (REPRODUCE, ["{tmp}/confirm_many.yaml"], {}, "{tmp}/confirm_many.yaml: protocol.tuner.confirm.finalists=1000 is not "
                                                 "allowed: at most protocol.tuner.trials (32)"),
    (REPRODUCE, ["{tmp}/objective.yaml"], {}, "{tmp}/objective.yaml: protocol.tuner.objective='best_val_acuracy' is not "
                                              "allowed: choose one of trips_to_target_or_shortfall, trips_to_target_or_budget, "
                                              "best_val_accuracy, final_val_accuracy, final_val_loss (did you mean best_val_accuracy?)"),
    (REPRODUCE, ["{tmp}/direction.yaml"], {}, "{tmp}/direction.yaml: protocol.tuner.direction='maximise' is not allowed: "
                                              "choose one of minimize, maximize (did you mean maximize?)"),
    # an arm's paper values: the keys its table's measure reads, in their shape
    (REPRODUCE, ["{tmp}/paper_text.yaml"], {}, "{tmp}/paper_text.yaml: tables.hfl_convex_smoke.arms.(0,0) S-SGD.paper."
                                               "accuracy='about 75' is not allowed: it must be a number: the paper's accuracy in %"),
    (REPRODUCE, ["{tmp}/paper_key.yaml"], {}, "{tmp}/paper_key.yaml: tables.hfl_convex_smoke.arms.(0,0) S-SGD.paper.acc is "
                                              "not a key of an arm's paper in a measure=best_accuracy table: did you mean "
                                              "accuracy? (its keys: accuracy, difference)"),
    *[(REPRODUCE, [f"{{tmp}}/paper_{name}.yaml"], {}, f"{{tmp}}/paper_{name}.yaml: tables.fedlaavg_table3_smoke.arms.N=20.paper."
       f"trips={value} is not allowed: it must be a list of the paper's ratios of trips (rounds) to the compared arm, one "
       "per dataset: numbers > 0") for name, value in (("zero", "[0]"), ("number", "2"))],
    (REPRODUCE, ["{tmp}/vs_itself.yaml"], {}, "{tmp}/vs_itself.yaml: tables.fedstaleweight_fig2_smoke.arms.fedstaleweight.vs="
                                              "'fedstaleweight' is not allowed: it names the arm itself, which compares it with "
                                              "none and leaves its paper.difference unread"),
    *[(REPRODUCE, [f"{{tmp}}/{name}_itself.yaml"], {}, f"{{tmp}}/{name}_itself.yaml: tables.hfl_convex_smoke.arms.(0,1) HFL."
       f"{key}='(0,1) HFL' is not allowed: it names the arm itself") for name, key in (("cause", "cause.arm"), ("tried", "tried[0].arm"))],
    *[(REPRODUCE, [f"{{tmp}}/table_{name}.yaml"], {}, f"{{tmp}}/table_{name}.yaml: table name={table!r} is not allowed: a "
       "table's name is its page's file name under --out") for name, table in (("path", "../../escaped_table"), ("dot", ".hidden"),
                                                                              ("nul", "a\0b"))],
    (REPRODUCE, ["{tmp}/headline_arm.yaml"], {}, "{tmp}/headline_arm.yaml: headlines[0].rows[0] arm='(0,0) S-SGDD' is not "
     "defined: did you mean (0,0) S-SGD?"),
    (REPRODUCE, ["{tmp}/headline_table.yaml"], {}, "{tmp}/headline_table.yaml: headlines[0].rows[0] table='hfl_convex' is not "
     "defined: did you mean hfl_convex_smoke?"),
    (REPRODUCE, ["{tmp}/headline_colon.yaml"], {}, "{tmp}/headline_colon.yaml: headlines[0].rows[0]='hfl_convex_smoke (0,0) "
     "S-SGD' is not allowed: write 'TABLE: ARM'"),
    (REPRODUCE, ["{tmp}/headline_no_paper.yaml"], {}, "{tmp}/headline_no_paper.yaml: headlines[0].rows[0]='hfl_convex_smoke: "
     "(0,1) S-SGD matched work' is not allowed: that arm tests no paper number"),
    (REPRODUCE, ["{tmp}/headline_twice.yaml"], {}, "{tmp}/headline_twice.yaml: headlines[0].rows=['hfl_convex_smoke: (0,1) "
     "S-SGD', 'hfl_convex_smoke: (0,1) S-SGD', 'hfl_convex_smoke: digits S-SGD'] is not allowed: each row once"),
    # issue 71: a claim's tolerance_why, blank or alone, and its misspellings
    (REPRODUCE, ["{tmp}/claim_why_blank.yaml"], {}, "{tmp}/claim_why_blank.yaml: tables.hfl_convex_smoke.arms.(0,0) "
     "S-SGD.tolerance_why='   ' is not allowed: a tighter tolerance needs its reason"),
    (REPRODUCE, ["{tmp}/claim_why_alone.yaml"], {}, "{tmp}/claim_why_alone.yaml: tables.hfl_convex_smoke.arms.(0,0) "
     "S-SGD.tolerance_why='tight' is not allowed: it gives the reason for a tighter tolerance, and the arm sets none: "
     "set tolerance too, or remove tolerance_why"),
    *[(REPRODUCE, [f"{{tmp}}/claim_why_{name}.yaml"], {}, f"{{tmp}}/claim_why_{name}.yaml: tables.hfl_convex_smoke.arms."
       f"(0,0) S-SGD.{key} is not a key of an arm: did you mean tolerance_why? (its keys:")
      for name, key in (("misspelt", "tolerence_why"), ("reason", "tolerance_reason"))],
    # a headline's rows and readings: each row once, and lists of 'TABLE: ARM'
    (REPRODUCE, ["{tmp}/reading_twice.yaml"], {}, "{tmp}/reading_twice.yaml: headlines[0].readings.inputs on 10 shared "
     "centres, Synthetic(0,0)=['hfl_convex_smoke: (0,0) centres S-SGD', 'hfl_convex_smoke: (0,0) centres S-SGD'] is not "
     "allowed: each row once"),
    (REPRODUCE, ["{tmp}/rows_text.yaml"], {}, "{tmp}/rows_text.yaml: headlines[0].rows='x' is not allowed: it must be a "
     "list of 'TABLE: ARM' strings"),
    (REPRODUCE, ["{tmp}/reading_text.yaml"], {}, "{tmp}/reading_text.yaml: headlines[0].readings.inputs on 10 shared "
     "centres, Synthetic(0,0)='x' is not allowed: it must be a list of 'TABLE: ARM' strings"),
    # YAML's booleans where a name or a text belongs, and a paper that is no mapping
    (REPRODUCE, ["{tmp}/paper_true.yaml"], {}, "{tmp}/paper_true.yaml: paper=True is not allowed: it must be a string or "
     "null (YAML reads an unquoted true, false, yes, no, on or off as a boolean"),
    (REPRODUCE, ["{tmp}/arm_yes.yaml"], {}, "{tmp}/arm_yes.yaml: tables.hfl_convex_smoke.arms name=True is not allowed: "
     "a name is a string (YAML reads an unquoted true, false, yes, no, on or off as a boolean"),
    (REPRODUCE, ["{tmp}/arm_paper_true.yaml"], {}, "{tmp}/arm_paper_true.yaml: tables.hfl_convex_smoke.arms.(0,0) S-SGD."
     "paper=True is not allowed: it must be a mapping of names to values or null"),
    # an arm compared with itself: every claim and paper value it gives is read, or refused
    (REPRODUCE, ["{tmp}/vs_itself_accuracy.yaml"], {}, "{tmp}/vs_itself_accuracy.yaml: tables.hfl_convex_smoke.arms."
     "(0,0) S-SGD.vs='(0,0) S-SGD' is not allowed: it names the arm itself, which compares it with none, and no arm of "
     "the table with a paper.accuracy is compared with it, so its paper.accuracy is read by nothing"),
    (REPRODUCE, ["{tmp}/vs_itself_claim.yaml"], {}, "{tmp}/vs_itself_claim.yaml: tables.hfl_convex_smoke.arms.(0,0) HFL."
     "vs='(0,0) HFL' is not allowed: it names the arm itself, which compares it with none, so its claim: closeness is "
     "never judged"),
    (REPRODUCE, ["{tmp}/reference_difference.yaml"], {}, "{tmp}/reference_difference.yaml: tables.fedstaleweight_fig2_"
     "smoke.arms.buffered_fedavg.paper={'difference': ['>0']} is not allowed: the table's reference arm is compared with "
     "none and leaves its paper.difference unread"),
    # a report seed listed twice: named, not the power rule's cap
    (REPRODUCE, ["{tmp}/report_twice.yaml"], {}, "{tmp}/report_twice.yaml: protocol.report_seeds[1]=1 is not allowed: "
     "seed 1 is also protocol.report_seeds[0]: list each seed once"),
    # the command's own values: --jobs, and a held-out check's registered evidence, before any run
    *[(REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--jobs", jobs], {}, f"--jobs {jobs} is not allowed: it is "
       "how many runs (and studies' searches) go at once on this machine: an integer >= 1") for jobs in ("0", "-1")],
    (REPRODUCE, [str(REPO / "sweeps" / "hfl_smoke.yaml"), "--held-out-seeds", "721-740", "--registered", "{tmp}"], {},
     "{tmp}/hfl_convex_smoke_evidence.csv does not exist: the held-out check compares with the registered evidence"),
    (REPRODUCE, ["{tmp}/headline_empty.yaml"], {}, "{tmp}/headline_empty.yaml: headlines[0].rows=[] is not allowed: a "
     "headline quotes the paper and names the rows that test it"),
    (REPRODUCE, ["{tmp}/headline_placeholder.yaml"], {}, "{tmp}/headline_placeholder.yaml: tables.hfl_convex_smoke.notes: "
     "'{headline:9}' names no headline of the file: write {headline:N} with N from 1 to 2"),
    (REPRODUCE, ["{tmp}/headline_reading.yaml"], {}, "{tmp}/headline_reading.yaml: headlines[0].readings.inputs on 10 "
     "shared centres, Synthetic(0,0)[0] arm='(0,1) HFLL' is not defined: did you mean (0,1) HFL?"),
    (REPRODUCE, ["{tmp}/duplicate_key.yaml"], {}, "{tmp}/duplicate_key.yaml is not valid YAML: found the key 'readings' "
     f"twice in one mapping at line {DUPLICATE_LINE}"),
    (REPRODUCE, ["{tmp}/claim_kind.yaml"], {}, "{tmp}/claim_kind.yaml: tables.hfl_convex_smoke.arms.(0,0) S-SGD.claim='gap' "
     "is not allowed"),
    (REPRODUCE, ["{tmp}/claim_loose.yaml"], {}, "{tmp}/claim_loose.yaml: tables.hfl_convex_smoke.arms.(0,0) S-SGD.tolerance=5.0 "
     "is not allowed: a table may only tighten the default rule: points in (0, 2]"),
    (REPRODUCE, ["{tmp}/claim_why.yaml"], {}, "{tmp}/claim_why.yaml: tables.hfl_convex_smoke.arms.(0,0) S-SGD.tolerance_why=None "
     "is not allowed: a tighter tolerance needs its reason"),
    (REPRODUCE, ["{tmp}/claim_type.yaml"], {}, "{tmp}/claim_type.yaml: tables.hfl_convex_smoke.arms.(0,0) S-SGD.tolerance"),
    (REPRODUCE, ["{tmp}/claim_side.yaml"], {}, "{tmp}/claim_side.yaml: tables.hfl_convex_smoke.arms.(0,0) S-SGD.tolerance=1.0 "
     "is not allowed: a side claim has no tolerance"),
    (REPRODUCE, ["{tmp}/cause.yaml"], {}, "{tmp}/cause.yaml: tables.hfl_convex_smoke.arms.(0,1) HFL.cause.arm='(0,1) "
                                          "FedAvgg' is not defined"),
    (REPRODUCE, ["{tmp}/fidelity_missing.yaml"], {}, "{tmp}/fidelity_missing.yaml: tables.hfl_convex_smoke.fidelity is "
     "missing: a table that tests paper numbers says how close its workload is to the paper's, fidelity: {level: LEVEL, "
     "note: TEXT} with LEVEL one of 'paper' (the paper's data set, model and scale), 'paper data' (the paper's data set, "
     "with a stated difference: scale, model or budget), 'stand-in' (another workload standing for the paper's)"),
    (REPRODUCE, ["{tmp}/fidelity_level.yaml"], {}, "{tmp}/fidelity_level.yaml: tables.hfl_convex_smoke.fidelity.level="
     "'standin' is not allowed: choose one of paper, paper data, stand-in (did you mean stand-in?)"),
    (REPRODUCE, ["{tmp}/fidelity_note.yaml"], {}, "{tmp}/fidelity_note.yaml: tables.hfl_convex_smoke.fidelity.note=' ' is "
     "not allowed: level 'paper data' needs its note: what differs from the paper's workload, or what the workload "
     "stands for"),
    (REPRODUCE, ["{tmp}/fidelity_list.yaml"], {}, "{tmp}/fidelity_list.yaml: tables.hfl_convex_smoke.fidelity.note="
     "['digits', 'synthetic'] is not allowed: it must be a string"),
    (REPRODUCE, ["{tmp}/fidelity_text.yaml"], {}, "{tmp}/fidelity_text.yaml: tables.hfl_convex_smoke.fidelity='stand-in' "
     "is not allowed: it must be a table's fidelity (a mapping with keys level, note) or null"),
    (SCOREBOARD, ["--sweeps", "{tmp}/no_such_dir"], {}, "--sweeps {tmp}/no_such_dir is not a directory"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/nothing", "--out", "{tmp}/board/evidence_empty"], {},
     "--sweeps {tmp}/board/nothing holds no reproduction's sweep file (a .yaml file with a protocol)"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps_broken", "--out", "{tmp}/board/nothing"], {},
     "{tmp}/board/sweeps_broken/zz.yaml is not valid YAML"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps_binary", "--out", "{tmp}/board/nothing"], {},
     "{tmp}/board/sweeps_binary/zz.yaml is not a text file"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/no_such_dir"], {}, "--out {tmp}/no_such_dir is not a directory"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/empty.csv"], {}, "--out {tmp}/empty.csv is not a directory"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/nothing"], {},
     "{tmp}/board/nothing holds no evidence file (<table>_evidence.csv) of any table of a paper record (<stem>_paper.yaml)"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/record_yaml"], {},
     "{tmp}/board/record_yaml/hfl_smoke_paper.yaml is not a paper record (not valid YAML)"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/record_binary"], {},
     "{tmp}/board/record_binary/hfl_smoke_paper.yaml is not a paper record (not a text file)"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/record_keys"], {},
     "{tmp}/board/record_keys/hfl_smoke_paper.yaml is not a paper record (missing or mistyped: tables, headlines"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/record_empty"], {},
     "{tmp}/board/record_empty/hfl_smoke_paper.yaml is not a paper record (missing or mistyped: paper, tables, headlines"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/record_type"], {},
     "{tmp}/board/record_type/hfl_smoke_paper.yaml is not a paper record (missing or mistyped: paper, tables;"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/record_no_fidelity"], {},
     "{tmp}/board/record_no_fidelity/hfl_smoke_paper.yaml gives no fidelity for hfl_convex_smoke, which has verdicts or "
     "answers a headline (a record from before fidelity was registered): reproduce its sweep file again (python -m "
     "fl_bench.analysis.reproduce), whose tables each register one (level paper, paper data, stand-in)"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/record_fidelity_type"], {},
     "{tmp}/board/record_fidelity_type/hfl_smoke_paper.yaml is not a paper record (missing or mistyped: fidelity;"),
    (FL_BENCH, ["algorithm=ca2fl", "algorithm.cache_mean_over=[all]"], {},
     "Error merging override algorithm.cache_mean_over=[all]: Cannot convert 'list' to string"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/evidence_empty"], {},
     "{tmp}/board/evidence_empty/hfl_convex_smoke_evidence.csv is not a table's evidence file (No columns to parse"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/evidence_columns"], {},
     "{tmp}/board/evidence_columns/hfl_convex_smoke_evidence.csv is not a table's evidence file (missing columns: paper"),
    (SCOREBOARD, ["--sweeps", "{tmp}/board/sweeps", "--out", "{tmp}/board/evidence_binary"], {},
     "{tmp}/board/evidence_binary/hfl_convex_smoke_evidence.csv is not a table's evidence file ("),
    # the scoreboard's checks of a record and its evidence, board/check_NAME (written above): its --sweeps, NAME
    # and the line after '{tmp}/board/check_NAME/'
    *[(SCOREBOARD, ["--sweeps", f"{{tmp}}/board/{sweeps}", "--out", f"{{tmp}}/board/check_{name}"], {},
       f"{{tmp}}/board/check_{name}/" + words) for sweeps, name, words in (
        ("sweeps", "rows_text", "hfl_smoke_paper.yaml: headlines[0].rows='hfl_convex_smoke: (0,0) S-SGD' is "
         "not allowed: it must be a list of rows, each 'TABLE: ARM' (a table of the record, one of its "
         "arms)"),
        ("sweeps", "headlines_numbers", "hfl_smoke_paper.yaml: headlines[0]=1 is not allowed: it must be a "
         "headline (a mapping with keys quote, where, rows, readings)"),
        ("sweeps", "no_rows", "hfl_smoke_paper.yaml: headlines[0].rows is missing: give a list of rows, "
         "each 'TABLE: ARM' (a table of the record, one of its arms)"),
        ("sweeps", "rows_key", "hfl_smoke_paper.yaml: headlines[0].rowz is not a key of a headline: did you "
         "mean rows? (its keys: quote, where, rows, readings)"),
        ("sweeps", "rows_empty", "hfl_smoke_paper.yaml: headlines[0].rows=[] is not allowed: a headline "
         "(and each of its readings) names the rows that test it, each 'TABLE: ARM'"),
        ("sweeps", "row_no_arm", "hfl_smoke_paper.yaml: headlines[0].rows[1]='hfl_convex_smoke' is not "
         "allowed: write 'TABLE: ARM' (a table of the record, one of its arms)"),
        ("sweeps", "row_arm", "hfl_smoke_paper.yaml: headlines[0].rows[1]='hfl_convex_smoke: (0,1) SGD' is "
         "not allowed: hfl_convex_smoke has no arm '(0,1) SGD', in its evidence or its sweep file: did "
         "you mean '(0,1) S-SGD'?"),
        ("sweeps", "row_table", "hfl_smoke_paper.yaml: headlines[0].rows[1] table='hfl_convx_smoke' is not "
         "defined: did you mean hfl_convex_smoke? (choose one of hfl_convex_smoke, "
         "hfl_convex_smoke_final)"),
        ("sweeps", "row_twice", "hfl_smoke_paper.yaml: headlines[0].rows[1]='hfl_convex_smoke: (0,0) S-SGD' "
         "is not allowed: it is headlines[0].rows[0] too: each row once (a row named twice would count "
         "twice)"),
        ("sweeps", "key_twice", "hfl_smoke_paper.yaml is not a paper record (not valid YAML): found the key "
         "'paper' twice in one mapping at line 4"),
        ("sweeps", "fidelity_level", "hfl_smoke_paper.yaml: fidelity.hfl_convex_smoke.level='standin' is "
         "not allowed: choose one of paper, paper data, stand-in (did you mean stand-in?)"),
        ("sweeps", "table_misspelt", "hfl_smoke_paper.yaml: tables[0]='hfl_convx_smoke' is not allowed: "
         "there is no hfl_convx_smoke_evidence.csv beside the record, and "
         "{tmp}/board/sweeps/hfl_smoke.yaml registers no such table: did you mean hfl_convex_smoke? (its "
         "tables: hfl_convex_smoke, hfl_convex_smoke_final)"),
        ("sweeps", "copy", "hfl_smoke_copy_paper.yaml: sweep_file='hfl_smoke.yaml' is not allowed: the "
         "record of hfl_smoke.yaml is hfl_smoke_paper.yaml, which is there: one record per sweep file (a "
         "copy counts each verdict again): remove hfl_smoke_copy_paper.yaml"),
        ("sweeps", "copy_old", "hfl_smoke_paper.yaml: tables[0]='hfl_convex_smoke' is not allowed: it is "
         "hfl_smoke_copy_paper.yaml's tables[0] too: each table in one record (two count each of its "
         "verdicts twice): remove the one of the two that is a copy"),
        ("sweeps", "renamed", "hfl_paper.yaml: sweep_file='hfl_smoke.yaml' is not allowed: the record of "
         "hfl_smoke.yaml is hfl_smoke_paper.yaml, as its reproduction writes it: rename hfl_paper.yaml "
         "to hfl_smoke_paper.yaml"),
        ("sweeps", "no_record", "hfl_convex_smoke_evidence.csv has no paper record: no *_paper.yaml beside "
         "it names the table hfl_convex_smoke ({tmp}/board/sweeps/hfl_smoke.yaml registers it: its "
         "record is hfl_smoke_paper.yaml): reproduce its sweep file again (python -m "
         "fl_bench.analysis.reproduce), or remove the file"),
        ("sweeps_fedgbo", "partial", "hfl_smoke_paper.yaml: tables[1]='hfl_convex_smoke_final' is not "
         "allowed: there is no hfl_convex_smoke_final_evidence.csv beside the record, and no sweep file "
         "read (--sweeps) is hfl_smoke.yaml, to register it: name a table made here, or give as --sweeps "
         "the directory of hfl_smoke.yaml"),
        ("sweeps", "verdict", "hfl_convex_smoke_evidence.csv: verdict='maybe' on line 2 (arm '(0,0) S-SGD') "
         "is not allowed: a verdict is one of reproduces, differs, inconclusive, same side, Nx the "
         "paper's [gap], underpowered at N seeds, not reached, paper split, tuning failed, or none (an "
         "empty cell)"),
        ("sweeps", "measure", "hfl_convex_smoke_evidence.csv: measure='tripz' on line 2 (arm '(0,0) S-SGD') "
         "is not allowed: choose one of trips, rounds, best_accuracy"),
        ("sweeps", "table_column", "hfl_convex_smoke_final_evidence.csv: table='hfl_convex_smoke' on line 2 "
         "(arm '(0,0) S-SGD') is not allowed: the file is hfl_convex_smoke_final's evidence, whose rows' "
         "table is hfl_convex_smoke_final"),
    )],
    # python -m fl_bench.data
    (DATA, ["prepare", "synthetic"], {}, "dataset='synthetic' is generated at run time: nothing to prepare"),
    (DATA, ["prepare", "nope"], {}, "unknown dataset 'nope'"),
    (DATA, ["prepare", "sent140"], {"FL_BENCH_PLUGINS": "no_such_module"}, "plugin module 'no_such_module'"),
    (DATA, ["prepare", "sent140"], {"FL_BENCH_PLUGINS": "broken.misspelt_group"}, "plugin module "
     "'broken.misspelt_group' (from FL_BENCH_PLUGINS) registers MisspeltGroupConfig under group 'algoritm', which is "
     "not a config group: did you mean algorithm?"),
    (DATA, ["prepare", "mnist", "data_root={tmp}/data"], {"FL_BENCH_DATA_MIRROR": "file://{tmp}/no_mirror"},
     "cannot download file://{tmp}/no_mirror/ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz (No such "
     "file or directory): download https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz by hand to "
     "{tmp}/data/raw/mnist/train-images-idx3-ubyte.gz and run again"),
    (DATA, ["prepare", "cifar10", "data_mirror=https://"], {}, "data_mirror='https://' is not allowed"),
    (DATA, ["prepare", "fmnist", "data_root={tmp}/wrong_plain"], {}, "{tmp}/wrong_plain/raw/fmnist/"
     "train-images-idx3-ubyte is refused (its content has SHA-256 " + WRONG_IDX_SHA256 + ", not "
     "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888), and it is read before"),
    (DATA, ["prepare", "mnist", "data_root={tmp}/wrong_gz"], {"FL_BENCH_DATA_MIRROR": "file://{tmp}/no_mirror"},
     "{tmp}/wrong_gz/raw/mnist/train-images-idx3-ubyte.gz is refused (its bytes have SHA-256 " + WRONG_IDX_SHA256 +
     ", not 440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609) and cannot download file://{tmp}/"
     "no_mirror/ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz (No such file or directory): delete "
     "it or replace it with a faithful copy of https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz, "
     "and run again"),
]


def _digests(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != ".lock"}


def _main(command: str):
    """The command's main function."""
    if command == FL_BENCH:
        from fl_bench.runs.cli import main  # reads sys.argv, as Hydra's entry points do
    elif command == TRACES:
        from fl_bench.traces.__main__ import main
    elif command == DATA:
        from fl_bench.data.__main__ import main
    elif command == SCOREBOARD:
        from fl_bench.analysis.scoreboard import main
    else:
        from fl_bench.analysis.reproduce import main
    return main


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished run's directory (copied by each test that runs into one)."""
    from fl_bench.runs.cli import main

    run = tmp_path_factory.mktemp("good") / "run"
    argv = sys.argv
    try:
        sys.argv = ["fl_bench", "progress=false", *GOOD_RUN, f"hydra.run.dir={run}"]
        main()
    finally:
        sys.argv = argv
    assert (run / "model.pt").exists()
    return run


# Refusals that come from a started run or a launched sweep, not from the config: end-to-end runs, left out
# of the quick loop (-m "not slow") with the other slow tests.
STARTED = ("the run made no server step", "the run is stuck", "no trial of study")


def _marked(row: tuple) -> object:
    command, args, _, words = row
    started = command == FL_BENCH and ("-m" in args or words.startswith(STARTED))
    return pytest.param(*row, marks=pytest.mark.slow) if started else row


@pytest.mark.parametrize("command, args, env, words", [_marked(row) for row in REFUSALS], ids=lambda value: None)
def test_bad_input_stops_with_one_line_and_leaves_an_earlier_run_whole(
        command, args, env, words, tmp_path, finished_run, monkeypatch, capsys):
    from fl_bench.analysis.launch import _mode_from_the_command_line
    from fl_bench.data.sources import SOURCES

    write_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    # (no row depends on the machine's packages: Fashion-MNIST has no system copy here)
    monkeypatch.setitem(SOURCES, "fmnist", dataclasses.replace(SOURCES["fmnist"], system_copies=()))
    monkeypatch.syspath_prepend(str(PLUGIN))
    for key, value in env.items():
        monkeypatch.setenv(key, value.replace("{tmp}", str(tmp_path)))
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = _digests(run)
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    if command == FL_BENCH:  # (Hydra's flags, -m, first)
        flags = [arg for arg in args if arg.startswith("-")]
        args = [*flags, "progress=false", *GOOD_RUN, *(a for a in args if a not in flags), f"hydra.run.dir={run}"]
    main = _main(command)
    if command == REPRODUCE:  # a refusal that is gone fails here in a second, not after a whole reproduction's runs
        from fl_bench.analysis.launch import Launcher

        monkeypatch.setattr(Launcher, "run", lambda self, command, *_, **__: pytest.fail(
            f"the refusal did not come before the runs: {' '.join(command[2:])[:200]}"))
    if command == FL_BENCH:
        monkeypatch.setattr(sys, "argv", ["fl_bench", *args])
    # Hydra composes a command's whole config a second time only to read hydra.mode, which no fl_bench config
    # sets (that composition's errors are swallowed): skipped here as reproduce --in-process skips it, unless the
    # row sets hydra.mode itself (half of a row's time went to it)
    skip_mode = _mode_from_the_command_line(args) if command == FL_BENCH else contextlib.nullcontext()
    with warnings.catch_warnings(record=True) as caught, pytest.raises(SystemExit) as stop, skip_mode:
        warnings.simplefilter("default")  # what python -m shows
        main() if command == FL_BENCH else main(args)
    shown = [w for w in caught if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))]
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()] + [str(w.message) for w in shown]
    assert stop.value.code == 1, err
    assert len(lines) == 1, err
    prog = {FL_BENCH: "fl_bench", TRACES: "fl_bench", DATA: "fl_bench", REPRODUCE: "fl_bench.analysis.reproduce",
            SCOREBOARD: "fl_bench.analysis.scoreboard"}[command]
    assert lines[0].startswith(f"{prog}: error: {words.replace('{tmp}', str(tmp_path))}"), lines[0]
    beside = (".diverged/",)  # where a diverged run goes when the directory held a completed one (run_dir.BESIDE)
    assert {k: v for k, v in _digests(run).items() if not k.startswith(beside)} == before  # untouched, cli.log included
    assert not (run / ".replaced").exists()


def test_every_sweep_file_is_read_whole_and_names_what_its_arms_refer_to():
    """Each of sweeps/*.yaml that the reproduction driver takes passes the schema, and the schema keeps
    what the file gives in its typed fields (an arm without vs has vs None)."""
    from fl_bench.analysis.sweep_file import load_sweep_file

    for path in sorted((REPO / "sweeps").glob("*_smoke.yaml")):
        spec = load_sweep_file(path)
        raw = yaml.safe_load(path.read_text())
        for name, table in raw["tables"].items():
            for label, arm in table["arms"].items():
                typed = spec.tables[name].arms[label]
                assert all(getattr(typed, key) not in (None, [], {}) for key in arm) and (typed.vs is None) == ("vs" not in arm)
