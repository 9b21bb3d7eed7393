"""Twelve components (algorithm, server optimizer, weighting, staleness function, work schedule, delay law, speed
model, availability, selection, model, dataset, partition), each a class or function with its config dataclass
below it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from torch import nn

from fl_bench.algorithms.base import ServerAlgorithm, SyncConfig
from fl_bench.algorithms.server_optimizers import ServerOptimizerConfig
from fl_bench.algorithms.weightings import Staleness, StalenessConfig, Weighting, WeightingConfig
from fl_bench.data.federated import DatasetConfig, Examples
from fl_bench.data.partition import PartitionConfig, federate
from fl_bench.engine.availability import Availability, AvailabilityConfig
from fl_bench.engine.delays import ClientDelays, Delay, DelayConfig, SpeedConfig
from fl_bench.engine.protocol import Rounds
from fl_bench.engine.selection import Selection, SelectionConfig
from fl_bench.engine.work import WorkSchedule, WorkScheduleConfig
from fl_bench.models import ModelConfig
from fl_bench.schema import build, require, schema


# ----------------------------------------------------------------------------- algorithm
class TrimmedFedAvg(ServerAlgorithm):
    """Coordinate-wise trimmed mean (Yin et al. 2018): per coordinate, drop the ``trim_fraction``
    largest and smallest of the round's updates and average the rest; w <- w - that mean."""

    step_policy = Rounds

    def __init__(self, cfg, params, num_clients, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self.deltas: list[torch.Tensor] = []

    def add(self, upload):
        self.deltas.append(upload.vector.clone())

    def _step(self):
        stacked = torch.stack(self.deltas).sort(dim=0).values
        trim = math.floor(self.cfg.trim_fraction * len(self.deltas))
        self.params -= stacked[trim: len(self.deltas) - trim].mean(0)
        self.deltas = []


@schema("algorithm", "trimmed_fedavg", TrimmedFedAvg)
class TrimmedFedAvgConfig(SyncConfig):
    # SyncConfig: the knobs of Rounds (cohort, deadline, ...); its code reads none of the server knobs that
    # fl_bench.algorithms.base's mixins add (weighting, staleness scaling, a server optimizer), so it has none
    trim_fraction: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.trim_fraction < 0.5, "algorithm.trim_fraction", self.trim_fraction, "must be in [0, 0.5)")


# ----------------------------------------------------------------------------- server optimizer
class Yogi(torch.optim.Optimizer):
    """FedYogi's server step (Reddi et al., ICLR 2021, Alg. 2): m <- b1 m + (1 - b1) g, v <- v - (1 - b2) g^2
    sign(v - g^2), w <- w - lr m / (sqrt(v) + tau), m and v from 0 (the paper's v_{-1} >= tau^2: here
    ``initial_v``)."""

    def __init__(self, params, lr: float, betas: tuple[float, float], tau: float, initial_v: float):
        super().__init__(params, {"lr": lr, "betas": betas, "tau": tau, "initial_v": initial_v})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                state = self.state[param]
                if not state:
                    state.update(m=torch.zeros_like(param), v=torch.full_like(param, group["initial_v"]))
                g2 = param.grad * param.grad
                state["m"].mul_(beta1).add_(param.grad, alpha=1 - beta1)
                state["v"].sub_((1 - beta2) * g2 * torch.sign(state["v"] - g2))
                param.addcdiv_(state["m"], state["v"].sqrt().add_(group["tau"]), value=-group["lr"])


def yogi(cfg, params):
    return Yogi(params, lr=cfg.lr, betas=tuple(cfg.betas), tau=cfg.tau, initial_v=cfg.initial_v)


@schema("server_optimizer", "yogi", yogi)
class YogiServerOptimizerConfig(ServerOptimizerConfig):
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.99])
    tau: float = 1e-3  # the adaptivity
    initial_v: float = 1e-6  # v_{-1} >= tau^2

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "algorithm.server_optimizer.betas",
                self.betas, "need [beta1, beta2], each in [0, 1)")
        require(self.tau > 0, "algorithm.server_optimizer.tau", self.tau, "must be > 0")
        require(self.initial_v >= self.tau ** 2, "algorithm.server_optimizer.initial_v", self.initial_v, "must be >= tau^2")


# ----------------------------------------------------------------------------- weighting
class SqrtExamples(Weighting):
    """w_i = sqrt(n_i): between uniform and example weights, so that large clients count more, but less than n_i."""

    def weight(self, upload):
        return math.sqrt(upload.num_examples)


@schema("weighting", "sqrt_examples", SqrtExamples)
class SqrtExamplesWeightingConfig(WeightingConfig):
    pass


# ----------------------------------------------------------------------------- staleness function
class HingeStaleness(Staleness):
    """Xie et al. 2019's hinge function: s(tau) = 1 for tau <= b, else 1 / (a (tau - b) + 1)."""

    @property
    def constant(self):
        return self.cfg.a == 0

    def scale(self, staleness):
        return 1.0 if staleness <= self.cfg.b else 1.0 / (self.cfg.a * (staleness - self.cfg.b) + 1.0)


@schema("staleness", "hinge", HingeStaleness)
class HingeStalenessConfig(StalenessConfig):
    a: float = 10.0
    b: int = 4

    def __post_init__(self):
        super().__post_init__()
        require(self.a >= 0, "algorithm.staleness.a", self.a, "must be >= 0")
        require(self.b >= 0, "algorithm.staleness.b", self.b, "must be >= 0")


# ----------------------------------------------------------------------------- delay law
class LogNormalDelay(Delay):
    """exp(N(mu, sigma^2)) per trip."""

    def __init__(self, cfg):
        self.mu, self.sigma = cfg.mu, cfg.sigma

    def sample(self, rng, num_examples):
        return float(rng.lognormal(self.mu, self.sigma))

    def mean(self, num_examples):
        return math.exp(self.mu + self.sigma**2 / 2) * np.ones_like(num_examples)


@schema("delay", "lognormal", LogNormalDelay)
class LogNormalDelayConfig(DelayConfig):
    mu: float = 0.0
    sigma: float = 0.5

    def __post_init__(self) -> None:
        require(self.sigma > 0, "delay.sigma", self.sigma, "must be > 0")


# ----------------------------------------------------------------------------- speed model
def by_size(cfg, delay_cfg, data) -> ClientDelays:
    """Client i's draws are multiplied by (n_i / mean n)^exponent: larger clients are slower."""
    factor = (data.sizes / data.sizes.mean()) ** cfg.exponent
    return ClientDelays([build(delay_cfg)], data.sizes, factor=factor)


@schema("speed", "by_size", by_size)
class BySizeSpeedConfig(SpeedConfig):
    exponent: float = 1.0


# ----------------------------------------------------------------------------- availability
class Alternating(Availability):
    """Even clients are available during [2kP, (2k + 1)P), odd ones during [(2k + 1)P, (2k + 2)P)."""

    def __init__(self, cfg, data):
        super().__init__(cfg, data.num_clients)
        self.period = cfg.period
        self._next = 1  # the next change is at 1 * period
        self._parity = np.arange(self.num_clients) % 2

    def initial(self):
        return self._parity == 0

    def next_change(self):
        return self._next * self.period

    def pop_change(self):
        clock, turn = self._next * self.period, self._next % 2
        self._next += 1
        on = np.flatnonzero(self._parity == turn)
        return clock, on, np.flatnonzero(self._parity != turn)

    def max_available(self):
        return (self.num_clients + 1) // 2

    def window_end(self, client, t):
        return (math.floor(t / self.period) + 1) * self.period


@schema("availability", "alternating", Alternating)
class AlternatingAvailabilityConfig(AvailabilityConfig):
    period: float = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.period > 0, "availability.period", self.period, "must be > 0")


# ----------------------------------------------------------------------------- selection
class FastestSelection(Selection):
    """The available idle clients with the shortest expected trips first."""

    def __init__(self, cfg, population, client_means):
        super().__init__(cfg, population, client_means)
        self.client_means = client_means

    def select(self, population, count, rng):
        candidates = population.pool.members().copy()
        order = np.argsort(self.client_means[candidates], kind="stable")
        return self._take(population, candidates[order[:count]])


@schema("selection", "fastest", FastestSelection)
class FastestSelectionConfig(SelectionConfig):
    pass


# ----------------------------------------------------------------------------- model
def tanh_mlp(cfg, input_shape, num_classes, vocab=None) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), cfg.hidden), nn.Tanh(),
                         nn.Linear(cfg.hidden, num_classes))


@schema("model", "tanh_mlp", tanh_mlp)
class TanhMLPConfig(ModelConfig):
    hidden: int = 16


# ----------------------------------------------------------------------------- dataset
def blobs(cfg, partition_cfg):
    """Gaussian blobs: one mean per class, examples split into clients by the run's partition."""
    rng = np.random.default_rng(cfg.data_seed)
    centres = rng.normal(0.0, cfg.separation, (cfg.num_classes, cfg.dim))

    def draw(n):
        y = rng.integers(0, cfg.num_classes, n)
        return Examples((centres[y] + rng.normal(0.0, 1.0, (n, cfg.dim))).astype(np.float32), y.astype(np.int64))

    return federate(cfg.name, draw(cfg.num_examples), draw(cfg.num_examples // 4), partition_cfg, cfg.num_classes)


@schema("dataset", "blobs", blobs)
class BlobsConfig(DatasetConfig):
    num_examples: int = 2000
    num_classes: int = 4
    dim: int = 5
    separation: float = 2.0
    data_seed: int = 0


# ----------------------------------------------------------------------------- partition
def label_shards(cfg, pool, num_classes):
    """McMahan et al. (2017)'s pathological split: examples sorted by label, dealt into
    ``num_clients`` contiguous shards whose sizes grow linearly, the last ``size_ratio`` times the first."""
    order = np.argsort(pool.y, kind="stable")
    weights = np.linspace(1.0, cfg.size_ratio, cfg.num_clients)
    sizes = np.floor(weights / weights.sum() * len(pool)).astype(np.int64)
    sizes[-1] += len(pool) - sizes.sum()
    return order, sizes


@schema("partition", "label_shards", label_shards)
class LabelShardsPartitionConfig(PartitionConfig):
    num_clients: int = 20
    size_ratio: float = 3.0

    def __post_init__(self) -> None:
        require(self.num_clients >= 1, "partition.num_clients", self.num_clients, "must be >= 1")
        require(self.size_ratio >= 1, "partition.size_ratio", self.size_ratio, "must be >= 1")


# ----------------------------------------------------------------------------- work schedule
class TimeBoxed(WorkSchedule):
    """Each trip trains the local steps that fit in ``budget`` of virtual time at its client's last measured time
    per step (its previous trip's duration over its steps), at least 1 and at most its full work; a client not
    measured yet does its full work. The server learns each speed from the trip that ends."""

    fixed = False

    def __init__(self, cfg):
        super().__init__(cfg)
        self.per_step: dict[int, float] = {}  # client -> its last trip's time per local step

    def assign(self, clients, now, full):
        return [int(f) if c not in self.per_step else
                max(1, min(int(f), math.floor(self.cfg.budget / self.per_step[c]))) for c, f in zip(clients, full)]

    def observe(self, trip):
        if not trip.aborted and trip.steps > 0:
            self.per_step[trip.client] = (trip.end - trip.start) / trip.steps


@schema("work_schedule", "time_boxed", TimeBoxed)
class TimeBoxedConfig(WorkScheduleConfig):
    budget: float = 1.0  # virtual time a trip may train for

    def __post_init__(self) -> None:
        super().__post_init__()
        require(math.isfinite(self.budget) and self.budget > 0, "algorithm.work_schedule.budget", self.budget, "must be > 0")
