"""One run, in three parts: ``build`` every object from the Config, ``simulate`` on the engine,
``summarise``. The run log is closed in a ``finally``: a diverged, failed or interrupted run still
leaves its metrics.csv, trips.csv and summary.json (with its ``status``). Checkpoints
(fl_bench.runs.checkpoint) let a killed or interrupted run go on from where it was."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import operator
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_bench.algorithms.hfl import HFLConfig
from fl_bench.clients.costs import example_flops, trip_flops
from fl_bench.clients.distributed import DistributedTrainer, launched_rank
from fl_bench.clients.hardware import Placement, place, resolve_accelerator
from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.task import ClassificationTask, LightningTaskConfig, builtin_task, drop_last
from fl_bench.clients.trainer import ClientTrainer
from fl_bench.contracts import Server
from fl_bench.data import FederatedData, build_dataset
from fl_bench.data.datamodule import refuse_fresh_reads
from fl_bench.data.downloads import download_settings
from fl_bench.data.partition import LabelGroupsPartitionConfig
from fl_bench.engine.delays import StragglerDelays
from fl_bench.engine.population import ClientPopulation
from fl_bench.engine.protocol import Rounds, build_protocol
from fl_bench.engine.simulator import Progress, Simulator
from fl_bench.errors import ConfigError, DivergenceError, FLBenchError, NoProgressError
from fl_bench.models import build_model
from fl_bench.numerics import describe as describe_numerics
from fl_bench.numerics import kernels, require_portable_process
from fl_bench.privacy.server import private_server
from fl_bench.runs.callbacks import (
    Callback,
    Checkpointing,
    CsvLog,
    PrivacyAccounting,
    ProgressBar,
    StragglerAccuracy,
    Target,
    TaskMetricsLog,
    WeightShares,
)
from fl_bench.runs.checkpoint import (
    CHECKPOINT,
    load_checkpoint,
    remove_checkpoint,
    remove_partial_checkpoints,
    save_checkpoint,
    save_verified,
    set_rng_states,
)
from fl_bench.runs.centralized import CentralizedRun
from fl_bench.runs.config import Config, config_digest, result_config
from fl_bench.runs.pooled import CentralizedConfig
from fl_bench.runs.fairness import accuracy_by_class
from fl_bench.runs.pruning import final_status, with_pruning
from fl_bench.runs.interrupt import STOP
from fl_bench.runs.run_dir import RunDirectory, error_line, finished_summary, writing
from fl_bench.runs.run_log import RunLog
from fl_bench.schema import build

logger = logging.getLogger(__name__)


@dataclass
class Experiment:
    """Every object of one run, as :func:`build_experiment` builds them."""

    cfg: Config
    data: FederatedData
    task: ClassificationTask
    trainer: ClientTrainer
    server: Server  # what the loop steps: the algorithm, or under DP the trusted aggregator around it
    simulator: Simulator
    example_flops: float = 0.0  # one example's forward + backward (fl_bench.clients.costs)
    placement: Placement | None = None  # device, batched trips, CUDA graphs (auto choices resolved)
    notes: tuple[str, ...] = ()  # how the clients' minibatches and a user's data are read (data_notes)

    def describe(self) -> list[str]:
        """The run's first lines: where and how clients train (and, for a LightningModule, how it steps),
        then how the clients' minibatches and a user's DataModule are read."""
        describe = getattr(self.trainer, "describe", None)
        return [self.placement.describe(), *([describe()] if describe else []), *self.notes]


def data_notes(data: FederatedData, local: LocalTraining, why: str) -> tuple[str, ...]:
    """The run's lines on what is not plain minibatch SGD over every example: short last batches left
    out (and why), and a user's DataModule's loader settings that the clients' minibatches replace."""
    notes = list(data.notes)
    if local.drop_last:
        notes.append(f"minibatches: each epoch's short last batch is left out ({why}); a client with fewer than "
                     f"algorithm.batch_size={local.batch_size} examples trains on them all as one batch")
    elif why:
        notes.append(f"minibatches: each epoch's short last batch is kept ({why})")
    size = data.loader.get("batch_size")
    if size is not None and size != local.batch_size:
        notes.append(f"dataset: train_dataloader()'s batch_size={size} is not used: clients step on minibatches of "
                     f"algorithm.batch_size={local.batch_size} (set algorithm.batch_size={size} for the DataModule's)")
    return tuple(notes)


def build_experiment(cfg: Config, on_eval, between_events=None) -> Experiment:
    """Every object of a run; bad input fails here, before any output is written. A multi-process run
    (``devices`` x ``num_nodes`` > 1) launches its processes here (Lightning Fabric)."""
    if cfg.numerics == "portable":
        require_portable_process()
    torch.manual_seed(cfg.seed)  # model initialisation
    accelerator = "cpu" if cfg.numerics == "portable" else cfg.accelerator  # the portable kernels are CPU ones
    resolve_accelerator(accelerator, cfg.devices, example_flops=0.0)  # an unavailable GPU fails before any data is built
    if isinstance(cfg.algorithm, CentralizedConfig):
        raise ConfigError("algorithm=centralized trains with lightning.Trainer, not on the simulator: "
                          "run it with run_experiment (fl_bench.runs.centralized)")
    with download_settings(cfg.data_mirror, cfg.progress):  # a missing dataset or GloVe file is fetched here
        data = build_dataset(cfg.dataset, cfg.partition)
        model = build_model(cfg.model, data.input_shape, data.num_classes, data.vocab)
    lightning = isinstance(cfg.task, LightningTaskConfig)
    if lightning:
        from fl_bench.clients.lightning_metrics import TaskMetrics
        from fl_bench.clients.lightning_task import build_lightning_task
        from fl_bench.clients.lightning_trainer import LightningClientTrainer

        task = build_lightning_task(cfg.task, model, data)
        if cfg.cuda_graphs:
            raise ConfigError("cuda_graphs=true is not allowed with task=lightning: a module's trips step through its "
                              "own optimizer, which no graph holds; use cuda_graphs=null or false")
    else:
        task = builtin_task(cfg.model, model, data, cfg.algorithm.entropy_weight)
        refuse_fresh_reads(data, "task=builtin trains on stored examples")
    drops, why = drop_last(cfg.task, task.model, data.loader)
    local = LocalTraining.from_config(cfg.algorithm, drop_last=drops)
    check_single_example_batches(task, data, local)
    per_example = example_flops(task, data, local.batch_size)  # counted on the CPU, before choosing the device
    metrics = TaskMetrics() if lightning else None
    placement = place(accelerator, cfg.devices, cfg.num_nodes, cfg.strategy, cfg.precision,
                      cfg.vmap_clients, False if lightning else cfg.cuda_graphs, task.model, per_example,
                      loggers=[metrics] if lightning else [], lightning_task=lightning)
    placement.launch()  # a multi-process run's other processes start here and build the same objects
    device = placement.device
    data = data.to(device)
    if lightning:
        task.set_up(placement.fabric, metrics, data.x_val, data.y_val)
    else:
        task = task.to(device)
    # The initial model, flat in the trainer's layout (every trainable parameter, in module order).
    initial = torch.cat([p.detach().reshape(-1) for p in task.parameters() if p.requires_grad])
    server = build(cfg.algorithm, initial, data.num_clients, client_sizes=data.sizes)
    # The clients step with the algorithm's rule (FedGBO's U, MFL's moving state).
    update = server.local_update()
    if lightning:
        own_optimizer = type(update) is LocalUpdate and not server.reads_client_rule
        if cfg.precision == "16-mixed" and not own_optimizer:
            raise ConfigError(f"precision=16-mixed is not allowed with algorithm={cfg.algorithm.name}: its clients step "
                              f"with the algorithm's rule, which takes no scaled loss; use bf16-mixed or 32-true")
        trainer = LightningClientTrainer(task, data, local, update, placement.fabric, own_optimizer, cfg.precision,
                                         chunk=cfg.vmap_chunk)
        trainer.choose_batching(server.broadcast(), placement.batched)
        if placement.batched and trainer.batched is None:  # (the task's line says why; the auto reason no longer holds)
            why = "; ".join(part for part in placement.why.split("; ") if part and not part.startswith("batched"))
            placement = dataclasses.replace(placement, batched=False, why=why)
    else:
        if cfg.precision == "16-mixed":
            raise ConfigError("precision=16-mixed is not allowed with task=builtin: its batched steps take no scaled "
                              "loss; use bf16-mixed (as fast on GPUs that have it) or task=lightning")
        trainer = ClientTrainer(task, data, local, vmap=placement.batched, chunk=cfg.vmap_chunk, update=update,
                                graphs=placement.graphs, precision=cfg.precision)
    if placement.processes > 1:
        trainer = DistributedTrainer(trainer, placement.fabric)
    delays = build(cfg.speed, cfg.delay, data)
    if isinstance(cfg.algorithm, HFLConfig) and isinstance(delays, StragglerDelays) and not delays.straggler.any():
        cfg.algorithm.refuse_readings_without_stragglers(
            f"speed.fraction={cfg.speed.fraction} makes none of the {data.num_clients} devices a straggler")
    client_means = delays.client_means()
    # fl_bench.engine.behaviour: failures, communication, partial work, outages
    behaviour = build(cfg.behaviour, data, cfg.seed, client_means)
    availability = build(cfg.availability, data)
    population = ClientPopulation(data.sizes, behaviour.with_outages(availability) if behaviour else availability)
    selection = build(cfg.selection, population, client_means)
    policy = build_protocol(getattr(server, "step_policy", None), cfg.algorithm, cfg.concurrency, cfg.arrival_rate,
                            selection.takes_all)
    flops_by_client = trip_flops(data.sizes, local, trainer.update, per_example, trainer.flat.numel())
    # under DP the loop steps the trusted aggregator around the algorithm (fl_bench.privacy)
    server = private_server(cfg, server, trainer, data.num_clients, device)
    simulator = Simulator(
        server=server,
        trainer=trainer,
        population=population,
        selection=selection,
        delays=delays,
        policy=policy,
        rng=np.random.default_rng(cfg.seed),
        max_trips=cfg.max_trips,
        max_steps=cfg.max_rounds,
        eval_every=cfg.eval_every,
        on_eval=on_eval,
        seed=cfg.seed,
        concurrency=cfg.concurrency,
        between_events=between_events,
        flops_by_client=flops_by_client,
        steps_by_client=local.num_steps(np.asarray(data.sizes, dtype=np.int64)),
        behaviour=behaviour,
        work=build(cfg.algorithm.work_schedule),
    )
    return Experiment(cfg, data, task, trainer, server, simulator, per_example, placement,
                      data_notes(data, local, why))


def check_single_example_batches(task: Any, data: FederatedData, local: LocalTraining) -> None:
    """Where a client's minibatches include one of a single example (task.drop_last off and n mod B = 1,
    a client of one example, or B = 1), the task's loss must take one: BatchNorm cannot normalise a
    single value per channel in training. Tried on a copy of the task, before any trip, where a batch
    of two examples works (else the loss's own error is reported where it occurs)."""
    sizes = np.asarray(data.sizes)
    single = sizes == 1 if local.drop_last else sizes % local.batch_size == 1 % local.batch_size
    if local.batch_size > 1 and not single.any():
        return
    client = int(np.flatnonzero(single)[0]) if single.any() else 0
    probe = copy.deepcopy(task)
    x, y = data.client(client)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.random.fork_rng():
            torch.autograd.grad(probe.loss(x, y), [p for p in probe.parameters() if p.requires_grad])

    try:
        step(data.x[:2], data.y[:2])
    except Exception:
        return  # (not a matter of one example: the FLOP count's step reports it)
    try:
        step(x[:1], y[:1])
    except Exception as error:  # the user's model: whatever it raises, one line
        n = int(sizes[client])
        fix = ("use algorithm.batch_size >= 2" if local.batch_size == 1 else
               "use a partition whose clients hold at least 2 examples" if n == 1 else
               "set task.drop_last=true (each epoch's short last batch is left out)")
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        cause = text if isinstance(error, FLBenchError) else f"{type(error).__name__}: {text}"
        raise ConfigError(f"client {client}'s minibatches include one of a single example ({n} examples in batches of "
                          f"{local.batch_size}, drop_last={local.drop_last}), and the task's loss fails on it "
                          f"({cause}): {fix}") from error


def _server_step_knob(algorithm: Any) -> str:
    """' or algorithm.<the key that sizes the server step> (<value>)', for the divergence message."""
    key = algorithm.step_size_key()
    return f" or algorithm.{key} ({operator.attrgetter(key)(algorithm)})" if key else ""


def default_callbacks(cfg: Config, num_clients: int, progress: bool = True, task_metrics=None) -> list[Callback]:
    """The callbacks every run of ``cfg`` has: the logs, fairness where clients form label groups,
    the target, the progress bar, checkpoints, privacy accounting under DP, and accuracy per group
    of devices where there are stragglers."""
    callbacks: list[Callback] = [CsvLog()]
    if isinstance(cfg.partition, LabelGroupsPartitionConfig):
        callbacks.append(WeightShares(cfg.partition.clients_per_group))
    callbacks += [Target(cfg.target_accuracy, cfg.max_trips, cfg.stop_at_target), ProgressBar(cfg.max_trips, cfg.progress and progress),
                  Checkpointing(cfg.checkpoint_every, cfg.checkpoint_minutes), StragglerAccuracy()]
    if cfg.dp.name != "none":
        callbacks.append(PrivacyAccounting())
    if task_metrics is not None:  # task=lightning: what the module logs
        callbacks.append(TaskMetricsLog(task_metrics))
    return callbacks


class Run:
    """One run around the simulator: it evaluates the global model when the loop asks, writes
    checkpoints and restores them, and makes the summary; logs, the target, checkpoint scheduling,
    the progress bar, fairness and privacy accounting hang on it as callbacks
    (fl_bench.runs.callbacks), called in list order."""

    checkpoint_name = CHECKPOINT  # in the run directory: the same command goes on from it

    def __init__(self, cfg: Config, run_dir: Path, config: dict[str, Any], callbacks: list[Callback] = (),
                 writes: bool = True):
        self.cfg, self.run_dir, self.config = cfg, run_dir, config
        # False in a multi-process run's processes other than rank 0: the same simulation, no checkpoints,
        # logs in a scratch directory (fl_bench.clients.distributed)
        self.writes = writes
        self.extra_callbacks = list(callbacks)
        self.callbacks: list[Callback] = []  # the defaults and the extra ones, once the objects are built
        self._between: list[Callback] = []
        self.resumed_at: list[int] = []  # client trips at which this run was resumed
        self.seconds_before = 0.0  # wall seconds of the run's earlier (interrupted) parts
        self.evaluated_since_resume = False  # a divergence before it names the checkpoint as a suspect
        self.exp: Experiment
        self.log: RunLog

    def build(self) -> None:
        """Every object of the run (bad input fails here) and its callbacks."""
        self.exp = build_experiment(self.cfg, self.on_eval, self.between_events)
        self.callbacks = with_pruning(self.cfg.pruning, default_callbacks(
            self.cfg, self.exp.data.num_clients, progress=self.writes,
            task_metrics=getattr(self.exp.task, "metrics", None)) + self.extra_callbacks)
        # between_events runs after every event: call only the callbacks that override it
        self._between = [c for c in self.callbacks if type(c).between_events is not Callback.between_events]

    def on_eval(self, p: Progress) -> bool:
        """The loop's evaluation hook: evaluate the global model, call the callbacks; True: stop."""
        exp = self.exp
        exp.trainer.load(exp.server.params)
        loss, acc = exp.task.evaluate(exp.data.x_val, exp.data.y_val)
        if not math.isfinite(loss) or math.isinf(acc):  # NaN accuracy: a task without one
            raise DivergenceError(f"validation loss {loss}", trips=p.trips, server_step=p.server_step)
        row = dict(trips=p.trips, server_step=p.server_step, sim_time=p.sim_time, val_accuracy=acc, val_loss=loss,
                   **exp.simulator.costs)
        stop = False
        for callback in self.callbacks:
            stop = bool(callback.on_evaluation(self, p, row)) or stop
        self.evaluated_since_resume = True
        logger.info("trips %d, server step %d, sim time %.2f: val accuracy %.4f, loss %.4f",
                    p.trips, p.server_step, p.sim_time, acc, loss)
        return stop

    def between_events(self) -> None:
        """The loop's hook after every event."""
        for callback in self._between:
            callback.between_events(self)

    def checkpoint(self) -> None:
        """Write a checkpoint: the simulator's state, the RNGs, the run's and every callback's state
        (rank 0 alone in a multi-process run: every process holds the same state)."""
        if not self.writes:
            return
        sim = self.exp.simulator
        run = dict(callbacks={callback.key: callback.state_dict() for callback in self.callbacks}, rows=self.log.rows,
                   resumed_at=self.resumed_at, seconds=self.seconds_before + time.perf_counter() - self.started,
                   wandb_id=self.log.wandb_id)
        save_checkpoint(self.run_dir / CHECKPOINT, self.config, sim.state_dict(), run)
        for callback in self.callbacks:
            callback.on_checkpoint(self)
        logger.info("checkpoint at trips %d, server step %d", sim.trips, sim.server.version)

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from a checkpoint: the simulator's state, the RNGs, this run's and its callbacks'."""
        run = state["run"]
        if "callbacks" not in run:  # written before the run's state moved into its callbacks (issue 30)
            raise ConfigError(f"{self.run_dir / CHECKPOINT} was written by an older fl_bench, without its callbacks' "
                              f"state: it cannot be resumed; run again with resume=false to start over")
        sim = self.exp.simulator
        sim.load_state_dict(state["simulator"])
        self.exp.server = sim.server
        set_rng_states(state["rng"])
        for callback in self.callbacks:
            if callback.key in run["callbacks"]:
                callback.load_state_dict(run["callbacks"][callback.key])
        self.resumed_at = [*run["resumed_at"], sim.trips]
        self.seconds_before = run["seconds"]

    def _check_progress(self) -> None:
        """NoProgressError (one line, status failed) for a run whose server never stepped: every trip
        failed, or the budget ended before the first step was due."""
        sim = self.exp.simulator
        if self.exp.server.version > 0:
            return
        failed, rounds = sim.failures["failed_trips"], self.cfg.max_rounds
        why = (f"every one of its {sim.trips} client trips failed on its device (behaviour={self.cfg.behaviour.name})"
               if failed == sim.trips else
               f"its {sim.trips} client trips ({failed} failed on their device) never made a server step due "
               f"(max_trips={self.cfg.max_trips}, max_rounds={'null' if rounds is None else rounds})")
        raise NoProgressError(f"the run made no server step, so its model never changed: {why}; allow more trips, "
                              f"fewer failures, or less work per step (a smaller buffer or cohort)")

    def checkpoint_to_resume(self, directory: RunDirectory) -> dict[str, Any] | None:
        """The run directory's checkpoint, when ``resume`` allows (refused in one line when it is
        another config's or damaged)."""
        path = directory.path / self.checkpoint_name
        if self.cfg.resume is False or not path.exists():
            if self.cfg.resume:
                raise ConfigError(f"resume=true but {directory.path} holds no {CHECKPOINT}: run without resume=true to start it")
            return None
        return load_checkpoint(path, self.config, self.exp.trainer.device)

    @cached_property
    def final_predictions(self) -> torch.Tensor | None:
        """The final model's class for every validation example (None: a task without classes),
        computed once, when the summary asks."""
        exp = self.exp
        if not exp.task.predicts_classes:
            return None
        exp.trainer.load(exp.server.params)
        with torch.no_grad():
            exp.task.eval()
            predicted = torch.cat([exp.task(x).argmax(-1) for x in exp.data.x_val.split(8192)])
            exp.task.train()
        return predicted

    def execute(self, checkpoint: dict[str, Any] | None) -> dict[str, Any]:
        """Simulate to the end, from ``checkpoint`` if given, and write the logs and summary whatever
        the outcome (a completed run also ``model.pt``; a completed or diverged one drops its
        checkpoint). Returns the summary; DivergenceError and KeyboardInterrupt propagate."""
        cfg, exp, run_dir = self.cfg, self.exp, self.run_dir
        self.started = time.perf_counter()
        if checkpoint is not None:
            self.restore(checkpoint)
        run = checkpoint["run"] if checkpoint else {}
        self.log = RunLog(run_dir, self.config, cfg.logger if self.writes else "csv", cfg.wandb, run.get("rows", ()),
                          run.get("wandb_id"))
        for line in exp.describe():
            logger.info("%s", line)
            if cfg.progress and self.writes:
                print(f"fl_bench: {line}", flush=True)
        for callback in self.callbacks:
            callback.on_start(self, checkpoint is not None)
        if checkpoint is not None:
            logger.info("resumed from the checkpoint at trips %d, server step %d", exp.simulator.trips, exp.server.version)
        status, diverged, simulate_start = "failed", {}, time.perf_counter()
        try:
            with STOP.deferred():
                exp.simulator.run(resume=checkpoint is not None)
            ended = final_status(self.callbacks, "completed")
            if ended == "completed":  # (a pruned run stopped early on purpose)
                self._check_progress()
            status = ended
        except DivergenceError as error:
            status = "diverged"
            diverged.update(trips=error.trips, server_step=error.server_step)
            advice = error.advice(f"lower algorithm.client_lr ({cfg.algorithm.client_lr}){_server_step_knob(cfg.algorithm)}")
            if checkpoint is not None and not self.evaluated_since_resume:
                advice = (f"this run went on from {CHECKPOINT} at trips {self.resumed_at[-1]} and diverged before its "
                          f"first evaluation since: suspect the checkpoint if the run was healthy before it (run again with "
                          f"resume=false to start over), else {advice}")
            raise DivergenceError(
                f"training diverged ({error}) after {error.trips} trips, server step {error.server_step}: {advice}",
                error.trips, error.server_step,
            ) from None
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            now = time.perf_counter()
            timing = dict(wall_seconds=self.seconds_before + now - self.started, simulate_seconds=now - simulate_start)
            summary = summarise(self, status, timing, diverged)
            summary["error"] = error_line(sys.exc_info()[1]) if status == "failed" else None
            for callback in self.callbacks:
                callback.on_end(self, status, summary)
            # the model, then the remaining trips and summary.json last (RunLog.finish): a run stopped at any
            # point before the summary's rename is no result
            if status == "completed":
                exp.trainer.load(exp.server.params)
                with writing(run_dir / "model.pt"):
                    save_verified(exp.task.model.state_dict(), run_dir / "model.pt")
            summary = self.log.finish(exp.simulator.log.columns(), summary)
            if status in ("completed", "diverged", "pruned"):  # final: nothing to resume
                remove_checkpoint(run_dir / CHECKPOINT)
            logger.info("%s: %s", status, json.dumps({k: summary[k] for k in _SUMMARY_LINE}))
        return summary


_SUMMARY_LINE = ("final_val_accuracy", "client_trips", "server_steps", "trips_to_target", "sim_time", "wall_seconds")


def run_experiment(cfg: Config, run_dir: Path, hydra_files: dict[str, Any] | None = None,
                   callbacks: list[Callback] = ()) -> dict[str, Any]:
    """Run ``cfg`` in ``run_dir``, or go on from the checkpoint there (``cfg.resume``). A run
    directory already holding this config's finished run is left as it is (its summary returned);
    another config's finished run is replaced, another config's checkpoint refused. ``callbacks``
    hang on the run after the default ones (fl_bench.runs.callbacks)."""
    run_dir = Path(run_dir)
    config = result_config(cfg)
    if launched_rank() != 0:
        return _run_other_process(cfg, run_dir, config, callbacks)
    run = (CentralizedRun if isinstance(cfg.algorithm, CentralizedConfig) else Run)(cfg, run_dir, config, callbacks)
    directory = RunDirectory(run_dir)
    with directory.locked(), kernels(cfg.numerics, cfg.threads):
        try:
            finished = _finished_summary(directory, cfg, config)
            if finished is not None:
                if (kept := _replaced(directory, finished["status"])) is not None:  # a replacement killed after
                    logger.warning("%s", kept)                                      # its run finished: settled now
                return finished
            if cfg.resume is False or not (run_dir / run.checkpoint_name).exists():  # starts over: keep the earlier run
                directory.set_aside()
            run.build()
            checkpoint = run.checkpoint_to_resume(directory)
        except BaseException:
            directory.remove_if_fresh()  # bad input leaves no orphan run directory
            directory.restore()  # nor a damaged earlier run
            raise
        try:
            directory.save_configs(hydra_files or {})
            remove_partial_checkpoints(run_dir)
            with writing(run_dir):  # (metrics.csv and trips.csv grow as the run goes: a disk can fill)
                summary = run.execute(checkpoint)
        except DivergenceError as error:  # a result, which replaces the earlier run unless that one completed
            kept = _replaced(directory, "diverged")
            if kept is not None:
                raise DivergenceError(f"{error}; {kept}", error.trips, error.server_step) from None
            raise
        except KeyboardInterrupt:  # resumable: the earlier run stays aside until this one ends
            raise
        except BaseException:  # no result: the earlier run comes back
            directory.restore()
            raise
        kept = _replaced(directory, summary["status"])
        if kept is not None:
            logger.warning("%s", kept)
        return summary


def _replaced(directory: RunDirectory, status: str) -> str | None:
    """The run ended ``status`` (completed, diverged, pruned). A completed run replaces the earlier run set
    aside, with a warning if that one had finished; another keeps a completed earlier run in its place and
    goes beside it: the line saying so (None: it replaced the earlier run)."""
    kept = directory.keep_completed(status) if status != "completed" else None
    if kept is not None:
        return (f"{directory.path} keeps the completed run it held (another config's), and this {status} run is in "
                f"{kept}")
    earlier = directory.replaced()
    if earlier is not None and earlier.get("status") in ("completed", "diverged"):
        logger.warning("%s held a finished run (%s): replaced by this run", directory.path, earlier["status"])
    return None


def _run_other_process(cfg: Config, run_dir: Path, config: dict[str, Any], callbacks: list[Callback]) -> dict[str, Any]:
    """A multi-process run's process other than rank 0: the same simulation, in step with rank 0, that
    writes nothing into ``run_dir`` (its logs go to a scratch directory, removed after) and resumes
    from the checkpoint rank 0 wrote there."""
    directory = RunDirectory(run_dir)
    with tempfile.TemporaryDirectory(prefix="fl_bench_rank_") as scratch, kernels(cfg.numerics, cfg.threads):
        finished = _finished_summary(directory, cfg, config, quiet=True)
        if finished is not None:
            return finished
        run = Run(cfg, Path(scratch), config, callbacks, writes=False)
        run.build()
        return run.execute(run.checkpoint_to_resume(directory))


def _finished_summary(directory: RunDirectory, cfg: Config, config: dict[str, Any], quiet: bool = False
                      ) -> dict[str, Any] | None:
    summary = finished_summary(directory.path)
    if cfg.resume is False or summary is None:
        return None
    if summary.get("config_digest") != config_digest(config):
        return None  # replaced once this run has finished (run_experiment)
    logger.info("%s already holds this run (%s); resume=false runs it again", directory.path, summary["status"])
    if not quiet:
        print(f"fl_bench: {directory.path} already holds this run ({summary['status']}): nothing to do; resume=false runs it again")
    return summary


def summarise(run: Run, status: str, timing: dict[str, float], diverged: dict[str, int]) -> dict[str, Any]:
    """summary.json: the run's own keys, then each callback's."""
    cfg, exp, log = run.cfg, run.exp, run.log
    sim, trips = exp.simulator, exp.simulator.log.columns()
    final = log.rows[-1] if log.rows else {}
    summary = {
        "status": status,  # completed | diverged | pruned (a tuning trial stopped early) | interrupted | failed
        # Where a NaN/Inf model (checked after every server step) or loss stopped the run.
        "diverged_at_trips": diverged.get("trips"),
        "diverged_at_step": diverged.get("server_step"),
        "algorithm": cfg.algorithm.name,
        "dataset": exp.data.name,
        "seed": cfg.seed,
        "concurrency": cfg.concurrency,
        "final_val_accuracy": final.get("val_accuracy"),
        "final_val_loss": final.get("val_loss"),
        # What val_accuracy is (a user's module: the metric its validation step logs, or its logits' argmax);
        # null: no accuracy is measured, and trips_to_target stays null ("no accuracy logged")
        "accuracy_source": getattr(exp.task, "accuracy_source", None),
        # Per label, of the final model (FedStaleWeight's per-group accuracy; empty without accuracy).
        "final_val_accuracy_by_class": accuracy_by_class(exp.data.y_val, run.final_predictions, exp.data.num_classes),
        "client_trips": sim.trips,
        "trips_trained": sim.trained,  # more than client_trips when trips in flight at the end were trained
        "server_steps": exp.server.version,
        "target_accuracy": cfg.target_accuracy,
        "max_trips": cfg.max_trips,
        "eval_every": cfg.eval_every,  # the first evaluation: a table whose arms all reach the target there is saturated
        "max_rounds": cfg.max_rounds,
        # exact: the run stops at max_trips; whole rounds: a synchronous run ends on a whole round, so
        # client_trips may pass max_trips by up to one round's trips (over-selected ones included).
        "trip_budget": "whole rounds" if isinstance(exp.simulator.policy, Rounds) else "exact",
        "sim_time": sim.now,
        "mean_client_time": sim.delays.mean(),  # FedBuff Table 6's unit of wall-clock time
        "mean_staleness": float(np.mean(trips["staleness"])) if len(sim.log) else 0.0,
        # Communication (FedGBO Table I): bytes every logged trip downloaded and uploaded.
        "bytes_down": int(trips["bytes_down"].sum()),
        "bytes_up": int(trips["bytes_up"].sum()),
        # behaviour=unreliable (fl_bench.engine.behaviour): trips lost part-way and the compute time they spent
        **sim.failures,
        "comm_time": float(trips["comm_time"].sum()) if "comm_time" in trips else 0.0,
        "flops": float(trips["flops"].sum()),  # local training of the uploaded trips (FedGBO App. B)
        "flops_per_example": exp.example_flops,  # one example's forward + backward, counted
        # Where and how clients trained (the auto choices resolved: fl_bench.clients.hardware).
        "device": str(exp.placement.device),
        "vmap_clients": exp.placement.batched,
        "cuda_graphs": exp.placement.graphs,
        "processes": exp.placement.processes,  # devices x num_nodes (fl_bench.clients.distributed)
        "precision": exp.placement.precision,
        # What computed it: native or portable kernels (fl_bench.numerics), torch and the CPU kernels it used.
        "numerics": cfg.numerics,
        **describe_numerics(),
        # Memory of per-client state: the server algorithm's store and the engine's population arrays.
        "client_state_bytes": exp.server.client_state_nbytes(),
        "server_state_bytes": exp.server.server_state_nbytes(),  # e.g. HFL's past models
        "population_bytes": sim.population.nbytes,
        **timing,  # wall_seconds: the whole run; simulate_seconds: the event loop (training, aggregation, evaluation)
        "run_dir": str(run.run_dir),
        # Client trips at which the run went on from a checkpoint (empty: one uninterrupted run).
        "resumed_at_trips": run.resumed_at,
        "wandb_run_id": log.wandb_id,  # logger=wandb: the W&B run (a resumed run continues it)
        "wandb_group": log.wandb_group,  # its group: the experiment preset (fl_bench.runs.run_log.run_labels)
        "config_digest": config_digest(run.config),  # equal for runs of one config (seed included)
    }
    for callback in run.callbacks:
        summary.update(callback.summary(run))
    return summary
