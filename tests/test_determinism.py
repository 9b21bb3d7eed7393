from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from fl_bench.cli import CONFIG_DIR
from fl_bench.experiment import run_experiment


def run(tmp_path: Path, name: str, overrides: list[str]) -> pd.DataFrame:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = OmegaConf.to_object(compose("config", overrides=overrides + ["progress=false"]))
    run_experiment(cfg, tmp_path / name)
    return pd.read_csv(tmp_path / name / "metrics.csv"), pd.read_csv(tmp_path / name / "trips.csv")


@pytest.mark.parametrize("algorithm", ["fedbuff", "fedavgm", "fedasync"])
def test_same_config_and_seed_give_identical_runs(tmp_path, algorithm):
    overrides = [f"algorithm={algorithm}", "max_trips=1500", "eval_every=500", "seed=3"]
    metrics_a, trips_a = run(tmp_path, "a", overrides)
    metrics_b, trips_b = run(tmp_path, "b", overrides)
    pd.testing.assert_frame_equal(metrics_a, metrics_b)
    pd.testing.assert_frame_equal(trips_a, trips_b)
    metrics_c, _ = run(tmp_path, "c", [o if o != "seed=3" else "seed=4" for o in overrides])
    assert not metrics_c.val_accuracy.equals(metrics_a.val_accuracy)
