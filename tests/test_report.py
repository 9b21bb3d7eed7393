"""The report on a tiny multirun: its table must equal what the metrics CSVs say."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from fl_bench.report import load_runs, load_wandb_runs, write_report
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


class StubRun:
    """The parts of wandb.apis.public.Run the report reads, filled from a local run directory the
    way run_log puts them into W&B (nested config, summary, metric history, per-trip table file)."""

    def __init__(self, run_dir, number):
        self.id, self.state, self._dir = f"run{number}", "finished", run_dir
        self.config = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra" / "config.yaml"))
        self.summary = {**json.loads((run_dir / "summary.json").read_text()),
                        "trips_table": {"_type": "table-file", "path": "media/table/trips_table.table.json"}}

    def history(self, keys, samples, pandas):
        assert pandas
        return pd.read_csv(self._dir / "metrics.csv")[keys].assign(_step=lambda d: d.trips)

    def file(self, path):
        run_dir = self._dir

        class File:
            def download(self, root, replace):
                trips = pd.read_csv(run_dir / "trips.csv")
                target = Path(root) / run_dir.name / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps({"columns": list(trips.columns), "data": trips.values.tolist()}))
                return open(target)

        return File()


class StubApi:
    def __init__(self, runs):
        self._runs = runs

    def runs(self, path):
        assert path == "me/fl_bench"
        return self._runs


def test_wandb_source_gives_the_same_report_as_the_run_directories(multirun, tmp_path):
    local = write_report(load_runs([multirun], ["algorithm.name"]), "local", tmp_path, "fedavgm")
    api = StubApi([StubRun(d, i) for i, d in enumerate(sorted(p.parent for p in multirun.rglob("summary.json")))])
    remote = write_report(load_wandb_runs("me/fl_bench", ["algorithm.name"], api=api), "remote", tmp_path, "fedavgm")
    pd.testing.assert_frame_equal(local, remote)
    assert (tmp_path / "remote_staleness.png").stat().st_size > 0
