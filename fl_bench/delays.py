"""Client trip durations on the simulated clock (FedBuff App. C.1-C.2). All draws use the run's
seeded numpy Generator."""

from __future__ import annotations

import math

import numpy as np

from fl_bench.config import (
    ConstantDelayConfig,
    DelayConfig,
    ExamplesExponentialDelayConfig,
    ExponentialDelayConfig,
    HalfNormalDelayConfig,
    UniformDelayConfig,
)


class Delay:
    def sample(self, rng: np.random.Generator, num_examples: int) -> float:
        raise NotImplementedError

    def mean(self, mean_examples: float) -> float:
        """Expected duration, for a client of average size."""
        raise NotImplementedError


class HalfNormalDelay(Delay):
    def __init__(self, sigma: float):
        self.sigma = sigma

    def sample(self, rng, num_examples):
        return abs(rng.standard_normal()) * self.sigma

    def mean(self, mean_examples):
        return self.sigma * math.sqrt(2 / math.pi)


class UniformDelay(Delay):
    def __init__(self, low: float, high: float):
        self.low, self.high = low, high

    def sample(self, rng, num_examples):
        return rng.uniform(self.low, self.high)

    def mean(self, mean_examples):
        return (self.low + self.high) / 2


class ExponentialDelay(Delay):
    def __init__(self, mean: float):
        self._mean = mean

    def sample(self, rng, num_examples):
        return rng.exponential(self._mean)

    def mean(self, mean_examples):
        return self._mean


class ExamplesExponentialDelay(Delay):
    """T_i ~ Exp(mean = lam * n_i): larger clients take longer (straggler parameter lam)."""

    def __init__(self, lam: float):
        self.lam = lam

    def sample(self, rng, num_examples):
        return rng.exponential(self.lam * num_examples)

    def mean(self, mean_examples):
        return self.lam * mean_examples


class ConstantDelay(Delay):
    def __init__(self, value: float):
        self.value = value

    def sample(self, rng, num_examples):
        return self.value

    def mean(self, mean_examples):
        return self.value


def build_delay(cfg: DelayConfig) -> Delay:
    if isinstance(cfg, HalfNormalDelayConfig):
        return HalfNormalDelay(cfg.sigma)
    if isinstance(cfg, UniformDelayConfig):
        return UniformDelay(cfg.low, cfg.high)
    if isinstance(cfg, ExponentialDelayConfig):
        return ExponentialDelay(cfg.mean)
    if isinstance(cfg, ExamplesExponentialDelayConfig):
        return ExamplesExponentialDelay(cfg.lam)
    if isinstance(cfg, ConstantDelayConfig):
        return ConstantDelay(cfg.value)
    raise TypeError(f"no delay distribution for {cfg!r}")
