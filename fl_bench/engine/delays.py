"""How long a client trip takes on the virtual clock.

A *delay law* is the distribution of one trip's duration given the client's example count
(``conf/delay/``: FedBuff App. C.1-C.2). A *speed model* (``conf/speed/``) makes speeds persistent
per client: which law a client draws from and a speed factor that scales its draws (FedStaleWeight's
fast and slow agents, HFL's stragglers). :class:`ClientDelays` joins the two; the engine asks it
for ``sample(rng, client)``. All draws use the run's seeded numpy Generator.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from omegaconf import MISSING

from fl_bench.data.label_groups import groups_by_label
from fl_bench.errors import ConfigError
from fl_bench.schema import SCHEMAS, build, require, schema
from fl_bench.traces.formats import read_fedscale_capacity


class Delay(ABC):
    """A delay law. ``sample`` draws one duration for a client of ``num_examples`` examples;
    ``mean`` is the expected duration for such a client (sets the default arrival rate)."""

    @abstractmethod
    def sample(self, rng: np.random.Generator, num_examples: int) -> float:
        """One trip duration (>= 0) for a client of ``num_examples`` examples, drawn with ``rng``."""

    @abstractmethod
    def mean(self, num_examples: float) -> float:
        """The expected duration for a client of ``num_examples`` examples. ``ClientDelays`` passes an
        array of counts, so the result must be a float or an array that broadcasts over it."""


class HalfNormalDelay(Delay):
    """|N(0, sigma^2)|, the production-like default (FedBuff App. C.1, Fig. 5)."""

    def __init__(self, cfg):
        self.sigma = cfg.sigma

    def sample(self, rng, num_examples):
        return abs(rng.standard_normal()) * self.sigma

    def mean(self, num_examples):
        return self.sigma * math.sqrt(2 / math.pi)


class UniformDelay(Delay):
    """U(low, high), whatever the client's size."""

    def __init__(self, cfg):
        self.low, self.high = cfg.low, cfg.high

    def sample(self, rng, num_examples):
        return rng.uniform(self.low, self.high)

    def mean(self, num_examples):
        return (self.low + self.high) / 2


class ExponentialDelay(Delay):
    """Exp(mean), whatever the client's size."""

    def __init__(self, cfg):
        self._mean = cfg.mean

    def sample(self, rng, num_examples):
        return rng.exponential(self._mean)

    def mean(self, num_examples):
        return self._mean


class ExamplesExponentialDelay(Delay):
    """T_i ~ Exp(mean = lam * n_i): larger clients take longer (straggler parameter lam)."""

    def __init__(self, cfg):
        self.lam = cfg.lam

    def sample(self, rng, num_examples):
        return rng.exponential(self.lam * num_examples)

    def mean(self, num_examples):
        return self.lam * num_examples


class ConstantDelay(Delay):
    """Every trip takes ``value``."""

    def __init__(self, cfg):
        self.value = cfg.value

    def sample(self, rng, num_examples):
        return self.value

    def mean(self, num_examples):
        return self.value


class ClientDelays:
    """Trip durations per client: client c draws from ``laws[law_of[c]]`` (one law for all when
    ``law_of`` is None) and its draw is multiplied by its persistent speed factor ``factor[c]``
    (none: 1)."""

    def __init__(self, laws: list[Delay], sizes: np.ndarray, law_of: np.ndarray | None = None,
                 factor: np.ndarray | None = None):
        if factor is not None and not (factor > 0).all():
            bad = float(factor[~(factor > 0)][0])
            raise ConfigError(f"speed factor {bad:g} is not allowed: every client's speed factor must be > 0")
        self.laws, self.sizes, self.law_of, self.factor = laws, sizes, law_of, factor

    def sample(self, rng: np.random.Generator, client: int) -> float:
        """One trip duration of ``client``: a draw from its law, times its speed factor."""
        law = self.laws[0] if self.law_of is None else self.laws[self.law_of[client]]
        duration = law.sample(rng, int(self.sizes[client]))
        return duration if self.factor is None else duration * float(self.factor[client])

    def client_means(self) -> np.ndarray:
        """Each client's expected trip duration (laws' ``mean`` take arrays of example counts)."""
        law_of = np.zeros(len(self.sizes), dtype=np.int64) if self.law_of is None else self.law_of
        means = np.empty(len(self.sizes))
        for k, law in enumerate(self.laws):
            mine = law_of == k
            means[mine] = law.mean(self.sizes[mine].astype(float))
        return means if self.factor is None else means * self.factor

    def mean(self) -> float:
        """The population's mean trip duration (the default arrival rate fills the system in one)."""
        if self.law_of is None and self.factor is None:
            return self.laws[0].mean(float(np.mean(self.sizes)))  # a client of average size
        return float(np.mean(self.client_means()))


class StragglerDelays(ClientDelays):
    """HFL Sec. 5: a seeded fraction of clients are stragglers whose upload comes tau rounds late:
    their trip takes the delay law's draw plus tau * round_time, tau uniform over {1..tau_max},
    fixed per straggler (``tau[c]``) or drawn per trip. With rounds of ``round_time`` (a deadline)
    and normal trips shorter than it, a straggler that starts in round t uploads in round t + tau."""

    def __init__(self, laws, sizes, straggler: np.ndarray, tau: np.ndarray, tau_max: int, round_time: float,
                 per_trip: bool):
        super().__init__(laws, sizes)
        self.straggler, self.tau, self.tau_max = straggler, tau, tau_max
        self.round_time, self.per_trip = round_time, per_trip

    def sample(self, rng, client):
        """The delay law's draw for ``client``, plus tau * round_time for a straggler (its fixed tau,
        or one drawn per trip)."""
        duration = super().sample(rng, client)
        if not self.straggler[client]:
            return duration
        tau = int(rng.integers(1, self.tau_max + 1)) if self.per_trip else int(self.tau[client])
        return duration + tau * self.round_time

    def client_means(self):
        """Each client's expected trip duration: the law's mean, plus E[tau] * round_time for a
        straggler."""
        expected = (self.tau_max + 1) / 2 if self.per_trip else self.tau
        return super().client_means() + np.where(self.straggler, expected * self.round_time, 0.0)

    def mean(self) -> float:
        return float(np.mean(self.client_means()))


# ----------------------------------------------------------------------------- speed models
def law_from_spec(spec: dict, key: str) -> Delay:
    """A delay law written inline, e.g. ``{name: uniform, low: 8, high: 12}`` (checked by its schema)."""
    spec = dict(spec)
    name = spec.pop("name", None)
    schemas = SCHEMAS["delay"]
    if name not in schemas:
        raise ConfigError(f"{key}.name={name!r} is not allowed: choose one of {', '.join(schemas)}")
    try:
        cfg = schemas[name](**spec)
    except TypeError as err:
        raise ConfigError(f"{key}={spec} is not allowed for delay {name}: {err}") from None
    return build(cfg)


def no_speed(cfg, delay_cfg, data) -> ClientDelays:
    """Every client draws from the run's delay law; no persistent speeds."""
    return ClientDelays([build(delay_cfg)], data.sizes)


def two_tier(cfg, delay_cfg, data) -> ClientDelays:
    """A seeded ``slow_fraction`` of clients are persistently ``slow_factor`` times slower."""
    rng = np.random.default_rng(cfg.seed)
    factor = np.ones(data.num_clients)
    factor[rng.choice(data.num_clients, round(cfg.slow_fraction * data.num_clients), replace=False)] = cfg.slow_factor
    return ClientDelays([build(delay_cfg)], data.sizes, factor=factor)


def by_group(cfg, delay_cfg, data) -> ClientDelays:
    """Group g (clients whose main label is in ``groups[g]``) draws from ``delays[g]``
    (FedStaleWeight Sec. 6.2: labels 4-9 fast U(1, 2), labels 0-3 slow U(8, 12))."""
    if len(cfg.delays) != len(cfg.groups):
        raise ConfigError(f"speed.delays has {len(cfg.delays)} entries but speed.groups has {len(cfg.groups)}: give one delay law per group")
    laws = [law_from_spec(spec, f"speed.delays[{g}]") for g, spec in enumerate(cfg.delays)]
    groups = groups_by_label(data.y.cpu().numpy(), data.offsets, data.num_classes, cfg.groups, "speed.groups")
    return ClientDelays(laws, data.sizes, law_of=groups)


def stragglers(cfg, delay_cfg, data) -> StragglerDelays:
    """A seeded ``fraction`` of clients are stragglers, tau_i uniform over {1..tau_max} (HFL)."""
    rng = np.random.default_rng(cfg.seed)
    straggler = np.zeros(data.num_clients, dtype=bool)
    straggler[rng.choice(data.num_clients, round(cfg.fraction * data.num_clients), replace=False)] = True
    tau = np.where(straggler, rng.integers(1, cfg.tau_max + 1, data.num_clients), 0)
    return StragglerDelays([build(delay_cfg)], data.sizes, straggler, tau, cfg.tau_max, cfg.round_time,
                           per_trip=not cfg.persistent)


def speed_trace(cfg, delay_cfg, data) -> ClientDelays:
    """Client i's draws times its device's computation latency (FedScale's capacity trace, ms per
    sample) over the median of the run's clients: the trace sets who is slow and by how much, the delay
    law the unit and the noise (delay=exp_examples: a trip takes time in proportion to n_i x latency_i, as
    FedScale's 3 B Q latency)."""
    computation, _ = read_fedscale_capacity(cfg.path, data.num_clients, "speed.path", cfg.wrap)
    return ClientDelays([build(delay_cfg)], data.sizes, factor=computation / np.median(computation))


@dataclass
class DelayConfig:
    """A delay law: one trip's duration given the client's example count (fl_bench.engine.delays)."""

    name: str = MISSING
    _target_: str = MISSING


@schema("delay", "halfnormal", HalfNormalDelay)
class HalfNormalDelayConfig(DelayConfig):
    """|N(0, sigma^2)|: the production-like default (FedBuff App. C.1, Fig. 5)."""

    sigma: float = 1.0

    def __post_init__(self) -> None:
        require(self.sigma > 0, "delay.sigma", self.sigma, "must be > 0")


@schema("delay", "uniform", UniformDelay)
class UniformDelayConfig(DelayConfig):
    """delay=uniform: U(low, high), whatever the client's size."""

    low: float = 0.0
    high: float = 2.0

    def __post_init__(self) -> None:
        require(0 <= self.low < self.high, "delay.low/high", (self.low, self.high), "need 0 <= low < high")


@schema("delay", "exponential", ExponentialDelay)
class ExponentialDelayConfig(DelayConfig):
    """delay=exponential: Exp(mean), whatever the client's size."""

    mean: float = 1.0

    def __post_init__(self) -> None:
        require(self.mean > 0, "delay.mean", self.mean, "must be > 0")


@schema("delay", "exp_examples", ExamplesExponentialDelay)
class ExamplesExponentialDelayConfig(DelayConfig):
    """T_i ~ Exp(mean = lam * n_i): time proportional to client size (FedBuff App. C.2)."""

    lam: float = 0.01

    def __post_init__(self) -> None:
        require(self.lam > 0, "delay.lam", self.lam, "must be > 0")


@schema("delay", "constant", ConstantDelay)
class ConstantDelayConfig(DelayConfig):
    """delay=constant: every trip takes ``value``."""

    value: float = 1.0

    def __post_init__(self) -> None:
        require(self.value > 0, "delay.value", self.value, "must be > 0")


@dataclass
class SpeedConfig:
    """Persistent client speeds on top of the delay law (fl_bench.engine.delays)."""

    name: str = MISSING
    _target_: str = MISSING


@schema("speed", "none", no_speed)
class NoSpeedConfig(SpeedConfig):
    """speed=none: no persistent speeds; every client draws from the run's delay law."""


@schema("speed", "two_tier", two_tier)
class TwoTierSpeedConfig(SpeedConfig):
    """A seeded fraction of clients is persistently slow_factor times slower."""

    slow_fraction: float = 0.1
    slow_factor: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        require(0 <= self.slow_fraction <= 1, "speed.slow_fraction", self.slow_fraction, "must be in [0, 1]")
        require(self.slow_factor > 0, "speed.slow_factor", self.slow_factor, "must be > 0")


@schema("speed", "stragglers", stragglers)
class StragglersSpeedConfig(SpeedConfig):
    """HFL Sec. 5: a seeded ``fraction`` of clients are stragglers whose upload arrives tau rounds
    late, tau uniform over {1..tau_max}, fixed per straggler (persistent) or drawn per trip; a
    straggler's trip lasts the delay law's draw + tau * round_time. Use with rounds of round_time
    (algorithm.deadline) and a delay law shorter than it (delay=constant delay.value=0.5)."""

    fraction: float = 0.5
    tau_max: int = 10
    persistent: bool = True
    round_time: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        require(0 <= self.fraction <= 1, "speed.fraction", self.fraction, "must be in [0, 1]")
        require(self.tau_max >= 1, "speed.tau_max", self.tau_max, "must be >= 1")
        require(self.round_time > 0, "speed.round_time", self.round_time, "must be > 0")


@schema("speed", "by_group", by_group)
class ByGroupSpeedConfig(SpeedConfig):
    """Group g (clients whose main label is in groups[g]) draws its trip durations from delays[g],
    a delay law written inline ({name: uniform, low: 1, high: 2})."""

    groups: list[list[int]] = field(default_factory=lambda: [[4, 5, 6, 7, 8, 9], [0, 1, 2, 3]])
    delays: list[Any] = field(default_factory=lambda: [
        {"name": "uniform", "low": 1.0, "high": 2.0}, {"name": "uniform", "low": 8.0, "high": 12.0},
    ])


@schema("speed", "trace", speed_trace)
class TraceSpeedConfig(SpeedConfig):
    """Persistent speeds from FedScale's device capacity trace (``client_device_capacity``): client i's
    trip durations scale with its device's computation latency relative to the median."""

    path: str = MISSING
    wrap: bool = False  # fewer devices than clients: refused (false) or client i takes entry i mod M (true)
