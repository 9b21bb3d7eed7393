"""LightningModules and DataModules written wrongly in the ways users write them, for the refusals
table (tests/test_refusals.py): each is refused in one line while the run is being built. Nothing
here knows about fl_bench."""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from my_fl_extensions.datamodules import BlobsDataset


class Classifier(L.LightningModule):
    """A correct linear classifier that the mistakes below change one thing of."""

    def __init__(self, input_shape: tuple, num_classes: int, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x):
        return self.layer(x.flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class DetachedLoss(Classifier):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx).detach()


class IntLoss(Classifier):
    def training_step(self, batch, batch_idx):
        return 1


class DictWithoutLoss(Classifier):
    """Returns its loss in a dict under another name (Lightning requires 'loss' there)."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        return {"train_loss": F.cross_entropy(logits, y), "logits": logits.detach()}


class LogsAString(Classifier):
    def training_step(self, batch, batch_idx):
        self.log("phase", "train")
        return super().training_step(batch, batch_idx)


class LogMisspelt(Classifier):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epochs=True)
        return loss


class NoOptimizer(Classifier):
    def configure_optimizers(self):
        return None


class IntOptimizer(Classifier):
    def configure_optimizers(self):
        return 1


class DictWithoutOptimizer(Classifier):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return {"lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1)}


class TwoOptimizers(Classifier):
    def configure_optimizers(self):
        return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.Adam(self.parameters())]


class Lbfgs(Classifier):
    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters(), lr=0.1)


class OneCycle(Classifier):
    """OneCycleLR over the fit's steps, as Lightning's docs size it."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5,
                                                        total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class FortnightScheduler(Classifier):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "fortnight"}}


class NoParameters(L.LightningModule):
    """Predicts the class of a fixed rule: nothing to train."""

    def forward(self, x):
        return torch.zeros(len(x), 10, requires_grad=True)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class TupleForward(Classifier):
    """Its forward returns (logits, features), and it has no validation_step."""

    def forward(self, x):
        features = x.flatten(1)
        return self.layer(features), features

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits, _ = self(x)
        return F.cross_entropy(logits, y)


class FailingPrepare(L.LightningDataModule):
    def prepare_data(self):
        raise RuntimeError("cannot download the data: no network")

    def setup(self, stage):
        self.train_set = BlobsDataset()

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=32)


class NoTrainLoader(FailingPrepare):
    def prepare_data(self):
        pass

    def train_dataloader(self):
        return None


class TextClasses(NoTrainLoader):
    """num_classes written as a string."""

    num_classes = "4"

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=32)


class ZeroClasses(TextClasses):
    num_classes = 0


class Words(Dataset):
    """Inputs that are strings (a text dataset without its tokenizer)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return f"sentence {i}", i % 2


class LongerThanItsData(BlobsDataset):
    """__len__ says more than it holds."""

    def __len__(self):
        return len(self.y) + 10


class ThreeExamples(BlobsDataset):
    def __init__(self):
        super().__init__(n=3)


class NoExamples(BlobsDataset):
    def __init__(self):
        super().__init__(n=0)
