"""The reproduction driver and the paper comparison: one point of every FedBuff table runs from the
sweep file (what CI can afford), and the direction column says what the ratios say."""

import json
import shutil
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml
import pytest
from omegaconf import OmegaConf

from fl_bench.analysis.sections import ratios_of_means
from fl_bench.errors import ConfigError
from fl_bench.analysis.launch import Launcher
from fl_bench.analysis.protocol import spaces_of
from fl_bench.analysis.reproduce import Arm, Reproduction
from fl_bench.analysis.tuning import Tuned
from fl_bench.runs.run_dir import finished_runs
from helpers.runs import job_run_dir, launched_jobs, write_finished_run
from tests.helpers.arms import as_arms

SPEC = Path(__file__).parents[2] / "sweeps" / "fedbuff_smoke.yaml"


TABLES = ("fedbuff_fig3_smoke", "fedbuff_table6_smoke")  # (every table's every arm: tests/analysis/test_sweep_files.py)


@pytest.mark.slow
def test_named_tables_run_from_the_sweep_file_logged_to_wandb_and_published(tmp_path):
    out, runs = tmp_path / "results", tmp_path / "runs"
    # logged to W&B offline, and each table published as a W&B Report specification (--dry-run)
    done = subprocess.run([sys.executable, "-m", "fl_bench.analysis.reproduce", str(SPEC), *TABLES, "--smoke", "--jobs", "2",
                           "--out", str(out), "--runs-dir", str(runs), "--publish", "my-team/fl_bench", "--dry-run",
                           "--override", f"data_root={tmp_path / 'data'}", "logger=wandb"],
                          capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr
    spec = OmegaConf.load(SPEC)
    assert sorted(p.stem for p in out.glob("*.md") if p.name != "README.md") == sorted(TABLES)  # the tables named, no other
    assert (out / "README.md").is_file()  # and the scoreboard
    for name in TABLES:
        table = spec.tables[name]
        text = (out / f"{name}.md").read_text()
        assert table.title in text and f"| {table.reference} " in text
        # the arms a smoke point does not run are said once each in the findings, not once per placeholder
        # (Table 6 names FedAvgM with over-selection twice: "((fedavgm over-selection 0.3: not run))" before)
        skipped = [label for label in table.arms if label != table.reference and f"{{effect:{label}}}" in table.notes]
        assert skipped and all(text.count(f"({label}: not run)") == 1 for label in skipped), name
        assert not any(f"(({label}: not run))" in text for label in table.arms)
        csv = pd.read_csv(out / f"{name}.csv")
        assert {"method", "algorithm", "concurrency", "seeds", "trips_to_target", "resolution", "ratio"} <= set(csv.columns)
        assert not {"paper", "direction"} & set(csv.columns)  # one judgement, the evidence's
        assert csv.loc[0, "seeds"] == 1 and csv.loc[0, "concurrency"] == 20  # the smoke workload, one seed
        for plot in ("curves", "staleness", "examples"):
            assert (out / f"{name}_{plot}.png").stat().st_size > 0
        report = json.loads((out / f"{name}_wandb_report.json").read_text())
        assert report["displayName"] == name and table.title in json.dumps(report)
    # every run was started with the sweep file's workload and the table's arm overrides
    logs = "\n".join(p.read_text() for p in runs.glob("*/reproduce.log"))
    assert "experiment=fedbuff_smoke" in logs and f"data_root={tmp_path / 'data'}" in logs and "algorithm.buffer_size=1000 algorithm.staleness.exponent=10" in logs


def test_arms_that_run_the_same_share_a_directory_and_unknown_tables_fail():
    a = Arm("fedbuff", "fedbuff", ())
    assert a.key == Arm("K=10", "fedbuff", ()).key != Arm("K=1", "fedbuff", ("algorithm.buffer_size=1",)).key
    assert "=" not in Arm("x", "fedbuff", ("delay=uniform",)).key  # Hydra's override grammar forbids it
    with pytest.raises(ValueError, match="unknown table fedbuff_table9: choose from fedbuff_fig3_smoke"):
        Reproduction(SPEC, smoke=True, runs_dir=None, jobs=1).tables(["fedbuff_table9"])


def test_ratios_of_means_are_data_beside_the_means_with_no_judgement_of_their_own():
    table = pd.DataFrame({
        "method": ["ref", "slower", "faster", "missed", "unshown", "other_ref", "vs_other"],
        "budget": [1000] * 7,
        "trips_to_target": [100.0, 250.0, 80.0, float("nan"), 103.0, 50.0, 100.0],
        "client_times_to_target": [10.0, 40.0, 8.0, float("nan"), 10.0, 5.0, 5.0],
    })
    arms = {
        "slower": {"paper": {"trips": [3.3, 1.7], "time": [3.6]}},
        "faster": {"paper": {"trips": [1.2]}},
        "missed": {"paper": {"trips": [">1"]}},                     # its budget over the reference's mean
        "vs_other": {"vs": "other_ref", "paper": {"trips": [2.0]}},
    }
    got = ratios_of_means(table, as_arms(arms), "ref").set_index("method")
    assert got.loc["slower", "ratio"] == "2.50×" and got.loc["slower", "ratio (time)"] == "4.00×"
    assert got.loc["faster", "ratio"] == "0.80×"
    assert got.loc["missed", "ratio"] == ">10.00×" and got.loc["missed", "ratio (time)"] == ""
    assert got.loc["vs_other", "ratio"] == "2.00×" and got.loc["vs_other", "ratio (time)"] == "1.00×"
    assert got.loc["ref", "ratio"] == "" and got.loc["unshown", "ratio"] == ""  # no vs, no paper: no ratio
    assert not {"paper", "direction", "paper (time)", "direction (time)"} & set(got.columns)


def test_an_arm_reruns_only_when_its_command_changed(tmp_path, monkeypatch):
    repro = Reproduction(SPEC, smoke=True, runs_dir=tmp_path, jobs=1)
    calls = []

    def fake_run(command, log_dir, check=True):  # what a finished launch leaves
        calls.append(launched_jobs(command))
        for job in calls[-1]:
            write_finished_run(job_run_dir(job), {"seed": int(job["seed"])})
        return True

    monkeypatch.setattr(repro.launcher, "run", fake_run)
    arm = Arm("K=10", "fedbuff", ())
    repro.launcher.launch_stage("report", [repro.arm_runs(arm)], 1)
    repro.launcher.launch_stage("report", [repro.arm_runs(arm)], 1)
    assert len(calls) == 1  # the second time found the runs of the same command
    monkeypatch.setattr(repro.studies, "tuned", lambda study: Tuned({"algorithm.client_lr": 0.5}))
    repro.launcher.launch_stage("report", [repro.arm_runs(arm)], 1)
    assert len(calls) == 2 and calls[1][0]["algorithm.client_lr"] == "0.5"  # a new setting reruns
    assert len(finished_runs(tmp_path / arm.key)) == 1  # (the earlier setting's run removed)


def _spec(tmp_path, protocol=None, **studies):
    """A sweep file of ``studies`` under a valid protocol with ``protocol``'s changes."""
    spec = {"workload": ["experiment=fedbuff_smoke"], "runs_dir": str(tmp_path / "runs"), "tuned_dir": str(tmp_path / "tuned"),
            "smoke": [], "tables": {},
            "protocol": {"registered": "2026-11-25", "report_seeds": [1, 2, 3, 4, 5], "verdict": "by the interval",
                         "tuner": {"trials": 32, "startup_trials": 10, "seeds": [100, 101],
                                   "objective": "trips_to_target_or_shortfall", "direction": "minimize"}},
            "studies": studies or {"fedavg": {"space": "fedbuff_smoke_server_sgd", "overrides": ["algorithm=fedavg"]}}}
    for key, value in (protocol or {}).items():
        target = spec["protocol"]["tuner"] if key in (*spec["protocol"]["tuner"], "confirm") else spec["protocol"]
        target[key] = value
    path = tmp_path / "spec.yaml"
    OmegaConf.save(OmegaConf.create(spec), path)
    return path


FEDAVG = {"space": "fedbuff_smoke_server_sgd", "overrides": ["algorithm=fedavg"]}
FEDAVGM = {"space": "fedbuff_smoke_server_momentum", "overrides": ["algorithm=fedavgm"],
           "special_case": {"study": "fedavg", "set": {"algorithm.server_optimizer.momentum": 0.0}}}


@pytest.mark.parametrize("protocol, studies, message", [
    ({"trials": 16}, {}, "protocol.tuner.trials=16: at least 32 for every study"),
    ({"seeds": [100]}, {}, r"protocol.tuner.seeds=\[100\]: at least 2 distinct seeds"),
    ({"report_seeds": [1, 2, 3, 4]}, {}, r"protocol.report_seeds=\[1, 2, 3, 4\]: at least 5 distinct seeds"),
    ({"report_seeds": [1, 2, 3, 4, 100]}, {}, r"seeds \[100\] are both tuning and report seeds"),
    ({"tuner": None}, {}, "studies fedavg name a search space but protocol.tuner is null"),
    ({}, {"fedavg": FEDAVG, "fedavgm": {**FEDAVGM, "special_case": {"study": "fedavg", "set": {"algorithm.server_optimizer.momentum": 0.05}}}},
     r"study fedavgm: its special case's algorithm.server_optimizer.momentum=0.05 lies outside its space"),
    ({}, {"fedavgm": {**FEDAVGM, "special_case": {"study": "fedavg_x", "set": {}}}}, "special_case.study='fedavg_x' must name another tuned study"),
    ({}, {"fedavg": FEDAVG, "fedavgm": {**FEDAVGM, "special_case": {"study": "fedavg", "set": {}}}},
     r"its special case \(fedavg's keys and \[\]\) sets \['algorithm.client_lr', 'algorithm.server_optimizer.lr'\], not its searched keys"),
    ({}, {"fedprox": {"space": "fedbuff_smoke_fedprox", "overrides": ["algorithm=fedprox"], "paper": {"algorithm.prox_mu": [0.001, 10.0]}}},
     r"study fedprox: the paper's algorithm.prox_mu values \[10.0\] lie outside its space"),
    ({}, {"a": {**FEDAVGM, "special_case": {"study": "b", "set": {"algorithm.server_optimizer.momentum": 0.0}}},
          "b": {**FEDAVGM, "special_case": {"study": "a", "set": {"algorithm.server_optimizer.momentum": 0.0}}}},
     "its special cases form a cycle"),
    ({"confirm": {"finalists": 1, "seeds": [102]}}, {}, "protocol.tuner.confirm.finalists=1: at least 2"),
    ({"confirm": {"finalists": 4, "seeds": [101, 5]}}, {}, r"protocol.tuner.confirm.seeds \[5, 101\] are also tuning, report or pilot seeds"),
    ({"confirm": {"finalists": 4, "seeds": []}}, {}, r"protocol.tuner.confirm.seeds=\[\]: at least one seed"),
    ({}, {"fedavg": FEDAVG, "fedavgm": {**FEDAVGM, "overrides": ["algorithm=fedavgm", "algorithm.server_optimizer.nesterov=true"]}},
     "study fedavgm: its special case does not run: algorithm.server_optimizer.nesterov=True is not allowed: Nesterov needs momentum > 0"),
])
def test_a_protocol_that_cannot_give_equal_budgets_or_unseen_report_seeds_is_refused_before_any_run(tmp_path, protocol, studies, message):
    with pytest.raises((ConfigError, ValueError), match=message):  # (the file's rules; a special case that does not run)
        Reproduction(_spec(tmp_path, protocol, **studies), smoke=False, runs_dir=None, jobs=1)


@pytest.mark.slow
@pytest.mark.parametrize("spec", sorted((SPEC.parent).glob("*_smoke.yaml")), ids=lambda p: p.stem)
def test_every_paper_s_sweep_file_states_a_protocol_that_passes_its_checks(spec):
    repro = Reproduction(spec, smoke=False, runs_dir=None, jobs=1)
    assert len(repro.seeds) >= 5 and repro.protocol.registered
    nested = [s for s in repro.spec.studies.values() if s.special_case is not None]
    if spec.stem in ("fedbuff_smoke", "fedgbo_smoke"):  # FedAvgM, FedProx / FedGBO, MFL, the Mimes, ... reduce to FedAvg
        assert len(nested) >= 4


def test_a_nested_study_starts_from_its_special_case_s_best_under_the_protocol_s_budget(tmp_path, monkeypatch):
    repro = Reproduction(_spec(tmp_path, None, fedavg=FEDAVG, fedavgm=FEDAVGM), smoke=False, runs_dir=None, jobs=1)
    commands = []

    def fake_run(command, log_dir, check=True):  # what a finished study leaves
        commands.append(command)
        log_dir.mkdir(parents=True)
        best = {"algorithm.client_lr": 0.3, "algorithm.server_optimizer.lr": 2.0}
        if "algorithm=fedavgm" in command:
            best["algorithm.server_optimizer.momentum"] = 0.9
        OmegaConf.save(OmegaConf.create({"best_params": best}), log_dir / "optimization_results.yaml")
        return True

    monkeypatch.setattr(repro.launcher, "run", fake_run)
    assert repro.studies.tuned("fedavgm").params["algorithm.server_optimizer.momentum"] == 0.9
    assert len(commands) == 2 and "algorithm=fedavg" in commands[0]  # the special case was tuned first
    for command in commands:
        assert {"hydra.sweeper.n_trials=32", "hydra.sweeper.n_startup_trials=10", "hydra.sweeper.seeds=[100,101]",
                "hydra.sweeper.objective=trips_to_target_or_shortfall",
                "hydra/launcher=local_cores", "hydra.launcher.n_jobs=1"} <= set(command)  # a trial's seeds one at a time
    assert ("hydra.sweeper.enqueue=[{algorithm.client_lr:0.3,algorithm.server_optimizer.lr:2.0,"
            "algorithm.server_optimizer.momentum:0.0}]") in commands[1]
    repro.studies.tuned("fedavgm")
    assert len(commands) == 2  # both on file under this protocol: reused
    changed = Reproduction(_spec(tmp_path, {"trials": 40}, fedavg=FEDAVG, fedavgm=FEDAVGM), smoke=False, runs_dir=None, jobs=1)
    monkeypatch.setattr(changed.launcher, "run", fake_run)
    changed.studies.tuned("fedavgm")
    assert len(commands) == 4 and "hydra.sweeper.n_trials=40" in commands[3]  # another protocol: tuned again
    widened = {"algorithm.client_lr": "tag(log, interval(1e-3, 1000.0))", "algorithm.server_optimizer.lr": "x"}
    monkeypatch.setattr("fl_bench.analysis.tuning.search_space_text", lambda space, spaces: widened)
    changed.studies.tuned("fedavg")
    assert len(commands) == 5  # a space with other ranges: tuned again


def test_the_finalists_run_on_the_confirmation_seeds_and_the_one_whose_worst_seed_is_best_is_kept(tmp_path, monkeypatch):
    """FedAvg's search best (lr 0.3: 10 and 12 trips on tuning seeds 100-101) collapses on confirmation
    seed 103; the runner-up (lr 0.1) holds on all four seeds and is kept. FedAvgM's start (FedAvg's
    kept setting with momentum 0) ranked third in its search, is a finalist anyway and holds where
    the search best collapses: the nested method cannot end worse than its special case."""
    confirm = {"finalists": 2, "seeds": [102, 103]}  # (the worst seed by default)
    spec = _spec(tmp_path, {"confirm": confirm}, fedavg=FEDAVG, fedavgm=FEDAVGM)
    repro = Reproduction(spec, smoke=False, runs_dir=tmp_path / "runs", jobs=1)
    lr, mom = "algorithm.client_lr", "algorithm.server_optimizer.momentum"
    held = {0.3: (11.0, 60.0), 0.1: (15.0, 15.0), 0.05: (16.0, 17.0), 0.5: (8.0, 90.0)}  # lr -> trips on seeds 102, 103
    commands = []

    def ranked(*settings):
        return [{"params": p, "value": sum(v) / 2, "per_seed": dict(zip((100, 101), v))} for p, v in settings]

    def fake_run(command, log_dir, check=True):
        commands.append(command)
        log_dir.mkdir(parents=True, exist_ok=True)
        if "hydra.sweeper.n_trials=32" in command and "hparams_search=fedbuff_smoke_server_sgd" in command:
            found = ranked(({lr: 0.3, "algorithm.server_optimizer.lr": 1.0}, (10.0, 12.0)),
                           ({lr: 0.1, "algorithm.server_optimizer.lr": 1.0}, (14.0, 14.0)))
        elif "hparams_search=fedbuff_smoke_server_momentum" in command:
            found = ranked(({lr: 0.05, "algorithm.server_optimizer.lr": 1.0, mom: 0.9}, (9.0, 9.0)),
                           ({lr: 0.3, "algorithm.server_optimizer.lr": 1.0, mom: 0.5}, (9.5, 9.5)),
                           ({lr: 0.1, "algorithm.server_optimizer.lr": 1.0, mom: 0.0}, (14.0, 14.0)))
        elif "hparams_search=fedbuff_smoke_server_sgd" in command:  # searched again, under another protocol
            found = ranked(({lr: 0.5, "algorithm.server_optimizer.lr": 1.0}, (8.0, 8.0)),
                           ({lr: 0.05, "algorithm.server_optimizer.lr": 1.0}, (16.0, 17.0)))
        else:  # the finalists on the confirmation seeds (and an earlier tuning's setting on the tuning seeds)
            for job in launched_jobs(command):
                seed, momentum = int(job["seed"]), job.get(mom) == "0.9"
                values = dict(zip((100, 101, 102, 103), (14.0, 14.0, *((100.0, 100.0) if momentum else held[float(job[lr])]))))
                write_finished_run(job_run_dir(job), {"seed": seed, "trips_to_target_or_shortfall": values[seed]})
            return True
        OmegaConf.save(OmegaConf.create({"best_params": found[0]["params"], "best_value": found[0]["value"], "ranked": found}),
                       log_dir / "optimization_results.yaml")
        return True

    monkeypatch.setattr(repro.launcher, "run", fake_run)
    fedavg = repro.studies.tuned("fedavg")
    assert fedavg.params == {lr: 0.1, "algorithm.server_optimizer.lr": 1.0}
    assert fedavg.value == 15.0 and fedavg.per_seed == {100: 14.0, 101: 14.0, 102: 15.0, 103: 15.0}
    fedavgm = repro.studies.tuned("fedavgm")
    assert fedavgm.params == {lr: 0.1, "algorithm.server_optimizer.lr": 1.0, mom: 0.0}
    # two searches, each then its finalists in one launch (two; three, the start the third), one run at a time
    assert [len(launched_jobs(c)) if "hydra/sweeper=fl_bench_jobs" in c else "search" for c in commands] == [
        "search", 2 * 2, "search", 3 * 2]
    assert all("hydra/launcher=local_cores" in c and "hydra.launcher.n_jobs=1" in c for c in commands)
    assert "hydra.sweeper.enqueue=[{algorithm.client_lr:0.1,algorithm.server_optimizer.lr:1.0,algorithm.server_optimizer.momentum:0.0}]" in commands[2]
    assert [job["seed"] for job in launched_jobs(commands[1])] == ["102", "103"] * 2
    repro.studies.tuned("fedavgm")
    assert len(commands) == 4  # the search and the confirmation on file: reused
    assert ("the settings earlier tunings kept also ran on seeds 102, 103 (an earlier setting on the tuning seeds as "
            "well), and the one with the worst seed over all 4 seeds was kept") in repro.protocol.describe(nested=True)
    smoke = Reproduction(spec, smoke=True, runs_dir=tmp_path / "smoke", jobs=1)
    assert smoke.studies.tuned("fedavg").params == fedavg.params  # a smoke point runs the confirmed setting
    unconfirmed = Reproduction(_spec(tmp_path, None, fedavg=FEDAVG), smoke=True, runs_dir=tmp_path / "smoke", jobs=1)
    assert unconfirmed.studies.tuned("fedavg").params == {lr: 0.3, "algorithm.server_optimizer.lr": 1.0}  # the search's

    # Searched again under another protocol, the search misses lr 0.1; the setting the earlier tuning kept
    # is a finalist still, runs on the tuning seeds too, and holds where the new search's best collapses.
    again = Reproduction(_spec(tmp_path, {"confirm": confirm, "trials": 40}, fedavg=FEDAVG), smoke=False,
                         runs_dir=tmp_path / "runs", jobs=1)
    monkeypatch.setattr(again.launcher, "run", fake_run)
    assert again.studies.tuned("fedavg").params == fedavg.params
    assert [job["seed"] for job in launched_jobs(commands[-1]) if job[lr] == "0.1"] == ["100", "101", "102", "103"]


@pytest.mark.slow
def test_a_bad_protocol_stops_the_command_with_one_line(tmp_path):
    spec = _spec(tmp_path, {"trials": 8})
    done = subprocess.run([sys.executable, "-m", "fl_bench.analysis.reproduce", str(spec)], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (f"fl_bench.analysis.reproduce: error: {spec}: protocol.tuner.trials=8: "
                                                    "at least 32 for every study")


def test_a_tuned_setting_far_worse_on_the_report_seeds_than_on_its_tuning_seeds_is_named(tmp_path, monkeypatch):
    """FedBuff Table 6's K=1000 setting: 57,000 trips on the tuning seeds, most report seeds missing the
    target (a median the unstable guard cannot see as an outlier)."""
    repro = Reproduction(_spec(tmp_path, None, fedavg=FEDAVG), smoke=False, runs_dir=None, jobs=1)
    monkeypatch.setattr(repro.studies, "tuned", lambda study: Tuned({}, 57000.0))
    arm, shifted = Arm("fedbuff K=1000", "fedavg", ()), Arm("K=1", "fedavg", ("algorithm.buffer_size=1",))
    for a, values in ((arm, [100000, 120000, 77000, 110000, 100000]), (shifted, [300000] * 5)):
        for seed, value in enumerate(values):
            write_finished_run(tmp_path / a.key / str(seed), {"seed": seed, "trips_to_target_or_shortfall": value})
    directories = {a.key: tmp_path / a.key for a in (arm, shifted)}
    text = repro.held_out([arm, shifted], directories)
    assert text.startswith("Guard, held-out:") and "fedbuff K=1000 (trips_to_target_or_shortfall 57,000 on tuning seeds 100, 101" in text
    assert "median 100,000 on the report seeds" in text and "K=1" not in text.replace("K=1000", "")  # another setting is not compared
    monkeypatch.setattr(repro.studies, "tuned", lambda study: Tuned({}, 90000.0))  # within 1.5x: nothing to say
    assert repro.held_out([arm], directories) == ""


def test_an_arm_is_made_of_finished_runs_only_and_its_unfinished_seeds_run_again(tmp_path, monkeypatch):
    """A failed or interrupted seed is no result: the next launch runs it again (the finished seeds are
    kept), and a seed that still does not finish stops the table in one line naming it with the first line of
    its own error."""
    repro = Reproduction(SPEC, smoke=False, runs_dir=tmp_path, jobs=1)
    monkeypatch.setattr(repro.studies, "tuned", lambda study: Tuned({}))
    outcomes = [{1: "completed", 2: "interrupted"}, {2: "failed"}, {2: "completed"}]
    calls = []

    def fake_run(command, log_dir, check=True):
        calls.append([job["seed"] for job in launched_jobs(command)])
        (log_dir / "reproduce.log").write_text(" ".join(command) + "\nfl_bench: error: a line from the log\n")
        for job in launched_jobs(command):
            status = outcomes[len(calls) - 1][int(job["seed"])]
            run = write_finished_run(job_run_dir(job), {"seed": int(job["seed"])})
            if status != "completed":  # what an unfinished run leaves: its summary, with its status and error
                summary = json.loads((run / "summary.json").read_text())
                (run / "summary.json").write_text(json.dumps({**summary, "status": status, "error": f"{status} for a reason"}))
        return False

    monkeypatch.setattr(repro.launcher, "run", fake_run)
    runs = repro.arm_runs(Arm("K=10", "fedbuff", ()), [1, 2])
    log = tmp_path / "launch" / "report" / "reproduce.log"
    with pytest.raises(RuntimeError) as stop:
        repro.launcher.launch_stage("report", [runs], 1)
    assert str(stop.value) == f"arm 'K=10' did not finish on seed 2: status interrupted: interrupted for a reason (log: {log})"
    with pytest.raises(RuntimeError, match="did not finish on seed 2: status failed: failed for a reason"):
        repro.launcher.launch_stage("report", [runs], 1)
    assert calls[1] == ["2"]  # seed 1's finished run was kept
    repro.launcher.launch_stage("report", [runs], 1)
    repro.launcher.launch_stage("report", [runs], 1)
    assert len(calls) == 3 and sorted(_seeds(runs.directory)) == [1, 2]  # all finished: reused


def _seeds(directory):
    return [summary["seed"] for summary in finished_runs(directory).values()]


LEDGER_TABLES = {"t": [1, 2, 3]}


def _ledger(tmp_path, seeds=(1, 2, 3), amended=(), started=(), table="t"):
    """Check and record the seeds of one table with one arm ``a`` against the ledger in ``tmp_path``."""
    from fl_bench.analysis.seed_ledger import SeedLedger

    ledger = SeedLedger.read(tmp_path)
    ledger.check({table: list(seeds)}, {"a": list(seeds)}, tuple(amended), {"a": "arm A"}, set(started))
    ledger.record({table: list(seeds)}, {"a": list(seeds)}, tuple(amended), SPEC)
    return ledger


def test_the_report_seeds_are_recorded_once_and_changed_only_by_a_new_amendment(tmp_path):
    import datetime

    today = datetime.date.today().isoformat()
    ledger = _ledger(tmp_path)
    assert ledger.note("t", SPEC).startswith(f"Report seeds 1-3, recorded in {tmp_path / 'report_seeds.json'} on {today} "
                                             "before the first report run (sweep file SHA-256")
    _ledger(tmp_path, started={"a"})  # the same seeds again (a resumed reproduction)
    with pytest.raises(ValueError, match=r"table t: its report runs used seeds 1-3 \(.*\); this protocol asks for 1-4: "
                                         "report seeds are set before the report runs"):
        _ledger(tmp_path, seeds=(1, 2, 3, 4), started={"a"})
    with pytest.raises(ValueError, match="arm 'arm A': its report runs used seeds 1-3"):  # a renamed table: its arm knows
        _ledger(tmp_path, seeds=(1, 2, 3, 4), started={"a"}, table="renamed")
    with pytest.raises(ValueError, match="protocol.amended entry '2026-01-01: more seeds' is dated before the report runs"):
        _ledger(tmp_path, seeds=(1, 2, 3, 4), amended=["2026-01-01: more seeds"], started={"a"})
    first = json.loads((tmp_path / "report_seeds.json").read_text())
    _ledger(tmp_path, amended=[f"{today}: claims of a kind"], started={"a"})  # an amendment that changes no seed
    assert json.loads((tmp_path / "report_seeds.json").read_text()) == first  # the recording stands as it was
    assert ledger.note("t", SPEC, (f"{today}: claims of a kind",)).endswith("0 amendments).")  # (the same file)
    edited = tmp_path / "edited.yaml"
    edited.write_text(SPEC.read_text() + "# amended\n")
    assert ledger.note("t", edited, (f"{today}: claims of a kind",)).endswith(
        "0 amendments; the sweep file has been edited since, 1 amendment added).")
    _ledger(tmp_path, seeds=(1, 2, 3, 4), amended=[f"{today}: more seeds, because"], started={"a"})
    with pytest.raises(ValueError, match="protocol.amended was rewritten after the report runs of table t began"):
        _ledger(tmp_path, seeds=(1, 2, 3, 4), amended=[f"{today}: more seeds, as planned"], started={"a"})

    path = tmp_path / "report_seeds.json"
    recorded = json.loads(path.read_text())
    recorded["arms"]["a"]["seeds"] = [1, 2, 3, 4, 5]  # edited by hand
    path.write_text(json.dumps(recorded))
    with pytest.raises(ValueError, match="report_seeds.json was edited after it was recorded"):
        _ledger(tmp_path, started={"a"})
    path.unlink()  # removed, with the report runs still there
    with pytest.raises(ValueError, match=r"arm 'arm A' already has report runs .* records no seeds for it"):
        _ledger(tmp_path, started={"a"})


def test_the_ledger_is_written_before_the_first_report_run(tmp_path, monkeypatch):
    spec = _spec(tmp_path, {"tuner": None}, fedavg={"overrides": ["algorithm=fedavg"]})  # not tuned
    text = OmegaConf.load(spec)
    text.tables = {"t": {"title": "T", "reference": "A", "arms": {"A": {"study": "fedavg"}}}}
    OmegaConf.save(text, spec)
    repro = Reproduction(spec, smoke=False, runs_dir=tmp_path / "runs", jobs=1)

    def launch(stage, stage_runs, at_once):
        (runs,) = stage_runs
        ledger = json.loads((tmp_path / "runs" / "report_seeds.json").read_text())
        assert stage == "report" and ledger["arms"][runs.directory.name]["seeds"] == list(runs.seeds) == [1, 2, 3, 4, 5]
        raise RuntimeError("stop here")

    monkeypatch.setattr(repro.launcher, "launch_stage", launch)
    with pytest.raises(RuntimeError, match="stop here"):
        repro.run(["t"], tmp_path / "out")


def test_an_arm_whose_kept_setting_is_its_special_case_is_found_from_the_tuned_files(tmp_path, monkeypatch):
    """issue 54: Table 1's FedProx (paper client) was tuned to mu = 0 (FedAvg's runs again, seed for seed)
    and FedGBO's MimeXlite to beta = 0; the tuned files say so, no run needed."""
    # (the special cases' compositions, half this test's time, are test_every_paper_s_sweep_file_states_a_protocol_...'s)
    monkeypatch.setattr(Reproduction, "_check_special_cases", lambda self: None)
    fedbuff = Reproduction(SPEC, smoke=False, runs_dir=tmp_path, jobs=1)
    assert fedbuff.degenerate(fedbuff.spec.tables["fedbuff_table1_smoke"]) == \
        {"fedprox (paper client)": "algorithm.prox_mu = 0.0"}
    fedgbo = Reproduction(SPEC.parent / "fedgbo_smoke.yaml", smoke=False, runs_dir=tmp_path, jobs=1)
    assert fedgbo.degenerate(fedgbo.spec.tables["fedgbo_table4_smoke"]) == {"mimexlite": "algorithm.beta = 0.0"}
    assert not any(tmp_path.iterdir())  # read from results/tuned alone


@pytest.mark.parametrize("every_arm", [False, True])
def test_a_misspelt_arm_override_stops_the_reproduction_before_any_directory_or_run(tmp_path, monkeypatch, every_arm):
    """A copy of a sweep file whose last arm (not the reference, which a smoke point runs alone) misspells an
    override: refused in one line before the other arms run, in a smoke check as in a full reproduction."""
    text = (SPEC.parent / "fedstaleweight_smoke.yaml").read_text()
    old = "fedstaleweight alg1: {study: fedstaleweight_alg1,"
    assert old in text
    spec = tmp_path / "mine.yaml"
    spec.write_text(text.replace(old, old + " overrides: [algorithm.staleness_emaa=0.3],"))
    ran = []
    monkeypatch.setattr(Launcher, "run", lambda self, command, log_dir, check=True: ran.append(command))
    repro = Reproduction(spec, smoke=True, runs_dir=tmp_path / "runs", jobs=1, every_arm=every_arm)
    with pytest.raises(ValueError, match=r"arm 'fedstaleweight alg1' \(fedstaleweight_alg1\) does not run: "
                                         r"algorithm.staleness_emaa is not a key of algorithm=fedstaleweight: did you mean"):
        repro.run([], tmp_path / "out")
    assert not ran and not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


def test_arms_that_share_their_runs_are_each_a_row_of_the_table(monkeypatch):
    """An 'against' row runs the same study and overrides as its ranking row (one directory): both are
    rows, each with every run of that directory; the last arm's label took them all before."""
    import fl_bench.analysis.reproduce as reproduce

    runs = pd.DataFrame({"source": ["/r/A/0_x", "/r/A/1_x", "/r/B/0_y"]}, index=["a0", "a1", "b0"])
    metrics = pd.DataFrame({"run": ["a0", "a0", "a1", "b0"]})
    trips = pd.DataFrame({"run": ["a0", "a1", "b0", "b0"]})
    loaded = []
    monkeypatch.setattr(reproduce, "load_runs", lambda paths, by: loaded.append(paths) or (runs, metrics, trips))
    chosen = [Arm("fedbuff", "fedbuff", ()), Arm("ca2fl", "ca2fl", ()), Arm("fedbuff against ca2fl", "fedbuff", ())]
    directories = {chosen[0].key: Path("/r/A"), chosen[1].key: Path("/r/B")}
    got_runs, got_metrics, got_trips = Reproduction._table_runs(chosen, directories)
    assert loaded == [[Path("/r/A"), Path("/r/B")]]  # each directory read once
    assert got_runs["method"].tolist() == ["fedbuff", "fedbuff", "ca2fl", "fedbuff against ca2fl", "fedbuff against ca2fl"]
    assert got_runs[got_runs["method"] == "fedbuff against ca2fl"].index.tolist() == ["a0", "a1"]
    assert got_metrics["method"].value_counts().to_dict() == {"fedbuff": 3, "fedbuff against ca2fl": 3, "ca2fl": 1}
    assert got_trips["method"].value_counts().to_dict() == {"ca2fl": 2, "fedbuff": 2, "fedbuff against ca2fl": 2}


def test_the_runs_directory_named_absolute_reuses_the_runs_its_relative_name_made(tmp_path, monkeypatch):
    """The same runs directory given as --runs-dir /abs/multirun/x, after the file's multirun/x made its runs:
    the runs are reused, not deleted and run again (the recorded command named the directory otherwise)."""
    monkeypatch.chdir(tmp_path)
    calls = []

    def fake_run(command, log_dir, check=True):
        calls.append(launched_jobs(command))
        for job in calls[-1]:
            write_finished_run(job_run_dir(job), {"seed": int(job["seed"])})
        return True

    arm = Arm("K=10", "fedbuff", ())
    for runs_dir in (Path("multirun"), tmp_path / "multirun"):
        repro = Reproduction(SPEC, smoke=True, runs_dir=runs_dir, jobs=1)
        monkeypatch.setattr(repro.launcher, "run", fake_run)
        repro.launcher.launch_stage("report", [repro.arm_runs(arm)], 1)
    assert len(calls) == 1 and finished_runs(tmp_path / "multirun" / arm.key)  # made once, kept


def test_a_sweep_file_s_paths_are_read_from_its_repository_from_any_working_directory(tmp_path, monkeypatch, capsys):
    """Issue 71: run from another directory, a sweep file's tuned_dir and runs_dir (and the default --out and
    --registered) are its repository's (the nearest directory above it with pyproject.toml or .git), so its kept
    settings are found and nothing is searched; a copy outside any repository reads them from its own directory,
    and the first line says how many studies it would search, with a line naming the settings the working
    directory keeps. From the repository's root the paths are what they always were."""
    from fl_bench.analysis import reproduce
    from fl_bench.analysis.sweep_file import load_sweep_file

    repo, elsewhere, loose = tmp_path / "repo", tmp_path / "elsewhere", tmp_path / "loose"
    (repo / "sweeps").mkdir(parents=True), elsewhere.mkdir(), loose.mkdir()
    (repo / "pyproject.toml").write_text("")
    spec = repo / "sweeps" / "fedgbo_smoke.yaml"
    spec.write_text((SPEC.parent / "fedgbo_smoke.yaml").read_text())
    shutil.copytree(SPEC.parents[1] / "results" / "tuned" / "fedgbo_smoke", repo / "results" / "tuned" / "fedgbo_smoke")
    shutil.copy(spec, loose)
    for cwd, tuned, runs in ((elsewhere, repo / "results/tuned/fedgbo_smoke", repo / "multirun/fedgbo_smoke"),
                             (repo / "sweeps", repo / "results/tuned/fedgbo_smoke", repo / "multirun/fedgbo_smoke"),
                             (repo, Path("results/tuned/fedgbo_smoke"), Path("multirun/fedgbo_smoke"))):
        monkeypatch.chdir(cwd)
        loaded = load_sweep_file(spec)
        assert (loaded.tuned_dir, loaded.runs_dir) == (str(tuned), str(runs)), cwd
    assert load_sweep_file(loose / "fedgbo_smoke.yaml").tuned_dir == str(loose / "results/tuned/fedgbo_smoke")

    # (the special cases' compositions are test_every_paper_s_sweep_file_states_a_protocol_...'s)
    monkeypatch.setattr(Reproduction, "_check_special_cases", lambda self: None)
    monkeypatch.setattr(Reproduction, "check", lambda self, out: pytest.fail("stop here"))
    ran = []
    monkeypatch.setattr(Launcher, "run", lambda self, command, log_dir, check=True: ran.append(command))
    for cwd, sweep_file in ((elsewhere, spec), (repo, loose / "fedgbo_smoke.yaml")):
        monkeypatch.chdir(cwd)
        with pytest.raises(pytest.fail.Exception, match="stop here"):
            Reproduction(sweep_file, smoke=False, runs_dir=tmp_path / "runs", jobs=2).run([], tmp_path / "out")
    first, again, kept_there = capsys.readouterr().out.splitlines()
    assert ("; settings to search: none (kept in {}/); runs planned: pilot 40, report (after the pilot)"
            .format(repo / "results/tuned/fedgbo_smoke")) in first
    studies = "fedavg, afo, fedgbo, fedmax, fedprox, mfl, mimelite, mimexlite"
    assert (f"; settings to search: 8 studies ({studies}), their time unknown until their first runs end (no earlier "
            f"search kept in {loose / 'results/tuned/fedgbo_smoke'}/); runs planned: tune_fedavg 64, ") in again
    assert kept_there == (f"{repo / 'results/tuned/fedgbo_smoke'}/ keeps the settings of {studies} under this protocol, "
                          f"and {loose / 'results/tuned/fedgbo_smoke'}/ (the sweep file's tuned_dir, read from its "
                          "repository) does not: stop now and copy them there, or set tuned_dir, to reuse them")
    assert not ran

    # the command's default --out and --registered: the repository's results
    given = []

    class Given:
        def __init__(self, *args):
            pass

        def run(self, tables, out, publish, dry_run, registered):
            given.append((out, registered))

    monkeypatch.setattr(reproduce, "Reproduction", Given)
    monkeypatch.chdir(elsewhere)
    reproduce.main([str(spec)])
    reproduce.main([str(spec), "--held-out-seeds", "721-725"])
    assert given == [(repo / "results", repo / "results"), (repo / "results/held_out/fedgbo_smoke_721-725", repo / "results")]


def test_the_first_line_says_how_long_the_searches_take_from_the_earlier_ones(tmp_path):
    """A study to search (its tuned file gone) is estimated from its earlier search's wall time, else from the mean
    of those kept beside it, the studies searched side by side."""
    from fl_bench.analysis.progress import Progress
    from fl_bench.analysis.sweep_file import load_sweep_file
    from fl_bench.analysis.tuning import Studies

    tuned = tmp_path / "tuned"
    shutil.copytree(SPEC.parents[1] / "results" / "tuned" / "fedgbo_smoke", tuned)
    (tuned / "mfl.yaml").unlink()
    (tuned / "afo.yaml").write_text((tuned / "afo.yaml").read_text().replace("trials: 32", "trials: 40"))
    spec = load_sweep_file(SPEC.parent / "fedgbo_smoke.yaml")
    studies = Studies(spec, spaces_of(), spec.workload, tuned, None, smoke=False)
    assert studies.to_search(["afo", "mfl", "fedavg"]) == {"afo": "search", "mfl": "search"}
    walls = {path.stem: float(yaml.safe_load(path.read_text())["wall_seconds"]) for path in tuned.glob("*.yaml")}
    mean = sum(walls.values()) / len(walls)
    assert studies.search_estimate(["afo", "mfl"], 2) == (walls["afo"] + mean) / 2
    assert studies.search_estimate(["afo", "mfl"], 1) == walls["afo"] + mean
    assert Progress.searches(["afo", "mfl"], tuned, 7200.0, 2) == (
        f"settings to search: 2 studies (afo, mfl), about 2 h at --jobs 2 (as earlier searches kept in {tuned}/ took)")
