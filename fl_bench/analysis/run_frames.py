"""The runs as the evidence and the pages read them: every finished run below some directories (or in a W&B
project) as three frames, its runs (config and summary, one row per run, labelled by method), metrics and
trips."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from fl_bench.runs.config import NOT_RESULT_KEYS
from fl_bench.runs.run_dir import FINISHED, unfinished
from fl_bench.runs.run_log import METRIC_COLUMNS

Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]

# Config keys that do not change the experiment a run measures, so runs that differ only in them are
# averaged together: the seed (what the table averages over), NOT_RESULT_KEYS (where data and outputs
# go, logging, checkpoints; device and threads, which change the float rounding of the kernels and so
# the metrics' last digits), the cache path, and vmap batching (the same computation batched: float
# rounding or augmentation draws differ at most). experiment_name only names a preset;
# the settings it makes are in the other keys.
NOT_WORKLOAD = {*NOT_RESULT_KEYS, "seed", "experiment_name", "dataset.root", "vmap_clients", "vmap_chunk"}


def _workload(config: Any) -> dict[str, str]:
    """The run's flattened config ("dataset.name": "synthetic") without the NOT_WORKLOAD keys."""
    flat = pd.json_normalize(OmegaConf.to_container(config)).iloc[0]
    return {key: str(value) for key, value in flat.items()
            if key not in NOT_WORKLOAD and key.split(".")[0] not in NOT_RESULT_KEYS}


def _determined(runs: pd.DataFrame, keys: list[str], key: str) -> bool:
    """Whether among ``runs`` each combination of values of ``keys`` comes with one value of ``key``."""
    return bool(keys) and runs.groupby(keys, dropna=False)[key].nunique(dropna=False).max() == 1


def _telling_keys(differing: pd.DataFrame) -> list[str]:
    """The differing keys a label names: a config group's choice (``dataset.name``) stands for the keys
    it sets (that dataset's size, its paper's partition and model), so those are left out."""
    choices = []
    for key in differing:  # in config order: dataset.name before the partition.name it sets
        if key.endswith(".name") and not _determined(differing, choices, key):
            choices.append(key)
    return [key for key in differing if key in choices or not _determined(differing, choices, key)]


def _methods(configs: list[Any], by: list[str]) -> list[str]:
    """Each run's method label: its ``by`` config values, and where runs with the same values differ in
    any workload key but the seed, the keys that tell them apart ("fedbuff [dataset.name=synthetic]"):
    one row per setting rather than a mean over different experiments. A line on stderr names the keys."""
    workloads = pd.DataFrame([_workload(config) for config in configs])  # NaN: a key this run lacks (unlabelled)
    labels = pd.Series([" ".join(str(OmegaConf.select(config, key)) for key in by) for config in configs])
    for label, runs in workloads.groupby(labels, sort=False):
        differing = runs[[key for key in runs if runs[key].nunique(dropna=False) > 1]]
        if differing.empty:
            continue
        print(f"fl_bench.analysis.report: runs of {label} differ in {', '.join(differing)} besides the seed: "
              "one row per setting", file=sys.stderr)
        for run, values in differing[_telling_keys(differing)].iterrows():
            labels[run] = f"{label} [{', '.join(f'{k}={v}' for k, v in values.items() if pd.notna(v))}]"
    return labels.tolist()


def _frames(records: list[tuple[Any, dict, pd.DataFrame, pd.DataFrame, str]], by: list[str]) -> Frames:
    """(runs, metrics, trips) from (config, summary, metrics, trips, where) per run; ``method`` as
    _methods labels it."""
    runs, metrics, trips = [], [], []
    methods = _methods([config for config, *_ in records], by)
    for run_id, ((_, summary, m, t, where), method) in enumerate(zip(records, methods)):
        runs.append({"run": run_id, "method": method, "source": where, **summary})
        metrics.append(m.assign(run=run_id, method=method, seed=summary["seed"]))
        trips.append(t[TRIP_COLUMNS].assign(run=run_id, method=method))
    return pd.DataFrame(runs), pd.concat(metrics, ignore_index=True), pd.concat(trips, ignore_index=True)


def load_runs(paths: list[Path], by: list[str]) -> Frames:
    """Every run directory (summary.json) below ``paths``; ValueError naming a run that did not finish
    (fl_bench.runs.run_dir.unfinished): a table is built from finished runs only."""
    summaries = sorted({s for p in paths for s in ([p] if p.name == "summary.json" else p.rglob("summary.json"))})
    if not summaries:
        raise FileNotFoundError(f"no finished runs (summary.json) under {', '.join(map(str, paths))}")
    records = []
    for summary_path in summaries:
        run_dir = summary_path.parent
        why = unfinished(run_dir)
        if why is not None:
            raise ValueError(f"{run_dir} did not finish ({why}): run its command again (it goes on from its "
                             f"checkpoint), or leave it out; a table is built from finished runs only")
        summary = json.loads(summary_path.read_text())
        records.append((
            OmegaConf.load(run_dir / ".hydra" / "config.yaml"), summary,
            pd.read_csv(run_dir / "metrics.csv"), _trips(run_dir, summary), str(run_dir),
        ))
    return _frames(records, by)


TRIP_COLUMNS = ["staleness", "used", "num_examples"]  # what the tables and plots read of trips.csv


def _trips(run_dir: Path, summary: dict[str, Any]) -> pd.DataFrame:
    """The run's trips.csv; none for ``algorithm=centralized``, which has no client trips to log
    (fl_bench.runs.centralized: one model on the pooled data, on lightning.Trainer)."""
    if summary.get("algorithm") == "centralized" and not (run_dir / "trips.csv").exists():
        return pd.DataFrame({column: pd.Series(dtype="int64") for column in TRIP_COLUMNS})
    return pd.read_csv(run_dir / "trips.csv")


def load_wandb_runs(project: str, by: list[str], api: Any = None) -> Frames:
    """The same from the W&B API: finished runs of ``entity/project`` logged with logger=wandb
    (config, summary, metric history, and the per-trip table)."""
    if api is None:
        import wandb

        api = wandb.Api()
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in api.runs(project):
            if run.state != "finished" or run.summary.get("status") not in FINISHED:  # (a W&B run ends "finished" when interrupted too)
                continue
            summary = dict(run.summary)
            table = json.loads(Path(run.file(summary["trips_table"]["path"]).download(root=tmp, replace=True).name)
                               .read_text())
            records.append((
                OmegaConf.create(dict(run.config)), summary,
                run.history(keys=list(METRIC_COLUMNS), samples=100_000, pandas=True),
                pd.DataFrame(table["data"], columns=table["columns"]), f"wandb:{project}/{run.id}",
            ))
    if not records:
        raise FileNotFoundError(f"no finished runs in W&B project {project}")
    return _frames(records, by)


def rounds_view(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with rounds (server steps) in place of client trips, for round-based papers
    (FedLaAvg Table 3): every round is evaluated, so the crossing is exact."""
    return runs.assign(trips_to_target=runs["steps_to_target"].astype(float), max_trips=runs["server_steps"],
                       trips_to_target_resolution=0)
