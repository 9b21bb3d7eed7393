"""LightningModules as Lightning's own documentation writes them (issue 69): its README's autoencoder, a
classifier whose configure_optimizers takes one of the docs' forms (a plateau scheduler on the training
loss, a OneCycleLR sized by ``self.trainer.estimated_stepping_batches``, an epoch StepLR), one that reads
its lr through ``self.optimizers()``, and validation steps that log their accuracy under other names.
Nothing here knows about fl_bench; the input size is the dataset's (the docs' 28 * 28 is MNIST's).

    python -m fl_bench task=lightning task.module._target_=my_fl_extensions.docs_modules_69.LitAutoEncoder \
        dataset=digits algorithm=fedavg
"""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F


class LitAutoEncoder(L.LightningModule):
    """Lightning's README: ``forward`` gives the embedding, ``training_step`` the reconstruction's MSE;
    no validation_step."""

    def __init__(self, input_shape: tuple = (1, 28, 28)):
        super().__init__()
        size = math.prod(input_shape)
        self.encoder = nn.Sequential(nn.Linear(size, 128), nn.ReLU(), nn.Linear(128, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 128), nn.ReLU(), nn.Linear(128, size))

    def forward(self, x):
        # in lightning, forward defines the prediction/inference actions
        embedding = self.encoder(x)
        return embedding

    def training_step(self, batch, batch_idx):
        # training_step defines the train loop. It is independent of forward
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        return optimizer


class LitClassifier(L.LightningModule):
    """A linear classifier with the docs' validation_step: val_loss and val_acc logged."""

    def __init__(self, input_shape: tuple = (1, 28, 28), num_classes: int = 10, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.l1 = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x):
        return self.l1(x.view(x.size(0), -1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class LogsValAccuracy(LitClassifier):
    """Logs its accuracy through ``self.log_dict`` as ``val_accuracy`` (not fl_bench's default val_acc)."""

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log_dict({"val_loss": loss, "val_accuracy": acc})


class LogsLossOnly(LitClassifier):
    """Its validation_step logs the loss alone: no accuracy is logged."""

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))


class PlateauOnTrainLoss(LitClassifier):
    """ReduceLROnPlateau monitoring the training loss, in the docs' lr_scheduler dict."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min")
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "train_loss"}}


class OneCycleOverTheFit(LitClassifier):
    """OneCycleLR over the fit's steps, sized as the docs of estimated_stepping_batches size it."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        stepping_batches = self.trainer.estimated_stepping_batches
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5, total_steps=stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class StepLRPerEpoch(LitClassifier):
    """SGD with a StepLR in the ([optimizers], [schedulers]) form: stepped per epoch (Lightning's default
    interval)."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        return [optimizer], [scheduler]


class WarmUpPerStep(StepLRPerEpoch):
    """A linear warm-up stepped per step, whose construction already scales the lr (start_factor)."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=100)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class LogsItsLr(LitClassifier):
    """Logs the optimizer's lr in training_step through ``self.optimizers()``."""

    def training_step(self, batch, batch_idx):
        self.log("lr", self.optimizers().param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)
