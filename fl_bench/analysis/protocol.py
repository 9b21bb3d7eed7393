"""A reproduction's protocol: the rule every arm of a sweep file follows, written before the runs and
checked before any of them starts (issue 29). One tuner budget for every study (trials, random start-up
trials, objective), tuning seeds, an optional confirmation of the search's best settings on seeds of their
own, report seeds disjoint from them all, an optional power rule (report seeds per table from a pilot),
the verdict rule, and dated amendments. Nested special cases and the paper's values must lie in their
studies' search spaces. The sweep file's schema (its keys and types) is fl_bench.analysis.sweep_file's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fl_bench.analysis.search_spaces import SPACES, contains, search_space
from fl_bench.runs.config import PRUNING_OBJECTIVES
from fl_bench.runs.pruning import make_pruner
from fl_bench.runs.tuning import AGGREGATES
from fl_bench.schema import plugin_conf_dirs


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


@dataclass(frozen=True)
class Protocol:
    """What every arm of a sweep file follows (its ``protocol:``), checked before any run (issue 29):
    at least MIN_TRIALS trials for every tuned study, MIN_TUNING_SEEDS tuning seeds, MIN_REPORT_SEEDS
    report seeds none of which was tuned on. ``tuner`` is None for a paper whose protocol is not tuned
    (HFL: the paper's eta_0 for every method); its studies then have no space."""

    registered: str  # the date the protocol was written, before its runs
    report_seeds: tuple[int, ...]
    verdict: str
    tuner: dict | None  # {trials, startup_trials, seeds, objective, direction}
    power: dict | None = None  # {pilot_seeds, cap}: report seeds per table from a pilot (fl_bench.analysis.power)
    spaces: tuple[Path, ...] = (SPACES,)  # where search spaces are found (a plugin's own after conf/hparams_search)
    amended: tuple[str, ...] = ()  # "DATE: what changed after registration, and why", printed under every table

    MIN_TRIALS, MIN_TUNING_SEEDS, MIN_REPORT_SEEDS, MIN_PILOT_SEEDS = 32, 2, 5, 3

    @classmethod
    def of(cls, spec: dict, spaces: tuple[Path, ...] = (SPACES,)) -> "Protocol":
        """The sweep file's ``protocol`` (its shape checked by fl_bench.analysis.sweep_file), checked
        against its studies (:meth:`check`) with search spaces from ``spaces``; ValueError naming what is wrong."""
        p = spec["protocol"]  # (its defaults filled in by the schema: power's cap, confirm's aggregate)
        protocol = cls(str(p["registered"]), tuple(p["report_seeds"]), p["verdict"], p["tuner"], p.get("power"), spaces,
                       tuple(p["amended"]))
        protocol.check(spec["studies"])
        return protocol

    def check(self, studies: dict[str, dict]) -> None:
        """ValueError unless ``studies`` follow the protocol: MIN_REPORT_SEEDS distinct report seeds; a
        complete tuner (null only if no study names a space) with MIN_TRIALS trials and MIN_TUNING_SEEDS
        tuning seeds, none a report seed; each tuned study's paper values and special case inside its
        space, and special cases that form no cycle."""
        if len(set(self.report_seeds)) < self.MIN_REPORT_SEEDS:
            raise ValueError(f"protocol.report_seeds={list(self.report_seeds)}: at least {self.MIN_REPORT_SEEDS} distinct seeds")
        tuned = [name for name, study in studies.items() if "space" in study]
        if self.power is not None:
            self._check_power()
        if self.tuner is None:
            if tuned:
                raise ValueError(f"studies {', '.join(tuned)} name a search space but protocol.tuner is null")
            return
        trials, seeds = self.tuner["trials"], self.tuner["seeds"]
        if trials < self.MIN_TRIALS:
            raise ValueError(f"protocol.tuner.trials={trials}: at least {self.MIN_TRIALS} for every study")
        if not 0 <= self.tuner["startup_trials"] < trials:
            raise ValueError(f"protocol.tuner.startup_trials={self.tuner['startup_trials']}: must be in [0, {trials})")
        if len(set(seeds)) < self.MIN_TUNING_SEEDS:
            raise ValueError(f"protocol.tuner.seeds={list(seeds)}: at least {self.MIN_TUNING_SEEDS} distinct seeds "
                             "(a setting tuned on one seed is tuned to its noise)")
        shared = sorted(set(seeds) & set(self.report_seeds))
        if shared:
            raise ValueError(f"seeds {shared} are both tuning and report seeds: report on seeds the tuner never saw")
        if self.tuner["direction"] not in ("minimize", "maximize"):
            raise ValueError(f"protocol.tuner.direction={self.tuner['direction']!r}: choose minimize or maximize")
        if self.tuner.get("aggregate") not in (None, *AGGREGATES):
            raise ValueError(f"protocol.tuner.aggregate={self.tuner['aggregate']!r}: choose one of {', '.join(AGGREGATES)}")
        if self.tuner.get("confirm") is not None:
            self._check_confirm()
        if self.tuner.get("pruner"):
            make_pruner(self.tuner["pruner"], "protocol.tuner.pruner")  # ValueError for an unknown pruner
            if self.tuner["objective"] not in PRUNING_OBJECTIVES:
                raise ValueError(f"protocol.tuner.pruner needs an objective with a value so far ({', '.join(PRUNING_OBJECTIVES)}), "
                                 f"not {self.tuner['objective']}")
        for name in tuned:
            self._check_study(name, studies)

    def _check_confirm(self) -> None:
        """Finalists to choose among, on confirmation seeds of their own."""
        confirm = self.tuner["confirm"]
        if confirm["finalists"] < 2:
            raise ValueError(f"protocol.tuner.confirm.finalists={confirm['finalists']}: at least 2 (one finalist has "
                             "nothing to be chosen over)")
        seeds = list(confirm["seeds"])
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"protocol.tuner.confirm.seeds={seeds}: at least one seed, none repeated")
        shared = sorted(set(seeds) & {*self.tuner["seeds"], *self.report_seeds, *((self.power or {}).get("pilot_seeds") or [])})
        if shared:
            raise ValueError(f"protocol.tuner.confirm.seeds {shared} are also tuning, report or pilot seeds: the "
                             "finalists run on seeds the search never saw, and the report on seeds neither saw")
        if confirm["aggregate"] not in AGGREGATES:
            raise ValueError(f"protocol.tuner.confirm.aggregate={confirm['aggregate']!r}: choose one of {', '.join(AGGREGATES)}")

    def _check_power(self) -> None:
        """Pilot seeds apart from every other seed; a cap the report seeds can fill."""
        pilot, cap = list(self.power["pilot_seeds"]), self.power["cap"]
        if len(set(pilot)) < self.MIN_PILOT_SEEDS:
            raise ValueError(f"protocol.power.pilot_seeds={pilot}: at least {self.MIN_PILOT_SEEDS} distinct seeds "
                             "(a spread needs them)")
        shared = sorted(set(pilot) & {*self.report_seeds, *((self.tuner or {}).get("seeds") or [])})
        if shared:
            raise ValueError(f"protocol.power.pilot_seeds {shared} are also tuning or report seeds: the pilot sets the "
                             "number of report seeds, on seeds of its own")
        if not self.MIN_REPORT_SEEDS <= cap <= len(set(self.report_seeds)):
            raise ValueError(f"protocol.power.cap={cap}: must be at least {self.MIN_REPORT_SEEDS} and at most the "
                             f"{len(set(self.report_seeds))} report seeds listed")

    def _check_study(self, name: str, studies: dict[str, dict]) -> None:
        """The study's space holds the paper's values and its special case, which is itself tuned."""
        study = studies[name]
        space = search_space(study["space"], self.spaces)
        for key, values in (study.get("paper") or {}).items():
            outside = [v for v in values if key not in space or not contains(space[key], v)]
            if outside:
                raise ValueError(f"study {name}: the paper's {key} values {outside} lie outside its space {study['space']}")
        special = study.get("special_case")
        if special is None:
            return
        base = special.get("study")
        if base not in studies or "space" not in studies[base] or base == name:
            raise ValueError(f"study {name}: special_case.study={base!r} must name another tuned study")
        for key, value in special.get("set", {}).items():
            if key not in space or not contains(space[key], value):
                raise ValueError(f"study {name}: its special case's {key}={value} lies outside its space {study['space']}")
        start = {*search_space(studies[base]["space"], self.spaces), *special.get("set", {})}
        if start != set(space):
            raise ValueError(f"study {name}: its special case ({base}'s keys and {sorted(special.get('set', {}))}) sets "
                             f"{sorted(start)}, not its searched keys {sorted(space)}")
        seen = {name}
        while base is not None:  # a chain of special cases ends (FedAvgM -> FedAvg)
            if base in seen:
                raise ValueError(f"study {name}: its special cases form a cycle through {base}")
            seen.add(base)
            base = (studies[base].get("special_case") or {}).get("study")

    def describe(self, nested: bool) -> str:
        """One paragraph for the tables' notes (``nested``: some study starts from its special case)."""
        if self.tuner is None:
            tuning = "not tuned: every method runs the paper's fixed setting"
        else:
            t = self.tuner
            start = "; a nested method's first trial is its special case's kept setting" if nested else ""
            pruner = t.get("pruner")
            pruned = (f", hopeless trials stopped early by {pruner['name'].replace('_', ' ')} (first rung "
                      f"{pruner['min_resource']:,} client trips, reduction factor {pruner.get('reduction_factor') or 3}, "
                      f"each run compared with the other settings' runs of its seed)" if pruner and pruner.get("name") else "")
            seeds = ', '.join(map(str, t['seeds']))
            score = {"worst": f"{t['objective']} of the worst of tuning seeds {seeds}"}.get(
                t.get("aggregate"), f"the {t.get('aggregate') or 'mean'} {t['objective']} over tuning seeds {seeds}")
            confirm, confirmed = t.get("confirm"), ""
            if confirm:
                finalists = (f"its {confirm['finalists']} best settings" + (", a nested study's start" if nested else "")
                             + " and the settings earlier tunings kept")
                confirmed = (f"; then {finalists} also ran on seeds {', '.join(map(str, confirm['seeds']))} (an earlier "
                             f"setting on the tuning seeds as well), and the one with the {confirm['aggregate']} seed over "
                             f"all {len(t['seeds']) + len(confirm['seeds'])} seeds was kept")
            tuning = f"every study {t['trials']} TPE trials ({t['startup_trials']} random){pruned}, objective {score}{start}{confirmed}"
        amended = "".join(f" Amended {change}." for change in self.amended)
        return (f"Protocol (registered {self.registered}): {tuning}; report seeds "
                f"{', '.join(map(str, self.report_seeds))}, none tuned on; verdict: {self.verdict}.{amended}")
