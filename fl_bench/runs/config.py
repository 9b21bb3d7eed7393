"""The run's config: the root schema that composes one option of every component group with the
run's own knobs, and its registration in Hydra's ConfigStore.

Each component's schema lives beside the component (``fl_bench.schema``): dataset and partition in
``fl_bench.data``, model in ``fl_bench.models``, algorithm, server optimizer, weighting and staleness function in
``fl_bench.algorithms``, delay, speed, availability and selection in ``fl_bench.engine``, DP in
``fl_bench.privacy``. Importing this module loads those (``BUILT_IN_MODULES``, through
:func:`fl_bench.schema.load_modules`, the path a plugin's modules take), which registers every built-in option;
:func:`register_configs` adds the plugins' and the root.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from fl_bench.algorithms.base import AlgorithmConfig
from fl_bench.clients.hardware import ACCELERATORS, PRECISIONS, STRATEGIES, check_cpu_devices, process_count
from fl_bench.clients.task import TaskConfig
from fl_bench.data.downloads import check_mirror
from fl_bench.data.federated import DatasetConfig
from fl_bench.data.partition import PartitionConfig
from fl_bench.engine.availability import AvailabilityConfig
from fl_bench.engine.behaviour import BehaviourConfig
from fl_bench.engine.delays import DelayConfig, SpeedConfig
from fl_bench.engine.selection import SelectionConfig
from fl_bench.models import ModelConfig
from fl_bench.numerics import MODES as NUMERICS_MODES
from fl_bench.privacy.server import DPConfig
from fl_bench.errors import ConfigError
from fl_bench.schema import check_keys, choice, load_modules, load_plugins, require

# The modules of the built-in options that this module does not import for their base schemas: loaded as a plugin's
# modules are (their @schema classes register themselves), before any plugin's
BUILT_IN_MODULES = (
    *(f"fl_bench.algorithms.{name}" for name in ("buffered", "ca2fl", "fadas", "fedcompass", "fedgbo", "fedlaavg",
                                                 "fedstaleweight", "hfl", "synchronous")),
    *(f"fl_bench.data.{name}" for name in ("datamodule", "sources", "synthetic", "two_means")),
    "fl_bench.runs.pooled",  # the pooled-data reference (algorithm=centralized)
)
load_modules({module: "fl_bench's built-in options" for module in BUILT_IN_MODULES})

LOGGERS = ("csv", "wandb")


def _devices_ok(devices: Any) -> bool:
    """A process count >= 1, or a non-empty list of distinct GPU indices."""
    if isinstance(devices, bool):
        return False
    if isinstance(devices, int):
        return devices >= 1
    try:
        indices = list(devices)
    except TypeError:
        return False
    return bool(indices) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices) \
        and len(set(indices)) == len(indices)


WANDB_MODES = ("online", "offline", "disabled")


@dataclass
class WandbConfig:
    """Where a ``logger=wandb`` run logs: the W&B project, entity and mode (``wandb.<key>``)."""

    project: str = "fl_bench"
    entity: Optional[str] = None
    # online | offline | disabled; WANDB_MODE in the environment wins. Online without an API key
    # falls back to offline (one warning line; `wandb sync` uploads the run later).
    mode: str = "online"

    def __post_init__(self) -> None:
        choice("wandb.mode", self.mode, WANDB_MODES)


# The summary keys whose value so far means something at every evaluation (fl_bench.runs.callbacks.Target)
PRUNING_OBJECTIVES = ("trips_to_target_or_shortfall", "trips_to_target_or_budget", "best_val_accuracy")
# The summary keys a tuning search may optimise (hydra.sweeper.objective, a sweep file's protocol.tuner.objective):
# numbers every finished run's summary.json holds (fl_bench.runs.experiment.summarise, callbacks.Target)
OBJECTIVES = (*PRUNING_OBJECTIVES, "final_val_accuracy", "final_val_loss")


@dataclass
class PruningConfig:
    """Where a tuning trial's run reports its objective at each evaluation (fl_bench.runs.pruning; set by
    the Optuna sweeper, not by hand)."""

    study: Optional[str] = None  # the study of this seed's runs (the run asks it for a trial); null: no pruning
    storage: Optional[str] = None  # its database URL (sqlite:///..., postgresql+psycopg2://...)
    objective: str = "trips_to_target_or_shortfall"  # one of PRUNING_OBJECTIVES

    def __post_init__(self) -> None:
        choice("pruning.objective", self.objective, PRUNING_OBJECTIVES)
        require(self.study is None or self.storage is not None, "pruning.storage", self.storage,
                "needs the database URL of pruning.study")
        if self.study is None:  # else they would be ignored
            require(self.storage is None, "pruning.storage", self.storage, "needs pruning.study (the study it holds)")
            require(self.objective == PruningConfig.objective, "pruning.objective", self.objective,
                    "needs pruning.study (the study it is reported to)")


@dataclass
class Config:
    """The root schema of a run: one option of every component group and the run's own knobs
    (budget, evaluation, hardware, logging, checkpoints)."""

    dataset: DatasetConfig = MISSING
    partition: PartitionConfig = MISSING
    model: ModelConfig = MISSING
    algorithm: AlgorithmConfig = MISSING
    delay: DelayConfig = MISSING
    availability: AvailabilityConfig = MISSING
    speed: SpeedConfig = MISSING
    behaviour: BehaviourConfig = MISSING
    selection: SelectionConfig = MISSING
    dp: DPConfig = MISSING
    task: TaskConfig = MISSING
    experiment_name: str = "default"
    seed: int = 0
    # M: clients training at once (async); the cohort size of synchronous algorithms.
    concurrency: int = 100
    # Client arrivals per unit of simulated time while fewer than `concurrency` are in flight;
    # null: concurrency / mean delay, so the system fills in about one mean trip duration.
    arrival_rate: Optional[float] = None
    max_trips: int = 20000  # budget of client trips
    # A budget of rounds (server steps) as well, whichever is spent first (HFL's T = 200 rounds: methods
    # whose rounds hold different numbers of trips get the same rounds). null: trips only.
    max_rounds: Optional[int] = None
    eval_every: int = 500  # evaluate the global model every this many client trips
    target_accuracy: float = 0.7
    stop_at_target: bool = False
    # Where and how clients train, in Lightning Fabric's names (fl_bench.clients.hardware).
    # accelerator: auto | cpu | cuda | gpu. auto: CUDA when there is a GPU and a training example costs
    # at least 1 MFLOP (below, a GPU is launch-bound and the CPU is faster).
    accelerator: str = "auto"
    # Processes per node (CPU) or GPUs (a count, or a list of GPU indices: [1] is cuda:1). Above one,
    # every process runs the same simulation and trains its share of each batch of client trips.
    devices: Any = 1
    num_nodes: int = 1
    # auto (ddp when devices x num_nodes > 1) | ddp: the processes' launch and collectives (gloo on CPU, NCCL on GPU)
    strategy: str = "auto"
    # Train a batch of client trips together, one pass per local step over stacked per-trip
    # parameters (same deltas as the sequential loop on the same seeds; augmentation draws differ).
    # null (auto): on CUDA, and on a CPU for models of Linear layers, where it is faster (fl_bench.clients.hardware).
    vmap_clients: Optional[bool] = None
    # Batched steps captured as CUDA graphs (one replay per local step). null (auto): whenever trips
    # are batched on CUDA; true needs both.
    cuda_graphs: Optional[bool] = None
    # Lightning's precision: 32-true, or client forward passes under bf16-mixed / 16-mixed autocast
    # (parameters, updates and evaluation stay fp32; 16-mixed scales the loss, for task=lightning).
    precision: str = "32-true"
    vmap_chunk: int = 256  # at most this many trips per vmap pass: bounds activation memory
    # torch intra-op threads on the CPU. 1: as fast as 2 on an idle 2-core machine for these small
    # models, not stalled beside other jobs (OpenMP's threads spin at every barrier: 2.9x slower with 2;
    # results/benchmarks.md, benchmarks/threads.py), and the same bytes on machines with any number of
    # cores. null: torch's default (one per core), for large models.
    threads: Optional[int] = 1
    # Floating-point kernels (fl_bench.numerics): "native", the fastest this machine has, or "portable",
    # byte-identical results on any x86-64 CPU (baseline kernels, one thread, on the CPU).
    numerics: str = "native"
    data_root: str = "~/.cache/fl_bench"
    # Fetch downloads from this mirror instead of their hosts: https://HOST/PATH from <data_mirror>/HOST/PATH
    # (an http(s):// or file:// URL; fl_bench.data.downloads). null: the hosts, unless FL_BENCH_DATA_MIRROR is set.
    data_mirror: Optional[str] = "${oc.env:FL_BENCH_DATA_MIRROR,null}"
    logger: str = "csv"
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True
    # Checkpoints (fl_bench.runs.checkpoint): every this many server steps, and/or every this many
    # minutes of wall time; always when the run is interrupted (Ctrl-C, SIGTERM). null: never.
    checkpoint_every: Optional[int] = None
    checkpoint_minutes: Optional[float] = 10.0
    # null: continue from the run directory's checkpoint if it has one of this config (re-running
    # the same command resumes); true: there must be one; false: start over, discarding it.
    resume: Optional[bool] = None
    # A tuning trial's run: where it reports its objective at each evaluation, and stops when pruned
    # (fl_bench.runs.pruning; set by the Optuna sweeper)
    pruning: PruningConfig = field(default_factory=PruningConfig)

    def __post_init__(self) -> None:
        require(self.seed >= 0, "seed", self.seed, "must be >= 0 (numpy seeds are non-negative)")
        if isinstance(self.partition, PartitionConfig):
            require(self.partition.seed >= 0, "partition.seed", self.partition.seed, "must be >= 0")
        require(self.concurrency >= 1, "concurrency", self.concurrency, "must be a positive integer")
        require(self.arrival_rate is None or self.arrival_rate > 0, "arrival_rate", self.arrival_rate, "must be > 0 or null")
        require(self.max_trips >= 1, "max_trips", self.max_trips, "must be >= 1")
        require(self.max_rounds is None or self.max_rounds >= 1, "max_rounds", self.max_rounds, "must be >= 1 or null")
        require(self.eval_every >= 1, "eval_every", self.eval_every, "must be >= 1")
        require(0 < self.target_accuracy <= 1, "target_accuracy", self.target_accuracy, "must be in (0, 1]")
        choice("accelerator", self.accelerator, ACCELERATORS)
        require(_devices_ok(self.devices), "devices", self.devices,
                "must be a number of processes >= 1 or a list of distinct GPU indices, e.g. [0, 1]")
        if self.accelerator == "cpu":
            check_cpu_devices(self.accelerator, self.devices)
        require(self.num_nodes >= 1, "num_nodes", self.num_nodes, "must be >= 1")
        choice("strategy", self.strategy, STRATEGIES)
        require(self.threads is None or self.threads >= 1, "threads", self.threads, "must be >= 1 or null")
        require(self.vmap_chunk >= 1, "vmap_chunk", self.vmap_chunk, "must be >= 1")
        if self.precision in ("fp32", "bf16"):
            raise ConfigError(f"precision={self.precision} is Lightning's "
                              f"{'32-true' if self.precision == 'fp32' else 'bf16-mixed'} now: choose one of {', '.join(PRECISIONS)}")
        choice("precision", self.precision, PRECISIONS)
        choice("numerics", self.numerics, NUMERICS_MODES)
        if self.numerics == "portable":
            require(self.threads in (None, 1), "threads", self.threads,
                     "numerics=portable computes with one intra-op thread: use threads=1 or null "
                     "(for speed, run several runs at once)")
            require(self.accelerator in ("auto", "cpu"), "accelerator", self.accelerator,
                    "numerics=portable runs on the CPU: use accelerator=cpu or auto")
            require(self.precision == "32-true", "precision", self.precision, "numerics=portable computes in 32-true")
        choice("logger", self.logger, LOGGERS)
        check_mirror(self.data_mirror)
        require(self.checkpoint_every is None or self.checkpoint_every >= 1, "checkpoint_every", self.checkpoint_every,
                 "must be >= 1 (server steps) or null")
        require(self.checkpoint_minutes is None or self.checkpoint_minutes > 0, "checkpoint_minutes",
                 self.checkpoint_minutes, "must be > 0 or null")
        require(self.pruning.study is None or process_count(self.devices, self.num_nodes) == 1, "pruning.study",
                self.pruning.study, "a tuning run reports from one process: use devices=1 num_nodes=1")


# Run keys that change where a run writes, how visibly, or on which hardware, not the experiment: the
# hardware keys and threads change the kernels' float rounding (a metric's last digits; the same bytes
# only for equal values: tests/runs/test_determinism.py), not what is computed. A resumed run may change
# them (a checkpoint of any other difference is refused), and a run
# directory's finished run counts as this config's whatever they are (fl_bench.runs.experiment).
NOT_RESULT_KEYS = ("resume", "progress", "checkpoint_every", "checkpoint_minutes", "logger", "wandb", "threads",
                   "accelerator", "devices", "num_nodes", "strategy", "cuda_graphs", "data_root", "data_mirror")


def to_config(cfg: DictConfig) -> Config:
    """The composed config as the run's objects, the one way a command makes them: a key that no schema has
    (a ``+``/``++`` override's typo) is refused first, then each schema's ``__post_init__`` checks its values."""
    check_keys(cfg)
    return OmegaConf.to_object(cfg)


def result_config(cfg: Config) -> dict[str, Any]:
    """The config as plain containers: what the checkpoint, the digest and the logs record."""
    return OmegaConf.to_container(OmegaConf.structured(cfg))


def config_digest(config: dict[str, Any]) -> str:
    """A short hash of every key that changes results (not where or how visibly a run logs)."""
    relevant = {key: value for key, value in config.items() if key not in NOT_RESULT_KEYS}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


def register_configs() -> None:
    """Register the root schema (``config_schema``) and the plugins' components; the built-in
    options registered themselves when this module loaded them (``BUILT_IN_MODULES``). Safe to call again; ConfigError
    (one line) for a plugin module that cannot be imported."""
    ConfigStore.instance().store(name="config_schema", node=Config)
    load_plugins()
