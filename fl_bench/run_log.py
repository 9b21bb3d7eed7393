"""What a run leaves behind: metrics.csv (one row per evaluation), trips.csv (one row per client
trip), summary.json, and optionally the same in a Weights & Biases run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from fl_bench.config import WandbConfig

METRIC_COLUMNS = ("trips", "server_step", "sim_time", "val_accuracy", "val_loss")


class RunLog:
    def __init__(self, run_dir: Path, config: dict[str, Any], logger: str, wandb_cfg: WandbConfig):
        self.run_dir = run_dir
        self.rows: list[dict[str, float]] = []
        self._wandb = None
        if logger == "wandb":
            import wandb  # imported lazily: most runs do not need it

            self._wandb = wandb.init(
                project=wandb_cfg.project,
                entity=wandb_cfg.entity,
                mode=os.environ.get("WANDB_MODE", wandb_cfg.mode),
                dir=str(run_dir),
                config=config,
                name=run_dir.name,
            )

    def metrics(self, row: dict[str, float]) -> None:
        self.rows.append(row)
        if self._wandb is not None:
            self._wandb.log(row, step=int(row["trips"]))

    def finish(self, trips: dict[str, Any], summary: dict[str, Any]) -> None:
        pd.DataFrame(self.rows, columns=list(METRIC_COLUMNS)).to_csv(self.run_dir / "metrics.csv", index=False)
        trip_table = pd.DataFrame(trips)
        trip_table.index.name = "trip"
        trip_table.to_csv(self.run_dir / "trips.csv")
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if self._wandb is not None:
            import wandb

            self._wandb.log({"trips_table": wandb.Table(dataframe=trip_table.reset_index())})
            self._wandb.summary.update(summary)
            self._wandb.finish()
