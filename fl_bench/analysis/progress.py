"""What a reproduction says while it runs (issue 70): one line, before anything else, naming where its pages
and runs go and what it plans, then per stage (a study's search and confirmation, the pilot, the report
runs) ``STAGE: D of N runs done (R reused), about T left`` as its runs finish, at most one line every few
seconds, and the stage's last line when it ends.

The runs are other processes (Hydra's launcher), or this process's main thread (``--in-process``): a
stage's progress is read from its run directories by a thread that polls them (``count``, the runs of
this invocation that ended) until the stage's launch returns. Runs that had finished before this
invocation (``reused``) count as done, not in the rate. The estimate is the mean wall time of the runs
finished in this invocation, times the runs still to do, divided by the jobs that run at once; a run's wall
time is read from when it was seen to end: the first ``jobs`` runs started with the stage, each later one
when an earlier one ended and freed its job. Until one has ended the line says ``estimating``.

Nothing here reads a run or knows a stage: fl_bench.analysis.launch and .tuning hand it the numbers, so
that a test drives it with a fake clock and a fake count, without running anything.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO


def duration(seconds: float) -> str:
    """``40 s``, ``3 min``, ``1 h 20 min``: a time as a line states it."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{round(seconds)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


class Stage:
    """One stage's progress: ``planned`` runs, ``reused`` of them finished before this invocation, ``to_run``
    launched now, ``jobs`` of those at a time. :meth:`update` takes how many of the launched runs have ended
    and returns the line to say, or None (nothing changed, or a line was said less than ``every`` seconds ago)."""

    def __init__(self, name: str, planned: int, reused: int, to_run: int, jobs: int, clock: Callable[[], float],
                 every: float):
        self.name, self.planned, self.reused, self.to_run = name, planned, reused, to_run
        self.jobs = max(1, min(jobs, to_run))  # (fewer runs than jobs: all of them at once)
        self.clock, self.every = clock, every
        self.started = clock()
        self.ended: list[float] = []  # when each run of this invocation was seen to end, in order
        self.said_at: float | None = None
        self.unsaid = False  # a change not said yet (a line less than `every` seconds before it)

    def mean_wall(self) -> float | None:
        """The mean wall time of the runs that ended in this invocation (None before the first): run k
        started with the stage (k < jobs) or when run k - jobs ended and freed its job."""
        if not self.ended:
            return None
        starts = [self.started if k < self.jobs else self.ended[k - self.jobs] for k in range(len(self.ended))]
        return sum(end - start for end, start in zip(self.ended, starts)) / len(self.ended)

    def left(self) -> float | None:
        """Seconds left: the mean wall time times the runs still to do, over the jobs at once."""
        mean = self.mean_wall()
        return None if mean is None else mean * max(0, self.to_run - len(self.ended)) / self.jobs

    def line(self) -> str:
        done = self.reused + len(self.ended)
        head = f"{self.name}: {done} of {self.planned} runs done ({self.reused} reused)"
        if len(self.ended) >= self.to_run:  # (every run reused: nothing to estimate)
            return head
        left = self.left()
        return f"{head}, " + ("estimating" if left is None else f"about {duration(left)} left")

    def update(self, ended: int) -> str | None:
        """The line to say now that ``ended`` of the launched runs have ended, or None."""
        now = self.clock()
        if ended > len(self.ended):
            self.ended += [now] * (min(ended, self.to_run) - len(self.ended))
            self.unsaid = True
        if not self.unsaid or (self.said_at is not None and now - self.said_at < self.every):
            return None
        if len(self.ended) >= self.to_run:  # every run ended: the launch's return says the last line
            return None
        self.said_at, self.unsaid = now, False
        return self.line()

    def first(self) -> str:
        """The stage's first line: its runs all reused, else none of this invocation ended yet (estimating)."""
        self.said_at = self.clock()
        return self.line()

    def last(self, ended: int) -> str:
        """The stage's last line, once its launch returned."""
        self.update(ended)
        done = self.reused + len(self.ended)
        return (f"{self.name}: {done} of {self.planned} runs done ({self.reused} reused), "
                f"took {duration(self.clock() - self.started)}")


class Progress:
    """A reproduction's lines, to ``out`` (default: standard output as it is when a line or stage starts;
    a stage keeps that stream, since an in-process run sends standard output to its log), each flushed."""

    def __init__(self, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic, every: float = 5.0,
                 poll: float = 2.0):
        self.out, self.clock, self.every, self.poll = out, clock, every, poll
        self._lock = threading.Lock()  # (studies searched side by side say their lines from several threads)

    def say(self, line: str, out: TextIO | None = None) -> None:
        with self._lock:
            print(line, file=out or self.out or sys.stdout, flush=True)

    def begin(self, sweep_file: Path, out: Path, runs_dir: Path, tables: int, arms: int, planned: dict[str, int | str],
              searches: str = "") -> None:
        """The first line: where the pages and the runs go, the settings to search (``searches``: how many
        studies and for how long, said before any search starts; none where nothing is tuned), and what is
        planned (runs per stage, a number where it is known, else when it will be)."""
        stages = ", ".join(f"{stage} {n}" if isinstance(n, int) else f"{stage} ({n})" for stage, n in planned.items())
        self.say(f"{sweep_file}: pages go to {out}/, runs to {runs_dir}/; {_count(tables, 'table')}, {_count(arms, 'arm')}; "
                 + (f"{searches}; " if searches else "") + f"runs planned: {stages or 'none'}")

    @staticmethod
    def searches(studies: list[str], kept_in: Path, seconds: float | None, at_once: int) -> str:
        """The first line's part on the settings to search: ``studies`` (none: every setting kept in ``kept_in``),
        ``seconds`` their searches' estimate (None: not known before their first runs end), ``at_once`` side by side."""
        if not studies:
            return f"settings to search: none (kept in {kept_in}/)"
        side = f" at --jobs {at_once}" if at_once > 1 and len(studies) > 1 else ""
        when = (f"about {duration(seconds)}{side} (as earlier searches kept in {kept_in}/ took)" if seconds is not None
                else f"their time unknown until their first runs end (no earlier search kept in {kept_in}/)")
        return (f"settings to search: {len(studies)} {'study' if len(studies) == 1 else 'studies'} "
                f"({', '.join(studies)}), {when}")

    @contextlib.contextmanager
    def stage(self, name: str, planned: int, reused: int, to_run: int, jobs: int, count: Callable[[], int]
              ) -> Iterator[Stage]:
        """Say the stage's progress while the block (its launch) runs: ``count()``, the launched runs that
        ended, is polled every ``poll`` seconds by a thread of its own; its last line when the block ends
        (none when the block raises: its error says what happened)."""
        out = self.out or sys.stdout
        stage = Stage(name, planned, reused, to_run, jobs, self.clock, self.every)
        self.say(stage.first(), out)
        if not to_run:
            yield stage
            return
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(stage, count, stop, out), daemon=True,
                                   name=f"progress {name}")
        watcher.start()
        try:
            yield stage
        finally:
            stop.set()
            watcher.join()
        self.say(stage.last(_counted(count, len(stage.ended))), out)

    def _watch(self, stage: Stage, count: Callable[[], int], stop: threading.Event, out: TextIO) -> None:
        while not stop.wait(self.poll):
            line = stage.update(_counted(count, len(stage.ended)))
            if line is not None:
                self.say(line, out)


def _counted(count: Callable[[], int], before: int) -> int:
    """``count()``, or ``before`` where the directories could not be read this time (a run moving its files)."""
    try:
        return count()
    except OSError:
        return before
