"""A plugin module (``FL_BENCH_PLUGINS=helpers.kill_once``) that SIGKILLs the process running a run of
algorithm ``$FL_BENCH_KILL_ALGORITHM`` at its first evaluation, once (it creates ``$FL_BENCH_KILL_MARKER`` first):
a task preempted or out of time mid-run, in whichever process a launcher runs it, with no hook in fl_bench."""

import os
import signal
from pathlib import Path

from fl_bench.runs.callbacks import CsvLog

_on_evaluation = CsvLog.on_evaluation


def _killed_once(self, run, progress, row):
    stop = _on_evaluation(self, run, progress, row)  # (metrics.csv has the row: the run is under way)
    marker = Path(os.environ["FL_BENCH_KILL_MARKER"])
    if run.cfg.algorithm.name == os.environ["FL_BENCH_KILL_ALGORITHM"] and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return stop


CsvLog.on_evaluation = _killed_once
