"""Fairness tables and plots across runs (FedStaleWeight Fig. 2):

    python -m fl_bench.analysis.fairness <multirun dir per method...> --name fedstaleweight_fig2_smoke

Each method's group weight shares, update shares, Jain's index, per-group accuracy, accuracy at fixed
aggregation counts, and a plot of the share per group against server steps, from the metrics of
``fl_bench.runs.fairness``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from fl_bench.analysis.report import machine
from fl_bench.runs.run_dir import unfinished
from fl_bench.runs.fairness import (client_groups, client_shares, has_step_weights, jain_index, share_over_steps,
                                    weight_shares)

NO_STEP_WEIGHTS = "no step weights"  # the cell of a weight column for a method whose algorithm logs none


def run_rows(run_dir: Path, checkpoints: list[int]) -> tuple[dict, pd.DataFrame, np.ndarray]:
    """One finished run's table row (group weight and update shares, Jain's index, group
    accuracies, and the accuracy of the last evaluation by each aggregation count in
    ``checkpoints``, NaN for a count the run never reached), its groups' weight shares over server steps
    (none for an algorithm without step weights), and each client's group."""
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    summary = json.loads((run_dir / "summary.json").read_text())
    trips = pd.read_csv(run_dir / "trips.csv")
    metrics = pd.read_csv(run_dir / "metrics.csv")
    groups = client_groups(list(cfg.partition.clients_per_group))
    label_groups = [list(g) for g in cfg.partition.groups]
    by_class = summary["final_val_accuracy_by_class"]
    shares = weight_shares(trips, groups)
    used = trips[trips["used"] == 1]
    steps = int(summary["server_steps"])
    row = {"method": summary["algorithm"], "seed": summary["seed"], "final_accuracy": 100 * summary["final_val_accuracy"],
           "aggregations_to_target": summary["steps_to_target"], "jain_index": jain_index(client_shares(trips, len(groups)))}
    for g, labels in enumerate(label_groups):
        row[f"group {g} weight share"] = 100 * shares[g]
        row[f"group {g} update share"] = 100 * float((groups[used["client"].to_numpy()] == g).mean())
        row[f"group {g} accuracy (labels {min(labels)}-{max(labels)})"] = 100 * float(np.mean([by_class[c] for c in labels]))
    for step in checkpoints:  # (a run that ended before the count has no accuracy there, not its last one)
        at = metrics[metrics["server_step"] <= step]
        row[f"accuracy at {step}"] = 100 * float(at["val_accuracy"].iloc[-1]) if len(at) and step <= steps else float("nan")
    row["server_steps"], row["step_weights"] = steps, has_step_weights(trips)
    over_steps = share_over_steps(trips, groups, max(1, steps // 20)) if row["step_weights"] else None
    return row, over_steps, groups


def write_fairness(runs: dict[str, list[Path]], name: str, out: Path, at: list[int], notes: str = "",
                   title: str = "") -> pd.DataFrame:
    """``name``.md/.csv and the weight-share plot from each method's runs (label -> run directories)."""
    import matplotlib.pyplot as plt  # after report's machine(): its import sets the Agg backend

    rows, curves = [], {}
    for method, run_dirs in runs.items():
        for run in run_dirs:
            row, over_steps, _ = run_rows(run, at)
            rows.append({**row, "method": method})
            if over_steps is not None:
                curves.setdefault(method, []).append(over_steps)
    table = pd.DataFrame(rows)
    by_method = table.drop(columns=["seed", "server_steps", "step_weights"]).groupby("method", sort=False)
    summary = by_method.agg(["mean", "std"])
    shown = pd.DataFrame({column: [f"{m:.2f} ± {s:.2f}" if pd.notna(m) else "–" for m, s in summary[column].to_numpy()]
                          for column in summary.columns.levels[0] if column in summary}, index=summary.index)
    ended = table.groupby("method", sort=False)["server_steps"].min()
    for step in at:  # a count some seed never reached is no mean over the others
        column = f"accuracy at {step}"
        short = by_method[column].apply(lambda values: values.isna().any())
        shown.loc[short, column] = [f"not reached (ended at {ended[m]:,})" for m in short.index[short]]
    weightless = ~table.groupby("method", sort=False)["step_weights"].all()
    weights = ["jain_index", *(c for c in shown.columns if c.endswith(" weight share"))]
    shown.loc[weightless, weights] = NO_STEP_WEIGHTS
    shown.insert(0, "seeds", table.groupby("method", sort=False).size())
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{name}.csv", index=False)
    fig, ax = plt.subplots(figsize=(7, 4))
    for method, frames in curves.items():
        mean = pd.concat(frames).groupby(level=0).mean()
        for group in mean.columns:
            ax.plot(mean.index, 100 * mean[group], label=f"{method}: group {group}", linestyle="-" if group else "--")
    ax.set(xlabel="server steps (aggregations)", ylabel="share of aggregation weight (%)", title="weight share per group")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{name}_weight_share.png", dpi=120)
    plt.close(fig)
    seeds = sorted(table["seed"].unique())
    wall = sum(json.loads((run / "summary.json").read_text()).get("wall_seconds", 0.0) for dirs in runs.values() for run in dirs)
    (out / f"{name}.md").write_text(
        f"# {name}\n\n{title + chr(10) * 2 if title else ''}Fairness of aggregation, mean ± std over seeds {', '.join(map(str, seeds))}: each group's share of "
        "the total aggregation weight and of the uploads, Jain's index of the clients' weight shares (1: equal "
        "influence), each label group's accuracy of the final model, accuracy (%) at fixed aggregation counts ("
        "'not reached' where the runs ended before that count) and aggregations to the target; "
        f"'{NO_STEP_WEIGHTS}' where the method's algorithm logs no upload's share of its step.\n\n"
        f"{shown.T.to_markdown()}\n\n{notes.strip() + chr(10) * 2 if notes.strip() else ''}"
        f"{len(table)} runs, {wall:,.0f} s of wall time in all; report written on {machine()}.\n\n"
        f"![weight share]({name}_weight_share.png)\n"
    )
    return table


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the documented command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.analysis.fairness", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="run or multirun directories")
    parser.add_argument("--name", default="fairness")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--at", nargs="+", type=int, default=[500, 1000, 2000, 4000], help="aggregation counts")
    parser.add_argument("--notes", default="", help="the paper's claim beside ours, printed under the table")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring): the finished runs under the paths, one method per
    algorithm, into :func:`write_fairness`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    found = sorted({s.parent for p in args.paths for s in p.rglob("summary.json")})
    for run in found:
        why = unfinished(run)
        if why is not None:
            parser.exit(2, f"fl_bench.analysis.fairness: error: {run} did not finish ({why}): run its command again, "
                           "or leave it out\n")
    if not found:
        parser.exit(2, f"fl_bench.analysis.fairness: error: no finished runs under {', '.join(map(str, args.paths))}\n")
    runs: dict[str, list[Path]] = {}
    for run in found:  # one method per algorithm
        runs.setdefault(json.loads((run / "summary.json").read_text())["algorithm"], []).append(run)
    write_fairness(runs, args.name, args.out, args.at, args.notes)
    print(f"written to {args.out / args.name}.md")


if __name__ == "__main__":
    main()
