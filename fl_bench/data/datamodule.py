"""A user's data as a dataset option (``dataset=datamodule``): a ``LightningDataModule`` or a torch
``Dataset``, federated by any partition that can apply.

    python -m fl_bench dataset=datamodule dataset.datamodule._target_=my_pkg.MyDataModule partition=dirichlet

``dataset.datamodule`` is instantiated as Hydra does (``_target_`` and its arguments). A
LightningDataModule is used as ``lightning.Trainer`` uses it: ``prepare_data()``, ``setup("fit")``, then
the dataset behind ``train_dataloader()`` is the pool the partition splits into clients and the one
behind ``val_dataloader()`` (when it has one) the validation split (several loaders, as a list, tuple or
dict: joined into it, each example once); a plain ``Dataset`` is the pool, and
``dataset.val_fraction`` of every label is held out for validation. Each item is read once and stored,
except a training set whose items differ between reads (random augmentation in ``__getitem__``): its
first read is stored (shapes, FLOPs, probes) and ``FederatedData.reads`` reads every batch afresh in
task=lightning's trips (fl_bench.clients.lightning_trainer); where its first draw would be frozen (another
task, a validation split held out of it, a validation set that varies too) it is refused. The training
DataLoader's ``drop_last=True`` is the clients' (unless
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


def _materialise(dataset: Any, where: str, partition_cfg: PartitionConfig) -> Examples:
    """Every item of a map-style dataset as arrays (inputs as stored: float32, or int64 token ids); a
    refusal of items without labels names what reads them (the partition only where it does)."""
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
        reader = (f"partition={partition_cfg.name} splits the examples by it, and " if "labels" in partition_cfg.needs
                  else "")
        raise ConfigError(f"{where}'s items are {type(first).__name__}s, not (input, label) pairs: every example needs "
                          f"an integer label as its second element ({reader}validation accuracy compares the model's "
                          f"predictions with it)")
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
    return Examples(x.numpy(), np.array([int(v) for v in labels], dtype=np.int64), None, None)


def _varies(dataset: Any, x: np.ndarray, probes: int = 32) -> int | None:
    """The first of a few items whose input differs on a second read (random augmentation in
    ``__getitem__``), or None where they are fixed."""
    with torch.random.fork_rng():
        for i in range(min(probes, len(x))):
            if not np.array_equal(torch.as_tensor(dataset[i][0]).numpy().astype(x.dtype), x[i]):
                return i
    return None


class FreshReads:
    """Training inputs read afresh from a user's Dataset whose ``__getitem__`` draws random augmentation:
    ``reads(rows)`` are the inputs of federated rows ``rows``, read now (under the trip's seeds)."""

    def __init__(self, dataset: Any, index: np.ndarray, dtype: torch.dtype):
        self.dataset, self.index, self.dtype = dataset, index, dtype  # index: federated row -> dataset index

    def __call__(self, rows: np.ndarray) -> torch.Tensor:
        return torch.stack([torch.as_tensor(self.dataset[int(i)][0]) for i in self.index[rows]]).to(self.dtype)


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
        train_set = _loader_dataset(loader, where, "train_dataloader")
        train = _materialise(train_set, f"{where}'s train_dataloader().dataset", partition_cfg)
        varies = _varies(train_set, train.x)
        settings = {key: getattr(loader, key, None) for key in ("batch_size", "drop_last")}
        has_val = type(source).val_dataloader is not LightningDataModule.val_dataloader
        test = Examples(train.x[:0], train.y[:0])
        if has_val:
            vals = _loaders(_hook(source, "val_dataloader", where))
            parts = []
            for i, val in enumerate(vals):
                name = f"{where}'s val_dataloader()" + (f"[{i}]" if len(vals) > 1 else "") + ".dataset"
                parts.append(_materialise(_loader_dataset(val, where, "val_dataloader"), name, partition_cfg))
                item = _varies(val.dataset, parts[-1].x)
                if item is not None:
                    raise ConfigError(f"{name}[{item}] differs between two reads (random augmentation in "
                                      f"__getitem__?): evaluation needs fixed items; give the validation set a "
                                      f"deterministic transform")
            test = _joined(parts, where) if parts else test
            if len(parts) > 1:  # one validation set scores the run: all of them, each example once
                notes.append(f"validation set: the {len(parts)} loaders of val_dataloader() joined "
                             f"({' + '.join(str(len(p)) for p in parts)} examples)")
    elif isinstance(source, torch.utils.data.Dataset):
        train_set, train, test = source, _materialise(source, where, partition_cfg), None
        varies = _varies(source, train.x)
    else:
        raise ConfigError(f"{where} is a {type(source).__name__}: give a LightningDataModule or a torch Dataset")
    if varies is not None and (test is None or len(test) == 0):
        raise ConfigError(f"{where}'s training items differ between two reads (item {varies}: random augmentation in "
                          f"__getitem__?) and it has no validation set of its own: a split held out of it would be "
                          f"one frozen random draw; give a LightningDataModule whose val_dataloader() reads fixed items")
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
    if varies is None:
        data = federate(cfg.name, train, test, partition_cfg, int(num_classes))
    else:  # partitions read labels only: split the items' indices, then store a first read in that order
        data = federate(cfg.name, Examples(np.arange(len(train)), train.y), test, partition_cfg, int(num_classes))
        index = data.x.numpy()
        data.x = torch.from_numpy(train.x[index])
        data.reads = FreshReads(train_set, index, data.x.dtype)
        notes.append(f"training inputs read afresh from the dataset for every batch (its items differ between reads, "
                     f"e.g. item {varies}: random augmentation in __getitem__), under each trip's seeds")
    data.loader, data.notes = {k: v for k, v in settings.items() if v is not None}, notes
    return data


def refuse_fresh_reads(data: FederatedData, why: str) -> None:
    """A user's Dataset whose items differ between reads is read afresh for every batch by task=lightning's
    trips only (fl_bench.data.datamodule): elsewhere its first draw would be frozen."""
    if data.reads is not None:
        raise ConfigError(f"dataset.datamodule's training items differ between reads (random augmentation in "
                          f"__getitem__), and {why}: its first draw would be frozen; use task=lightning, whose trips "
                          f"read every batch afresh, or a dataset whose items are fixed")


@schema("dataset", "datamodule", load_datamodule)
class DataModuleConfig(DatasetConfig):
    """``dataset=datamodule``: a user's LightningDataModule or torch Dataset (module docstring)."""

    datamodule: Optional[dict[str, Any]] = None  # {_target_: ..., its arguments}

    def __post_init__(self) -> None:
        super().__post_init__()
        target = (self.datamodule or {}).get("_target_")
        require(isinstance(target, str) and target != "", "dataset.datamodule._target_", target,
                "name your LightningDataModule or Dataset class, e.g. dataset.datamodule._target_=my_pkg.MyDataModule")
