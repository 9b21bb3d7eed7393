"""Fault injection for tests/runs/test_processes.py, loaded into every process of a run through
``FL_BENCH_PLUGINS=kill_rank``: the process of rank ``KILL_RANK`` dies (SIGKILL-like, no cleanup)
at its ``KILL_AT_TRAIN``-th batch of client trips, as a process lost to the OOM killer would."""

import os

from fl_bench.clients.distributed import DistributedTrainer, launched_rank

_train = DistributedTrainer.train
_calls = 0


def _train_then_die(self, *args, **kwargs):
    global _calls
    _calls += 1
    if launched_rank() == int(os.environ["KILL_RANK"]) and _calls == int(os.environ["KILL_AT_TRAIN"]):
        os._exit(9)
    return _train(self, *args, **kwargs)


DistributedTrainer.train = _train_then_die
