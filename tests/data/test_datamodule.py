"""dataset=datamodule (fl_bench.data.datamodule): a user's LightningDataModule or torch Dataset,
written as its users write it (tests/example_plugin/my_fl_extensions/datamodules.py), federated by a
partition; what cannot be split stops in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_bench.data import build_dataset
from fl_bench.errors import ConfigError
from fl_bench.runs.experiment import run_experiment
from tests.conftest import compose_run_config

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
DM = "dataset.datamodule._target_=my_fl_extensions.datamodules"


@pytest.fixture(autouse=True)
def user_package(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))


def data(*overrides: str):
    cfg = compose_run_config("dataset=datamodule", *overrides)
    return build_dataset(cfg.dataset, cfg.partition)


def test_a_datamodule_s_train_set_is_split_into_clients_and_its_validation_set_kept():
    from my_fl_extensions.datamodules import BlobsDataModule

    iid = data(f"{DM}.BlobsDataModule", "partition=iid", "partition.num_clients=20")
    skewed = data(f"{DM}.BlobsDataModule", "partition=dirichlet", "partition.num_clients=20", "partition.alpha=0.1")
    module = BlobsDataModule()
    module.setup("fit")
    for fed in (iid, skewed):  # every training example once, the module's own validation split as is
        assert fed.num_clients == 20 and len(fed.y) == len(module.train_set) == 960 and fed.num_classes == 4
        assert len(fed.y_val) == 240 and sorted(fed.y.tolist()) == sorted(int(module.train_set[i][1]) for i in range(960))

    def label_share(fed):  # each client's largest label share
        return np.mean([np.bincount(fed.y[a:b].numpy(), minlength=4).max() / (b - a)
                        for a, b in zip(fed.offsets[:-1], fed.offsets[1:])])

    assert label_share(skewed) > 0.8 > 0.5 > label_share(iid)  # the labels reached the partition


def test_a_plain_dataset_holds_out_its_validation_split_and_a_run_learns(tmp_path):
    fed = data(f"{DM}.BlobsDataset", "partition=iid", "partition.num_clients=10")
    assert len(fed.y) + len(fed.y_val) == 600 and len(fed.y_val) == 120 and fed.num_classes == 3  # 20% of each label
    for partition in ("iid", "dirichlet"):
        summary = run_experiment(compose_run_config("dataset=datamodule", f"{DM}.BlobsDataModule", f"partition={partition}",
                                                    "partition.num_clients=20", "model=mlp", "concurrency=10",
                                                    "max_trips=100", "eval_every=50"), tmp_path / partition)
        assert summary["final_val_accuracy"] > 0.8  # four well-separated blobs


def test_items_without_labels_are_refused_for_what_reads_labels_not_for_a_partition_that_reads_none():
    with pytest.raises(ConfigError) as iid:  # (dataset=datamodule's partition: iid)
        data(f"{DM}.Unlabelled")
    assert "every example needs an integer label" in str(iid.value) and "partition" not in str(iid.value)
    assert "validation accuracy compares the model's predictions with it" in str(iid.value)
    with pytest.raises(ConfigError, match=r"\(partition=dirichlet splits the examples by it, and validation accuracy"):
        data(f"{DM}.Unlabelled", "partition=dirichlet", "partition.num_clients=2")


@pytest.mark.parametrize("overrides, message", [
    ((), r"^dataset.datamodule._target_=None is not allowed: name your LightningDataModule or Dataset class"),
    ((f"{DM}.Unlabelled",), r"Unlabelled's items are Tensors, not \(input, label\) pairs"),
    ((f"{DM}.Missing",), r"^dataset.datamodule._target_=my_fl_extensions.datamodules.Missing could not be built"),
    ((f"{DM}.BlobsDataModule", "partition=natural"), r"^partition=natural needs a dataset with natural clients"),
])
def test_what_cannot_be_federated_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        data(*overrides)
    assert "\n" not in str(error.value)


def test_several_validation_loaders_are_joined_into_the_validation_set_and_said(tmp_path):
    """val_dataloader() returning a list of loaders (Lightning's several validation sets): the run's
    validation set is all of them, each example once, and its first lines say so."""
    from my_fl_extensions.datamodules import TwoValidationSets

    fed = data(f"{DM}.TwoValidationSets", "partition.num_clients=20")
    module = TwoValidationSets()
    module.setup("fit")
    shifted = np.stack([module.shifted_set[i][0].numpy() for i in range(100)])
    assert len(fed.y_val) == 200 and np.array_equal(fed.x_val[100:].numpy(), shifted)
    assert fed.notes == ["validation set: the 2 loaders of val_dataloader() joined (100 + 100 examples)"]
    summary = run_experiment(compose_run_config("dataset=datamodule", f"{DM}.TwoValidationSets", "partition.num_clients=20",
                                                "model=mlp", "concurrency=10", "max_trips=40", "eval_every=20"),
                             tmp_path / "run")
    assert summary["final_val_accuracy"] > 0.8
