"""A user's data as a dataset option (``dataset=datamodule``): a ``LightningDataModule`` or a torch
``Dataset``, federated by any partition that can apply.

    python -m fl_bench dataset=datamodule dataset.datamodule._target_=my_pkg.MyDataModule partition=dirichlet

``dataset.datamodule`` is instantiated as Hydra does (``_target_`` and its arguments). A
LightningDataModule is used as ``lightning.Trainer`` uses it: ``prepare_data()``, ``setup("fit")``, then
the dataset behind ``train_dataloader()`` is the pool the partition splits into clients and the one
behind ``val_dataloader()`` (when it has one) the validation split (several loaders, as a list, tuple or
dict: joined into it, each example once); a plain ``Dataset`` is the pool, and
``dataset.val_fraction`` of every label is held out for validation. Each item is read once and stored:
a dataset whose items differ between reads (random augmentation in ``__getitem__``) is refused, as its
first draw would be frozen. The training DataLoader's ``drop_last=True`` is the clients' (unless
``task.drop_last`` says otherwise); its ``batch_size`` is not (``algorithm.batch_size`` is), and the
run's first lines say so where they differ. Every item must be an
``(input, label)`` pair (the label hook: partitions by label read each item's second element, an
integer class), inputs of one shape; the classes are ``0 .. num_classes - 1``, taken from the module's
``num_classes`` attribute where it has one (an integer >= 1), else from the largest label. A partition
that needs what the data lacks (``natural``: owners; ``pachinko``: coarse labels), and whatever the
DataModule's hooks or items raise, stop in one line.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from fl_bench.data.federated import DatasetConfig, Examples, FederatedData
from fl_bench.data.partition import PartitionConfig, federate
from fl_bench.errors import ConfigError
from fl_bench.schema import require, schema


def _item(dataset: Any, i: int, where: str, size: int) -> Any:
    try:
        return dataset[i]
    except Exception as error:  # the user's __getitem__: whatever it raises, one line
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ConfigError(f"{where}[{i}] raised {type(error).__name__}{': ' + text if text else ''} (its len() is "
                          f"{size}): every index below len() must give an (input, label) pair") from error


def _materialise(dataset: Any, where: str) -> Examples:
    """Every item of a map-style dataset as arrays (inputs as stored: float32, or int64 token ids)."""
    try:
        size = len(dataset)
    except TypeError:
        raise ConfigError(f"{where} is not a map-style dataset (len and indexing): give a Dataset with "
                          f"__len__ and __getitem__, as a DataLoader without a sampler of its own needs") from None
    items = [_item(dataset, i, where, size) for i in range(size)]
    if not items:
        raise ConfigError(f"{where} is empty: the partition needs examples to split into clients")
    first = items[0]
    if not (isinstance(first, (tuple, list)) and len(first) == 2):
        raise ConfigError(f"{where}'s items are {type(first).__name__}s, not (input, label) pairs: a partition "
                          f"reads each example's label from the second element")
    labels = [item[1] for item in items]
    if not all(isinstance(v, (int, np.integer)) or (isinstance(v, torch.Tensor) and v.numel() == 1
                                                     and not v.is_floating_point()) for v in labels):
        raise ConfigError(f"{where}'s labels (second elements) are not integer classes: e.g. {labels[0]!r}")
    try:
        inputs = [torch.as_tensor(item[0]) for item in items]
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"{where}'s inputs are {type(first[0]).__name__}s (e.g. {str(first[0])[:40]!r}), not "
                          f"numbers: give each input as a tensor or array (text as token ids)") from None
    if len({tuple(x.shape) for x in inputs}) > 1:
        raise ConfigError(f"{where}'s inputs have several shapes ({inputs[0].shape} and others): one shape is needed")
    if any(x.dtype == torch.bool or x.is_complex() for x in inputs[:1]):
        raise ConfigError(f"{where}'s inputs are {inputs[0].dtype} tensors: give real numbers or integer token ids")
    x = torch.stack(inputs)
    x = x.float() if x.is_floating_point() else x.long()
    _check_fixed(dataset, x, where)
    return Examples(x.numpy(), np.array([int(v) for v in labels], dtype=np.int64), None, None)


def _check_fixed(dataset: Any, x: torch.Tensor, where: str, probes: int = 32) -> None:
    """Refuse a dataset whose items change between reads (random augmentation in ``__getitem__``): the
    data is read once and stored, so every later epoch would see the first read's draw, frozen."""
    with torch.random.fork_rng():
        for i in range(min(probes, len(x))):
            again = torch.as_tensor(dataset[i][0])
            if not torch.equal(again.to(x.dtype), x[i]):
                raise ConfigError(f"{where}[{i}] differs between two reads (random augmentation in __getitem__?): "
                                  f"fl_bench reads each item once and stores it, so the augmentation would be "
                                  f"drawn once and frozen; apply it to the batch in the LightningModule's "
                                  f"training_step (task=lightning), or use a dataset whose items are fixed")


def _loader_dataset(loader: Any, where: str, hook: str) -> Any:
    """The map-style dataset behind a DataLoader that ``hook`` returned."""
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        got = "None" if loader is None else f"a {type(loader).__name__}"
        raise ConfigError(f"{where}'s {hook}() returned {got}: return a DataLoader over a map-style Dataset")
    return dataset


def _loaders(returned: Any) -> list[Any]:
    """The DataLoaders of a ``*_dataloader()`` return: one, or a list, tuple or dict of them (Lightning's
    forms for several)."""
    if isinstance(returned, dict):
        return list(returned.values())
    return list(returned) if isinstance(returned, (list, tuple)) else [returned]


def _hook(source: Any, hook: str, where: str, *args: Any) -> Any:
    """Call the DataModule's ``hook``; whatever it raises, one line."""
    try:
        return getattr(source, hook)(*args)
    except ConfigError:
        raise
    except Exception as error:
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ConfigError(f"{where}'s {hook}() raised {type(error).__name__}{': ' + text if text else ''}") from error


def _joined(parts: list[Examples], where: str) -> Examples:
    if len({p.x.shape[1:] for p in parts}) > 1:
        raise ConfigError(f"{where}'s val_dataloader() returned {len(parts)} loaders whose inputs differ in shape "
                          f"({', '.join(str(p.x.shape[1:]) for p in parts)}): one validation set needs one shape")
    return Examples(np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts]))


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
    notes, settings = [], {}
    if isinstance(source, LightningDataModule):
        _hook(source, "prepare_data", where)
        _hook(source, "setup", where, "fit")
        loaders = _loaders(_hook(source, "train_dataloader", where))
        if len(loaders) != 1:
            raise ConfigError(f"{where}'s train_dataloader() returned {len(loaders)} loaders: the partition splits one "
                              f"training set into clients; return one DataLoader")
        loader = loaders[0]
        train = _materialise(_loader_dataset(loader, where, "train_dataloader"), f"{where}'s train_dataloader().dataset")
        settings = {key: getattr(loader, key, None) for key in ("batch_size", "drop_last")}
        has_val = type(source).val_dataloader is not LightningDataModule.val_dataloader
        test = Examples(train.x[:0], train.y[:0])
        if has_val:
            vals = _loaders(_hook(source, "val_dataloader", where))
            parts = [_materialise(_loader_dataset(v, where, "val_dataloader"), f"{where}'s val_dataloader()"
                                  + (f"[{i}]" if len(vals) > 1 else "") + ".dataset") for i, v in enumerate(vals)]
            test = _joined(parts, where) if parts else test
            if len(parts) > 1:  # one validation set scores the run: all of them, each example once
                notes.append(f"validation set: the {len(parts)} loaders of val_dataloader() joined "
                             f"({' + '.join(str(len(p)) for p in parts)} examples)")
    elif isinstance(source, torch.utils.data.Dataset):
        train, test = _materialise(source, where), None
    else:
        raise ConfigError(f"{where} is a {type(source).__name__}: give a LightningDataModule or a torch Dataset")
    if test is None or len(test) == 0:
        train, test = holdout(train, Examples(train.x[:0], train.y[:0]), cfg.val_fraction, partition_cfg.seed)
        if len(test) == 0:
            raise ConfigError(f"{where} has {len(train)} examples: too few to hold out dataset.val_fraction="
                              f"{cfg.val_fraction} of every label for validation; give more (or a val_dataloader)")
    num_classes = getattr(source, "num_classes", None)
    if num_classes is not None and not (isinstance(num_classes, (int, np.integer)) and not isinstance(num_classes, bool)
                                        and num_classes >= 1):
        raise ConfigError(f"{where}'s num_classes={num_classes!r} is not allowed: an integer >= 1 (the classes are "
                          f"0 .. num_classes - 1), or no num_classes attribute (then the largest label + 1)")
    num_classes = num_classes or int(max(train.y.max(), test.y.max())) + 1
    if min(train.y.min(), test.y.min()) < 0 or max(train.y.max(), test.y.max()) >= num_classes:
        raise ConfigError(f"{where}: labels must lie in 0 .. {num_classes - 1} (its num_classes)")
    data = federate(cfg.name, train, test, partition_cfg, int(num_classes))
    data.loader, data.notes = {k: v for k, v in settings.items() if v is not None}, notes
    return data


@schema("dataset", "datamodule", load_datamodule)
class DataModuleConfig(DatasetConfig):
    """``dataset=datamodule``: a user's LightningDataModule or torch Dataset (module docstring)."""

    datamodule: Optional[dict[str, Any]] = None  # {_target_: ..., its arguments}

    def __post_init__(self) -> None:
        super().__post_init__()
        target = (self.datamodule or {}).get("_target_")
        require(isinstance(target, str) and target != "", "dataset.datamodule._target_", target,
                "name your LightningDataModule or Dataset class, e.g. dataset.datamodule._target_=my_pkg.MyDataModule")
