"""``algorithm=centralized``: the pooled-data reference (FedLaAvg's and HFL's S-SGD) trained by a real
``lightning.Trainer``, so that it is what a Lightning user would have run: Lightning's progress bar,
its loggers (CSV under ``lightning_logs/``, W&B with ``logger=wandb``) and its checkpoints
(``checkpoints/last.ckpt``, which the same command resumes from).

One Trainer epoch is one round of the federated runs: a trip of the same local steps, batch size and
lr schedule on every client's examples pooled into one. Its minibatches are the trip plan of the
simulator's trip of that round (fl_bench.clients.trainer.minibatch_plan, seed ``seed << 32 | round``),
and each step's lr is ``algorithm.client_lr`` times the schedule's factor (``lr_decay^t`` or
1/(1+t), and LR-norm's n/B), so it is the same S-SGD the federated axes were built for: a round is one
client trip and one server step in metrics.csv and summary.json, evaluated every ``eval_every`` rounds.

The built-in task's module takes a round as one Trainer batch, the round's minibatches, and steps
through them in one ``training_step`` (manual optimization: zero_grad, ``manual_backward``, the
optimizer's step; bit for bit the steps automatic optimization took one batch each), because
Lightning's per-batch loop (fetch, hooks, progress, logging) costs more than a small model's step
(benchmarks/centralized_cost.py). So Lightning's progress bar and its loggers' step axis count rounds
(``trainer.global_step`` still counts steps). ``checkpoints/last.ckpt`` is written at round ends:
every ``checkpoint_every`` rounds and at the first round's end ``checkpoint_minutes`` after the last.

With ``task=lightning`` the Trainer fits the user's module itself, one Trainer batch a minibatch: its
``training_step``, ``configure_optimizers`` (the lr schedule's factor scales its lr, as for client
trips; ``algorithm.client_lr`` is not used), hooks, ``self.log`` and ``validation_step``, whose
``task.loss_key`` / ``task.accuracy_key`` are metrics.csv's loss and accuracy.

One model on one device: more processes (``devices`` x ``num_nodes`` > 1), DP, client availability,
selection and speed have nothing to act on and are refused.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from fl_bench.clients.hardware import check_cpu_devices, process_count, resolve_accelerator
from fl_bench.clients.local_update import LocalTraining
from fl_bench.clients.task import LightningTaskConfig, builtin_task, drop_last
from fl_bench.clients.trainer import minibatch_plan
from fl_bench.data import FederatedData, build_dataset
from fl_bench.data.datamodule import refuse_fresh_reads
from fl_bench.data.downloads import download_settings
from fl_bench.engine.simulator import Progress
from fl_bench.errors import ConfigError, DivergenceError
from fl_bench.models import build_model
from fl_bench.numerics import describe as describe_numerics
from fl_bench.numerics import require_portable_process
from fl_bench.runs.callbacks import Callback, Target
from fl_bench.runs.checkpoint import config_differences, save_verified
from fl_bench.runs.pruning import final_status, with_pruning
from fl_bench.runs.config import Config, config_digest
from fl_bench.runs.fairness import accuracy_by_class
from fl_bench.runs.run_dir import error_line, write_summary, writing
from fl_bench.runs.run_log import RunLog, has_wandb_credentials, run_labels

logger = logging.getLogger(__name__)


@contextmanager
def _lightning_quiet() -> Iterator[None]:
    """Lightning's start-up lines (no GPU, no TPU, a cloud-logging tip, "max_epochs reached") and a
    deprecation inside it (its pytree LeafSpec under this torch) say nothing about the run, whose own
    first line names its device: Lightning's warnings still show."""
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = rank_zero.level
    rank_zero.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*LeafSpec.*is deprecated", category=FutureWarning)
            yield
    finally:
        rank_zero.setLevel(level)

CHECKPOINTS = "checkpoints"  # Lightning's checkpoints in the run directory (last.ckpt resumes)
EVAL_BATCH = 8192


def _spelt(value) -> str:
    """A value as a Hydra override spells it (null, true)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def check_centralized(cfg: Config) -> None:
    """What has nothing to act on with one model on the pooled data is refused in one line, every such
    setting at once (an experiment preset sets several for its federated arms: the line names them all and
    what to add): among them a round's timing (``algorithm.deadline``, ``fixed_rounds``, ``late_uploads``), which
    HFL's presets set for every arm and a run without a clock cannot honour. The run's own clock keys (delay,
    concurrency), which every run has, are left alone: it records no simulated time (sim_time is empty)."""
    refused: list[tuple[str, str, str]] = []  # (the setting, why it cannot act, what to use)
    for group, allowed in (("availability", "always"), ("selection", "uniform"), ("speed", "none"), ("dp", "none"),
                           ("behaviour", "reliable")):
        name = getattr(cfg, group).name
        if name != allowed:
            refused.append((f"{group}={name}", "it trains one model on the pooled data (one client, always "
                            "available)", f"{group}={allowed}"))
    if process_count(cfg.devices, cfg.num_nodes) > 1:
        refused.append((f"devices={cfg.devices} num_nodes={cfg.num_nodes}", "its reference steps one model on the "
                        "rounds' minibatches, one process", "devices=1"))
    if cfg.cuda_graphs:
        refused.append(("cuda_graphs=true", "the Trainer steps one model without batched trips to capture",
                        "cuda_graphs=null"))
    if cfg.vmap_clients:
        refused.append(("vmap_clients=true", "there is one trip per round to batch", "vmap_clients=null"))
    algorithm = cfg.algorithm
    for key, value, default in (("deadline", algorithm.deadline, None), ("fixed_rounds", algorithm.fixed_rounds, False),
                                ("late_uploads", algorithm.late_uploads, "drop")):
        if value != default:
            refused.append((f"algorithm.{key}={_spelt(value)}", "a round of the pooled reference is one trip with no "
                            "clock to time it", f"algorithm.{key}={_spelt(default)}"))
    if len(refused) == 1:
        setting, why, use = refused[0]
        raise ConfigError(f"{setting} is not allowed with algorithm=centralized: {why}; use {use}")
    if refused:
        raise ConfigError(f"{', '.join(r[0] for r in refused)} are not allowed with algorithm=centralized, which "
                          f"trains one model on the pooled data in one process, one trip a round (an experiment "
                          f"preset sets them for its federated arms); add {' '.join(r[2] for r in refused)}")


class _Examples(Dataset):
    """Stored examples, indexed by a minibatch's rows (one gather, no collation), or by a round's
    list of them (a list of minibatches). ``index_select`` copies whole rows (x[rows] copies element
    by element: 5x the time for a minibatch of uint8 images)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, rows: torch.Tensor | list[torch.Tensor]):
        if isinstance(rows, list):
            return [self[minibatch] for minibatch in rows]
        return self.x.index_select(0, rows), self.y.index_select(0, rows)


class RoundBatches(Sampler):
    """Round (epoch) t's minibatches, each a tensor of rows: the plan of the simulator's trip
    ``seed << 32 | t`` on the pooled data. The DataLoader's sampler (``batch_size=None``), so that
    Lightning calls its ``set_epoch`` before each epoch and a resumed run gets the same batches.
    ``whole_rounds``: the round's minibatches as one item, for a module that steps through them in
    one ``training_step``."""

    def __init__(self, num_examples: int, seed: int, local: LocalTraining, whole_rounds: bool = False):
        self.n, self.seed_base, self.local, self.epoch = num_examples, seed << 32, local, 0
        self.steps = int(local.num_steps(np.array([num_examples]))[0])
        self.whole_rounds = whole_rounds

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return 1 if self.whole_rounds else self.steps

    def __iter__(self):
        plan = minibatch_plan(np.array([self.n]), [self.seed_base + self.epoch], self.local)
        # a step's rows lead its row of the plan (its mask): the masked rows, split by step
        minibatches = list(plan.rows[0][plan.mask[0]].split(plan.mask[0].sum(-1).tolist()))
        if self.whole_rounds:
            yield minibatches
        else:
            yield from minibatches


def pooled_module(task: Any, local: LocalTraining, seed: int):
    """The built-in task as a LightningModule: SGD on its objective at each step's ``step_lr``, one
    ``training_step`` a round (manual optimization: Lightning's per-batch loop costs more than a
    small model's step); the validation loss and accuracy of its evaluator, weighted by batch size."""
    from lightning import LightningModule

    class PooledSGD(LightningModule):
        def __init__(self):
            super().__init__()
            self.task = task
            self.automatic_optimization = False

        def training_step(self, minibatches, batch_idx):
            """The round's steps, each as Lightning's automatic optimization takes a batch's: the
            forward under the precision's autocast (Lightning's context around training_step), then
            outside it zero_grad, manual_backward (the precision's backward) and the optimizer's step
            at the step's lr."""
            optimizer, round_ = self.optimizers(), self.current_epoch
            # augmentation draws: the round's trip seed, as the simulator's trip draws them
            generator = torch.Generator().manual_seed((seed << 32) + round_)
            outside_autocast = torch.autocast(self.device.type, enabled=False)
            for x, y in minibatches:
                loss = self.task.loss(x, y, generator)
                with outside_autocast:
                    optimizer.zero_grad()
                    self.manual_backward(loss)
                    for group in optimizer.param_groups:
                        group["lr"] = local.step_lr(len(y), round_)
                    optimizer.step()

        def validation_step(self, batch, batch_idx):
            x, y = batch
            loss, accuracy = self.task.evaluate(x, y)
            self.log_dict({"val_loss": loss, "val_acc": accuracy}, batch_size=len(y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=local.lr)

    return PooledSGD()


def round_callbacks(run: "CentralizedRun"):
    """The Lightning callbacks that put the Trainer on the federated axes (rounds = trips = server
    steps): the lr schedule's factor on each step of a user's module (the built-in one sets its own),
    and metrics.csv, the target and the run's callbacks at each validation (their state in
    Lightning's checkpoints)."""
    from lightning import Callback as LightningCallback

    local = run.local

    class LrSchedule(LightningCallback):
        """Each step's lr: the user's optimizer's times ``step_lr(n, t) / client_lr`` (the schedule's
        factor for round t, LR-norm's n/B); restored after the step, for the module's own scheduler."""

        def __init__(self):
            self.count, self.base = local.batch_size, []

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            targets = batch[run.target_key] if isinstance(batch, dict) else batch[1]
            self.count = len(targets)

        def on_before_optimizer_step(self, trainer, module, optimizer):
            self.base = [group["lr"] for group in optimizer.param_groups]
            for group in optimizer.param_groups:  # exactly step_lr for an optimizer at client_lr (the built-in task)
                group["lr"] = local.step_lr(self.count, trainer.current_epoch) * (group["lr"] / local.lr)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            for optimizer in trainer.optimizers:
                for group, lr in zip(optimizer.param_groups, self.base):
                    group["lr"] = lr

    class FederatedAxes(LightningCallback):
        """metrics.csv's row, the target and the run's callbacks at each validation."""

        def on_validation_end(self, trainer, module):
            metrics = trainer.callback_metrics
            if run.loss_key not in metrics:
                raise ConfigError(f"task.loss_key={run.loss_key} is not among what the module's validation_step logs "
                                  f"({', '.join(sorted(metrics)) or 'nothing'}): set task.loss_key")
            # the sanity check is round 0's evaluation (the initial model); trainer.validate after fit, the final one
            after_fit = trainer.state.fn == "validate"  # the epoch counter has moved past the last round
            rounds = 0 if trainer.sanity_checking else trainer.current_epoch + (not after_fit)
            loss = float(metrics[run.loss_key])
            accuracy = float(metrics.get(run.accuracy_key, float("nan")))
            if not math.isfinite(loss):
                raise DivergenceError(f"validation loss {loss}", trips=rounds, server_step=rounds)
            if run.evaluate(Progress(trips=rounds, server_step=rounds, sim_time=float("nan")), loss, accuracy):
                trainer.should_stop = True

        def on_save_checkpoint(self, trainer, module, checkpoint):
            # saved at a round's end (round_checkpoint): the rounds trained, which a resume goes on from
            checkpoint["fl_bench"] = dict(run.state_dict(), trained=trainer.current_epoch + 1)

        def on_load_checkpoint(self, trainer, module, checkpoint):
            run.load_state_dict(checkpoint["fl_bench"])

    return [LrSchedule(), FederatedAxes()] if run.user_module else [FederatedAxes()]


def round_checkpoint(path: Path, every: int | None, minutes: float | None):
    """Lightning's checkpoint (``trainer.save_checkpoint``) to ``path`` at the end of every
    ``every``-th round and of the first round ``minutes`` after the last save. At round ends only:
    Lightning's ModelCheckpoint times its saves at the batch ends of automatic optimization alone (the
    built-in module's rounds are one manually optimized batch), and a save inside a round would not
    resume exactly (the round's minibatches would start over). Written beside ``path`` and renamed over it,
    so that a run killed while saving keeps its previous checkpoint whole."""
    from lightning.pytorch.callbacks import Checkpoint

    partial = path.with_name(path.name + ".partial")

    class RoundCheckpoint(Checkpoint):
        def on_train_start(self, trainer, module):
            self.saved_at = time.monotonic()

        def on_train_epoch_end(self, trainer, module):
            now, rounds = time.monotonic(), trainer.current_epoch + 1
            if (every and rounds % every == 0) or (minutes and now - self.saved_at >= 60 * minutes):
                trainer.save_checkpoint(partial)
                os.replace(partial, path)
                self.saved_at = now

    return RoundCheckpoint()


class CentralizedRun:
    """A centralized run (module docstring), with :class:`fl_bench.runs.experiment.Run`'s interface:
    ``build``, ``checkpoint_to_resume``, ``execute``; the callbacks' ``on_start``, ``on_evaluation``,
    ``state_dict``, ``summary`` and ``on_end`` hooks are called as the simulator's run calls them."""

    checkpoint_name = f"{CHECKPOINTS}/last.ckpt"  # Lightning's, in the run directory: the same command goes on from it

    def __init__(self, cfg: Config, run_dir: Path, config: dict[str, Any], callbacks: list[Callback] = ()):
        self.cfg, self.run_dir, self.config = cfg, Path(run_dir), config
        self.callbacks: list[Callback] = with_pruning(cfg.pruning, [
            Target(cfg.target_accuracy, cfg.max_trips, cfg.stop_at_target), *callbacks])
        self.resumed_at: list[int] = []
        self.rounds = 0
        self.log: RunLog

    def build(self) -> None:
        """The pooled data, the model and the LightningModule that trains it; bad input fails here."""
        cfg = self.cfg
        check_centralized(cfg)
        if cfg.numerics == "portable":
            require_portable_process()
        torch.manual_seed(cfg.seed)  # model initialisation, as the simulator's runs
        self.accelerator, _ = resolve_accelerator("cpu" if cfg.numerics == "portable" else cfg.accelerator,
                                                  cfg.devices, example_flops=0.0)
        if self.accelerator == "cpu":
            check_cpu_devices(cfg.accelerator, cfg.devices)
        with download_settings(cfg.data_mirror, cfg.progress):  # a missing dataset or GloVe file is fetched here
            data: FederatedData = build_dataset(cfg.dataset, cfg.partition).pooled()
            refuse_fresh_reads(data, "algorithm=centralized trains on stored examples")
            self.data = data
            model = build_model(cfg.model, data.input_shape, data.num_classes, data.vocab)
        self.loss_key, self.accuracy_key, self.target_key = "val_loss", "val_acc", None
        if isinstance(cfg.task, LightningTaskConfig):
            from fl_bench.clients.lightning_task import build_lightning_task

            for key, value, default in (("buffers", cfg.task.buffers, "federated"), ("evaluation", cfg.task.evaluation, "auto")):
                if value not in (default, "steps"):  # one model on the pooled data: it would be ignored
                    raise ConfigError(f"task.{key}={value} is not allowed with algorithm=centralized: one model trains on "
                                      f"the pooled data with its own buffers and the Trainer validates it with its "
                                      f"validation_step; leave task.{key} unset")
            task = build_lightning_task(cfg.task, model, data)
            if task.evaluator != "validation_step":
                raise ConfigError(f"task.module._target_={cfg.task.module['_target_']} has no validation_step: "
                                  f"algorithm=centralized validates with the Trainer; add one")
            self.module = task.module
            self.loss_key, self.accuracy_key = cfg.task.loss_key, cfg.task.accuracy_key
            self.target_key = cfg.task.batch_keys[1] if cfg.task.batch_keys else None
            self.collate = lambda batch, train: task.batch(*batch, train)
        else:
            task = builtin_task(cfg.model, model, data, cfg.algorithm.entropy_weight)
        self.local = LocalTraining.from_config(cfg.algorithm, drop_last=drop_last(cfg.task, task.model, data.loader)[0])
        self.user_module = isinstance(cfg.task, LightningTaskConfig)  # stepped by Lightning, one batch a step
        if not self.user_module:
            self.module = pooled_module(task, self.local, cfg.seed)
            self.collate = lambda batch, train: batch
        self.task = task
        self.rounds_budget = min(cfg.max_trips, cfg.max_rounds or cfg.max_trips)  # one trip per round

    def _loaders(self) -> tuple[DataLoader, DataLoader]:
        data = self.data
        x, y = data.client(0)
        rounds = RoundBatches(len(y), self.cfg.seed, self.local, whole_rounds=not self.user_module)
        train = DataLoader(_Examples(x, y), sampler=rounds, batch_size=None,
                           collate_fn=lambda batch: self.collate(batch, True))
        val = DataLoader(_Examples(data.x_val, data.y_val), sampler=torch.arange(len(data.y_val)).split(EVAL_BATCH),
                         batch_size=None, collate_fn=lambda batch: self.collate(batch, False))
        return train, val

    def _trainer(self, resumed: bool):
        from lightning import Trainer
        from lightning.pytorch.loggers import CSVLogger, WandbLogger

        cfg = self.cfg
        checkpoints = []
        if cfg.checkpoint_every or cfg.checkpoint_minutes:
            checkpoints.append(round_checkpoint(self.run_dir / self.checkpoint_name, cfg.checkpoint_every,
                                                cfg.checkpoint_minutes))
        loggers = [CSVLogger(self.run_dir, name="lightning_logs")]  # version_0, and version_1... for each resume
        if cfg.logger == "wandb":  # WANDB_MODE in the environment wins, as for the simulator's runs
            group, tags = run_labels(self.config)
            mode = os.environ.get("WANDB_MODE") or cfg.wandb.mode
            if mode == "online" and not has_wandb_credentials():
                logger.warning("logger=wandb: no W&B API key, so this run logs offline into %s", self.run_dir)
                mode = "offline"
            loggers.append(WandbLogger(project=cfg.wandb.project, entity=cfg.wandb.entity, save_dir=str(self.run_dir),
                                       name=self.run_dir.name, config=self.config, group=group, tags=tags,
                                       mode=mode))
        devices = cfg.devices if isinstance(cfg.devices, list) else 1  # a GPU index list selects the GPU
        return Trainer(accelerator=self.accelerator, devices=devices, precision=cfg.precision, max_epochs=self.rounds_budget,
                       gradient_clip_val=getattr(cfg.task, "gradient_clip_val", None),  # (task=lightning's knobs)
                       gradient_clip_algorithm=getattr(cfg.task, "gradient_clip_algorithm", None),
                       check_val_every_n_epoch=cfg.eval_every,
                       num_sanity_val_steps=0 if resumed else -1,  # the sanity check is round 0's evaluation
                       logger=loggers,
                       callbacks=[*round_callbacks(self), *checkpoints], enable_checkpointing=bool(checkpoints),
                       enable_progress_bar=cfg.progress, enable_model_summary=False, use_distributed_sampler=False,
                       log_every_n_steps=max(1, len(RoundBatches(len(self.data.y), 0, self.local,
                                                                 whole_rounds=not self.user_module))),
                       default_root_dir=self.run_dir)

    # The callbacks' hooks, on the federated axes.

    def evaluate(self, progress: Progress, loss: float, accuracy: float) -> bool:
        """metrics.csv's row of an evaluation and the callbacks' ``on_evaluation``; True: stop."""
        row = dict(trips=progress.trips, server_step=progress.server_step, sim_time=progress.sim_time,
                   val_accuracy=accuracy, val_loss=loss, bytes_down=0, bytes_up=0, flops=0.0)
        self.rounds = progress.trips
        self.log.metrics(row)
        stop = False
        for callback in self.callbacks:
            stop = bool(callback.on_evaluation(self, progress, row)) or stop
        logger.info("round %d: val accuracy %.4f, loss %.4f", progress.trips, accuracy, loss)
        return stop

    def state_dict(self) -> dict[str, Any]:
        """What Lightning's checkpoint keeps of the run: its config, rows, last evaluated round, resumes
        and callbacks."""
        return dict(config=self.config, rows=self.log.rows, rounds=self.rounds, resumed_at=self.resumed_at,
                    callbacks={callback.key: callback.state_dict() for callback in self.callbacks})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for callback in self.callbacks:
            if callback.key in state["callbacks"]:
                callback.load_state_dict(state["callbacks"][callback.key])
        # (a checkpoint written before rounds trained were kept: its last evaluated round)
        self.rounds, self.resumed_at = state["rounds"], [*state["resumed_at"], state.get("trained", state["rounds"])]

    def checkpoint_to_resume(self, directory) -> dict[str, Any] | None:
        """Lightning's last.ckpt in the run directory, when ``resume`` allows; refused (one line) when it
        belongs to another config."""
        path = self.run_dir / self.checkpoint_name
        if self.cfg.resume is False or not path.exists():
            if self.cfg.resume:
                raise ConfigError(f"resume=true but {self.run_dir} holds no {CHECKPOINTS}/last.ckpt: run without "
                                  f"resume=true to start it")
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)["fl_bench"]  # Lightning's own file
        except Exception as error:
            raise ConfigError(f"{path} is not a readable checkpoint ({type(error).__name__}): delete it or run with "
                              f"resume=false") from None
        differences = config_differences(state["config"], self.config)
        if differences:
            raise ConfigError(f"{self.run_dir} holds a checkpoint of another config ({'; '.join(differences[:3])}): "
                              f"choose another hydra.run.dir, or resume=false to start over there")
        return dict(path=path, rows=state["rows"])

    def execute(self, checkpoint: dict[str, Any] | None) -> dict[str, Any]:
        """Fit to the end (from ``checkpoint``'s last.ckpt if given) and write metrics.csv, summary.json
        and model.pt, as the simulator's runs do."""
        with _lightning_quiet():
            return self._execute(checkpoint)

    def _execute(self, checkpoint: dict[str, Any] | None) -> dict[str, Any]:
        cfg = self.cfg
        started = time.perf_counter()
        self.log = RunLog(self.run_dir, self.config, "csv", cfg.wandb, checkpoint["rows"] if checkpoint else ())
        trainer = self._trainer(resumed=checkpoint is not None)
        if cfg.progress:
            print(f"fl_bench: centralized reference on {self.accelerator} with lightning.Trainer "
                  f"({'resumed from ' + str(checkpoint['path']) if checkpoint else 'a new run'})", flush=True)
        for callback in self.callbacks:
            callback.on_start(self, checkpoint is not None)
        status, diverged = "failed", {}
        try:
            train, val = self._loaders()
            # weights_only=False: the run's own file, which holds its callbacks' state (e.g. the target's Progress)
            trainer.fit(self.module, train, val, ckpt_path=checkpoint["path"] if checkpoint else None, weights_only=False)
            if self.rounds != trainer.current_epoch and not trainer.should_stop:
                trainer.validate(self.module, val, verbose=False)  # the final model, as the simulator's runs
            self.rounds = trainer.current_epoch
            status = final_status(self.callbacks, "completed")
        except DivergenceError as error:
            status = "diverged"
            diverged.update(trips=error.trips, server_step=error.server_step)
            advice = error.advice(f"lower algorithm.client_lr ({cfg.algorithm.client_lr})")
            raise DivergenceError(f"training diverged ({error}) after {error.trips} rounds: {advice}", error.trips,
                                  error.server_step) from None
        finally:
            summary = self.summary(status, diverged, time.perf_counter() - started)
            for callback in self.callbacks:
                callback.on_end(self, status, summary)
            summary["error"] = error_line(sys.exc_info()[1]) if status == "failed" else None
            if status == "completed":
                with writing(self.run_dir / "model.pt"):
                    save_verified(self.task.model.state_dict(), self.run_dir / "model.pt")
            summary = write_summary(self.run_dir, summary)  # last: a run stopped before it is no result
        return summary

    @torch.no_grad()
    def _accuracy_by_class(self) -> list[float]:
        """The final model's accuracy per label (empty for a task without classes)."""
        if not self.task.predicts_classes:
            return []
        device = next(self.task.parameters()).device
        self.task.eval()
        predicted = torch.cat([self.task(x.to(device)).argmax(-1).cpu() for x in self.data.x_val.split(EVAL_BATCH)])
        return accuracy_by_class(self.data.y_val, predicted, self.data.num_classes)

    def summary(self, status: str, diverged: dict[str, int], seconds: float) -> dict[str, Any]:
        """summary.json: the simulator's runs' keys that a centralized run has, then the callbacks'."""
        cfg, final = self.cfg, (self.log.rows[-1] if self.log.rows else {})
        summary = {
            "status": status,
            "diverged_at_trips": diverged.get("trips"),
            "diverged_at_step": diverged.get("server_step"),
            "algorithm": cfg.algorithm.name,
            "dataset": self.data.name,
            "seed": cfg.seed,
            "final_val_accuracy": final.get("val_accuracy"),
            "final_val_loss": final.get("val_loss"),
            "final_val_accuracy_by_class": self._accuracy_by_class() if status == "completed" else [],
            "client_trips": self.rounds,  # one trip per round
            "server_steps": self.rounds,
            "target_accuracy": cfg.target_accuracy,
            "max_trips": cfg.max_trips,
            "eval_every": cfg.eval_every,
            "max_rounds": cfg.max_rounds,
            "trip_budget": "whole rounds",
            "sim_time": None,  # no clients, no clock: null here, empty in metrics.csv, not printed
            "trainer": "lightning.Trainer",
            "device": self.accelerator,
            "processes": 1,
            "precision": cfg.precision,
            "numerics": cfg.numerics,
            **describe_numerics(),
            "wall_seconds": seconds,
            "run_dir": str(self.run_dir),
            "resumed_at_trips": self.resumed_at,
            "config_digest": config_digest(self.config),
        }
        for callback in self.callbacks:
            summary.update(callback.summary(self))
        summary["sim_time_to_target"] = None  # (the target's evaluation has no clock either)
        return summary
