"""The learning task: a model with its local objective and its evaluation.

The built-in tasks (``task=builtin``) wrap the model group's network in a plain ``nn.Module`` whose
``loss`` the trainers call from a lean loop (fl_bench.clients.trainer), so a run that never touches
a LightningModule never imports Lightning for its task. ``task=lightning`` makes a user's own
LightningModule the task instead (fl_bench.clients.lightning_task).
"""

from __future__ import annotations

import math

from dataclasses import field
from typing import Any, Optional

import torch
from torch import nn
from torch.nn import functional as F

from fl_bench.data.transforms import ImageTransform
from fl_bench.errors import ConfigError
from fl_bench.schema import choice, require, schema


@schema("task", "builtin")
class TaskConfig:
    """``task=builtin``: the model group's network scored by ``model.task`` (cross-entropy and accuracy,
    or FedLaAvg Example 1's squared error), trained by fl_bench's own loop."""


@schema("task", "lightning")
class LightningTaskConfig(TaskConfig):
    """``task=lightning``: a user's LightningModule is the client task (fl_bench.clients.lightning_task).
    ``module`` is instantiated as Hydra does (``_target_`` and the constructor's arguments); arguments
    named ``model``, ``num_classes``, ``input_shape`` or ``vocab_size`` that it does not set come from
    the run (the model group's network, the dataset's shape and classes)."""

    module: dict[str, Any] = field(default_factory=lambda: {"_target_": None})
    # null: training_step gets (inputs, targets) tuples; two names, e.g. [image, label]: dict batches
    batch_keys: Optional[list[str]] = None
    # What validation_step (or test_step) logs as the loss and accuracy of metrics.csv (no accuracy: NaN)
    loss_key: str = "val_loss"
    accuracy_key: str = "val_acc"
    # The module's buffers (BatchNorm's running statistics): federated (averaged with the update's
    # weights, as FedAvg is usually run), local (kept per client: FedBN), reset (every trip starts from
    # the initial buffers; evaluation sees what the last trip left)
    buffers: str = "federated"
    # What training_step gets: pair ((inputs, targets), or a dict under batch_keys), inputs (the inputs
    # alone: a module with its own objective), next_token (token sequences x as (x[:, :-1], x[:, 1:]): a
    # language model)
    batch: str = "pair"
    # How the global model is scored: steps (validation_step or test_step), logits (its forward's class
    # logits by cross-entropy and accuracy), training_step (the mean of its loss over the validation
    # set, no accuracy); auto: steps where the module has them, else logits for pair batches whose forward
    # gives [batch, num_classes] logits on a few validation examples, else training_step
    evaluation: str = "auto"
    # DataLoader's drop_last for the clients' minibatches: true leaves out each epoch's short last batch
    # (a client with fewer than algorithm.batch_size examples still trains on them all, as one batch);
    # null: true for a module with BatchNorm layers (which cannot train on a batch of one), else false
    drop_last: Optional[bool] = None
    # The lr schedulers its configure_optimizers returns: on (they act within each trip, as the Trainer
    # steps them), off (left out: trips step its optimizer at its configured lr; across trips,
    # algorithm.lr_decay)
    lr_scheduler: str = "on"
    # lightning.Trainer's gradient_clip_val and gradient_clip_algorithm (norm or value), which a module
    # cannot carry: passed to its configure_gradient_clipping at every step of a trip, as the Trainer
    # passes its own (null: unset; 0: no clipping); LightningModule's default clips with them
    gradient_clip_val: Optional[float] = None
    gradient_clip_algorithm: Optional[str] = None

    BUFFER_RULES = ("federated", "local", "reset")
    BATCHES = ("pair", "inputs", "next_token")
    EVALUATIONS = ("auto", "steps", "logits", "training_step")
    LR_SCHEDULERS = ("on", "off")

    def __post_init__(self) -> None:
        choice("task.buffers", self.buffers, self.BUFFER_RULES)
        choice("task.batch", self.batch, self.BATCHES)
        choice("task.evaluation", self.evaluation, self.EVALUATIONS)
        choice("task.lr_scheduler", self.lr_scheduler, self.LR_SCHEDULERS)
        require(self.gradient_clip_val is None or (isinstance(self.gradient_clip_val, (int, float))
                                                   and not isinstance(self.gradient_clip_val, bool)
                                                   and math.isfinite(self.gradient_clip_val) and self.gradient_clip_val >= 0),
                "task.gradient_clip_val", self.gradient_clip_val, "a number >= 0 (0 or null: no clipping)")
        require(self.gradient_clip_algorithm in (None, "norm", "value"), "task.gradient_clip_algorithm",
                self.gradient_clip_algorithm, "norm or value (null: norm, as lightning.Trainer)")
        require(self.batch_keys is None or self.batch == "pair", "task.batch_keys", self.batch_keys,
                f"null with task.batch={self.batch} (dict batches name inputs and targets: task.batch=pair)")
        require(self.evaluation != "logits" or self.batch == "pair", "task.evaluation", self.evaluation,
                f"steps or training_step with task.batch={self.batch} (logits are scored against the targets of pairs)")
        target = self.module.get("_target_")
        require(isinstance(target, str) and target != "", "task.module._target_", target,
                "name your LightningModule class, e.g. task.module._target_=my_package.MyModule")
        require(self.batch_keys is None or (len(self.batch_keys) == 2 and len(set(self.batch_keys)) == 2),
                "task.batch_keys", self.batch_keys, "null (tuple batches) or two distinct names, e.g. [image, label]")


def drop_last(cfg: TaskConfig, model: nn.Module, loader: dict[str, Any] | None = None) -> tuple[bool, str]:
    """Whether the clients' minibatch plans leave out each epoch's short last batch, and why:
    ``task.drop_last``; where it is null (and for the built-in task, which has no such key) true if a
    user's DataModule's training DataLoader sets drop_last=True (``loader``) or ``model`` has BatchNorm
    layers, which cannot train on a batch of one example."""
    from fl_bench.clients.local_update import has_batch_norm

    choice = getattr(cfg, "drop_last", None)
    if choice is not None:
        return bool(choice), f"task.drop_last={bool(choice)}"
    if (loader or {}).get("drop_last"):
        return True, "the DataModule's train_dataloader() sets drop_last=True"
    if has_batch_norm(model):
        return True, "the model has BatchNorm layers, which cannot train on a batch of one example"
    return False, ""


def model_inputs(transform: ImageTransform | None, x: torch.Tensor, train: bool,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Stored examples -> model inputs: images scaled/augmented/normalised, token ids as int64."""
    if transform is not None:
        return transform(x, train, generator)
    return x.long() if x.dtype in (torch.int32, torch.int16) else x


def max_entropy_gap(activations: torch.Tensor) -> torch.Tensor:
    """KL(U || softmax(a)) per row, = -log H - mean_j log softmax(a)_j (FedMAX, Chen et al. 2020; FedGBO's
    code: kl_div(log_softmax(a), softmax(0)), i.e. KL of the uniform U against softmax(a)): 0 when
    the H activations are all equal, the maximum-entropy point."""
    return -math.log(activations.shape[-1]) - F.log_softmax(activations, dim=-1).mean(-1)


class ClassificationTask(nn.Module):
    """A model with its local objective (cross-entropy, plus the L2 and FedMAX terms when set)
    and its evaluation (loss, accuracy); ``transform`` turns stored examples into model inputs."""

    predicts_classes = True  # the model's outputs are class logits (per-class accuracy of the final model)
    accuracy_source: str | None = "the argmax of the model's logits"  # what val_accuracy is (None: no accuracy)

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        weight_decay: float = 0.0,
        transform: ImageTransform | None = None,
        entropy_weight: float = 0.0,
    ):
        super().__init__()
        self.model = model
        self.num_classes = num_classes
        self.weight_decay = weight_decay
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
        linears[-1].register_forward_pre_hook(self._keep_features)

    def _keep_features(self, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        # a bound method, not a closure: a deep copy of the task (the FLOP count's) keeps its own features
        if module.training:
            self.features = inputs[0]

    def inputs(self, x: torch.Tensor, train: bool, generator: torch.Generator | None = None) -> torch.Tensor:
        """Stored examples -> model inputs (:func:`model_inputs` with the dataset's transform)."""
        return model_inputs(self.transform, x, train, generator)

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
        """Mean cross-entropy and accuracy (the argmax class, as torchmetrics' micro multiclass accuracy,
        which costs a second to import for this one comparison) over (x, y), in chunks to bound memory."""
        was_training = self.training
        self.eval()
        loss_sum, correct = torch.zeros((), device=x.device), torch.zeros((), device=x.device)
        for s in range(0, len(y), chunk):
            logits = self.model(self.inputs(x[s : s + chunk], train=False))
            loss_sum += F.cross_entropy(logits, y[s : s + chunk], reduction="sum")
            correct += (logits.argmax(-1) == y[s : s + chunk]).sum()
        self.train(was_training)
        return (loss_sum / len(y)).item(), (correct / len(y)).item()


class MeanSquaredErrorTask(ClassificationTask):
    """Regression on the model's residuals (FedLaAvg Example 1: the model outputs w - x): objective
    1/2 r^2 averaged over the batch, so a full batch's gradient is exactly w - mean(x). It has no
    accuracy: ``evaluate`` returns (validation objective, NaN)."""

    predicts_classes = False
    accuracy_source = None

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


def builtin_task(model_cfg: Any, model: nn.Module, data: Any, entropy_weight: float = 0.0) -> ClassificationTask:
    """``task=builtin``: the model group's network scored by ``model.task``, with the model's L2 term and
    the dataset's transform (FedMAX's ``entropy_weight`` from the algorithm)."""
    return TASKS[model_cfg.task](model, data.num_classes, model_cfg.weight_decay, transform=data.transform,
                                 entropy_weight=entropy_weight)
