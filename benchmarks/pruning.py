"""Pruned against full tuning (issue 40): does stopping hopeless trials early find a setting as good as
the full search, in a fraction of its time?

    python benchmarks/pruning.py                     # the three studies below, one after another
    python benchmarks/pruning.py --studies fedgbo    # one of them
    python benchmarks/pruning.py --adoption results/tuned/fedbuff_smoke results/tuned/fedbuff_smoke_pruned
                                                     # a file's every study, tuned in full and pruned

The protocol, registered before the runs (2026-11-26): for each study, the sweep file's own tuner (32 TPE
trials, 10 random, tuning seeds 100 and 101, the file's objective) runs twice from scratch on this
machine, one command at a time: once in full, once with successive halving (Optuna's
SuccessiveHalvingPruner, reduction factor 3, first rung at about 1/27 of the budget on the evaluation
grid, so three rungs before the budget; each run compared with the other settings' runs of its seed).
Each search's best setting then runs on the file's report seeds (1-5). The pruner holds for a study when
the pruned search's best scores, as the median objective over the report seeds, inside the full
search's 95% bootstrap interval of that median, in at most a third of the full search's time.
Results: results/pruning_validation.md and .csv.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fl_bench.analysis.verdict import bootstrap_interval
from fl_bench.analysis.reproduce import Arm, Reproduction

REPO = Path(__file__).resolve().parents[1]
REGISTERED = "2026-11-26"
# (label, sweep file, study, first rung in client trips: about budget / 27 on the file's evaluation grid)
STUDIES = {
    "fedbuff": ("FedBuff", "sweeps/fedbuff_smoke.yaml", "fedbuff", 3750),  # 100,000 trips, grid 250
    "fedlaavg": ("FedLaAvg", "sweeps/fedlaavg_smoke.yaml", "fedavg_fca", 350),  # 10,000 trips, grid 50
    "fedgbo": ("FedGBO", "sweeps/fedgbo_smoke.yaml", "fedavg", 100),  # 3,000 trips, grid 100
}
REDUCTION = 3


def reproduction(spec_path: Path, out: Path, name: str, pruner: dict | None) -> Reproduction:
    """The sweep file's reproduction with its own tuned and run directories under ``out`` (nothing of
    results/tuned is reused), its tuner given ``pruner``."""
    spec = yaml.safe_load(spec_path.read_text())
    if pruner:
        spec["protocol"]["tuner"]["pruner"] = pruner
    spec["tuned_dir"], spec["runs_dir"] = str(out / name / "tuned"), str(out / name / "runs")
    path = out / name / "sweep.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return Reproduction(path, smoke=False, runs_dir=None, jobs=1)


def measure(key: str, out: Path) -> dict:
    label, spec, study, first_rung = STUDIES[key]
    pruner = {"name": "successive_halving", "min_resource": first_rung, "reduction_factor": REDUCTION}
    row = {"paper": label, "study": study, "first rung (trips)": first_rung}
    scores = {}
    for mode, settings in (("full", None), ("pruned", pruner)):
        repro = reproduction(REPO / spec, out, f"{key}_{mode}", settings)
        started = time.perf_counter()
        tuned = repro.studies.tuned(study)
        row[f"{mode} search (s)"] = round(time.perf_counter() - started, 1)
        # the search's work in client trips, which other load on the machine does not change
        row[f"{mode} search (trips)"] = sum(json.loads(p.read_text())["client_trips"]
                                            for p in (Path(repro.runs_dir) / f"tune_{study}").rglob("summary.json"))
        row[f"{mode} best on tuning seeds"] = tuned.value
        row[f"{mode} best setting"] = json.dumps(tuned.params)
        if mode == "pruned":
            results = yaml.safe_load((Path(repro.runs_dir) / f"tune_{study}" / "optimization_results.yaml").read_text())
            row["pruned trials"] = results.get("pruned_trials")
        runs = repro.arm_runs(Arm(study, study, ()), repro.seeds[:5])  # the report seeds 1-5, as registered
        repro.launcher.launch_stage("report", [runs], at_once=1)
        directory = runs.directory
        objective = repro.protocol.tuner.objective
        scores[mode] = np.array([json.loads(p.read_text())[objective] for p in sorted(directory.glob("*/summary.json"))])
        row[f"{mode} median on report seeds"] = float(statistics.median(scores[mode]))
    low, high = bootstrap_interval(np.median, scores["full"])
    row["full 95% interval"] = f"[{low:.4g}, {high:.4g}]"
    row["time ratio (full / pruned)"] = round(row["full search (s)"] / row["pruned search (s)"], 2)
    row["trips ratio (full / pruned)"] = round(row["full search (trips)"] / row["pruned search (trips)"], 2)
    row["inside"] = bool(low <= row["pruned median on report seeds"] <= high)
    row["holds"] = bool(row["inside"] and row["time ratio (full / pruned)"] >= 3)
    return row


def adoption(full: Path, pruned: Path) -> pd.DataFrame:
    """Every study a sweep file tuned twice, in full (``full``: its results/tuned directory) and with the
    pruner (``pruned``): the best objective each search found on the tuning seeds and its wall time."""
    rows = []
    for path in sorted(pruned.glob("*.yaml")):
        a, b = (yaml.safe_load((d / path.name).read_text()) for d in (full, pruned))
        if not a.get("best_params") or a.get("wall_seconds", 0) == 0:
            continue  # not tuned (a diagnostic that runs another study's setting)
        rows.append({"study": path.stem, "full best on tuning seeds": a["best_value"],
                     "pruned best on tuning seeds": b["best_value"],
                     "pruned / full": round(b["best_value"] / a["best_value"], 2) if a["tuner"]["direction"] == "minimize"
                     else round(b["best_value"] - a["best_value"], 4),
                     "full search (s)": round(a["wall_seconds"]), "pruned search (s)": round(b["wall_seconds"]),
                     "pruned trials": b.get("pruned_trials")})
    return pd.DataFrame(rows)


def adoption_lines(table: pd.DataFrame, full: str, pruned: str) -> list[str]:
    """The adoption section: the table and which studies the pruned search left worse than the full one."""
    worse = table[table["pruned / full"] > 1.05]
    return ["## Adoption: every study of a file, tuned in full and pruned", "",
            f"The same protocol with and without the pruner, each tuned from scratch by the file's reproduction on this "
            f"machine ({full} against {pruned}; a minimized objective, so a ratio above 1 is a worse setting found; the "
            "searches ran on different days beside other jobs, so their seconds compare only roughly). The validation "
            "above covered one study; this is what the pruner did to every study of the file.", "",
            table.to_markdown(index=False), "",
            f"- Searches: {table['full search (s)'].sum():,} s in full against {table['pruned search (s)'].sum():,} s pruned "
            f"(summed over studies, {table['full search (s)'].sum() / table['pruned search (s)'].sum():.1f}x).",
            f"- The pruned search ended more than 5% worse on the tuning seeds for {len(worse)} of {len(table)} studies"
            + (": " + ", ".join(f"{r['study']} ({r['pruned / full']}x)" for _, r in worse.iterrows()) if len(worse) else "")
            + ".", ""]


def write_page(table: pd.DataFrame, path: Path, adopted: list[str] = ()) -> None:
    """results/pruning_validation.md: the protocol, the table, and one generated sentence per study; then
    the ``adopted`` section (:func:`adoption_lines`) where one was measured."""
    lines = [f"# Pruned against full tuning (`benchmarks/pruning.py`, registered {REGISTERED})", "",
             " ".join(__doc__.split("\n\n")[2].split()), "",
             "No paper has a number here: this compares two ways of tuning the same study. Search times are wall "
             "seconds on the machine that ran it; client trips are the searches' work, which other load does not "
             "change.", "", table.to_markdown(index=False), ""]
    for _, r in table.iterrows():
        verdict = "holds" if r["holds"] else "does not hold"
        lines.append(f"- {r['paper']} ({r['study']}): the pruned search's best scores {r['pruned median on report seeds']:.4g} "
                     f"on the report seeds, {'inside' if r['inside'] else 'outside'} the full search's interval "
                     f"{r['full 95% interval']}, in {r['pruned search (s)']:.0f} s against {r['full search (s)']:.0f} s "
                     f"({r['time ratio (full / pruned)']}x less time, {r['trips ratio (full / pruned)']}x fewer client "
                     f"trips, {r['pruned trials']} of 32 trials pruned): the pruner {verdict}.")
    path.write_text("\n".join([*lines, "", *adopted]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", nargs="+", choices=list(STUDIES), default=["fedgbo", "fedlaavg", "fedbuff"])
    parser.add_argument("--work", type=Path, default=Path("multirun/pruning_validation"), help="tuning and runs")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "pruning_validation")
    parser.add_argument("--adoption", nargs=2, type=Path, metavar=("FULL", "PRUNED"),
                        help="instead: compare two tuned directories of one sweep file (in full, pruned)")
    args = parser.parse_args()
    if args.adoption:
        table = adoption(*args.adoption)
        table.to_csv(args.out.parent / f"{args.out.name}_adoption.csv", index=False)
        validated = pd.read_csv(args.out.with_suffix(".csv"))
        write_page(validated, args.out.with_suffix(".md"), adoption_lines(table, *map(str, args.adoption)))
        print(table.to_string())
        return
    rows = []
    for key in args.studies:
        rows.append(measure(key, args.work))
        table = pd.DataFrame(rows)
        table.to_csv(args.out.with_suffix(".csv"), index=False)
        write_page(table, args.out.with_suffix(".md"))
        print(table.to_string(), flush=True)


if __name__ == "__main__":
    main()
