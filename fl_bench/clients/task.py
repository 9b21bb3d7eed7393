"""The learning task as a LightningModule: model + loss + metrics.

Federated local training calls ``loss`` from a lean loop (fl_bench.clients.trainer); ``training_step`` and
``validation_step`` make the same module usable with a Lightning ``Trainer`` for centralized runs.
"""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torchmetrics.functional.classification import multiclass_accuracy

from fl_bench.data.transforms import ImageTransform
from fl_bench.errors import ConfigError


def max_entropy_gap(activations: torch.Tensor) -> torch.Tensor:
    """KL(U || softmax(a)) per row, = -log H - mean_j log softmax(a)_j (FedMAX, Chen et al. 2020; FedGBO's
    code: kl_div(log_softmax(a), softmax(0)), i.e. KL of the uniform U against softmax(a)): 0 when
    the H activations are all equal, the maximum-entropy point."""
    return -math.log(activations.shape[-1]) - F.log_softmax(activations, dim=-1).mean(-1)


class ClassificationTask(L.LightningModule):
    """A model with its local objective (cross-entropy, plus the L2 and FedMAX terms when set)
    and its evaluation (loss, accuracy); ``transform`` turns stored examples into model inputs."""

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        weight_decay: float = 0.0,
        lr: float = 0.1,
        transform: ImageTransform | None = None,
        entropy_weight: float = 0.0,
    ):
        super().__init__()
        self.model = model
        self.num_classes = num_classes
        self.weight_decay = weight_decay
        self.lr = lr
        self.transform = transform
        self.entropy_weight = entropy_weight  # FedMAX's alpha
        self.features: torch.Tensor | None = None  # the last training forward's penultimate activations
        if entropy_weight:
            self._watch_penultimate()

    def _watch_penultimate(self) -> None:
        """Keep the input of the model's last linear layer (FedMAX's activation vector a, as FedGBO's
        code takes it: after the hidden layer's ReLU) at every training forward."""
        linears = [m for m in self.model.modules() if isinstance(m, nn.Linear)]
        hidden = sum(p.numel() for p in self.model.parameters()) - sum(p.numel() for p in linears[-1].parameters()) if linears else 0
        if not hidden:
            raise ConfigError(f"algorithm.entropy_weight={self.entropy_weight} (FedMAX) needs a model with a hidden layer: "
                              f"{type(self.model).__name__}'s output layer reads the input; use model=cnn_fedgbo, char_gru, mlp, ...")

        def keep(module, inputs):
            if module.training:
                self.features = inputs[0]

        linears[-1].register_forward_pre_hook(keep)

    def inputs(self, x: torch.Tensor, train: bool, generator: torch.Generator | None = None) -> torch.Tensor:
        """Stored examples -> model inputs: images scaled/augmented/normalised, token ids as int64."""
        if self.transform is not None:
            return self.transform(x, train, generator)
        return x.long() if x.dtype in (torch.int32, torch.int16) else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of stored examples ``x``, preprocessed for evaluation (no augmentation)."""
        return self.model(self.inputs(x, train=False))

    def loss(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The objective of one training minibatch of stored examples (training-time augmentation
        drawn from ``generator``; FedMAX's activations from this very forward)."""
        return self.objective(self.model(self.inputs(x, True, generator)), y, self.model.parameters(), features=self.features)

    def objective(self, logits, y, params, weights: torch.Tensor | None = None, features: torch.Tensor | None = None) -> torch.Tensor:
        """The local objective: cross-entropy averaged over the batch (or weighted per example by
        ``weights``, e.g. a batch of clients each averaging its own examples) plus the L2
        regulariser (weight_decay / 2) * ||w||^2 (HFL's logistic regression) plus FedMAX's
        alpha KL(U || softmax(a)) of the penultimate activations ``features``."""
        if weights is None:
            loss = F.cross_entropy(logits, y)
        else:
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
            loss = (ce * weights.reshape(-1)).sum()
        if self.entropy_weight:
            kl = max_entropy_gap(features.reshape(-1, features.shape[-1]))
            loss = loss + self.entropy_weight * (kl.mean() if weights is None else (kl * weights.reshape(-1)).sum())
        if self.weight_decay:
            loss = loss + 0.5 * self.weight_decay * sum(p.pow(2).sum() for p in params)
        return loss

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, chunk: int = 8192) -> tuple[float, float]:
        """Mean cross-entropy and accuracy over (x, y), in chunks to bound memory."""
        was_training = self.training
        self.eval()
        loss_sum, correct = torch.zeros((), device=x.device), torch.zeros((), device=x.device)
        for s in range(0, len(y), chunk):
            logits = self.model(self.inputs(x[s : s + chunk], train=False))
            loss_sum += F.cross_entropy(logits, y[s : s + chunk], reduction="sum")
            correct += multiclass_accuracy(
                logits, y[s : s + chunk], num_classes=self.num_classes, average="micro"
            ) * len(y[s : s + chunk])
        self.train(was_training)
        return (loss_sum / len(y)).item(), (correct / len(y)).item()

    # --- Lightning hooks (centralized training with a Trainer)
    def training_step(self, batch, batch_idx):
        """Lightning: the batch's :meth:`loss`, logged as train_loss."""
        loss = self.loss(*batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        """Lightning: log the batch's val_loss (cross-entropy) and val_accuracy."""
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_accuracy", multiclass_accuracy(logits, y, num_classes=self.num_classes, average="micro"))

    def configure_optimizers(self):
        """Lightning: SGD at ``lr`` over every parameter."""
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class MeanSquaredErrorTask(ClassificationTask):
    """Regression on the model's residuals (FedLaAvg Example 1: the model outputs w - x): objective
    1/2 r^2 averaged over the batch, so a full batch's gradient is exactly w - mean(x). It has no
    accuracy: ``evaluate`` returns (validation objective, NaN)."""

    def objective(self, residuals, y, params, weights: torch.Tensor | None = None, features=None) -> torch.Tensor:
        """1/2 r^2 of the model's outputs r = ``residuals``, averaged over the batch (or weighted per
        example by ``weights``), plus the L2 regulariser; no FedMAX term."""
        squared = 0.5 * residuals.pow(2)
        loss = squared.mean() if weights is None else (squared * weights).sum()
        if self.weight_decay:
            loss = loss + 0.5 * self.weight_decay * sum(p.pow(2).sum() for p in params)
        return loss

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, chunk: int = 8192) -> tuple[float, float]:
        """(1/2 mean r^2 over ``x``, NaN): the validation objective without the L2 term, and no
        accuracy."""
        return (0.5 * self.model(x).pow(2).mean()).item(), float("nan")


TASKS = {"classification": ClassificationTask, "mean_squared_error": MeanSquaredErrorTask}
