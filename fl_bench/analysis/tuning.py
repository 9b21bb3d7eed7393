"""The tuning stage of a reproduction: every study's TPE search on the tuning seeds, and the confirmation of
its finalists on seeds of their own, each kept in ``<tuned_dir>/<study>.yaml`` and reused under the same
protocol (fl_bench.analysis.reproduce drives it)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import shutil
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fl_bench.analysis.search_spaces import contains, search_space, search_space_text
from fl_bench.analysis.launch import REPRODUCTION_NOT_WRITTEN, Launcher, Runs, ended_runs, multirun
from fl_bench.analysis.protocol import Confirm
from fl_bench.analysis.sweep_file import Study, SweepFile
from fl_bench.errors import ConfigError
from fl_bench.runs.atomic import replace_text
from fl_bench.runs.run_dir import FINISHED, finished_runs, writing
from fl_bench.runs.tuning import confirmed


@dataclass(frozen=True)
class Tuned:
    """A study's tuning as the later stages read it (its file under ``tuned_dir`` keeps the whole search and
    confirmation). ``params``: the setting its arms run, the confirmed finalist's, else the search's best ({}:
    untuned, the algorithm's defaults or the paper's fixed setting); ``value``: that setting's objective (a
    confirmed one's worst seed); ``per_seed``: its objective per seed; ``wall_seconds``: the tuning's wall time as
    its file keeps it (0 for a borrowed or untuned setting); ``space``: the search space it was tuned in."""

    params: dict[str, Any]
    value: float | None = None
    per_seed: dict[int, float] | None = None
    wall_seconds: float = 0.0
    space: str | None = None

    @classmethod
    def of(cls, found: dict) -> "Tuned":
        """From a study's tuned file (or the search's result, with its confirmed best filled in)."""
        return cls(dict(found.get("best_params") or {}), found.get("best_value"), found.get("best_per_seed"),
                   float(found.get("wall_seconds", 0.0)), found.get("space"))


class _WouldLaunch(Exception):
    """Raised where a study's search or confirmation would be launched while :meth:`Studies.to_search` plans."""

    def __init__(self, study: str, stage: str):
        super().__init__(study, stage)
        self.study, self.stage = study, stage


class Studies:
    """A reproduction's studies (``spec``'s, searched in ``spaces``), tuned through ``launcher`` with the
    reproduction's ``workload``, kept under ``tuned_dir``; a ``smoke`` point never tunes (it reads a kept
    setting, else the algorithm's defaults), nor does a held-out check (``retune`` False: only kept settings
    are read). A nested study waits for its special case (a lock per study)."""

    def __init__(self, spec: SweepFile, spaces: tuple[Path, ...], workload: list[str], tuned_dir: Path,
                 launcher: Launcher, smoke: bool, retune: bool = True):
        self.spec, self.protocol, self.spaces, self.workload = spec, spec.protocol, spaces, workload
        self.tuned_dir, self.launcher, self.smoke, self.retune = tuned_dir, launcher, smoke, retune
        self._study_locks = defaultdict(threading.Lock)
        self._planning = False  # (to_search: read the kept files, launch nothing)

    def to_search(self, studies: list[str]) -> dict[str, str]:
        """Of ``studies`` and the studies they take a setting from (a special case, a setting_of), those that
        :meth:`tuned` would tune now, each with its first stage to launch ("search", or "confirm" where only the
        confirmation of a kept search is missing), the ones they start from first; read only: nothing is
        launched. A study whose special case is searched is searched after it (it starts from its setting)."""
        involved: list[str] = []

        def add(study: str) -> None:
            spec = self.spec.studies[study]
            for base in (spec.setting_of, spec.special_case.study if spec.special_case else None):
                if base is not None and base not in involved:
                    add(base)
            if study not in involved:
                involved.append(study)

        for study in studies:
            add(study)
        found: dict[str, str] = {}
        self._planning = True
        try:
            for study in involved:
                if self.spec.studies[study].setting_of is not None or self.spec.studies[study].space is None:
                    continue  # (not tuned: another study's setting, or a fixed one)
                try:
                    self.tuned(study)
                except _WouldLaunch as would:
                    found[study] = would.stage if would.study == study else "search"
        finally:
            self._planning = False
        return found

    def search_estimate(self, studies: list[str], at_once: int) -> float | None:
        """Seconds the searches of ``studies`` may take, ``at_once`` side by side: each study's earlier search's wall
        time as its file under tuned_dir keeps it (under any protocol), else the mean of the other files' there
        (a confirmation's time not counted); None where no file there keeps one."""
        walls = {}
        for path in sorted(self.tuned_dir.glob("*.yaml")) if self.tuned_dir.is_dir() else []:
            try:
                wall = float(_kept(path).get("wall_seconds") or 0.0)
            except (ConfigError, TypeError, ValueError):
                continue
            if wall > 0:
                walls[path.stem] = wall
        if not walls or not studies:
            return None
        mean = sum(walls.values()) / len(walls)
        return sum(walls.get(study, mean) for study in studies) / max(1, min(at_once, len(studies)))

    def tuned(self, study: str) -> Tuned:
        """The study's best setting; tuned now unless already on file under the same protocol (smoke
        runs never tune: they take such a file when present, else the algorithm's defaults)."""
        spec = self.spec.studies[study]
        if spec.setting_of is not None:  # not tuned: runs another study's best setting (a diagnostic arm)
            return dataclasses.replace(self.tuned(spec.setting_of), wall_seconds=0.0)
        if spec.space is None:  # not tuned: the paper's fixed setting (HFL: eta_0 = 0.1 for every method)
            return Tuned({})
        with self._study_locks[study]:
            return Tuned.of(self._tune(study, spec))

    def _tune(self, study: str, spec: Study) -> dict:
        """The search's result; under a protocol that confirms, with the confirmed finalist as its best
        (``best_params``, ``best_value``, ``best_per_seed``)."""
        found = self._search(study, spec)
        confirm = self.protocol.tuner.confirm
        if confirm is None or not found.get("best_params"):
            return found
        best = self._confirm(study, spec, found, confirm)
        if best is None:  # a smoke point without a confirmed file: the algorithm's defaults
            return {"best_params": {}, "wall_seconds": 0.0}
        return {**found, "best_params": best["params"], "best_value": best["value"], "best_per_seed": best["per_seed"]}

    def _search(self, study: str, spec: Study) -> dict:
        """The TPE search on the tuning seeds (``protocol.tuner`` less its ``confirm``), kept in
        ``<tuned_dir>/<study>.yaml`` with every completed setting ranked."""
        path = self.tuned_dir / f"{study}.yaml"
        tuner, search = self.protocol.tuner, self.protocol.tuner.kept()
        if self.smoke:
            kept = _kept(path)
            return kept if kept.get("tuner") == search else {"best_params": {}, "wall_seconds": 0.0}
        enqueue = self._special_case_start(spec)
        made = {"space": spec.space, "params": search_space_text(spec.space, self.spaces), "overrides": spec.overrides,
                "tuner": search, "enqueued": enqueue}
        kept = _kept(path)
        # (a file from before the ranking was kept cannot name finalists: searched again)
        if all(kept.get(key) == value for key, value in made.items()) and ("ranked" in kept or tuner.confirm is None):
            return kept
        if self._planning:
            raise _WouldLaunch(study, "search")
        if not self.retune:  # (a held-out check: fl_bench.analysis.held_out)
            raise ValueError(f"study {study}: {path} holds no setting tuned under this protocol, its space and overrides: "
                             "a held-out check reuses the kept tuned settings; run the registered reproduction first")
        previous = self._previous(kept, spec)
        self.launcher.check_sweep_file()
        sweep_dir = self.launcher.runs_dir / f"tune_{study}"
        shutil.rmtree(sweep_dir, ignore_errors=True)  # a study of another protocol is not continued
        started = time.perf_counter()
        command = multirun([
            *self.launcher.launcher_settings(1),  # (a trial's seeds one after another on this machine, as --jobs studies run)
            *self.workload, *spec.overrides, f"hparams_search={spec.space}",
            f"hydra.sweeper.n_trials={tuner.trials}", f"hydra.sweeper.n_startup_trials={tuner.startup_trials}",
            f"hydra.sweeper.objective={tuner.objective}", f"hydra.sweeper.direction={tuner.direction}",
            f"hydra.sweeper.seeds=[{','.join(map(str, tuner.seeds))}]",
            *([f"hydra.sweeper.aggregate={tuner.aggregate}"] if tuner.aggregate else []),
            *([f"hydra.sweeper.pruner={{{','.join(f'{k}:{v}' for k, v in search['pruner'].items())}}}"]
              if tuner.pruner else []),
            *([f"hydra.sweeper.enqueue=[{{{','.join(f'{k}:{v}' for k, v in enqueue.items())}}}]"] if enqueue else []),
            f"hydra.sweeper.study_name={study}", f"hydra.sweeper.storage=sqlite:///{sweep_dir}/optuna.db",
            f"hydra.sweep.dir={sweep_dir}",
        ])
        planned = tuner.trials * max(1, len(tuner.seeds))  # (each trial's runs: fewer if a small space ends it)
        with self.launcher.progress.stage(f"tune_{study}", planned, 0, planned, 1,
                                 functools.partial(ended_runs, sweep_dir, (*FINISHED, "pruned", "failed"))):
            self.launcher.run(command, sweep_dir)
        result = OmegaConf.to_container(OmegaConf.load(sweep_dir / "optimization_results.yaml"))
        result.update(study=study, **made, previous=previous, wall_seconds=time.perf_counter() - started)
        _save_tuned(path, result)
        return result

    def _previous(self, kept: dict, spec: Study) -> list[dict]:
        """The settings earlier tunings of the study kept (its file's ``previous`` and its best), those
        that the study's space can still take: a search again, in a wider space or under another rule,
        can miss a setting an earlier one found, and the confirmation then still weighs it."""
        space = search_space(spec.space, self.spaces)
        kept_best = (kept.get("confirmed") or {}).get("best", {}).get("params") or kept.get("best_params") or {}
        settings = [*kept.get("previous", []), kept_best]
        return [p for i, p in enumerate(settings) if p and p not in settings[:i] and set(p) == set(space)
                and all(contains(space[key], value) for key, value in p.items())]

    def _confirm(self, study: str, spec: Study, found: dict, confirm: Confirm) -> dict | None:
        """The confirmation stage: the search's best ``confirm.finalists`` settings (and a nested
        study's start, its special case's chosen setting, wherever it ranked, and the settings earlier
        tunings kept, on the tuning seeds too) run on the confirmation seeds; the one with the best
        ``confirm.aggregate`` over all its seeds is kept. Two tuning
        seeds do not show a setting at the edge of stability that collapses on one seed in four; the
        finalists' extra seeds can, for far fewer runs than a search on more seeds. Kept in the study's
        file (None at a smoke point without one)."""
        tuner, rule = self.protocol.tuner, asdict(confirm)  # (the rule as the tuned file keeps it)
        ranked = found.get("ranked") or []  # (none in a file from before rankings were kept: a smoke point's defaults)
        finalists = ranked[:confirm.finalists]
        start = found.get("enqueued")  # the nested study's first trial (its special case's kept setting)
        finalists += [c for c in ranked[confirm.finalists:] if start and c["params"] == start][:1]
        finalists += [next((c for c in ranked if c["params"] == p), {"params": p, "per_seed": {}})
                      for p in found.get("previous") or [] if all(c["params"] != p for c in finalists)]
        kept = found.get("confirmed") or {}
        if kept.get("rule") == rule and [c["params"] for c in kept["candidates"]] == [c["params"] for c in finalists]:
            return kept["best"]
        if self.smoke:
            return None
        if self._planning:
            raise _WouldLaunch(study, "confirm")
        if not self.retune:
            raise ValueError(f"study {study}: {self.tuned_dir / (study + '.yaml')} holds no confirmation under this protocol: "
                             "a held-out check reuses the kept tuned settings; run the registered reproduction first")
        stage_runs = [Runs(self.launcher.runs_dir / f"confirm_{study}" / str(number), tuple(self.workload),
                           (*spec.overrides, *(f"{k}={v}" for k, v in finalist["params"].items())),
                           (*(s for s in tuner.seeds if s not in finalist["per_seed"]), *confirm.seeds),
                           f"study {study}'s finalist {number}") for number, finalist in enumerate(finalists)]
        self.launcher.launch_stage(f"confirm_{study}", stage_runs, at_once=1)  # (as its search: --jobs studies run side by side)
        candidates = []
        for finalist, runs in zip(finalists, stage_runs):
            summaries = finished_runs(runs.directory).values()
            candidates.append({**finalist, "per_seed": {**finalist["per_seed"],
                                                        **{s["seed"]: float(s[tuner.objective]) for s in summaries}}})
        best = confirmed(candidates, confirm.aggregate, tuner.direction)
        found = {**found, "confirmed": {"rule": rule, "candidates": candidates, "best": best}}
        _save_tuned(self.tuned_dir / f"{study}.yaml", found)
        return best

    def _special_case_start(self, spec: Study) -> dict:
        """The nested study's first trial: its special case's tuned best with the values that reduce
        it to that case (empty without a special case)."""
        special = spec.special_case
        if special is None:
            return {}
        return {**self.tuned(special.study).params, **special.set}


def _kept(path: Path) -> dict:
    """A study's tuned file ({} when there is none), read once per version: every arm, guard and
    nested study asks for it, and a file that keeps its search's ranking is some kilobytes of YAML."""
    if not path.exists():
        return {}
    stat = path.stat()
    return copy.deepcopy(_read_kept(path, stat.st_mtime_ns, stat.st_size))


def _save_tuned(path: Path, result: dict) -> None:
    """A study's tuned file, replaced whole (a failed write keeps the earlier one)."""
    with writing(path, REPRODUCTION_NOT_WRITTEN):
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_text(path, OmegaConf.to_yaml(OmegaConf.create(result)))


@functools.lru_cache(maxsize=256)
def _read_kept(path: Path, mtime_ns: int, size: int) -> dict:
    try:
        kept = OmegaConf.to_container(OmegaConf.load(path)) if size else {}  # (an empty file: tuned again)
    except (UnicodeDecodeError, yaml.YAMLError, OmegaConfBaseException):
        kept = None
    if not isinstance(kept, dict):
        raise ConfigError(f"{path} is not a study's tuned file (a mapping of its search and its best setting): "
                          "delete it to tune the study again")
    return kept
