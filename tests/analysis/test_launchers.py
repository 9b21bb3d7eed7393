"""A reproduction through Hydra's launchers (issue 59): each stage's runs are one multirun of the
fl_bench_jobs sweeper through the launcher ``--launcher`` names, each job claims its run directory, a task
killed mid-run is launched again by the next invocation, and the table is the one a single machine makes."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fl_bench.analysis.launch import Launcher
from fl_bench.analysis.reproduce import Reproduction
from fl_bench.runs.claim import claim_path, claimed, holder
from fl_bench.runs.run_dir import finished_runs
from helpers.runs import job_run_dir, launched_jobs, write_finished_run

REPO = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, **protocol) -> Path:
    """A sweep file of two untuned arms of runs of a few seconds (``protocol``: more of its protocol)."""
    spec = {
        "paper": "Toy", "workload": ["max_trips=60", "eval_every=30", "concurrency=10", "target_accuracy=0.3"],
        "protocol": {"registered": "2026-11-26", "tuner": None, "report_seeds": [1, 2, 3, 4, 5], "verdict": "v", **protocol},
        "runs_dir": str(tmp_path / "runs"), "tuned_dir": str(tmp_path / "tuned"),
        "studies": {"fedbuff": {"overrides": ["algorithm=fedbuff"]}, "fedavg": {"overrides": ["algorithm=fedavg"]}},
        "tables": {"toy": {"title": "t", "reference": "fedbuff", "measure": "best_accuracy",
                           "fidelity": {"level": "stand-in", "note": "a toy workload"}, "arms": {
            "fedbuff": {"study": "fedbuff"}, "fedavg": {"study": "fedavg", "paper": {"difference": [">0"]}}}}},
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------- claims

def test_a_run_is_claimed_by_one_task_and_a_dead_task_s_claim_is_taken_over(tmp_path):
    run = tmp_path / "arm" / "0_fedbuff_seed1"
    with claimed(run) as first:
        assert first is None and claim_path(run).is_file()
        with claimed(run) as second:  # (another open of the file: flocks conflict within a process too)
            assert second == holder(run) and f"pid {os.getpid()} on " in second
    assert holder(run) is None and not claim_path(run).exists()  # released

    # another process holds it: refused while it lives, naming it
    holding = subprocess.Popen([sys.executable, "-c", "import sys; from fl_bench.runs.claim import claimed\n"
                                f"with claimed({str(run)!r}): print('held', flush=True); sys.stdin.readline()"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holding.stdout.readline() == "held\n"
        with claimed(run) as other:
            assert other is not None and f"pid {holding.pid} on " in other
    finally:
        holding.communicate("")
    # a task killed while holding it leaves its file, unlocked: the next claimant takes it over
    claim_path(run).write_text("pid 1 on a lost node since 2026-11-28 00:00:00\n")
    assert holder(run) is None
    with claimed(run) as taken:
        assert taken is None and f"pid {os.getpid()} on " in claim_path(run).read_text()


# ------------------------------------------------------------------------------- the driver's stages

def test_a_stage_is_one_multirun_of_every_arm_s_runs_to_do_through_the_chosen_launcher(tmp_path, monkeypatch):
    """The report runs of both arms go out as one fl_bench_jobs multirun through --launcher slurm with its
    settings. A task still running when the launch ends (here fedavg's seed 2: the command ended on another
    job's failure) stops the driver in one line naming it; run again meanwhile, the driver launches nothing
    (the rest finished, by the same command); once it is gone, that run alone."""
    repro = Reproduction(_spec(tmp_path), smoke=False, runs_dir=None, jobs=3, launcher="slurm",
                         overrides=["hydra.launcher.partition=gpu", "+hydra.launcher.additional_parameters.mail-type=END"])
    fedbuff, fedavg = (repro.arm_runs(arm) for arm in repro.arms(repro.spec.tables["toy"]))
    commands, still_running = [], contextlib.ExitStack()

    def fake_run(command, log_dir, check=True):  # each job's run finishes, but fedavg's seed 2 the first time
        commands.append(command)
        for job in launched_jobs(command):
            if (Path(job["hydra.sweep.dir"]), job["seed"], len(commands)) == (fedavg.directory, "2", 1):
                assert still_running.enter_context(claimed(job_run_dir(job))) is None
            else:
                write_finished_run(job_run_dir(job), {"seed": int(job["seed"])})
        return False

    monkeypatch.setattr(repro.launcher, "run", fake_run)
    with still_running:
        for _ in range(2):
            with pytest.raises(RuntimeError, match=r"^1 run is still running \(arm 'fedavg', seed 2: pid \d+ on .*\): run "
                                                   "this command again when they end$"):
                repro.run(["toy"], tmp_path / "out")
    (command,) = commands  # (the second time: nothing to launch)
    # one multirun of the jobs sweeper through SLURM, the launcher's settings on it (no n_jobs: slurm has none),
    # and the workload every job shares
    assert command[2:] == ["fl_bench", "-m", "progress=false", "hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                           "+hydra.launcher.additional_parameters.mail-type=END", "hydra/sweeper=fl_bench_jobs",
                           f"hydra.sweeper.jobs={tmp_path / 'runs' / 'launch' / 'report' / 'jobs.yaml'}",
                           f"hydra.sweep.dir={tmp_path / 'runs' / 'launch' / 'report'}",
                           "max_trips=60", "eval_every=30", "concurrency=10", "target_accuracy=0.3"]
    jobs = launched_jobs(command)
    assert [(Path(j["hydra.sweep.dir"]), j["seed"], j["hydra.sweep.subdir"]) for j in jobs] == [
        (arm.directory, str(seed), f"{i}_${{algorithm.name}}_seed{seed}") for arm in (fedbuff, fedavg)
        for i, seed in enumerate([1, 2, 3, 4, 5])]
    assert [set(j) for j in jobs] == [{"algorithm", "seed", "hydra.sweep.dir", "hydra.sweep.subdir"}] * 10
    # the arm's command, kept for reuse, names no launcher: the same runs, whichever launcher made them
    assert (fedavg.directory / "reproduce.log").read_text().split(" ", 1)[1] == (
        f"-m fl_bench -m progress=false max_trips=60 eval_every=30 concurrency=10 target_accuracy=0.3 algorithm=fedavg "
        f"seed=1,2,3,4,5 hydra.sweep.dir={fedavg.directory}\n")
    def table_evidence(table, directories, *rest):  # the table's evidence, from both arms' runs: all finished
        assert directories == {runs.directory.name: runs.directory for runs in (fedbuff, fedavg)}
        assert all(len(finished_runs(runs.directory)) == 5 for runs in (fedbuff, fedavg))
        raise StopIteration

    monkeypatch.setattr(repro, "table_evidence", table_evidence)
    with pytest.raises(StopIteration):
        repro.run(["toy"], tmp_path / "out")
    assert [(Path(j["hydra.sweep.dir"]), j["seed"]) for j in launched_jobs(commands[-1])] == [(fedavg.directory, "2")]
    assert len(commands) == 2


def test_the_ledger_and_the_sweep_file_are_checked_before_any_run_is_launched(tmp_path, monkeypatch):
    """A damaged ledger stops a reproduction before its first stage (here its pilot, which comes before the
    report seeds are known), and a sweep file edited after the driver read it before the next stage."""
    spec = _spec(tmp_path, power={"pilot_seeds": [101, 102, 103], "cap": 5})
    launched = []
    monkeypatch.setattr(Launcher, "run", lambda self, command, log_dir, check=True: launched.append(command))
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "report_seeds.json").write_text("{}")
    with pytest.raises(ValueError, match="report_seeds.json is not a ledger of report seeds"):
        Reproduction(spec, smoke=False, runs_dir=None, jobs=1).run([], tmp_path / "out")
    assert not launched
    repro = Reproduction(spec, smoke=True, runs_dir=None, jobs=1)
    spec.write_text(spec.read_text().replace("verdict: v", "verdict: w"))  # edited while the reproduction goes on
    with pytest.raises(ValueError, match=rf"^{spec} was edited after this reproduction read it \(SHA-256 \w{{12}}, now "
                                         r"\w{12}\): run the command again"):
        repro.run([], tmp_path / "out")
    assert not launched


def test_jobs_is_local_cores_n_jobs_for_a_stage_and_one_for_a_search_unless_overridden():
    """On this machine (local_cores: joblib's n_jobs) --jobs studies are searched side by side, each trial's
    seeds one after another as registered; a pilot's or the report's runs go --jobs at a time. An n_jobs of
    --override is every command's."""
    spec = Path(__file__).parents[2] / "sweeps" / "fedstaleweight_smoke.yaml"
    repro = Reproduction(spec, smoke=True, runs_dir=None, jobs=2)
    assert repro.launcher.launcher_settings(1) == ["hydra/launcher=local_cores", "hydra.launcher.n_jobs=1"]
    assert repro.launcher.launcher_settings(2) == ["hydra/launcher=local_cores", "hydra.launcher.n_jobs=2"]
    mine = Reproduction(spec, smoke=True, runs_dir=None, jobs=2, overrides=["hydra.launcher.n_jobs=4"])
    assert mine.launcher.launcher_settings(1) == ["hydra/launcher=local_cores", "hydra.launcher.n_jobs=4"]
    assert "hydra.launcher.n_jobs=4" not in mine.workload


# ------------------------------------------------------------------------------------- stopping

# A reproduction's process tree in small: the driver (fl_bench.analysis.launch's stopping, a Launcher's run) starts
# a "Hydra process" that starts two "loky workers" and waits, each process waiting for a signal; the Hydra process
# writes their process ids to a file (argv[1]) once all have started.
HYDRA = """
import os, signal, subprocess, sys
workers = [subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"]) for _ in range(2)]
with open(sys.argv[1] + ".part", "w") as ids:
    ids.write(" ".join(map(str, [os.getpid(), *(worker.pid for worker in workers)])))
os.replace(sys.argv[1] + ".part", sys.argv[1])
signal.pause()
"""
DRIVER = """
import sys
from pathlib import Path
from fl_bench.analysis.launch import Launcher, Stopped, stopped_on_signal
directory = Path(sys.argv[1])
launcher = Launcher(directory, (), "local_cores", frozenset(), (), False, directory, "")
try:
    with stopped_on_signal():
        ok = launcher.run([sys.executable, "-c", sys.argv[2], str(directory / "ids")], directory, check=False)
except Stopped as stop:
    sys.exit(128 + stop.signum)
print("returned", ok, flush=True)
"""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not reaped by its parent, has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _within(seconds: float, done) -> bool:
    """Whether ``done()`` holds within ``seconds`` (polled, not waited for a fixed time)."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes' states in /proc")
@pytest.mark.parametrize("stopped", ["driver and Hydra process", "Hydra process"])
def test_stopping_the_driver_stops_every_process_it_started(stopped, tmp_path):
    """SIGTERM to the driver and its Hydra process at once (a user stopping a reproduction) leaves no process of its
    tree running: the loky workers, orphaned by their Hydra process, are stopped with its process group, and the
    driver exits 128 + 15. SIGTERM to the Hydra process alone: the driver's launch returns (a failed command) and the
    workers it left are stopped before it does."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), HYDRA], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    ids = tmp_path / "ids"
    tree: list[int] = []
    try:
        assert _within(10, ids.exists), "the tree did not start"
        tree = [int(pid) for pid in ids.read_text().split()]
        hydra = tree[0]  # (then its two workers)
        assert all(map(_alive, tree))
        if stopped == "driver and Hydra process":
            os.kill(driver.pid, signal.SIGTERM)
        # (the driver's own stop may reach the Hydra process first, as a terminal's Ctrl-C reaches both at once)
        with contextlib.suppress(ProcessLookupError):
            os.kill(hydra, signal.SIGTERM)
        assert driver.wait(timeout=10) == (128 + signal.SIGTERM if stopped.startswith("driver") else 0)
        assert _within(5, lambda: not any(map(_alive, tree))), [pid for pid in tree if _alive(pid)]
        if stopped == "Hydra process":
            assert driver.stdout.read() == "returned False\n"
    finally:
        for pid in [driver.pid, *tree]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        driver.wait()


def test_a_stopped_reproduction_says_so_in_one_line_and_exits_128_plus_the_signal(monkeypatch, capsys):
    from fl_bench.analysis import reproduce
    from fl_bench.analysis.launch import Stopped

    def stopped(*args, **kwargs):
        raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(reproduce, "Reproduction", stopped)
    with pytest.raises(SystemExit) as stop:
        reproduce.main([str(REPO / "sweeps" / "hfl_smoke.yaml")])
    assert stop.value.code == 128 + signal.SIGTERM
    assert capsys.readouterr().err == ("fl_bench.analysis.reproduce: stopped by SIGTERM: every process it started was "
                                       "stopped (unfinished runs keep their checkpoints); run the same command again "
                                       "to go on\n")


# ------------------------------------------------------------------------------------- end to end

def _unmeasured(page: str) -> str:
    """A page without the wall seconds its runs took (its runs' line): the one thing two launches' runs differ in."""
    return re.sub(r"^[\d,]+ runs, .*$", lambda line: re.sub(r"[\d,]+ s\b", "N s", line.group()), page, flags=re.M)


def _reproduce(spec: Path, out: Path, runs: Path, data: Path, *options: str, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "fl_bench.analysis.reproduce", str(spec), "--smoke", "--every-arm",
                           "--out", str(out), "--runs-dir", str(runs), *options, "--override", f"data_root={data}"],
                          capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", **(env or {})})


@pytest.fixture(scope="module")
def single_machine(tmp_path_factory) -> tuple[Path, Path]:
    """The toy table as one machine makes it: every run in one process, one after another; and the data root."""
    tmp = tmp_path_factory.mktemp("single")
    data = tmp / "data"
    Reproduction(_spec(tmp), smoke=True, runs_dir=tmp / "runs", jobs=1, overrides=[f"data_root={data}"], every_arm=True,
                 in_process=True).run([], tmp / "out")
    return tmp / "out", data


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [["--launcher", "local_cores", "--jobs", "2"], ["--launcher", "submitit_local"]],
                         ids=["joblib", "submitit_local"])
def test_a_task_killed_mid_run_is_launched_again_and_the_table_is_the_single_machine_s(launcher, single_machine, tmp_path):
    """A reproduction through joblib (two runs at once) and through submitit's local executor: fedavg's task is
    SIGKILLed at its first evaluation (helpers.kill_once), which stops the driver in one line; run again, the
    driver launches what had not finished, the killed run among it (its dead task's claim taken over), and the
    table is the single machine's."""
    expected, data = single_machine
    spec, out, runs = _spec(tmp_path), tmp_path / "out", tmp_path / "runs"
    kill = {"FL_BENCH_PLUGINS": "helpers.kill_once", "FL_BENCH_KILL_ALGORITHM": "fedavg",
            "FL_BENCH_KILL_MARKER": str(tmp_path / "killed")}
    first = _reproduce(spec, out, runs, data, *launcher, env=kill)
    assert first.returncode == 1 and (tmp_path / "killed").exists()
    assert re.fullmatch(r"fl_bench\.analysis\.reproduce: error: arm '\w+' did not finish on seed 1: .*",
                        first.stderr.strip().splitlines()[-1]), first.stderr
    (killed,) = runs.glob("fedavg-*/0_fedavg_seed1")
    assert not (killed / "summary.json").exists() and (killed / "metrics.csv").is_file()  # killed under way
    assert claim_path(killed).exists() and holder(killed) is None  # its claim left behind, by a dead task
    unfinished = {arm for arm in runs.iterdir() if arm.name != "launch" and not finished_runs(arm)}

    again = _reproduce(spec, out, runs, data, *launcher, env=kill)
    assert again.returncode == 0, again.stderr
    jobs = launched_jobs([f"hydra.sweeper.jobs={runs / 'launch' / 'report' / 'jobs.yaml'}"])
    assert {Path(job["hydra.sweep.dir"]) for job in jobs} == unfinished and killed.parent in unfinished
    assert not list(runs.glob("*/*.claim"))  # every claim released
    for name in ("toy_evidence.csv", "toy.md"):
        got, want = (out / name).read_text(), (expected / name).read_text()
        assert _unmeasured(got) == _unmeasured(want), name  # byte for byte, but the wall seconds
