"""What a reproduction says while it runs (fl_bench.analysis.progress): its first line names where the pages
and runs go, and each stage says its runs done of runs planned with the time left, from a fake clock and a
fake count of ended runs (nothing runs, nothing sleeps)."""

import io
import threading
from pathlib import Path

from fl_bench.analysis.progress import Progress, Stage, duration
from fl_bench.analysis.reproduce import Reproduction
from helpers.runs import runs_only

FEDSTALEWEIGHT = Path(__file__).parents[2] / "sweeps" / "fedstaleweight_smoke.yaml"


class Clock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _stage(planned=10, reused=0, to_run=None, jobs=1, every=5.0):
    clock = Clock()
    return Stage("report", planned, reused, planned - reused if to_run is None else to_run, jobs, clock, every), clock


def test_a_stage_line_says_runs_done_of_planned_reused_and_the_time_left():
    stage, clock = _stage(planned=4, reused=1)
    assert stage.first() == "report: 1 of 4 runs done (1 reused), estimating"  # no run of this invocation ended yet
    clock.now = 100.0
    assert stage.update(1) == "report: 2 of 4 runs done (1 reused), about 3 min left"  # 100 s a run, 2 to do
    assert [duration(s) for s in (0.4, 40, 89, 150, 5340, 5400, 4 * 3600 + 60)] == \
        ["0 s", "40 s", "89 s", "2 min", "89 min", "1 h 30 min", "4 h 1 min"]
    clock.now = 250.0
    assert stage.last(3) == "report: 4 of 4 runs done (1 reused), took 4 min"


def test_runs_reused_count_as_done_but_not_in_the_rate():
    stage, clock = _stage(planned=10, reused=8)
    clock.now = 30.0
    assert stage.update(1) == "report: 9 of 10 runs done (8 reused), about 30 s left"  # one run of 30 s, one to do
    everything, clock = _stage(planned=5, reused=5)
    assert everything.first() == "report: 5 of 5 runs done (5 reused)"


def test_the_estimate_is_the_mean_wall_time_times_the_runs_left_over_the_jobs_at_once():
    stage, clock = _stage(planned=8, jobs=2)
    clock.now = 10.0
    stage.update(1)
    clock.now = 14.0
    stage.update(2)  # both started with the stage: 10 s and 14 s
    assert stage.mean_wall() == 12.0 and stage.left() == 12.0 * 6 / 2
    clock.now = 20.0
    stage.update(3)  # the third took the first one's job at 10 s: 10 s
    assert stage.mean_wall() == (10 + 14 + 10) / 3 and stage.left() == stage.mean_wall() * 5 / 2
    assert stage.line() == "report: 3 of 8 runs done (0 reused), about 28 s left"
    few, clock = _stage(planned=3, jobs=8)  # fewer runs than jobs: all three at once
    clock.now = 60.0
    few.update(1)
    assert few.jobs == 3 and few.left() == 60.0 * 2 / 3


def test_it_says_estimating_until_a_run_ended_and_a_line_at_most_every_few_seconds():
    stage, clock = _stage(planned=6, every=5.0)
    assert stage.first() == "report: 0 of 6 runs done (0 reused), estimating"
    clock.now = 2.0
    assert stage.update(0) is None and stage.left() is None and stage.line().endswith(", estimating")
    assert stage.update(1) is None  # 2 s after the first line: kept for later
    clock.now = 5.0
    assert stage.update(1) == "report: 1 of 6 runs done (0 reused), about 10 s left"  # (seen at 2 s: 2 s a run)
    clock.now = 7.0
    assert stage.update(1) is None  # no change
    assert stage.update(3) is None  # a change 2 s after the last line
    clock.now = 11.0
    assert stage.update(3) is not None and stage.update(3) is None


def test_a_stage_polls_its_count_in_a_thread_until_its_launch_returns_and_says_each_change(tmp_path):
    out, clock, seen = io.StringIO(), Clock(), threading.Event()
    listing = iter([0, 1, 1, 2, OSError, 3])  # what a directory listing finds, poll after poll (once unreadable)

    def count():
        clock.now += 10.0
        found = next(listing, 3)
        if found is OSError:
            raise OSError("a run moving its files")
        if found == 3:
            seen.set()
        return found

    progress = Progress(out=out, clock=clock, every=5.0, poll=0.001)
    with progress.stage("pilot", 3, 0, 3, 1, count):
        assert seen.wait(5)  # (the watcher's Event.wait(poll) between polls: no sleep here)
    lines = out.getvalue().splitlines()
    assert lines[0] == "pilot: 0 of 3 runs done (0 reused), estimating"
    assert lines[1:3] == ["pilot: 1 of 3 runs done (0 reused), about 40 s left",
                          "pilot: 2 of 3 runs done (0 reused), about 20 s left"]
    # (the last run's end is said once, by the line the launch's return says)
    assert lines[3].startswith("pilot: 3 of 3 runs done (0 reused), took ") and len(lines) == 4


def test_the_reproduction_says_where_the_pages_go_and_each_stage_s_runs(tmp_path, monkeypatch, capsys):
    """FedStaleWeight's file (untuned, no pilot) with a launch that leaves finished runs: the first line, the
    report stage's lines, and on a second invocation the same runs reused."""
    repro = Reproduction(FEDSTALEWEIGHT, smoke=False, runs_dir=tmp_path / "runs", jobs=2)
    repro.launcher.progress = Progress(clock=Clock())

    runs_only(repro, monkeypatch)  # (a launch that leaves finished runs)
    for _ in range(2):
        repro.run([], tmp_path / "out")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"{FEDSTALEWEIGHT}: pages go to {tmp_path / 'out'}/, runs to {tmp_path / 'runs'}/; "
                        "1 table, 3 arms; runs planned: report 15")
    assert lines[1:3] == ["report: 0 of 15 runs done (0 reused), estimating",
                          "report: 15 of 15 runs done (0 reused), took 0 s"]
    assert lines[3] == lines[0] and lines[4:] == ["report: 15 of 15 runs done (15 reused)"]
