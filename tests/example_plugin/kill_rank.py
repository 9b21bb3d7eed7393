"""Fault injection for tests/runs/test_processes.py, loaded into every process of a run through
``FL_BENCH_PLUGINS=kill_rank``: the process of rank ``KILL_RANK`` dies (SIGKILL-like, no cleanup)
at its ``KILL_AT_TRAIN``-th batch of client trips, as a process lost to the OOM killer would; the
others take ``STALL_SECONDS`` more over that batch."""

import os
import time

from fl_bench.clients.distributed import DistributedTrainer, launched_rank

_train = DistributedTrainer.train
_calls = 0


def _train_then_die(self, *args, **kwargs):
    global _calls
    _calls += 1
    if _calls == int(os.environ["KILL_AT_TRAIN"]):
        if launched_rank() == int(os.environ["KILL_RANK"]):
            os._exit(9)
        # the others busy for longer than Lightning's 5-s look at the processes it started (STALL_SECONDS)
        time.sleep(float(os.environ.get("STALL_SECONDS", 0)))
    return _train(self, *args, **kwargs)


DistributedTrainer.train = _train_then_die
