"""The simulation engine, a module per role:

- ``simulator``: the event loop on the virtual clock (trips, lazy training, server steps, logging);
- ``protocol``: step policies (buffered asynchronous, synchronous rounds with deadlines and late
  uploads);
- ``population``: array-backed client state (idle, available, last selected);
- ``selection``: selection policies (uniform, longest absent, all available, weighted);
- ``availability``: availability schedules (always, diurnal, trace);
- ``delays``: delay laws and persistent client speeds;
- ``behaviour``: how devices behave during a trip (failures, communication time, partial work, outages);
- ``link``: a server link shared by the transfers in flight;
- ``trip_log``: the per-trip record.

What crosses the network and the roles the loop drives (server, trainer, step policy) are declared
below the engine, in ``fl_bench.contracts``; the engine knows nothing of DP (``fl_bench.privacy``
wraps the server it steps).
"""
