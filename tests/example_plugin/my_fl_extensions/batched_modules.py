"""LightningModules as Lightning's docs write them, for trips batched over clients (``vmap_clients``):
some that batch, and some whose step needs one client at a time. Nothing here knows about fl_bench."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F


class MLP(L.LightningModule):
    """The docs' classifier: cross-entropy, ``self.log`` of the loss, SGD with momentum."""

    def __init__(self, input_shape: tuple, num_classes: int, hidden: int = 32, lr: float = 0.1, momentum: float = 0.9):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(input_shape).prod()), hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)


class LogsAccuracy(MLP):
    """Logs its minibatch accuracy computed by hand (a padded example would count in it), with Adam over two
    groups: weight decay on the weights only."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("train_acc", (logits.argmax(-1) == y).float().mean())
        return F.cross_entropy(logits, y)

    def configure_optimizers(self):
        decay = [p for name, p in self.named_parameters() if name.endswith("weight")]
        rest = [p for name, p in self.named_parameters() if not name.endswith("weight")]
        return torch.optim.Adam([{"params": decay, "weight_decay": 0.01}, {"params": rest}], lr=0.01)


class WithDropout(MLP):
    def __init__(self, input_shape: tuple, num_classes: int):
        super().__init__(input_shape, num_classes)
        self.net.insert(2, nn.Dropout(0.2))


class CountsSteps(MLP):
    def __init__(self, input_shape: tuple, num_classes: int):
        super().__init__(input_shape, num_classes)
        self.steps_seen = 0

    def training_step(self, batch, batch_idx):
        self.steps_seen += 1
        return super().training_step(batch, batch_idx)


class EpochHook(MLP):
    def on_train_epoch_end(self):
        self.log("epoch_marker", 1.0)


class SkipsLargeLosses(MLP):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if loss.item() > 1e6:  # a guard against a diverging step, read in Python
            return None
        return loss


class WithBatchNorm(MLP):
    def __init__(self, input_shape: tuple, num_classes: int):
        super().__init__(input_shape, num_classes)
        self.net.insert(2, nn.BatchNorm1d(32))


class FactoredOptimizer(MLP):
    def configure_optimizers(self):
        return torch.optim.Adafactor(self.parameters(), lr=0.01)  # factored second moments: not elementwise
