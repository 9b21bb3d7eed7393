"""A reproduction's protocol: the rule every arm of a sweep file follows, written before the runs and
checked before any of them starts (issue 29). One tuner budget for every study (trials, random start-up
trials, objective), tuning seeds, an optional confirmation of the search's best settings on seeds of their
own, report seeds disjoint from them all, an optional power rule (report seeds per table from a pilot),
the verdict rule, and dated amendments. Nested special cases and the paper's values must lie in their
studies' search spaces.

The protocol's part of the sweep file's schema (:class:`Protocol`, :class:`Tuner`, :class:`Confirm`,
:class:`Power`) and every rule of it live here; fl_bench.analysis.sweep_file loads the whole file into
that schema and calls :meth:`Protocol.check` once, so every refusal is one ConfigError naming the file.
"""

from __future__ import annotations

import datetime
import difflib
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Optional

from omegaconf import MISSING

from fl_bench.errors import ConfigError
from fl_bench.runs.config import OBJECTIVES
from fl_bench.runs.pruning import PrunerConfig

from fl_bench.analysis.search_spaces import SPACES, contains, search_space
from fl_bench.runs.config import PRUNING_OBJECTIVES
from fl_bench.runs.pruning import make_pruner
from fl_bench.runs.tuning import AGGREGATES
from fl_bench.schema import plugin_conf_dirs


def spaces_of(overrides: list[str] = ()) -> tuple[Path, ...]:
    """Where a command's search spaces are found: conf/hparams_search, then the plugins' (:func:`plugin_spaces`)."""
    return (SPACES, *plugin_spaces(overrides))


def plugin_spaces(overrides: list[str]) -> list[Path]:
    """The ``hparams_search`` directories of the installed plugins' own ``conf/`` (fl_bench.schema.plugin_conf_dirs),
    then of the local config directories an override ``hydra.searchpath=[file://DIR, ...]`` adds (a plugin's own
    search spaces), in the order Hydra searches them."""
    directories = [conf / "hparams_search" for conf in plugin_conf_dirs()]
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") == "hydra.searchpath":
            directories += [Path(item.strip().strip("'\"")[len("file://"):]) / "hparams_search"
                            for item in value.strip("[]").split(",") if item.strip().strip("'\"").startswith("file://")]
    return directories


DIRECTIONS = ("minimize", "maximize")


@dataclass
class Confirm:
    """``protocol.tuner.confirm``: the search's best settings rerun on seeds it never saw."""

    finalists: int = MISSING  # the search's best settings that run on the confirmation seeds
    seeds: list[int] = MISSING  # apart from the tuning, report and pilot seeds
    aggregate: str = "worst"  # a finalist's score over all its seeds (tuning and confirmation)


@dataclass
class Tuner:
    """``protocol.tuner``: one budget for every study of the file."""

    trials: int = MISSING
    startup_trials: int = MISSING
    seeds: list[int] = MISSING
    objective: str = MISSING
    direction: str = MISSING
    pruner: Optional[PrunerConfig] = None  # null: every trial runs its whole budget
    aggregate: Optional[str] = None  # a trial's score over its tuning seeds: mean (null) | worst | median
    confirm: Optional[Confirm] = None  # null: the search's best is kept


    def kept(self) -> dict:
        """The search's settings as a study's tuned file keeps them (fl_bench.analysis.tuning), to tell whether
        the file was made by this search: every field but ``confirm``, those left null (and a pruner's) left out."""
        kept = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "confirm" and getattr(self, f.name) is not None}
        if self.pruner is not None:
            kept["pruner"] = {key: value for key, value in asdict(self.pruner).items() if value is not None}
        return kept


@dataclass
class Power:
    """``protocol.power``: report seeds set per table from a pilot's spread (fl_bench.analysis.power)."""

    pilot_seeds: list[int] = MISSING  # every arm runs on these first, before any report run
    cap: int = 30  # the most report seeds a table may take (the first ``cap`` of report_seeds)


@dataclass
class Protocol:
    """``protocol``: what every arm of a sweep file follows, written before the runs and checked before any of
    them starts (:meth:`check`): at least MIN_TRIALS trials for every tuned study, MIN_TUNING_SEEDS tuning
    seeds, MIN_REPORT_SEEDS report seeds none of which was tuned on. ``tuner`` is None for a paper whose
    protocol is not tuned (HFL: the paper's eta_0 for every method); its studies then have no space."""

    registered: str = MISSING  # the date the protocol was written, before its runs
    report_seeds: list[int] = MISSING  # with power: the pool, in order, of which a table takes the first n
    verdict: str = MISSING
    tuner: Optional[Tuner] = MISSING  # null: the paper's fixed setting, not tuned
    power: Optional[Power] = None  # null: every table reports on all report_seeds
    amended: list[str] = field(default_factory=list)  # "DATE: what changed after registration, and why"

    MIN_TRIALS: ClassVar[int] = 32
    MIN_TUNING_SEEDS: ClassVar[int] = 2
    MIN_REPORT_SEEDS: ClassVar[int] = 5
    MIN_PILOT_SEEDS: ClassVar[int] = 3

    def check(self, studies: dict, spaces: tuple[Path, ...], path: Path) -> None:
        """ConfigError naming ``path`` unless the protocol holds: seeds >= 0, each listed once, real dates in
        order, the tuner's objective and direction, MIN_REPORT_SEEDS distinct report seeds; a complete tuner
        (null only if no study names a space) with MIN_TRIALS trials and MIN_TUNING_SEEDS tuning seeds, none a
        report seed; seeds of the pilot and the confirmation apart from the others; each tuned study's paper values and special case
        inside its space (found in ``spaces``), and special cases that form no cycle."""
        try:
            self._check(studies, spaces)
        except ValueError as error:
            raise ConfigError(f"{path}: {error}") from None

    def _check(self, studies: dict, spaces: tuple[Path, ...]) -> None:
        tuner, confirm = self.tuner, self.tuner.confirm if self.tuner else None
        for key, seeds in (("protocol.report_seeds", self.report_seeds),
                           ("protocol.power.pilot_seeds", self.power.pilot_seeds if self.power else []),
                           ("protocol.tuner.seeds", tuner.seeds if tuner else []),
                           ("protocol.tuner.confirm.seeds", confirm.seeds if confirm else [])):
            first: dict[int, int] = {}
            for i, seed in enumerate(seeds):
                if seed < 0:
                    raise ValueError(f"{key}[{i}]={seed!r} is not allowed: seeds are integers >= 0")
                if seed in first:  # (a seed listed twice runs once: the list would count it twice)
                    raise ValueError(f"{key}[{i}]={seed!r} is not allowed: seed {seed} is also {key}[{first[seed]}]: "
                                     "list each seed once")
                first[seed] = i
        self._check_dates()
        if tuner:
            _choose("protocol.tuner.objective", tuner.objective, OBJECTIVES)
            _choose("protocol.tuner.direction", tuner.direction, DIRECTIONS)
        if confirm and confirm.finalists > tuner.trials:
            raise ValueError(f"protocol.tuner.confirm.finalists={confirm.finalists!r} is not allowed: at most "
                             f"protocol.tuner.trials ({tuner.trials}): the finalists are the search's best settings")
        if len(set(self.report_seeds)) < self.MIN_REPORT_SEEDS:
            raise ValueError(f"protocol.report_seeds={list(self.report_seeds)}: at least {self.MIN_REPORT_SEEDS} distinct seeds")
        tuned = [name for name, study in studies.items() if study.space is not None]
        if self.power is not None:
            self._check_power()
        if tuner is None:
            if tuned:
                raise ValueError(f"studies {', '.join(tuned)} name a search space but protocol.tuner is null")
            return
        if tuner.trials < self.MIN_TRIALS:
            raise ValueError(f"protocol.tuner.trials={tuner.trials}: at least {self.MIN_TRIALS} for every study")
        if not 0 <= tuner.startup_trials < tuner.trials:
            raise ValueError(f"protocol.tuner.startup_trials={tuner.startup_trials}: must be in [0, {tuner.trials})")
        if len(set(tuner.seeds)) < self.MIN_TUNING_SEEDS:
            raise ValueError(f"protocol.tuner.seeds={list(tuner.seeds)}: at least {self.MIN_TUNING_SEEDS} distinct seeds "
                             "(a setting tuned on one seed is tuned to its noise)")
        shared = sorted(set(tuner.seeds) & set(self.report_seeds))
        if shared:
            raise ValueError(f"seeds {shared} are both tuning and report seeds: report on seeds the tuner never saw")
        if tuner.aggregate not in (None, *AGGREGATES):
            raise ValueError(f"protocol.tuner.aggregate={tuner.aggregate!r}: choose one of {', '.join(AGGREGATES)}")
        if confirm is not None:
            self._check_confirm()
        if tuner.pruner:
            make_pruner(asdict(tuner.pruner), "protocol.tuner.pruner")  # ValueError for an unknown pruner
            if tuner.objective not in PRUNING_OBJECTIVES:
                raise ValueError(f"protocol.tuner.pruner needs an objective with a value so far ({', '.join(PRUNING_OBJECTIVES)}), "
                                 f"not {tuner.objective}")
        for name in tuned:
            self._check_study(name, studies, spaces)

    def _check_dates(self) -> None:
        """``registered`` is a real day, not in the future (the protocol is written before its runs); each
        amendment is 'YYYY-MM-DD: what changed and why', dated on or after registered (a day's protocol may be
        amended later that day, once runs have shown something), in date order, not in the future."""
        today = datetime.date.today()
        registered = _date(self.registered)
        if registered is None or registered > today:
            raise ValueError(f"protocol.registered={self.registered!r} is not allowed: it must be a date YYYY-MM-DD, not "
                             f"after today ({today}): the day the protocol was written, before its runs")
        previous = registered
        for i, entry in enumerate(self.amended):
            dated = re.match(r"(\S+): \S", entry)
            date = _date(dated.group(1)) if dated else None
            wrong = ("write 'YYYY-MM-DD: what changed and why', with a real date" if date is None
                     else f"dated after today ({today}): an amendment records a change already made" if date > today
                     else f"dated before registered ({registered}): an amendment changes the registered protocol"
                     if date < registered else f"dated before the entry above it ({previous}): entries go in date order"
                     if date < previous else "")
            if wrong:
                raise ValueError(f"protocol.amended[{i}]={entry if len(entry) <= 40 else entry[:40] + '...'!r} is not "
                                 f"allowed: {wrong}")
            previous = date

    def _check_confirm(self) -> None:
        """Finalists to choose among, on confirmation seeds of their own."""
        confirm = self.tuner.confirm
        if confirm.finalists < 2:
            raise ValueError(f"protocol.tuner.confirm.finalists={confirm.finalists}: at least 2 (one finalist has "
                             "nothing to be chosen over)")
        seeds = list(confirm.seeds)
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"protocol.tuner.confirm.seeds={seeds}: at least one seed, none repeated")
        shared = sorted(set(seeds) & {*self.tuner.seeds, *self.report_seeds, *(self.power.pilot_seeds if self.power else [])})
        if shared:
            raise ValueError(f"protocol.tuner.confirm.seeds {shared} are also tuning, report or pilot seeds: the "
                             "finalists run on seeds the search never saw, and the report on seeds neither saw")
        if confirm.aggregate not in AGGREGATES:
            raise ValueError(f"protocol.tuner.confirm.aggregate={confirm.aggregate!r}: choose one of {', '.join(AGGREGATES)}")

    def _check_power(self) -> None:
        """Pilot seeds apart from every other seed; a cap the report seeds can fill."""
        pilot, cap = list(self.power.pilot_seeds), self.power.cap
        if len(set(pilot)) < self.MIN_PILOT_SEEDS:
            raise ValueError(f"protocol.power.pilot_seeds={pilot}: at least {self.MIN_PILOT_SEEDS} distinct seeds "
                             "(a spread needs them)")
        shared = sorted(set(pilot) & {*self.report_seeds, *(self.tuner.seeds if self.tuner else [])})
        if shared:
            raise ValueError(f"protocol.power.pilot_seeds {shared} are also tuning or report seeds: the pilot sets the "
                             "number of report seeds, on seeds of its own")
        if not self.MIN_REPORT_SEEDS <= cap <= len(set(self.report_seeds)):
            raise ValueError(f"protocol.power.cap={cap}: must be at least {self.MIN_REPORT_SEEDS} and at most the "
                             f"{len(set(self.report_seeds))} report seeds listed")

    @staticmethod
    def _check_study(name: str, studies: dict, spaces: tuple[Path, ...]) -> None:
        """The study's space holds the paper's values and its special case, which is itself tuned."""
        study = studies[name]
        space = search_space(study.space, spaces)
        for key, values in (study.paper or {}).items():
            outside = [v for v in values if key not in space or not contains(space[key], v)]
            if outside:
                raise ValueError(f"study {name}: the paper's {key} values {outside} lie outside its space {study.space}")
        special = study.special_case
        if special is None:
            return
        base = special.study
        if base not in studies or studies[base].space is None or base == name:
            raise ValueError(f"study {name}: special_case.study={base!r} must name another tuned study")
        for key, value in special.set.items():
            if key not in space or not contains(space[key], value):
                raise ValueError(f"study {name}: its special case's {key}={value} lies outside its space {study.space}")
        start = {*search_space(studies[base].space, spaces), *special.set}
        if start != set(space):
            raise ValueError(f"study {name}: its special case ({base}'s keys and {sorted(special.set)}) sets "
                             f"{sorted(start)}, not its searched keys {sorted(space)}")
        seen = {name}
        while base is not None:  # a chain of special cases ends (FedAvgM -> FedAvg)
            if base in seen:
                raise ValueError(f"study {name}: its special cases form a cycle through {base}")
            seen.add(base)
            base = studies[base].special_case.study if studies[base].special_case else None

    def describe(self, nested: bool) -> str:
        """One paragraph for the tables' notes (``nested``: some study starts from its special case)."""
        if self.tuner is None:
            tuning = "not tuned: every method runs the paper's fixed setting"
        else:
            t = self.tuner
            start = "; a nested method's first trial is its special case's kept setting" if nested else ""
            pruner = t.pruner
            pruned = (f", hopeless trials stopped early by {pruner.name.replace('_', ' ')} (first rung "
                      f"{pruner.min_resource:,} client trips, reduction factor {pruner.reduction_factor or 3}, "
                      f"each run compared with the other settings' runs of its seed)" if pruner and pruner.name else "")
            seeds = ', '.join(map(str, t.seeds))
            score = {"worst": f"{t.objective} of the worst of tuning seeds {seeds}"}.get(
                t.aggregate, f"the {t.aggregate or 'mean'} {t.objective} over tuning seeds {seeds}")
            confirm, confirmed = t.confirm, ""
            if confirm:
                finalists = (f"its {confirm.finalists} best settings" + (", a nested study's start" if nested else "")
                             + " and the settings earlier tunings kept")
                confirmed = (f"; then {finalists} also ran on seeds {', '.join(map(str, confirm.seeds))} (an earlier "
                             f"setting on the tuning seeds as well), and the one with the {confirm.aggregate} seed over "
                             f"all {len(t.seeds) + len(confirm.seeds)} seeds was kept")
            tuning = f"every study {t.trials} TPE trials ({t.startup_trials} random){pruned}, objective {score}{start}{confirmed}"
        amended = "".join(f" Amended {change}." for change in self.amended)
        return (f"Protocol (registered {self.registered}): {tuning}; report seeds "
                f"{', '.join(map(str, self.report_seeds))}, none tuned on; verdict: {self.verdict}.{amended}")


def _date(text: str) -> datetime.date | None:
    """The day ``text`` names (YYYY-MM-DD); None for one that names none (2026-13-45, yesterday)."""
    try:
        return datetime.date.fromisoformat(text) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) else None
    except ValueError:
        return None


def _choose(key: str, value, options: tuple[str, ...]) -> None:
    """``value`` is one of ``options``, else one line with the closest."""
    if value not in options:
        close = difflib.get_close_matches(str(value), options, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"{key}={value!r} is not allowed: choose one of {', '.join(options)}{hint}")
