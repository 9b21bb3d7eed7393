"""What a run leaves behind: metrics.csv (one row per evaluation), trips.csv (one row per client
trip), summary.json, and optionally the same in a Weights & Biases run.

metrics.csv and trips.csv are written as the run goes (a metric row at each evaluation, the trips
since the last write at each evaluation and checkpoint), so a run that dies keeps what it did. A
resumed run rewrites both from its checkpoint, dropping rows logged after it, then goes on.
"""

from __future__ import annotations

import logging
import netrc
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd

from fl_bench.errors import ConfigError
from fl_bench.runs.config import WANDB_MODES, WandbConfig
from fl_bench.runs.run_dir import write_summary, writing

# bytes_down, bytes_up, flops: totals over the trips over so far (FedGBO Table IV's cost axes)
METRIC_COLUMNS = ("trips", "server_step", "sim_time", "val_accuracy", "val_loss", "bytes_down", "bytes_up", "flops")
log = logging.getLogger(__name__)


class RunLog:
    """A run's metrics.csv, trips.csv and summary.json (and its W&B run with ``logger=wandb``),
    written as the run goes; ``rows``: the metric rows a resumed run keeps from its checkpoint."""

    def __init__(self, run_dir: Path, config: dict[str, Any], logger: str, wandb_cfg: WandbConfig,
                 rows: list[dict[str, float]] = (), wandb_id: str | None = None):
        self.run_dir = run_dir
        self.rows: list[dict[str, float]] = list(rows)  # kept by a checkpoint when resuming
        self._trips_written = 0
        pd.DataFrame(self.rows, columns=list(METRIC_COLUMNS)).to_csv(self._metrics_path, index=False)
        self._wandb = _wandb_run(run_dir, config, wandb_cfg, wandb_id) if logger == "wandb" else None

    @property
    def _metrics_path(self) -> Path:
        return self.run_dir / "metrics.csv"

    @property
    def wandb_id(self) -> str | None:
        """The W&B run's id (None without W&B): a resumed run continues that run."""
        return self._wandb.id if self._wandb is not None else None

    @property
    def wandb_group(self) -> str | None:
        """The W&B run's group, the experiment preset (None without W&B)."""
        return self._wandb.group if self._wandb is not None else None

    def metrics(self, row: dict[str, float]) -> None:
        """Append one evaluation's row (``METRIC_COLUMNS``) to metrics.csv, and to W&B at step
        ``trips``."""
        self.rows.append(row)
        pd.DataFrame([row], columns=list(METRIC_COLUMNS)).to_csv(self._metrics_path, mode="a", header=False, index=False)
        if self._wandb is not None:
            self._wandb.log(row, step=int(row["trips"]))

    def wandb_only(self, values: dict[str, float], trips: int) -> None:
        """Metrics for W&B's panels that metrics.csv does not hold (e.g. weight share per group)."""
        if self._wandb is not None:
            self._wandb.log(values, step=trips)

    def trips(self, columns: dict[str, np.ndarray], settled: int | None = None) -> None:
        """Append to trips.csv the trips logged since the last call, up to row ``settled`` (rows
        after it may still change; None: all)."""
        done = self._trips_written
        total = len(next(iter(columns.values()))) if settled is None else settled
        if done and done == total:
            return
        table = pd.DataFrame({name: column[done:total] for name, column in columns.items()},
                             index=pd.RangeIndex(done, total, name="trip"))
        with writing(self.run_dir / "trips.csv"):
            table.to_csv(self.run_dir / "trips.csv", mode="a" if done else "w", header=not done)
        self._trips_written = total

    def finish(self, trips: dict[str, np.ndarray], summary: dict[str, Any]) -> dict[str, Any]:
        """Write the remaining trips, then summary.json, the run's last file (fl_bench.runs.run_dir.write_summary);
        with W&B, log the trips table and the summary and finish the W&B run. Returns the summary as written."""
        self.trips(trips)
        summary = write_summary(self.run_dir, summary)
        if self._wandb is not None:
            import wandb

            table = pd.DataFrame(trips).rename_axis("trip").reset_index()
            self._wandb.log({"trips_table": wandb.Table(dataframe=table)})
            self._wandb.summary.update(summary)
            self._wandb.finish()
        return summary


def _wandb_run(run_dir: Path, config: dict[str, Any], wandb_cfg: WandbConfig, run_id: str | None):
    import wandb  # imported lazily: most runs do not need it

    mode = os.environ.get("WANDB_MODE") or wandb_cfg.mode
    if mode not in WANDB_MODES:
        raise ConfigError(f"WANDB_MODE={mode!r} is not allowed: choose one of {', '.join(WANDB_MODES)}")
    if mode == "online" and not has_wandb_credentials():
        log.warning("logger=wandb: no W&B API key (WANDB_API_KEY or `wandb login`), so this run logs offline "
                    "into %s; upload it later with `wandb sync %s/wandb/offline-run-*`", run_dir, run_dir)
        mode = "offline"
    # A resumed run continues its W&B run (same id); metric steps it logged after the checkpoint are
    # logged again and W&B keeps the first of each.
    group, tags = run_labels(config)  # a report's run set selects its runs by them (fl_bench.analysis.wandb_report)
    return wandb.init(project=wandb_cfg.project, entity=wandb_cfg.entity, mode=mode, dir=str(run_dir),
                      config=config, name=run_dir.name, id=run_id, resume="allow" if run_id else None,
                      group=group, tags=tags)


def run_labels(config: dict[str, Any]) -> tuple[str, list[str]]:
    """(group, tags) of a run's W&B run, from its result config."""
    tags = [f"algorithm:{config['algorithm']['name']}", f"dataset:{config['dataset']['name']}", f"seed:{config['seed']}"]
    return config.get("experiment_name", "default"), tags


def has_wandb_credentials() -> bool:
    """Whether W&B can log online: an API key or identity token in the environment, or a netrc
    entry for the W&B host."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
