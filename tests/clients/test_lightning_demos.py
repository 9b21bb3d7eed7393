"""Lightning's own demo modules (lightning.pytorch.demos), which nobody here wrote, as federated
clients on data the test package generates: a Transformer language model on token sequences
(task.batch=next_token) and BoringModel, whose training_step takes the inputs alone and whose
validation_step returns no loss (task.batch=inputs, task.evaluation=training_step). Manual
optimisation stops in one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fl_bench.errors import ConfigError
from fl_bench.runs.experiment import build_experiment, run_experiment
from tests.conftest import compose_run_config

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
DATA = "dataset.datamodule._target_=my_fl_extensions.datamodules"


@pytest.fixture(autouse=True)
def user_package(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))


@pytest.mark.parametrize("overrides", [
    pytest.param(("task.module._target_=lightning.pytorch.demos.LightningTransformer", "+task.module.vocab_size=16",
                  "task.batch=next_token", f"{DATA}.CountingDataModule", "partition.num_clients=20", "algorithm=fedavg",
                  "algorithm.batch_size=8", "algorithm.local_epochs=1", "max_trips=10", "eval_every=5"),
                 marks=pytest.mark.slow),  # (a 2-layer encoder-decoder: seconds)
    ("task.module._target_=lightning.pytorch.demos.BoringModel", "task.batch=inputs", "task.evaluation=training_step",
     f"{DATA}.BlobsDataset", "+dataset.datamodule.dim=32", "+dataset.datamodule.scale=0.1",
     # (two local epochs: its epoch-interval StepLR acts within a trip, where at one it would do nothing and is refused)
     "partition.num_clients=10", "algorithm=fedbuff", "algorithm.local_epochs=2", "max_trips=40", "eval_every=20"),
], ids=["LightningTransformer", "BoringModel"])
def test_lightnings_demo_modules_train_federated(tmp_path, overrides):
    summary = run_experiment(compose_run_config("task=lightning", "dataset=datamodule", "partition=iid", "concurrency=5",
                                                *overrides), tmp_path / "run")
    losses = pd.read_csv(tmp_path / "run" / "metrics.csv")["val_loss"]
    assert summary["status"] == "completed" and losses.iloc[-1] < 0.1 * losses.iloc[0]  # its own objective, learned


def test_manual_optimisation_and_what_cannot_be_batched_stop_in_one_line():
    cases = [(("task.module._target_=lightning.pytorch.demos.boring_classes.ManualOptimBoringModel", "task.batch=inputs",
               f"{DATA}.BlobsDataset", "+dataset.datamodule.dim=32"), r"sets automatic_optimization=False"),
             (("task.module._target_=lightning.pytorch.demos.BoringModel", "task.batch=inputs", "task.evaluation=logits",
               f"{DATA}.BlobsDataset"), r"^task.evaluation='logits' is not allowed: steps or training_step with task.batch=inputs"),
             (("task.module._target_=lightning.pytorch.demos.LightningTransformer", "task.evaluation=steps",
               f"{DATA}.BlobsDataset"), r"^task.evaluation=steps needs a validation_step or test_step")]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=message) as error:
            build_experiment(compose_run_config("task=lightning", "dataset=datamodule", "partition.num_clients=10",
                                                "concurrency=5", *overrides), on_eval=lambda progress: False)
        assert "\n" not in str(error.value)
