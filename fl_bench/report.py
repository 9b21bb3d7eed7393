"""Tables and plots from finished runs, in the layout of FedBuff Table 1.

    python -m fl_bench.report multirun/2026-11-22/10-00-00 [more dirs] --name fedbuff_table1_smoke \
        [--reference fedbuff] [--by algorithm.name] [--out results]
    python -m fl_bench.report --wandb entity/project --name ...      # runs logged with logger=wandb

Reads every run directory below the given paths (``summary.json``, ``metrics.csv``,
``trips.csv``, ``.hydra/config.yaml``), or the same from the W&B API, and writes into ``--out``:
  <name>.md / <name>.csv   client trips to the target accuracy, mean over seeds, and the ratio to
                           the reference method's (FedBuff Table 1: "FedAvgM needs 1.7x"),
                           simulated time to the target;
                           ">budget" where some seed missed the target;
  <name>_curves.png        validation accuracy against client trips and against simulated time,
                           one line per method, a band from the lowest to the highest seed;
  <name>_staleness.png     histogram of staleness over all trips, per method.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from fl_bench.run_log import METRIC_COLUMNS  # noqa: E402


Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


def _frames(records: list[tuple[Any, dict, pd.DataFrame, pd.DataFrame, str]], by: list[str]) -> Frames:
    """(runs, metrics, trips) from (config, summary, metrics, trips, where) per run; ``method`` is
    made of the ``by`` config keys."""
    runs, metrics, trips = [], [], []
    for run_id, (config, summary, m, t, where) in enumerate(records):
        method = " ".join(str(OmegaConf.select(config, key)) for key in by)
        runs.append({"run": run_id, "method": method, "source": where, **summary})
        metrics.append(m.assign(run=run_id, method=method, seed=summary["seed"]))
        trips.append(t[["staleness", "used"]].assign(run=run_id, method=method))
    return pd.DataFrame(runs), pd.concat(metrics, ignore_index=True), pd.concat(trips, ignore_index=True)


def load_runs(paths: list[Path], by: list[str]) -> Frames:
    """Every finished run directory (summary.json) below ``paths``."""
    summaries = sorted({s for p in paths for s in ([p] if p.name == "summary.json" else p.rglob("summary.json"))})
    if not summaries:
        raise FileNotFoundError(f"no finished runs (summary.json) under {', '.join(map(str, paths))}")
    records = []
    for summary_path in summaries:
        run_dir = summary_path.parent
        records.append((
            OmegaConf.load(run_dir / ".hydra" / "config.yaml"), json.loads(summary_path.read_text()),
            pd.read_csv(run_dir / "metrics.csv"), pd.read_csv(run_dir / "trips.csv"), str(run_dir),
        ))
    return _frames(records, by)


def load_wandb_runs(project: str, by: list[str], api: Any = None) -> Frames:
    """The same from the W&B API: finished runs of ``entity/project`` logged with logger=wandb
    (config, summary, metric history, and the per-trip table)."""
    if api is None:
        import wandb

        api = wandb.Api()
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in api.runs(project):
            if run.state != "finished":
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


def trips_to_target_table(runs: pd.DataFrame, reference: str | None) -> pd.DataFrame:
    """Per method: seeds, mean client trips to target (NaN if a seed missed it), ratio to the reference."""
    rows = []
    for method, group in runs.groupby("method", sort=False):
        reached = group["trips_to_target"].notna().all()
        rows.append({
            "method": method,
            "seeds": len(group),
            "target_accuracy": group["target_accuracy"].iloc[0],
            "budget": int(group["max_trips"].max()),
            "trips_to_target": group["trips_to_target"].mean() if reached else float("nan"),
            "sim_time_to_target": group["sim_time_to_target"].mean() if reached else float("nan"),
            "final_val_accuracy": group["final_val_accuracy"].mean(),
        })
    table = pd.DataFrame(rows)
    if reference is not None:
        if reference not in set(table["method"]):
            raise ValueError(f"reference method {reference!r} is not among the runs: {', '.join(table['method'])}")
        base = table.loc[table["method"] == reference, "trips_to_target"].iloc[0]
        table["vs_reference"] = table["trips_to_target"] / base  # FedBuff Table 1: "FedAvgM needs 1.7x"
    return table


def markdown(table: pd.DataFrame) -> str:
    shown = table.copy()
    shown["trips_to_target"] = [
        f"{v:,.0f}" if pd.notna(v) else f">{b:,}" for v, b in zip(table["trips_to_target"], table["budget"])
    ]
    if "vs_reference" in shown:
        shown["vs_reference"] = [f"{v:.2f}×" if pd.notna(v) else "–" for v in table["vs_reference"]]
    shown["sim_time_to_target"] = [f"{v:,.1f}" if pd.notna(v) else "–" for v in table["sim_time_to_target"]]
    shown["final_val_accuracy"] = shown["final_val_accuracy"].map("{:.3f}".format)
    return shown.drop(columns=["budget"]).to_markdown(index=False)


def plot_curves(metrics: pd.DataFrame, target: float, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, x in zip(axes, ["trips", "sim_time"]):
        for method, group in metrics.groupby("method", sort=False):
            # Evaluations happen at the same trip counts in every seed; simulated time differs, so
            # it is averaged at each evaluation.
            stats = group.groupby("trips").agg(x=(x, "mean"), mean=("val_accuracy", "mean"),
                                               low=("val_accuracy", "min"), high=("val_accuracy", "max"))
            line = ax.plot(stats["x"], stats["mean"], label=method)[0]
            ax.fill_between(stats["x"], stats["low"], stats["high"], color=line.get_color(), alpha=0.2)
        ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("client trips" if x == "trips" else "simulated time")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation accuracy")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_staleness(trips: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    used = trips[trips["used"] == 1]
    bins = range(0, int(used["staleness"].max()) + 2)
    for method, group in used.groupby("method", sort=False):
        ax.hist(group["staleness"], bins=bins, alpha=0.5, density=True, label=method)
    ax.set_xlabel("staleness (server steps between download and use)")
    ax.set_ylabel("fraction of trips")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                    if line.startswith("model name")), cpu)
    import torch

    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    return f"{cpu}, {os.cpu_count()} cores{gpu}; Python {platform.python_version()}, torch {torch.__version__}"


def write_report(frames: Frames, name: str, out: Path, reference: str | None) -> pd.DataFrame:
    runs, metrics, trips = frames
    table = trips_to_target_table(runs, reference)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{name}.csv", index=False)
    (out / f"{name}.md").write_text(
        f"# {name}\n\nClient trips to {table['target_accuracy'].iloc[0]:.0%} validation accuracy, mean over seeds "
        f"(\">budget\": some seed did not reach it){'; vs_reference: trips needed relative to ' + reference if reference else ''}.\n\n"
        f"{markdown(table)}\n\n{len(runs)} runs, {runs['wall_seconds'].sum():,.0f} s of run wall time in all "
        f"(largest {runs['wall_seconds'].max():,.0f} s); report written on {machine()}.\n\n"
        f"![curves]({name}_curves.png)\n\n![staleness]({name}_staleness.png)\n"
    )
    plot_curves(metrics, float(table["target_accuracy"].iloc[0]), out / f"{name}_curves.png")
    plot_staleness(trips, out / f"{name}_staleness.png")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fl_bench.report", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="run or multirun directories")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs from W&B instead")
    parser.add_argument("--name", default="report", help="file name stem of the outputs")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--by", nargs="+", default=["algorithm.name"], help="config keys that name a method")
    parser.add_argument("--reference", help="method the others' trips are divided by")
    args = parser.parse_args(argv)
    try:
        if bool(args.paths) == bool(args.wandb):
            raise ValueError("give run directories or --wandb ENTITY/PROJECT (one of the two)")
        frames = load_wandb_runs(args.wandb, args.by) if args.wandb else load_runs(args.paths, args.by)
        table = write_report(frames, args.name, args.out, args.reference)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"fl_bench.report: error: {error}\n")
    print(markdown(table))
    print(f"written to {args.out}/{args.name}.md, .csv, _curves.png, _staleness.png")


if __name__ == "__main__":
    main()
