"""The fairness table (fl_bench.analysis.fairness) says what its runs do not have: a method whose algorithm
logs no step weights, and an aggregation count the runs never reached."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd

from fl_bench.analysis.fairness import NO_STEP_WEIGHTS, write_fairness


def _run(directory: Path, algorithm: str, seed: int, weights: bool, steps: int = 10) -> Path:
    """A finished run of 4 clients in two label groups ([0, 1]: labels 0-1; [2, 3]: labels 2-3), one upload per
    client and step, weighted 0.1 (clients 0, 1) and 0.4 (2, 3) where the algorithm logs step weights."""
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "config.yaml").write_text("partition: {clients_per_group: [2, 2], groups: [[0, 1], [2, 3]]}\n")
    (directory / "summary.json").write_text(json.dumps({
        "algorithm": algorithm, "seed": seed, "final_val_accuracy": 0.5, "steps_to_target": None, "server_steps": steps,
        "final_val_accuracy_by_class": [0.4, 0.5, 0.6, 0.7], "wall_seconds": 1.0}))
    trips = pd.DataFrame([{"client": c, "used": 1, "download_version": s, "staleness": 0,
                           "weight": (0.1 if c < 2 else 0.4) if weights else float("nan")}
                          for s in range(steps) for c in range(4)])
    trips.to_csv(directory / "trips.csv", index=False)
    pd.DataFrame({"server_step": range(0, steps + 1, 5), "val_accuracy": [0.1, 0.3, 0.5][: steps // 5 + 1]}).to_csv(
        directory / "metrics.csv", index=False)
    return directory


def test_a_method_without_step_weights_and_a_count_never_reached_are_said_so(tmp_path):
    runs = {"weighted": [_run(tmp_path / f"w{seed}", "fedstaleweight", seed, weights=True) for seed in (1, 2)],
            "plugin": [_run(tmp_path / f"p{seed}", "trimmed", seed, weights=False) for seed in (1, 2)]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's 0/0 "invalid value encountered in divide" among them
        table = write_fairness(runs, "fair", tmp_path / "out", [5, 10, 50])
    shown = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:4]]
             for line in (tmp_path / "out" / "fair.md").read_text().splitlines() if line.startswith("| ")}
    assert shown["group 1 weight share"] == ["80.00 ± 0.00", NO_STEP_WEIGHTS]
    assert shown["jain_index"][1] == shown["group 0 weight share"][1] == NO_STEP_WEIGHTS
    assert shown["group 0 update share"] == ["50.00 ± 0.00", "50.00 ± 0.00"]  # uploads are counted either way
    # at 5 and 10 aggregations the runs' evaluations; at 50 none: they ended at 10
    assert shown["accuracy at 5"] == ["30.00 ± 0.00"] * 2 and shown["accuracy at 10"] == ["50.00 ± 0.00"] * 2
    assert shown["accuracy at 50"] == ["not reached (ended at 10)"] * 2
    assert table["accuracy at 50"].isna().all() and not table.loc[table["method"] == "plugin", "step_weights"].any()


def test_a_count_one_seed_never_reached_is_no_mean_over_the_others(tmp_path):
    runs = {"mixed": [_run(tmp_path / "long", "fedbuff", 1, weights=True, steps=10),
                      _run(tmp_path / "short", "fedbuff", 2, weights=True, steps=5)]}
    write_fairness(runs, "fair", tmp_path / "out", [10])
    page = (tmp_path / "out" / "fair.md").read_text()
    assert "| accuracy at 10 " in page and "not reached (ended at 5)" in page
