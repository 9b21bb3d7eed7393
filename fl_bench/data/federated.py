"""Federated dataset storage: flat tensors plus per-client offsets.

All training examples live in one tensor with each client's examples contiguous, so a client is a
zero-copy slice and there is no per-client Python object, even for 660k clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from omegaconf import MISSING

from fl_bench.schema import require

if TYPE_CHECKING:
    from fl_bench.data.transforms import ImageTransform


@dataclass
class Examples:
    """A pool of labelled examples before it is split into clients.

    ``x`` keeps the compact storage type: uint8 NCHW images, int32 token ids (0 = padding),
    float32 features. ``user`` is the natural owner of each example (LEAF user index), if any;
    ``coarse`` is CIFAR-100's coarse (super-class) label, used by Pachinko allocation.
    """

    x: np.ndarray
    y: np.ndarray
    user: np.ndarray | None = None
    coarse: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.y = np.asarray(self.y, dtype=np.int64)
        assert len(self.x) == len(self.y), "x and y need one row per example"
        for extra in (self.user, self.coarse):
            assert extra is None or len(extra) == len(self.y), "user/coarse need one entry per example"

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class FederatedData:
    """A federated dataset: every client's training examples contiguous in ``x`` / ``y`` (client i
    owns rows ``offsets[i]:offsets[i+1]``, at least one), ``sizes[i]`` their count, and the
    validation split ``x_val`` / ``y_val``."""

    name: str
    x: torch.Tensor  # [N, ...] training examples, grouped by client
    y: torch.Tensor  # [N] int64 labels
    offsets: np.ndarray  # [C + 1] int64: client i owns rows offsets[i]:offsets[i+1]
    x_val: torch.Tensor
    y_val: torch.Tensor
    num_classes: int
    # Batch-time preprocessing of stored uint8 images (None: x is fed to the model as stored).
    transform: ImageTransform | None = None
    # Token-id -> word for text datasets (0 = "<pad>", 1 = "<unk>"); models build their own
    # vocabulary (GloVe's top words, or the data's) from it.
    vocab: list[str] | None = None
    # [C + 1] int64: client i's held-out rows are x_val[val_offsets[i]:val_offsets[i+1]], where the
    # validation set is split per client (split_clients); None where it is pooled (a test split).
    val_offsets: np.ndarray | None = None
    # A user's DataModule (dataset=datamodule): its training DataLoader's batch_size and drop_last, and
    # what the run's first lines say about how its data was read
    loader: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # A user's Dataset whose items differ between reads (random augmentation in __getitem__): training
    # inputs read afresh for every batch, ``reads(rows)`` for rows of x (x holds a first read); None: x
    reads: Any = None

    def __post_init__(self) -> None:
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        assert self.offsets[0] == 0 and self.offsets[-1] == len(self.y), "offsets must cover every example"
        self.sizes = np.diff(self.offsets)
        assert (self.sizes > 0).all(), "every client needs at least one training example"
        if self.val_offsets is not None:
            self.val_offsets = np.asarray(self.val_offsets, dtype=np.int64)
            assert len(self.val_offsets) == len(self.offsets) and self.val_offsets[0] == 0 \
                and self.val_offsets[-1] == len(self.y_val), "val_offsets must give every client its held-out rows"

    @property
    def num_clients(self) -> int:
        """The number of clients C."""
        return len(self.sizes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one example as the model sees it (after any crop)."""
        shape = tuple(self.x.shape[1:])
        return self.transform.output_shape(shape) if self.transform else shape

    def client(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client i's training examples ``(x, y)``, zero-copy slices."""
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.x[lo:hi], self.y[lo:hi]

    def pooled(self) -> "FederatedData":
        """Every client's examples as one client (centralized training on the same data)."""
        val_offsets = None if self.val_offsets is None else np.array([0, len(self.y_val)])
        return FederatedData(self.name, self.x, self.y, np.array([0, len(self.y)]), self.x_val, self.y_val,
                             self.num_classes, self.transform, self.vocab, val_offsets, self.loader, self.notes,
                             self.reads)

    def to(self, device: torch.device) -> "FederatedData":
        """The same data with its tensors on ``device`` (offsets, transform and vocabulary shared)."""
        return FederatedData(
            self.name, self.x.to(device), self.y.to(device), self.offsets,
            self.x_val.to(device), self.y_val.to(device), self.num_classes, self.transform, self.vocab,
            self.val_offsets, self.loader, self.notes, self.reads,
        )


def split_clients(
    name: str, xs: list[np.ndarray], ys: list[np.ndarray], val_fraction: float, num_classes: int, seed: int
) -> FederatedData:
    """Hold out ``val_fraction`` of each client's examples (at least one stays for training)."""
    rng = np.random.default_rng(seed)
    train_x, train_y, val_x, val_y, sizes, val_sizes = [], [], [], [], [], []
    for x, y in zip(xs, ys):
        perm = rng.permutation(len(y))
        n_val = min(int(val_fraction * len(y)), len(y) - 1)
        val_idx, train_idx = perm[:n_val], perm[n_val:]
        train_x.append(x[train_idx]), train_y.append(y[train_idx])
        val_x.append(x[val_idx]), val_y.append(y[val_idx])
        sizes.append(len(train_idx)), val_sizes.append(n_val)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return FederatedData(
        name=name,
        x=torch.from_numpy(np.concatenate(train_x)),
        y=torch.from_numpy(np.concatenate(train_y)),
        offsets=offsets,
        x_val=torch.from_numpy(np.concatenate(val_x)),
        y_val=torch.from_numpy(np.concatenate(val_y)),
        num_classes=num_classes,
        val_offsets=np.concatenate([[0], np.cumsum(val_sizes)]),
    )


@dataclass
class DatasetConfig:
    """A dataset option. Its ``_target_`` is the function ``(cfg, partition_cfg) -> FederatedData``
    that builds the federated data (generated clients, or real examples split by the partition)."""

    name: str = MISSING
    _target_: str = MISSING
    # Fraction of each client's examples held out; the union of held-out parts is the
    # validation split (LEAF-style per-client split).
    val_fraction: float = 0.2

    def __post_init__(self) -> None:
        require(0.0 < self.val_fraction < 1.0, "dataset.val_fraction", self.val_fraction, "must be in (0, 1)")
