"""LightningModules written as their users write them, for ``task=lightning``: torchmetrics inside,
``save_hyperparameters``, schedulers, ``self.log`` calls, tuple and dict batches. Nothing here knows
about fl_bench.

    python -m fl_bench task=lightning task.module._target_=my_fl_extensions.lightning_modules.DigitsClassifier \
        dataset=digits algorithm=fedavg
"""

from __future__ import annotations

import math
import random

import lightning as L
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score


class DigitsClassifier(L.LightningModule):
    """An MLP classifier with its own optimizer (SGD, optionally with momentum), a per-step StepLR
    schedule, torchmetrics accuracy and ``self.log`` in training and validation."""

    def __init__(self, input_shape: tuple, num_classes: int, hidden: int = 32, lr: float = 0.1, momentum: float = 0.0,
                 gamma: float = 1.0):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))
        self.train_accuracy = MulticlassAccuracy(num_classes, average="micro")
        self.val_accuracy = MulticlassAccuracy(num_classes, average="micro")
        self.seen_lrs: list[float] = []  # every step's lr, recorded by a hook (tests read it)
        self.hooks: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss)
        self.log("train_acc", self.train_accuracy(logits, y))
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", self.val_accuracy(logits, y))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=self.hparams.gamma)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_before_optimizer_step(self, optimizer):
        self.seen_lrs.append(optimizer.param_groups[0]["lr"])

    def on_train_start(self):
        self.hooks.append("train_start")

    def on_train_epoch_start(self):
        self.hooks.append("epoch_start")

    def on_train_epoch_end(self):
        self.hooks.append("epoch_end")

    def on_train_end(self):
        self.hooks.append("train_end")


class DocsClassifier(L.LightningModule):
    """Written as Lightning's and torchmetrics' documentation write a classifier: torchmetrics objects
    logged by ``self.log`` (on_step and on_epoch in training), a MetricCollection through
    ``self.log_dict`` in validation, the validation loss returned rather than logged, and BatchNorm
    (whose running statistics are buffers)."""

    def __init__(self, input_shape: tuple, num_classes: int, hidden: int = 32, lr: float = 0.5):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.BatchNorm1d(hidden),
                                 nn.ReLU(), nn.Linear(hidden, num_classes))
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_metrics = MetricCollection({"val_acc": MulticlassAccuracy(num_classes, average="micro"),
                                             "val_f1": MulticlassF1Score(num_classes, average="macro")})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if len(y) < 2:  # BatchNorm cannot normalise a batch of one: skipped, as Lightning lets a step do
            return None
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_metrics.update(logits, y)
        self.log_dict(self.val_metrics)
        return F.cross_entropy(logits, y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class WrappedNetwork(L.LightningModule):
    """Takes fl_bench's network from the model group (its ``model`` argument) with the plain objective
    and SGD at ``lr``: trains as the built-in task does."""

    def __init__(self, model: nn.Module, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters(ignore=["model"])
        self.model = model

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class DictBatchClassifier(L.LightningModule):
    """Reads dict batches ({"image": ..., "label": ...}), steps Adam with an epoch-interval
    scheduler in a list, and has no validation_step (fl_bench scores its logits)."""

    def __init__(self, input_shape: tuple, num_classes: int, lr: float = 0.01):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self(batch["image"]), batch["label"])
        self.log_dict({"loss": loss, "batch_size": float(len(batch["label"]))})
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return [optimizer], [torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)]


class NotALightningModule(nn.Module):
    """A plain torch module: task=lightning refuses it in one line."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 2)


class _Linear(L.LightningModule):
    """A linear classifier without the methods its subclasses leave out (refused in one line)."""

    def __init__(self, input_shape: tuple, num_classes: int):
        super().__init__()
        self.layer = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x):
        return self.layer(x.flatten(1))


class NoConfigureOptimizers(_Linear):
    """Has a training_step but no configure_optimizers."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)


class NoTrainingStep(_Linear):
    """Has configure_optimizers but no training_step."""

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class LogOfZero(NoTrainingStep):
    """A loss that is NaN on every batch from the start (a log of 0 times 0): no learning rate is to blame."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.log(torch.zeros(())) * 0 + F.cross_entropy(self(x), y)


class ValidationLogOfZero(NoTrainingStep):
    """Trains as it should, but its validation loss is NaN from the start."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.log(torch.zeros(())) * 0 + F.cross_entropy(self(x), y))


class SkipsEveryBatch(NoTrainingStep):
    """A training_step that returns None (Lightning skips such a batch) on every batch."""

    def training_step(self, batch, batch_idx):
        return None


class BatchNormClassifier(L.LightningModule):
    """The classifier of Lightning's docs, as written there: Linear, BatchNorm1d, ReLU, Dropout, Linear,
    with no guard against a batch of one example (BatchNorm cannot normalise it in training)."""

    def __init__(self, input_shape: tuple, num_classes: int, hidden: int = 64, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.BatchNorm1d(hidden),
                                 nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class EpochStepLR(L.LightningModule):
    """SGD with a StepLR stepped per epoch (Lightning's default interval): the lr is multiplied by
    ``gamma`` after every ``step_size`` epochs. Records the lr of every optimizer step."""

    def __init__(self, input_shape: tuple, num_classes: int, lr: float = 0.1, step_size: int = 1, gamma: float = 0.5,
                 interval: str = "epoch"):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(math.prod(input_shape), num_classes)
        self.seen_lrs: list[float] = []

    def forward(self, x):
        return self.layer(x.flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=self.hparams.step_size, gamma=self.hparams.gamma)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.hparams.interval}}

    def on_before_optimizer_step(self, optimizer):
        self.seen_lrs.append(optimizer.param_groups[0]["lr"])


class RecordsInputs(L.LightningModule):
    """A linear classifier that keeps every training batch's inputs (tests read them)."""

    def __init__(self, input_shape: tuple, num_classes: int, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(math.prod(input_shape), num_classes)
        self.seen: list[torch.Tensor] = []

    def forward(self, x):
        return self.layer(x.flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(x.detach().clone())
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class DrawsEverywhere(L.LightningModule):
    """Dropout, and noise on its inputs from torch's, numpy's and Python's global generators, in every
    training step: a trip's draws come from its seed (tests compare trips and the host's generators)."""

    def __init__(self, input_shape: tuple, num_classes: int, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 32), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(32, num_classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        noise = torch.randn_like(x) + float(np.random.normal()) + random.gauss(0.0, 1.0)
        loss = F.cross_entropy(self(x + 0.01 * noise), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
