"""A LightningDataModule and a torch Dataset written as their users write them, for
``dataset=datamodule``: nothing here knows about fl_bench. The data is generated (offline): 8-feature
points around one centre per class."""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split


def blobs(n: int, num_classes: int, seed: int, dim: int = 8, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(num_classes, dim, generator=generator)
    y = torch.randint(num_classes, (n,), generator=generator)
    return scale * (centres[y] + torch.randn(n, dim, generator=generator)), y


class BlobsDataModule(L.LightningDataModule):
    """Its own train / validation split in setup, DataLoaders as Lightning's docs write them."""

    def __init__(self, n: int = 1200, num_classes: int = 4, batch_size: int = 32, seed: int = 0, drop_last: bool = False):
        super().__init__()
        self.save_hyperparameters()
        self.num_classes = num_classes

    def setup(self, stage: str) -> None:
        x, y = blobs(self.hparams.n, self.hparams.num_classes, self.hparams.seed)
        full = TensorDataset(x, y)
        self.train_set, self.val_set = random_split(full, [0.8, 0.2], generator=torch.Generator().manual_seed(1))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True, drop_last=self.hparams.drop_last)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)


class BlobsDataset(Dataset):
    """A plain map-style Dataset of (features, label) pairs."""

    def __init__(self, n: int = 600, num_classes: int = 3, dim: int = 8, scale: float = 1.0):
        self.x, self.y = blobs(n, num_classes, seed=1, dim=dim, scale=scale)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class Unlabelled(Dataset):
    """Items without labels: no partition by label can apply."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int):
        return torch.zeros(8)


class CountingSequences(Dataset):
    """Token sequences that count up modulo ``vocab`` from a random start (a language model learns
    the next token), each labelled by its start modulo 4 (what a label partition reads)."""

    def __init__(self, n: int = 640, length: int = 12, vocab: int = 16, seed: int = 2):
        start = torch.randint(vocab, (n,), generator=torch.Generator().manual_seed(seed))
        self.x = (start[:, None] + torch.arange(length + 1)) % vocab
        self.y = start % 4

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class CountingDataModule(L.LightningDataModule):
    """CountingSequences as a DataModule: 640 training and 160 validation sequences (equal batches of
    8 per client under partition=iid with 20 clients, as the demo LSTM's carried hidden state needs)."""

    def __init__(self, length: int = 12, vocab: int = 16):
        super().__init__()
        self.length, self.vocab = length, vocab

    def setup(self, stage: str) -> None:
        self.train_set = CountingSequences(640, self.length, self.vocab, seed=2)
        self.val_set = CountingSequences(160, self.length, self.vocab, seed=3)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=8, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=8)


class TwoValidationSets(L.LightningDataModule):
    """Two validation loaders (the blobs, and the same blobs shifted), as Lightning allows."""

    def setup(self, stage: str) -> None:
        x, y = blobs(800, 4, seed=0)
        self.train_set, self.val_set = TensorDataset(x[:600], y[:600]), TensorDataset(x[600:700], y[600:700])
        self.shifted_set = TensorDataset(x[700:] + 0.5, y[700:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=32, shuffle=True)

    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(self.val_set, batch_size=32), DataLoader(self.shifted_set, batch_size=32)]


class NoisyBlobs(BlobsDataset):
    """Random augmentation in __getitem__, as torchvision's transforms do: Gaussian noise on every read."""

    def __getitem__(self, i: int):
        return self.x[i] + 0.1 * torch.randn_like(self.x[i]), self.y[i]


class NoisyBlobsDataModule(L.LightningDataModule):
    """The blobs with random augmentation on the training set only (Gaussian noise on every read), a fixed
    validation set, as image DataModules pair a random training transform with a deterministic one."""

    def __init__(self, noisy_validation: bool = False):
        super().__init__()
        self.noisy_validation = noisy_validation

    def setup(self, stage: str) -> None:
        self.train_set, self.val_set = NoisyBlobs(600, 4), BlobsDataset(200, 4)
        if self.noisy_validation:
            self.val_set = NoisyBlobs(200, 4)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=32, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=32)
