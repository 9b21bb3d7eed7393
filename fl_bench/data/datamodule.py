"""A user's data as a dataset option (``dataset=datamodule``): a ``LightningDataModule`` or a torch
``Dataset``, federated by any partition that can apply.

    python -m fl_bench dataset=datamodule dataset.datamodule._target_=my_pkg.MyDataModule partition=dirichlet

``dataset.datamodule`` is instantiated as Hydra does (``_target_`` and its arguments). A
LightningDataModule is used as ``lightning.Trainer`` uses it: ``prepare_data()``, ``setup("fit")``, then
the dataset behind ``train_dataloader()`` is the pool the partition splits into clients and the one
behind ``val_dataloader()`` (when it has one) the validation split; a plain ``Dataset`` is the pool, and
``dataset.val_fraction`` of every label is held out for validation. Every item must be an
``(input, label)`` pair (the label hook: partitions by label read each item's second element, an
integer class), inputs of one shape; the classes are ``0 .. num_classes - 1``, taken from the module's
``num_classes`` attribute where it has one, else from the largest label. A partition that needs what the
data lacks (``natural``: owners; ``pachinko``: coarse labels) stops in one line.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from fl_bench.data.federated import DatasetConfig, Examples, FederatedData
from fl_bench.data.partition import PartitionConfig, federate
from fl_bench.errors import ConfigError
from fl_bench.schema import require, schema


def _materialise(dataset: Any, where: str, partition_cfg: PartitionConfig) -> Examples:
    """Every item of a map-style dataset as arrays (inputs as stored: float32, or int64 token ids); a
    refusal of items without labels names what reads them (the partition only where it does)."""
    try:
        items = [dataset[i] for i in range(len(dataset))]
    except TypeError:
        raise ConfigError(f"{where} is not a map-style dataset (len and indexing): give a Dataset with "
                          f"__len__ and __getitem__, as a DataLoader without a sampler of its own needs") from None
    if not items:
        raise ConfigError(f"{where} is empty: the partition needs examples to split into clients")
    first = items[0]
    if not (isinstance(first, (tuple, list)) and len(first) == 2):
        reader = (f"partition={partition_cfg.name} splits the examples by it, and " if "labels" in partition_cfg.needs
                  else "")
        raise ConfigError(f"{where}'s items are {type(first).__name__}s, not (input, label) pairs: every example needs "
                          f"an integer label as its second element ({reader}validation accuracy compares the model's "
                          f"predictions with it)")
    labels = [item[1] for item in items]
    if not all(isinstance(v, (int, np.integer)) or (isinstance(v, torch.Tensor) and v.numel() == 1
                                                     and not v.is_floating_point()) for v in labels):
        raise ConfigError(f"{where}'s labels (second elements) are not integer classes: e.g. {labels[0]!r}")
    inputs = [torch.as_tensor(item[0]) for item in items]
    if len({tuple(x.shape) for x in inputs}) > 1:
        raise ConfigError(f"{where}'s inputs have several shapes ({inputs[0].shape} and others): one shape is needed")
    x = torch.stack(inputs)
    x = x.float() if x.is_floating_point() else x.long()
    return Examples(x.numpy(), np.array([int(v) for v in labels], dtype=np.int64))


def load_datamodule(cfg: "DataModuleConfig", partition_cfg: PartitionConfig) -> FederatedData:
    """The FederatedData of a user's DataModule or Dataset (module docstring)."""
    from hydra.utils import instantiate
    from lightning import LightningDataModule

    from fl_bench.data.sources import holdout

    target = cfg.datamodule.get("_target_")
    try:
        source = instantiate(cfg.datamodule)
    except Exception as error:  # Hydra wraps the import or constructor error
        cause = error.__cause__ or error
        raise ConfigError(f"dataset.datamodule._target_={target} could not be built: {str(cause).splitlines()[0]}") from None
    where = f"dataset.datamodule._target_={target}"
    if isinstance(source, LightningDataModule):
        source.prepare_data()
        source.setup("fit")
        train = _materialise(source.train_dataloader().dataset, f"{where}'s train_dataloader().dataset", partition_cfg)
        has_val = type(source).val_dataloader is not LightningDataModule.val_dataloader
        test = (_materialise(source.val_dataloader().dataset, f"{where}'s val_dataloader().dataset", partition_cfg) if has_val
                else Examples(train.x[:0], train.y[:0]))
    elif isinstance(source, torch.utils.data.Dataset):
        train, test = _materialise(source, where, partition_cfg), None
    else:
        raise ConfigError(f"{where} is a {type(source).__name__}: give a LightningDataModule or a torch Dataset")
    if test is None or len(test) == 0:
        train, test = holdout(train, Examples(train.x[:0], train.y[:0]), cfg.val_fraction, partition_cfg.seed)
    num_classes = getattr(source, "num_classes", None) or int(max(train.y.max(), test.y.max())) + 1
    if min(train.y.min(), test.y.min()) < 0 or max(train.y.max(), test.y.max()) >= num_classes:
        raise ConfigError(f"{where}: labels must lie in 0 .. {num_classes - 1} (its num_classes)")
    return federate(cfg.name, train, test, partition_cfg, int(num_classes))


@schema("dataset", "datamodule", load_datamodule)
class DataModuleConfig(DatasetConfig):
    """``dataset=datamodule``: a user's LightningDataModule or torch Dataset (module docstring)."""

    datamodule: Optional[dict[str, Any]] = None  # {_target_: ..., its arguments}

    def __post_init__(self) -> None:
        super().__post_init__()
        target = (self.datamodule or {}).get("_target_")
        require(isinstance(target, str) and target != "", "dataset.datamodule._target_", target,
                "name your LightningDataModule or Dataset class, e.g. dataset.datamodule._target_=my_pkg.MyDataModule")
