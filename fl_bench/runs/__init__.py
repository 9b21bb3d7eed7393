"""One run, from the command line to the files it leaves.

- ``config``: the root schema composing one option of every component group, and its registration.
- ``cli``: ``python -m fl_bench [overrides]`` (Hydra), one-line errors.
- ``experiment``: build the run's objects, simulate, summarise.
- ``pooled``, ``centralized``: the pooled-data reference (``algorithm=centralized``), its config and its run.
- ``checkpoint``, ``run_dir``, ``interrupt``: exact resume, one writer per run directory, signals.
- ``claim``: the one task, among every launch's, that runs a reproduction's run.
- ``run_log``: metrics.csv, trips.csv, summary.json and W&B.
- ``fairness``: weight shares and per-group accuracy of a run (FedStaleWeight).

Depends on the engine, the algorithms, the clients, data, models and privacy; only
``fl_bench.analysis`` depends on it.
"""
