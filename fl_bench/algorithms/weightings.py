"""How much an upload counts in a server step: two component kinds that the server algorithms read.

- A **weighting** (``algorithm/weighting=<name>``) weighs an upload by its client's data: w_i, 1 for every
  upload (``uniform``) or its examples n_i (``examples``). The algorithm normalises the weights as its paper says
  (FedBuff and the FedAvg family: over the step's uploads; FedCompass: by the mean client size).
- A **staleness function** (``algorithm/staleness=<name>``) scales an upload of staleness tau (server steps since
  its client's download) by s(tau) in (0, 1]: ``polynomial``, s(tau) = (1 + tau)^-a (FedBuff Sec. 5; Xie et al.
  2019's polynomial function), with ``algorithm.staleness.exponent=a``; ``constant``, s(tau) = 1.

Each option is a class with its config dataclass beside it, registered as every component is
(``@schema("weighting", name, cls)``, ``@schema("staleness", name, cls)``: fl_bench.schema), with its YAML in
``conf/algorithm/weighting/`` or ``conf/algorithm/staleness/``. A plugin adds one the same way
(docs/extending/plugins.md). An algorithm's config holds the kinds its code reads (the ``Weighted`` and
``StalenessScaled`` mixins of fl_bench.algorithms.base); under DP, a weighting that is not ``constant`` is refused
(a client's normalised weight, set by the others, has no bound), and so is a staleness function that is not
``constant`` under a mean over the step's s(tau).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from fl_bench.contracts import Upload
from fl_bench.errors import ConfigError
from fl_bench.schema import SCHEMAS, import_path, require, schema


class Weighting:
    """An upload's weight by its client's data, w_i >= 0, before the algorithm normalises it. ``constant``: every
    upload weighs the same (the only kind a private step allows)."""

    constant: ClassVar[bool] = False

    def __init__(self, cfg: "WeightingConfig"):
        self.cfg = cfg

    def weight(self, upload: Upload) -> float:
        raise NotImplementedError


class UniformWeighting(Weighting):
    """w_i = 1 (FedBuff Table 7's uniform arm; FedGBO's Alg. 1, (1/|S_t|) sum y_K)."""

    constant = True

    def weight(self, upload: Upload) -> float:
        return 1.0


class ExampleWeighting(Weighting):
    """w_i = n_i, the client's examples (FedAvg; FedBuff Table 7's example arm)."""

    def weight(self, upload: Upload) -> float:
        return float(upload.num_examples)


class Staleness:
    """s(tau), the scale of an upload of staleness tau: in (0, 1], 1 at tau = 0 for the built-in one.
    ``constant``: s(tau) = 1 for every tau under this config."""

    def __init__(self, cfg: "StalenessConfig"):
        self.cfg = cfg

    @property
    def constant(self) -> bool:
        raise NotImplementedError

    def scale(self, staleness: int) -> float:
        raise NotImplementedError

    def checked_scale(self, staleness: int) -> float:
        """:meth:`scale`, refused in one line outside (0, 1] (a private step's sensitivity assumes s <= 1)."""
        s = self.scale(staleness)
        if not 0.0 < s <= 1.0:
            raise ConfigError(f"algorithm/staleness={self.cfg.name} gave s({staleness})={s!r}: a staleness function's "
                              "values must be in (0, 1]")
        return s


class ConstantStaleness(Staleness):
    """s(tau) = 1: no upload is weighed by its staleness (FADAS's Alg. 1)."""

    constant = True

    def scale(self, staleness: int) -> float:
        return 1.0


class PolynomialStaleness(Staleness):
    """s(tau) = (1 + tau)^-a (FedBuff Sec. 5; the polynomial function of Xie et al. 2019)."""

    @property
    def constant(self) -> bool:
        return self.cfg.exponent == 0

    def scale(self, staleness: int) -> float:
        return (1.0 + staleness) ** -self.cfg.exponent


@dataclass
class _ComponentConfig:
    """The base schema of one kind (``kind``): an algorithm's config types its field as the kind's base, so that any
    option composes over it (OmegaConf merges only subclasses of the node's type). An option's ``name`` and
    ``_target_`` are set by choosing it (``algorithm/<kind>=<name>``), not by hand: the base may carry any registered
    option's pair (an algorithm config's default), an option's subclass only its own."""

    kind: ClassVar[str]

    name: str = MISSING
    _target_: str = MISSING  # the class that fl_bench.schema.build makes from this config

    def __post_init__(self) -> None:
        option = SCHEMAS.get(self.kind, {}).get(self.name)
        own = type(self).name in (MISSING, self.name)  # (the base's class attribute is MISSING, an option's its name)
        require(option is not None and own and option._target_ == self._target_, f"algorithm.{self.kind}.name",
                self.name, f"is set by the option: choose it with algorithm/{self.kind}=<name>")


@dataclass
class WeightingConfig(_ComponentConfig):
    """The base schema of the weightings."""

    kind = "weighting"


@schema("weighting", "uniform", UniformWeighting)
class UniformWeightingConfig(WeightingConfig):
    """w_i = 1."""


@schema("weighting", "examples", ExampleWeighting)
class ExampleWeightingConfig(WeightingConfig):
    """w_i = n_i."""


def default_weighting(name: str):
    """An algorithm config's default weighting, the base schema carrying option ``name`` (its YAML chooses the same
    option, over which another choice composes)."""
    return lambda: WeightingConfig(name=name, _target_=SCHEMAS["weighting"][name]._target_)


@dataclass
class StalenessConfig(_ComponentConfig):
    """The base schema of the staleness functions. Left as it is (a config built in Python, not from its YAML), the
    constant function."""

    kind = "staleness"


@schema("staleness", "constant", ConstantStaleness)
class ConstantStalenessConfig(StalenessConfig):
    """s(tau) = 1."""


@schema("staleness", "polynomial", PolynomialStaleness)
class PolynomialStalenessConfig(StalenessConfig):
    """s(tau) = (1 + tau)^-exponent; exponent 0 weighs no upload by its staleness."""

    exponent: float = 0.5  # a (FedBuff's alpha; Xie et al.'s a)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(math.isfinite(self.exponent) and self.exponent >= 0, "algorithm.staleness.exponent", self.exponent,
                "must be >= 0")


def default_staleness() -> StalenessConfig:
    """An algorithm config's default staleness function in Python: the base schema carrying the constant function (a
    YAML's choice composes over it; OmegaConf merges an option only into a node of its base type)."""
    return StalenessConfig(name="constant", _target_=import_path(ConstantStaleness))


