"""The report on a tiny multirun: its table must equal what the metrics CSVs say."""

import subprocess
import sys

import pandas as pd
import pytest

from fl_bench.report import main as report_main
from tests.test_cli import fl_bench


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    root = tmp_path_factory.mktemp("multirun")
    result = fl_bench(
        "-m", "algorithm=fedbuff,fedavgm", "seed=0,1", "max_trips=600", "eval_every=200", "concurrency=20",
        "target_accuracy=0.15", "progress=false", f"hydra.sweep.dir={root}", cwd=root,
    )
    assert result.returncode == 0, result.stderr
    return root


def test_trips_to_target_table_matches_the_metrics_csvs(multirun, tmp_path):
    report_main([str(multirun), "--name", "tiny", "--out", str(tmp_path), "--reference", "fedavgm"])
    table = pd.read_csv(tmp_path / "tiny.csv").set_index("method")
    expected = {}
    for algorithm in ["fedbuff", "fedavgm"]:
        per_seed = []
        for seed in [0, 1]:
            metrics = pd.read_csv(next(multirun.glob(f"*_{algorithm}_seed{seed}")) / "metrics.csv")
            hit = metrics[metrics.val_accuracy >= 0.15]
            per_seed.append(hit.trips.iloc[0] if len(hit) else None)
        expected[algorithm] = float("nan") if None in per_seed else sum(per_seed) / 2
        assert table.loc[algorithm, "seeds"] == 2
    for algorithm, trips in expected.items():
        assert table.loc[algorithm, "trips_to_target"] == pytest.approx(trips, nan_ok=True)
    assert table.loc["fedbuff", "vs_reference"] == pytest.approx(expected["fedbuff"] / expected["fedavgm"], nan_ok=True)
    assert not pd.isna(table.loc["fedbuff", "trips_to_target"])  # the tiny run must exercise a reached target
    text = (tmp_path / "tiny.md").read_text()
    for algorithm, trips in expected.items():
        assert (f"{trips:,.0f}" if trips == trips else ">600") in text
    assert (tmp_path / "tiny_curves.png").stat().st_size > 0 and (tmp_path / "tiny_staleness.png").stat().st_size > 0


def test_unknown_reference_and_empty_directory_fail_in_one_line(multirun, tmp_path):
    bad = subprocess.run([sys.executable, "-m", "fl_bench.report", str(multirun), "--reference", "fedx",
                          "--out", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "reference method 'fedx' is not among the runs: fedbuff, fedavgm" in bad.stderr
    empty = subprocess.run([sys.executable, "-m", "fl_bench.report", str(tmp_path)], capture_output=True, text=True)
    assert empty.returncode == 2 and "no finished runs" in empty.stderr and "Traceback" not in empty.stderr
