"""A held-out check (fl_bench.analysis.held_out): the registered protocol rerun on seeds it never used, the kept
tuned settings reused, into directories of its own, and each verdict set beside the registered one."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from fl_bench.analysis import held_out
from fl_bench.analysis.reproduce import Reproduction
from helpers.runs import launched_jobs, runs_only

REPO = Path(__file__).parents[2]
FEDBUFF = REPO / "sweeps" / "fedbuff_smoke.yaml"


def test_held_out_seeds_are_ranges_or_lists_given_once():
    assert held_out.parse_seeds("721-725") == [721, 722, 723, 724, 725]
    assert held_out.parse_seeds("721, 725,730-731") == [721, 725, 730, 731]
    assert held_out.label([721, 722, 723]) == "721-723" and held_out.label([721, 725]) == "721_725"
    for bad, why in (("x", "give seeds as FIRST-LAST"), ("725-721", "ends before it starts"),
                     ("721,721", "a seed is given twice"), ("-3", "give seeds as FIRST-LAST")):
        with pytest.raises(ValueError, match=why):
            held_out.parse_seeds(bad)


def test_the_comparison_sets_each_verdict_beside_the_registered_one_and_names_those_that_moved(tmp_path):
    registered, checked = tmp_path / "results", tmp_path / "held"
    registered.mkdir(), checked.mkdir()
    name = "fedlaavg_table2_smoke"
    shutil.copy(REPO / "results" / f"{name}_evidence.csv", registered)
    found = pd.read_csv(registered / f"{name}_evidence.csv")
    judged = found[found["verdict"].fillna("") != ""]
    first = judged.index[0]
    found.loc[first, "verdict"] = "inconclusive" if found.loc[first, "verdict"] != "inconclusive" else "reproduces"
    found["seeds"] = 20
    found.to_csv(checked / f"{name}_evidence.csv", index=False)
    summary = held_out.write_comparison(registered, checked, [name], FEDBUFF, list(range(721, 741)))
    assert summary == f"1 of {len(judged)} verdicts moved on held-out seeds 721-740 (20 seeds)"
    table = pd.read_csv(checked / "held_out.csv")
    assert table["moved"].tolist() == [arm == found.loc[first, "arm"] for arm in table["arm"]]
    assert (table["held-out seeds"] == 20).all() and (table["registered seeds"] != 20).all()
    page = (checked / "held_out.md").read_text()
    assert summary in page and f"{name}: {found.loc[first, 'arm']} (" in page and "**moved**" in page
    with pytest.raises(ValueError, match="compares with the registered evidence"):
        held_out.write_comparison(tmp_path / "nowhere", checked, [name], FEDBUFF, [721])


def test_a_held_out_check_reruns_the_kept_settings_on_its_seeds_into_its_own_directories(tmp_path, monkeypatch):
    """FedBuff Table 2 on seeds 721-740: no tuning, no pilot, no ledger; the report runs (the kept settings,
    each seed of the held-out ones) in <runs_dir>_held_out_721-740; then the comparison."""
    seeds = list(range(721, 741))
    assert Reproduction(FEDBUFF, False, None, 1, held_out_seeds=seeds).runs_dir == Path("multirun/fedbuff_smoke_held_out_721-740")
    repro = Reproduction(FEDBUFF, smoke=False, runs_dir=tmp_path / "runs", jobs=1, held_out_seeds=seeds)
    assert repro.seeds == seeds
    commands, compared = runs_only(repro, monkeypatch), []
    monkeypatch.setattr(held_out, "write_comparison", lambda *args: compared.append(args) or "0 of 2 verdicts moved")
    with pytest.raises(ValueError, match="fedbuff_table2_smoke_evidence.csv does not exist: the held-out check compares"):
        repro.run(["fedbuff_table2_smoke"], tmp_path / "out", registered=tmp_path / "results")  # (before any run)
    assert not commands
    (tmp_path / "results").mkdir()
    shutil.copy(REPO / "results" / "fedbuff_table2_smoke_evidence.csv", tmp_path / "results")
    repro.run(["fedbuff_table2_smoke"], tmp_path / "out", registered=tmp_path / "results")
    jobs = [job for command in commands for job in launched_jobs(command)]
    assert len(commands) == 1 and not any("hparams_search" in word for word in commands[0])  # one stage: the report
    assert sorted({int(job["seed"]) for job in jobs}) == seeds and len(jobs) == 3 * len(seeds)  # 3 arms
    kept = repro.studies.tuned("fedbuff_k1").params
    assert kept and all(any(job.get(key) == str(value) for job in jobs) for key, value in kept.items())
    assert not (tmp_path / "runs" / "report_seeds.json").exists()  # the registered ledger is not this check's
    assert compared == [(tmp_path / "results", tmp_path / "out", ["fedbuff_table2_smoke"], FEDBUFF, seeds)]


def test_a_held_out_check_never_tunes_and_uses_no_seed_of_the_protocol(tmp_path):
    with pytest.raises(ValueError, match=r"seeds \[101, 201\] are the protocol's own"):
        Reproduction(FEDBUFF, smoke=False, runs_dir=None, jobs=1, held_out_seeds=[101, 201, 721, 722, 723])
    with pytest.raises(ValueError, match="3 seeds, at least 5"):
        Reproduction(FEDBUFF, smoke=False, runs_dir=None, jobs=1, held_out_seeds=[721, 722, 723])
    assert len(Reproduction(FEDBUFF, False, None, 1, held_out_seeds=list(range(700, 740))).seeds) == 30  # the cap
    spec = tmp_path / "fedbuff_smoke.yaml"  # its tuned settings nowhere
    spec.write_text(FEDBUFF.read_text().replace("tuned_dir: results/tuned/fedbuff_smoke", f"tuned_dir: {tmp_path / 'tuned'}"))
    repro = Reproduction(spec, smoke=False, runs_dir=tmp_path / "runs", jobs=1, held_out_seeds=list(range(721, 741)))
    with pytest.raises(ValueError, match="study fedbuff: .* holds no setting tuned under this protocol.*run the "
                                         "registered reproduction first"):
        repro.studies.tuned("fedbuff")
