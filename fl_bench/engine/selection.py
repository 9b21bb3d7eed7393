"""Selection policies: which idle, available clients start the next trips (``conf/selection/``;
the role of FLSim's ``active_user_selectors`` and Flower's ``ClientManager.sample``).

A policy takes ``count`` clients out of the population's pool (fewer when fewer are available)
and returns them in the order their trips start. Draws use the run's seeded Generator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from omegaconf import MISSING

from fl_bench.engine.population import ClientPopulation
from fl_bench.errors import ConfigError
from fl_bench.schema import choice, schema


class Selection(ABC):
    """A selection policy, built from its config, the population and each client's expected trip
    duration (``client_means``). ``takes_all`` marks a policy that takes every available client, which
    only synchronous rounds allow."""

    # True: the policy ignores ``count`` and takes every available client (a round of all of them).
    takes_all: bool = False

    def __init__(self, cfg, population: ClientPopulation, client_means: np.ndarray):
        self.cfg = cfg

    @abstractmethod
    def select(self, population: ClientPopulation, count: int, rng: np.random.Generator) -> list[int]:
        """Remove up to ``count`` clients from ``population.pool`` (fewer when fewer are there) and
        return them in the order their trips start; draws use ``rng``."""

    @staticmethod
    def _take(population: ClientPopulation, clients: np.ndarray) -> list[int]:
        chosen = clients.tolist()
        for client in chosen:
            population.pool.remove(client)
        return chosen


class UniformSelection(Selection):
    """Uniformly at random among the available idle clients (FedBuff, FedAvg)."""

    def select(self, population, count, rng):
        pool = population.pool
        return [pool.take(rng) for _ in range(min(count, len(pool)))]


class LongestAbsentSelection(Selection):
    """FedLaAvg Alg. 1 lines 5-7: the available clients whose latest selection is oldest
    (never-selected first), ties broken at random."""

    def select(self, population, count, rng):
        candidates = population.pool.members().copy()
        ties = rng.random(len(candidates))
        order = np.lexsort((ties, population.last_selected[candidates]))
        return self._take(population, candidates[order[:count]])


class AllAvailableSelection(Selection):
    """Every available idle client (HFL: all normal devices train every round)."""

    takes_all = True

    def select(self, population, count, rng):
        return self._take(population, population.pool.members().copy())


class WeightedSelection(Selection):
    """Without replacement, with probability proportional to a per-client weight: ``by=examples``
    (n_i) or ``by=mean_delay`` (expected trip duration; HFL's FedAvg samples proportionally to
    tau_i)."""

    def __init__(self, cfg, population, client_means):
        super().__init__(cfg, population, client_means)
        self.weight = population.sizes.astype(float) if cfg.by == "examples" else client_means
        if not (self.weight > 0).all():
            raise ConfigError(f"selection.by={cfg.by} gives a client weight <= 0: every weight must be > 0")

    def select(self, population, count, rng):
        candidates = population.pool.members().copy()
        p = self.weight[candidates]
        picked = rng.choice(len(candidates), size=min(count, len(candidates)), replace=False, p=p / p.sum())
        return self._take(population, candidates[picked])


SELECTION_WEIGHTS = ("examples", "mean_delay")


@dataclass
class SelectionConfig:
    """Which available idle clients start trips (fl_bench.engine.selection)."""

    name: str = MISSING
    _target_: str = MISSING


@schema("selection", "uniform", UniformSelection)
class UniformSelectionConfig(SelectionConfig):
    """selection=uniform: uniformly at random among the available idle clients."""


@schema("selection", "longest_absent", LongestAbsentSelection)
class LongestAbsentSelectionConfig(SelectionConfig):
    """selection=longest_absent: the available clients selected longest ago first (FedLaAvg)."""


@schema("selection", "all_available", AllAvailableSelection)
class AllAvailableSelectionConfig(SelectionConfig):
    """selection=all_available: every available idle client (synchronous rounds only)."""


@schema("selection", "weighted", WeightedSelection)
class WeightedSelectionConfig(SelectionConfig):
    """selection=weighted: without replacement, in proportion to ``by``: examples (n_i) or
    mean_delay (expected trip duration)."""

    by: str = "examples"

    def __post_init__(self) -> None:
        choice("selection.by", self.by, SELECTION_WEIGHTS)
