"""fl_bench: asynchronous federated learning experiment suite.

Packages by role, each depending only on those listed before it:

- ``contracts``: what crosses the network and the roles the engine drives (server, trainer, step
  policy), each hook's contract in its docstring; it imports nothing from fl_bench.
- ``errors``, ``schema`` (how a component declares its config), ``numerics``: the shared base.
- ``data``: datasets and partitions.  ``models``: the networks.
- ``engine``: the discrete-event loop on a virtual clock, its step policies, the client population,
  selection, availability, delays and speeds.
- ``clients``: local training (the step rule, the trainers, the task, device placement, FLOPs).
- ``algorithms``: the server algorithms.  ``privacy``: DP as a wrapper around any server (clipping,
  noise, accounting), built on the contracts, not on the engine.
- ``runs``: one run (``python -m fl_bench``): its config, build, simulation, logs and checkpoints.
- ``analysis``: the papers' protocols, tables and plots (``python -m fl_bench.analysis.reproduce``).
- ``commands``: the modules ``python -m`` runs; any other ``python -m fl_bench.<module>`` stops in one line.
"""

__version__ = "0.1.0"

import sys as _sys

if getattr(_sys, "argv", None) and _sys.argv[0] == "-m":  # python -m is locating its module: is it a command?
    from fl_bench.commands import refuse_non_command

    refuse_non_command()  # one line, exit 2, for a module that would silently do nothing (fl_bench/commands.py)
