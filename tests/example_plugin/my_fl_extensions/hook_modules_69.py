"""LightningModules that override Lightning's hooks as Lightning's documentation writes them (issue 69): a
warm-up in ``optimizer_step``, ``configure_gradient_clipping`` clipping hard, an epoch metric computed in
``on_validation_epoch_end`` from outputs kept by ``validation_step``, a loss weight scheduled by
``self.current_epoch``, a counter incremented in ``on_train_epoch_end``, and one that records every hook it
is called in. Nothing here knows about fl_bench; the tests train each under lightning.Trainer too.

    python -m fl_bench task=lightning task.module._target_=my_fl_extensions.hook_modules_69.WarmUpClassifier \
        dataset=digits algorithm=fedavg
"""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F


class LinearClassifier(L.LightningModule):
    """A linear classifier trained by SGD at ``learning_rate``, its training_step's cross-entropy."""

    def __init__(self, input_shape: tuple, num_classes: int, learning_rate: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x):
        return self.layer(x.flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)


class PlainOptimizerStep(LinearClassifier):
    """Overrides optimizer_step with LightningModule's own body (its docs' example): trains as without it."""

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        # Add your custom logic to run directly before `optimizer.step()`

        optimizer.step(closure=optimizer_closure)

        # Add your custom logic to run directly after `optimizer.step()`


class WarmUpClassifier(LinearClassifier):
    """Lightning's documented lr warm-up without a scheduler (LightningModule.optimizer_step's docs), over
    ``warmup_steps``; records the lr of every step."""

    def __init__(self, input_shape: tuple, num_classes: int, learning_rate: float = 0.1, warmup_steps: int = 4):
        super().__init__(input_shape, num_classes, learning_rate)
        self.save_hyperparameters()
        self.seen_lrs: list[float] = []

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        # update params
        optimizer.step(closure=optimizer_closure)

        # manually warm up lr without a scheduler
        if self.trainer.global_step < self.hparams.warmup_steps:
            lr_scale = min(1.0, float(self.trainer.global_step + 1) / self.hparams.warmup_steps)
            for pg in optimizer.param_groups:
                pg["lr"] = lr_scale * self.hparams.learning_rate

    def on_before_optimizer_step(self, optimizer):
        self.seen_lrs.append(optimizer.param_groups[0]["lr"])


class ClippedClassifier(LinearClassifier):
    """Clips its gradients itself, as configure_gradient_clipping's docs show, at a norm of ``clip``: at the
    default 1e-9 it learns (next to) nothing."""

    def __init__(self, input_shape: tuple, num_classes: int, learning_rate: float = 0.1, clip: float = 1e-9):
        super().__init__(input_shape, num_classes, learning_rate)
        self.save_hyperparameters()

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        # Implement your own custom logic to clip gradients
        # You can call `self.clip_gradients` with your settings:
        self.clip_gradients(optimizer, gradient_clip_val=self.hparams.clip, gradient_clip_algorithm="norm")


class EpochMetricClassifier(LinearClassifier):
    """Lightning 2.x's way to an epoch metric (the migration guide's): validation_step keeps its outputs, and
    on_validation_epoch_end computes the accuracy over all of them, logs it, and frees the list."""

    def __init__(self, input_shape: tuple, num_classes: int, learning_rate: float = 0.1):
        super().__init__(input_shape, num_classes, learning_rate)
        self.validation_step_outputs: list[torch.Tensor] = []

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("val_loss", loss)
        self.validation_step_outputs.append(logits.argmax(-1) == y)
        return loss

    def on_validation_epoch_end(self):
        all_correct = torch.cat(self.validation_step_outputs)
        self.log("val_acc", all_correct.float().mean())
        self.validation_step_outputs.clear()  # free memory


class KeepsBest(EpochMetricClassifier):
    """Keeps the best validation accuracy so far, and saves it in the checkpoint (on_save_checkpoint's docs)."""

    def __init__(self, input_shape: tuple, num_classes: int, learning_rate: float = 0.1):
        super().__init__(input_shape, num_classes, learning_rate)
        self.best_val_acc = 0.0

    def on_validation_epoch_end(self):
        accuracy = torch.cat(self.validation_step_outputs).float().mean()
        self.best_val_acc = max(self.best_val_acc, float(accuracy))
        super().on_validation_epoch_end()

    def on_save_checkpoint(self, checkpoint):
        # 99% of use cases you don't need to implement this method
        checkpoint["best_val_acc"] = self.best_val_acc

    def on_load_checkpoint(self, checkpoint):
        self.best_val_acc = checkpoint["best_val_acc"]


class EpochScheduled(LinearClassifier):
    """Anneals its loss's weight by ``self.current_epoch`` (in, say, a KL warm-up's manner) over
    ``anneal_epochs``; records (current_epoch, global_step, batch_idx) at every step."""

    def __init__(self, input_shape: tuple, num_classes: int, learning_rate: float = 0.1, anneal_epochs: int = 2):
        super().__init__(input_shape, num_classes, learning_rate)
        self.save_hyperparameters()
        self.seen: list[tuple[int, int, int]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append((self.current_epoch, self.global_step, batch_idx))
        weight = min(1.0, (self.current_epoch + 1) / self.hparams.anneal_epochs)
        return weight * F.cross_entropy(self(x), y)


class CountsEpochs(LinearClassifier):
    """Counts the epochs it has trained in an attribute (on_train_epoch_end), and records at every step the
    count it sees."""

    def __init__(self, input_shape: tuple, num_classes: int, learning_rate: float = 0.1):
        super().__init__(input_shape, num_classes, learning_rate)
        self.epochs_trained = 0
        self.counts_seen: list[int] = []

    def training_step(self, batch, batch_idx):
        self.counts_seen.append(self.epochs_trained)
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self):
        self.epochs_trained += 1


class SkipsEpochTails(LinearClassifier):
    """Skips the rest of an epoch after its first two batches, as on_train_batch_start's docs allow (-1)."""

    def on_train_batch_start(self, batch, batch_idx):
        if batch_idx >= 2:
            return -1


class RecordsHooks(LinearClassifier):
    """Overrides every hook a trip or an evaluation calls, each doing what LightningModule's own does, and
    records (hook, current_epoch, global_step) in ``calls``."""

    def __init__(self, input_shape: tuple, num_classes: int, learning_rate: float = 0.1):
        super().__init__(input_shape, num_classes, learning_rate)
        self.calls: list[tuple[str, int, int]] = []

    def _record(self, hook):
        self.calls.append((hook, self.current_epoch, self.global_step))

    def on_fit_start(self):
        self._record("on_fit_start")

    def on_fit_end(self):
        self._record("on_fit_end")

    def on_train_start(self):
        self._record("on_train_start")

    def on_train_end(self):
        self._record("on_train_end")

    def on_train_epoch_start(self):
        self._record("on_train_epoch_start")

    def on_train_epoch_end(self):
        self._record("on_train_epoch_end")

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self._record("on_before_batch_transfer")
        return batch

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self._record("transfer_batch_to_device")
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self._record("on_after_batch_transfer")
        return batch

    def on_train_batch_start(self, batch, batch_idx):
        self._record("on_train_batch_start")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self._record("on_train_batch_end")
        assert set(outputs) == {"loss"} and not outputs["loss"].requires_grad

    def training_step(self, batch, batch_idx):
        self._record("training_step")
        return super().training_step(batch, batch_idx)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        self._record("optimizer_step")
        assert (epoch, batch_idx) == (self.current_epoch, batch_idx)
        optimizer.step(closure=optimizer_closure)

    def on_before_zero_grad(self, optimizer):
        self._record("on_before_zero_grad")

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self._record("optimizer_zero_grad")
        optimizer.zero_grad()

    def on_before_backward(self, loss):
        self._record("on_before_backward")

    def backward(self, loss, *args, **kwargs):
        self._record("backward")
        loss.backward(*args, **kwargs)

    def on_after_backward(self):
        self._record("on_after_backward")

    def on_before_optimizer_step(self, optimizer):
        self._record("on_before_optimizer_step")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self._record("configure_gradient_clipping")
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm)

    def configure_optimizers(self):
        self._record("configure_optimizers")
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    def lr_scheduler_step(self, scheduler, metric):
        self._record("lr_scheduler_step")
        scheduler.step()

    def validation_step(self, batch, batch_idx):
        self._record("validation_step")
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())


for _hook in ("model_zero_grad", "model_eval", "start", "epoch_start", "epoch_end", "end", "model_train"):
    def _evaluation_hook(self, _name=f"on_validation_{_hook}", _default=getattr(L.LightningModule, f"on_validation_{_hook}")):
        self._record(_name)
        return _default(self)  # (the default's own work: eval(), train(), zero_grad)

    setattr(RecordsHooks, f"on_validation_{_hook}", _evaluation_hook)


def _validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
    self._record("on_validation_batch_start")


def _validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
    self._record("on_validation_batch_end")


RecordsHooks.on_validation_batch_start = _validation_batch_start
RecordsHooks.on_validation_batch_end = _validation_batch_end
