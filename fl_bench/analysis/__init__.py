"""From runs to the papers' tables: nothing here runs during a simulation.

- ``reproduce``: ``python -m fl_bench.analysis.reproduce SWEEP``: a paper's protocol end to end
  (tune every study with the same budget, rerun on the report seeds, make the tables).
- ``report``: tables and plots from run directories or W&B, with the paper's numbers beside ours.
- ``guards``: evidence, verdicts and the guards (edge, tuning failed, saturated, unstable, held-out).
- ``wandb_report``: a report table as a W&B Report.
- ``example1``: FedLaAvg's Example 1, closed forms against the engine.

Depends on ``fl_bench.runs`` (and what it depends on); nothing depends on it.
"""
