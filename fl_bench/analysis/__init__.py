"""From runs to the papers' tables: nothing here runs during a simulation.

- ``reproduce``: ``python -m fl_bench.analysis.reproduce SWEEP``: a paper's protocol end to end
  (tune every study with the same budget, rerun on the report seeds, make the tables), as stages:
  ``sweep_file`` and ``protocol`` (the typed sweep file), ``tuning`` (the studies' searches),
  ``launch`` (each stage's runs through Hydra's launcher), ``verdict`` (the evidence and the verdicts),
  then the pages (``report``, ``fairness``, ``scoreboard``, ``wandb_report``); each stage reads only
  the ones before it (tests/test_architecture.py).
- ``measures``: the measures a table reads, one entry each (every stage reads them, none switches on a name).
- ``run_frames``: finished runs as the frames the evidence and the pages read.
- ``report``: tables and plots from run directories or W&B, with the paper's numbers beside ours.
- ``verdict``: the evidence and its verdicts (tuning failed among them), the pages' evidence sections.
- ``guards``: what a verdict must pass to be believed (saturated, unstable, edge): ``python -m
  fl_bench.analysis.guards`` lists the tuned values at an edge.
- ``search_spaces``: the tuner's search spaces, read as the sweeper reads them.
- ``wandb_report``: a report table as a W&B Report.
- ``example1``: FedLaAvg's Example 1, closed forms against the engine.

Depends on ``fl_bench.runs`` (and what it depends on); nothing depends on it.
"""
