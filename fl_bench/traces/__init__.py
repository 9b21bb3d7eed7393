"""Device and availability traces: readers of the trace files other simulators publish
(:mod:`fl_bench.traces.formats`) and ``python -m fl_bench.traces``, which summarises a trace and
generates a synthetic one (:mod:`fl_bench.traces.__main__`)."""
