"""Seeded runs repeat exactly, and the engine reproduces the runs of the engine it replaced."""

from pathlib import Path

import pandas as pd
import pytest

from tests.test_cli import fl_bench

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("algorithm", ["fedbuff", "fedavgm", "fedasync"])
def test_same_config_and_seed_give_identical_runs(run_config, algorithm):
    overrides = [f"algorithm={algorithm}", "max_trips=1500", "eval_every=500", "seed=3"]
    _, metrics_a, trips_a = run_config(*overrides, name="a")
    _, metrics_b, trips_b = run_config(*overrides, name="b")
    pd.testing.assert_frame_equal(metrics_a, metrics_b)
    pd.testing.assert_frame_equal(trips_a, trips_b)
    _, metrics_c, _ = run_config(*[o if o != "seed=3" else "seed=4" for o in overrides], name="c")
    assert not metrics_c.val_accuracy.equals(metrics_a.val_accuracy)


@pytest.mark.parametrize("name, overrides", [
    ("fedbuff", ["algorithm=fedbuff"]),
    ("fedavgm", ["algorithm=fedavgm"]),
    ("fedavgm_over_selection", ["algorithm=fedavgm", "algorithm.over_selection=0.3"]),
])
def test_results_identical_to_the_previous_engine(tmp_path, name, overrides):
    """tests/golden/ holds metrics.csv and trips.csv of 4,000 trips of the default workload, written by
    the orchestrator before engine v2 (commit 04dcdc3) with numerics=portable's kernels (how:
    tests/golden/README.md). With those kernels this engine must give the same bytes, on any x86-64
    CPU: the schedule (every trip's client, times, staleness) and every metric, compared exactly."""
    # vmap_clients=false: the golden runs trained one trip at a time (the batched path's Deltas equal
    # those to float tolerance only, tests/test_batched.py)
    run_dir = tmp_path / name
    result = fl_bench("progress=false", "numerics=portable", *overrides, "max_trips=4000", "eval_every=500",
                      "vmap_clients=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    metrics, trips = pd.read_csv(run_dir / "metrics.csv"), pd.read_csv(run_dir / "trips.csv")
    golden_trips = pd.read_csv(GOLDEN / f"{name}_trips.csv")
    pd.testing.assert_frame_equal(trips[golden_trips.columns], golden_trips, check_exact=True)
    # metrics.csv has gained cost columns since (bytes, FLOPs): the golden ones must be unchanged
    golden_metrics = pd.read_csv(GOLDEN / f"{name}_metrics.csv")
    pd.testing.assert_frame_equal(metrics[golden_metrics.columns], golden_metrics, check_exact=True)
