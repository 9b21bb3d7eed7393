"""Reproduce a paper's tables from one sweep file: tune every study with the same budget, rerun each
table's arms on fresh seeds, write the tables beside the paper's numbers.

    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml [TABLE ...] [--jobs 2]
    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml --smoke --out /tmp/r   # one point per table
    python -m fl_bench.analysis.reproduce sweeps/hfl_smoke.yaml --smoke --every-arm --in-process   # every arm, once
    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml --override device=cuda vmap_chunk=1024
    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml --launcher slurm --jobs 23 \
        --override hydra.launcher.partition=gpu hydra.launcher.timeout_min=60   # from a SLURM login node

Every run is a ``python -m fl_bench`` command line, so anything this does can be redone by hand:
a study is a Hydra multirun with the Optuna sweeper (``hparams_search=<space>``), its best setting
is kept in ``<tuned_dir>/<study>.yaml``; an arm is a multirun over the report seeds with that
setting plus the arm's overrides, in ``<runs_dir>/<arm key>/``. Both are reused when present (a
study's when the same protocol, search space (its ranges) and overrides made it; an arm's runs when the same command
made them, its first line in the arm's ``reproduce.log``), so an interrupted reproduction resumes, arms that
several tables share run once, and a retuned study reruns its arms.

Hydra's launcher ``--launcher`` runs every run (conf/hydra/launcher/: ``local_cores``, this machine's cores,
the default; ``slurm``, SLURM job arrays; or a launcher plugin's, ``submitit_local``), with its settings given
as ``--override hydra.launcher.KEY=VALUE``. A stage (a study's confirmation, the pilot, the report runs) is
one multirun of every seed of its arms still to run, each seed's run a job of its own, launched together
(hydra_plugins/fl_bench_jobs: ``<runs_dir>/launch/<stage>/``); a search hands each trial's seeds to the
launcher. ``--jobs`` runs go at once on this machine (local_cores' ``n_jobs``): a stage's runs, or as many
studies searched side by side, each one run at a time (a TPE search is sequential: it decides a trial
from the trials before it). Each job claims its run directory (fl_bench.runs.claim), so a run is never
run twice at once, also by a reproduction started again while the first one's SLURM tasks still run; a
task that dies leaves its run unfinished, and the next invocation launches it again. The driver can be
stopped and started again at any time.

Every arm of the file (not only those this command runs: a smoke point's reference arm) is composed as
it would run and checked, so that a misspelt override stops the reproduction in one line before any
directory is made or any run starts. A sweep file's ``protocol`` is the rule every arm follows, written before the runs and checked
before any of them starts (:class:`fl_bench.analysis.protocol.Protocol`): one tuner budget for every study (trials, random
start-up trials, objective), tuning seeds (a trial's objective is its mean over them), optionally a
confirmation of the search's best settings on seeds of their own (``tuner.confirm``), report seeds
disjoint from them all, and the verdict rule. A study may name its nested ``special_case`` (the
study it reduces to, and the values that reduce it: FedAvgM with momentum 0 is FedAvg): its space
must contain those values, its first trial is the special case's kept setting, so a working tuner
cannot end the nested method worse than its special case on the tuning seeds. A study's ``paper``
values (FedBuff's mu grid) must lie in its space. ``readings`` (a list) says where the implementation
reads the paper one way and another reading is possible; every table prints them. The sweep files'
own comments document the rest
(``sweeps/fedbuff_smoke.yaml``).

Tables are built from finished runs only (fl_bench.runs.run_dir.unfinished): an arm's failed or
interrupted seeds run again (the same command goes on where it stopped), one that still does not finish
stops the reproduction in one line naming it and its own error, and a table's files replace its earlier
ones together. Each table's and arm's report seeds are recorded before the first report run
(fl_bench.analysis.seed_ledger); the ledger is read before any run, and the sweep file must still be the
one the driver read (its SHA-256) when each search or stage is launched.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import hashlib
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pandas as pd
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fl_bench.analysis.fairness import write_fairness
from fl_bench.analysis.guards import (SPACES, contains, evidence, evidence_markdown, fill_notes, paper_effect, samples,
                                     search_space, search_space_text, tuned_edges)
from fl_bench.analysis.measures import MEASURES, Measure
from fl_bench.analysis.power import Need, seeds_needed, table_seeds
from fl_bench.analysis.protocol import Protocol, plugin_spaces
from fl_bench.analysis.report import Frames, load_runs, rounds_view, write_report
from fl_bench.analysis import scoreboard
from fl_bench.analysis.scoreboard import write_table_evidence
from fl_bench.analysis.seed_ledger import SeedLedger
from fl_bench.analysis.sweep_file import load_sweep_file
from fl_bench.errors import ConfigError, FLBenchError
from fl_bench.runs.config import register_configs
from fl_bench.runs.atomic import replace_text
from fl_bench.runs.claim import SUFFIX as CLAIM
from fl_bench.runs.claim import holder as claim_holder
from fl_bench.runs.run_dir import RunDirectory, finished_runs, unfinished, writing
from fl_bench.runs.tuning import confirmed


# What a reproduction's write error adds to the path it names.
REPRODUCTION_NOT_WRITTEN = "results written before are kept (free space, or choose a writable --runs-dir / --out)"
# An --override of the launcher's settings (hydra.launcher.partition=gpu, +hydra.launcher.additional_parameters.X=Y).
LAUNCHER_OVERRIDE = re.compile(r"[+~]{0,2}hydra\.launcher\.")


@dataclass(frozen=True)
class Runs:
    """The runs of the reproduction's ``workload`` with ``setting`` (a study's, and an arm's overrides) on
    ``seeds`` in ``directory`` (an arm's, or a study's finalist's); ``what`` names them in errors."""

    directory: Path
    workload: tuple[str, ...]
    setting: tuple[str, ...]
    seeds: tuple[int, ...]
    what: str

    @property
    def command(self) -> list[str]:
        """The multirun that makes these runs, kept in the directory's reproduce.log (runs are reused only
        where the same command made them): by hand it makes the same runs in the same run directories,
        one after another; the driver launches each seed's run as a job of its own (:meth:`job`)."""
        return _multirun([*self.workload, *self.setting, f"seed={','.join(map(str, self.seeds))}",
                          f"hydra.sweep.dir={self.directory}"])

    def job(self, index: int) -> list[str]:
        """The command's job ``index`` (the run of seed ``seeds[index]``, in the run directory the command
        gives it: Hydra's ``<job num>_<algorithm>_seed<seed>``, conf/config.yaml), less the workload, which
        the launch's command line gives every job."""
        seed = self.seeds[index]
        return [*self.setting, f"seed={seed}", f"hydra.sweep.dir={self.directory}",
                f"hydra.sweep.subdir={index}_${{algorithm.name}}_seed{seed}"]


@dataclass(frozen=True)
class Arm:
    """One row of a table: its ``label``, the study whose tuned setting it runs, and extra
    ``overrides``."""

    label: str
    study: str
    overrides: tuple[str, ...]

    @property
    def key(self) -> str:
        """A directory name naming exactly what the arm runs (shared by tables that run the same)."""
        text = " ".join((self.study, *self.overrides))
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("=", "-"))[:60]
        return f"{slug}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


class Reproduction:
    """One sweep file's reproduction: tune its studies, run its tables' arms on the report seeds,
    write the tables. ``smoke``: the file's small workload, one seed, each table's reference arm (with
    ``every_arm`` every arm: a check that each of the file's commands runs and is reported),
    no tuning."""

    def __init__(self, spec_path: Path, smoke: bool, runs_dir: Path | None, jobs: int, overrides: list[str] = (),
                 every_arm: bool = False, in_process: bool = False, launcher: str = "local_cores"):
        register_configs()  # plugin components the arms name (FL_BENCH_PLUGINS); one that cannot be imported is one line
        self.spec, self.spec_path = load_sweep_file(spec_path), Path(spec_path)
        self.sweep_sha256 = hashlib.sha256(self.spec_path.read_bytes()).hexdigest()
        self.paper = self.spec.get("paper", self.spec_path.stem)  # its name on the scoreboard
        # the launcher's settings go to the commands that launch runs, not into the runs' own (or their commands)
        self.launcher_overrides = [o for o in overrides if LAUNCHER_OVERRIDE.match(o)]
        overrides = [o for o in overrides if not LAUNCHER_OVERRIDE.match(o)]
        self.protocol = Protocol.of(self.spec, (SPACES, *plugin_spaces(overrides)))
        if every_arm and not smoke:
            raise ValueError("--every-arm is a smoke check: use it with --smoke (a full reproduction runs every arm)")
        if in_process and jobs > 1:
            raise ValueError(f"--in-process runs one command at a time in this process: use --jobs 1, not {jobs}")
        if in_process and (launcher != "local_cores" or self.launcher_overrides):
            raise ValueError(f"--in-process runs every run in this process: use the default --launcher local_cores, "
                             f"without hydra.launcher overrides (not {' '.join([launcher, *self.launcher_overrides])})")
        self.launcher, self.launcher_keys = launcher, _launcher_keys(launcher, self.launcher_overrides, overrides)
        self.smoke, self.every_arm, self.jobs, self.in_process = smoke, every_arm, jobs, in_process
        self.runs_dir = runs_dir or Path(self.spec["runs_dir"] + ("_smoke" if smoke else ""))
        self.tuned_dir = Path(self.spec["tuned_dir"])
        self.workload = [*self.spec["workload"], *(self.spec["smoke"] if smoke else []), *overrides]
        self.seeds = list(self.protocol.report_seeds[:1] if smoke else self.protocol.report_seeds)
        self._study_locks = defaultdict(threading.Lock)  # a nested study waits for its special case
        if not smoke:  # they guard the tuning, which a smoke point never does
            self._check_special_cases()

    def _check_special_cases(self) -> None:
        """Every nested study's special case composes into a config that runs (FedProx with mu = 0):
        otherwise its first trial fails and the study starts from nowhere."""
        self._check_composes([
            ([*self.workload, *study["overrides"], *(f"{k}={v}" for k, v in study["special_case"].get("set", {}).items())],
             f"study {name}: its special case does not run")
            for name, study in self.spec["studies"].items() if study.get("special_case") is not None])

    def check_arms(self, arms: list[Arm]) -> None:
        """Every arm's command composes into a config that passes its checks (a misspelt override or a
        value out of range), before any study is tuned or any arm run (the tuned setting, not known yet, aside)."""
        self._check_composes([([*self.workload, *self.spec["studies"][arm.study]["overrides"], *arm.overrides],
                               f"arm {arm.label!r} ({arm.study}) does not run") for arm in arms])

    @staticmethod
    def _check_composes(configs: list[tuple[list[str], str]]) -> None:
        """Compose each (overrides, what) as a run would; ValueError naming ``what`` and the error."""
        from hydra import compose, initialize_config_dir

        from fl_bench.runs.cli import CONFIG_DIR, one_line

        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            for overrides, what in configs:
                try:
                    OmegaConf.to_object(compose("config", overrides=overrides))
                except Exception as error:  # Hydra's and the schema's errors, made one line
                    raise ValueError(f"{what}: {one_line(error)}") from error

    def tables(self, names: list[str]) -> dict[str, dict]:
        """The tables named ``names`` (all when empty), by name; ValueError for an unknown one."""
        tables = self.spec["tables"]
        unknown = [n for n in names if n not in tables]
        if unknown:
            raise ValueError(f"unknown table {', '.join(unknown)}: choose from {', '.join(tables)}")
        return {n: tables[n] for n in names or tables}

    def arms(self, table: dict, every: bool = False) -> list[Arm]:
        """The table's arms (with ``smoke`` only its reference arm unless ``every``, and each arm's smoke
        overrides); the studies they name were checked when the file was read (fl_bench.analysis.sweep_file)."""
        arms = [Arm(label, a["study"], tuple([*a.get("overrides", []), *(a.get("smoke", []) if self.smoke else [])]))
                for label, a in table["arms"].items()]
        if self.smoke and not self.every_arm and not every:  # one point per table: its reference arm, which the others are compared with
            return [a for a in arms if a.label == table["reference"]]
        return arms

    # ------------------------------------------------------------------ tuning
    def tuned(self, study: str) -> dict:
        """The study's best setting; tuned now unless already on file under the same protocol (smoke
        runs never tune: they take such a file when present, else the algorithm's defaults)."""
        spec = self.spec["studies"][study]
        if "setting_of" in spec:  # not tuned: runs another study's best setting (a diagnostic arm)
            return {**self.tuned(spec["setting_of"]), "wall_seconds": 0.0}
        if "space" not in spec:  # not tuned: the paper's fixed setting (HFL: eta_0 = 0.1 for every method)
            return {"best_params": {}, "wall_seconds": 0.0}
        with self._study_locks[study]:
            return self._tune(study, spec)

    def _tune(self, study: str, spec: dict) -> dict:
        """The search's result; under a protocol that confirms, with the confirmed finalist as its best
        (``best_params``, ``best_value``, ``best_per_seed``)."""
        found = self._search(study, spec)
        confirm = self.protocol.tuner.get("confirm")
        if confirm is None or not found.get("best_params"):
            return found
        best = self._confirm(study, spec, found, confirm)
        if best is None:  # a smoke point without a confirmed file: the algorithm's defaults
            return {"best_params": {}, "wall_seconds": 0.0}
        return {**found, "best_params": best["params"], "best_value": best["value"], "best_per_seed": best["per_seed"]}

    def _search(self, study: str, spec: dict) -> dict:
        """The TPE search on the tuning seeds (``protocol.tuner`` less its ``confirm``), kept in
        ``<tuned_dir>/<study>.yaml`` with every completed setting ranked."""
        path = self.tuned_dir / f"{study}.yaml"
        search = {key: value for key, value in self.protocol.tuner.items() if key != "confirm"}
        if self.smoke:
            kept = _kept(path)
            return kept if kept.get("tuner") == search else {"best_params": {}, "wall_seconds": 0.0}
        enqueue = self._special_case_start(spec)
        made = {"space": spec["space"], "params": search_space_text(spec["space"], self.protocol.spaces), "overrides": spec["overrides"],
                "tuner": search, "enqueued": enqueue}
        kept = _kept(path)
        # (a file from before the ranking was kept cannot name finalists: searched again)
        if all(kept.get(key) == value for key, value in made.items()) and ("ranked" in kept or "confirm" not in self.protocol.tuner):
            return kept
        previous = self._previous(kept, spec)
        self._check_sweep_file()
        sweep_dir = self.runs_dir / f"tune_{study}"
        shutil.rmtree(sweep_dir, ignore_errors=True)  # a study of another protocol is not continued
        started = time.perf_counter()
        self._run(_multirun([
            *self._launcher_overrides(1),  # (a trial's seeds one after another on this machine, as --jobs studies run)
            *self.workload, *spec["overrides"], f"hparams_search={spec['space']}",
            f"hydra.sweeper.n_trials={search['trials']}", f"hydra.sweeper.n_startup_trials={search['startup_trials']}",
            f"hydra.sweeper.objective={search['objective']}", f"hydra.sweeper.direction={search['direction']}",
            f"hydra.sweeper.seeds=[{','.join(map(str, search['seeds']))}]",
            *([f"hydra.sweeper.aggregate={search['aggregate']}"] if search.get("aggregate") else []),
            *([f"hydra.sweeper.pruner={{{','.join(f'{k}:{v}' for k, v in search['pruner'].items() if v is not None)}}}"]
              if search.get("pruner") else []),
            *([f"hydra.sweeper.enqueue=[{{{','.join(f'{k}:{v}' for k, v in enqueue.items())}}}]"] if enqueue else []),
            f"hydra.sweeper.study_name={study}", f"hydra.sweeper.storage=sqlite:///{sweep_dir}/optuna.db",
            f"hydra.sweep.dir={sweep_dir}",
        ]), sweep_dir)
        result = OmegaConf.to_container(OmegaConf.load(sweep_dir / "optimization_results.yaml"))
        result.update(study=study, **made, previous=previous, wall_seconds=time.perf_counter() - started)
        _save_tuned(path, result)
        return result

    def _previous(self, kept: dict, spec: dict) -> list[dict]:
        """The settings earlier tunings of the study kept (its file's ``previous`` and its best), those
        that the study's space can still take: a search again, in a wider space or under another rule,
        can miss a setting an earlier one found, and the confirmation then still weighs it."""
        space = search_space(spec["space"], self.protocol.spaces)
        kept_best = (kept.get("confirmed") or {}).get("best", {}).get("params") or kept.get("best_params") or {}
        settings = [*kept.get("previous", []), kept_best]
        return [p for i, p in enumerate(settings) if p and p not in settings[:i] and set(p) == set(space)
                and all(contains(space[key], value) for key, value in p.items())]

    def _confirm(self, study: str, spec: dict, found: dict, confirm: dict) -> dict | None:
        """The confirmation stage: the search's best ``confirm.finalists`` settings (and a nested
        study's start, its special case's chosen setting, wherever it ranked, and the settings earlier
        tunings kept, on the tuning seeds too) run on the confirmation seeds; the one with the best
        ``confirm.aggregate`` over all its seeds is kept. Two tuning
        seeds do not show a setting at the edge of stability that collapses on one seed in four; the
        finalists' extra seeds can, for far fewer runs than a search on more seeds. Kept in the study's
        file (None at a smoke point without one)."""
        tuner, rule = self.protocol.tuner, confirm
        ranked = found.get("ranked") or []  # (none in a file from before rankings were kept: a smoke point's defaults)
        finalists = ranked[:confirm["finalists"]]
        start = found.get("enqueued")  # the nested study's first trial (its special case's kept setting)
        finalists += [c for c in ranked[confirm["finalists"]:] if start and c["params"] == start][:1]
        finalists += [next((c for c in ranked if c["params"] == p), {"params": p, "per_seed": {}})
                      for p in found.get("previous") or [] if all(c["params"] != p for c in finalists)]
        kept = found.get("confirmed") or {}
        if kept.get("rule") == rule and [c["params"] for c in kept["candidates"]] == [c["params"] for c in finalists]:
            return kept["best"]
        if self.smoke:
            return None
        stage_runs = [Runs(self.runs_dir / f"confirm_{study}" / str(number), tuple(self.workload),
                           (*spec["overrides"], *(f"{k}={v}" for k, v in finalist["params"].items())),
                           (*(s for s in tuner["seeds"] if s not in finalist["per_seed"]), *confirm["seeds"]),
                           f"study {study}'s finalist {number}") for number, finalist in enumerate(finalists)]
        self._launch(f"confirm_{study}", stage_runs, at_once=1)  # (as its search: --jobs studies run side by side)
        candidates = []
        for finalist, runs in zip(finalists, stage_runs):
            summaries = finished_runs(runs.directory).values()
            candidates.append({**finalist, "per_seed": {**finalist["per_seed"],
                                                        **{s["seed"]: float(s[tuner["objective"]]) for s in summaries}}})
        best = confirmed(candidates, rule["aggregate"], tuner["direction"])
        found = {**found, "confirmed": {"rule": rule, "candidates": candidates, "best": best}}
        _save_tuned(self.tuned_dir / f"{study}.yaml", found)
        return best

    def _special_case_start(self, spec: dict) -> dict:
        """The nested study's first trial: its special case's tuned best with the values that reduce
        it to that case (empty without a special case)."""
        special = spec.get("special_case")
        if special is None:
            return {}
        return {**self.tuned(special["study"])["best_params"], **special.get("set", {})}

    # ------------------------------------------------------------------ runs
    def arm_runs(self, arm: Arm, seeds: list[int] | None = None, base: Path | None = None) -> Runs:
        """The arm's runs on ``seeds`` (default: the report seeds) in ``base`` (default: the runs
        directory), with its study's tuned setting (a retuned study or an edited arm is another command)."""
        seeds = self.seeds if seeds is None else list(seeds)
        best = self.tuned(arm.study)["best_params"]
        setting = (*self.spec["studies"][arm.study]["overrides"], *(f"{k}={v}" for k, v in best.items()), *arm.overrides)
        return Runs((base or self.runs_dir) / arm.key, tuple(self.workload), setting, tuple(seeds), f"arm {arm.label!r}")

    def _launch(self, stage: str, stage_runs: list[Runs], at_once: int) -> None:
        """Every run of ``stage_runs`` finished (a diverged seed is a result), as one multirun of the
        fl_bench_jobs sweeper through the launcher (hydra_plugins/fl_bench_jobs), logged in
        ``<runs_dir>/launch/<stage>/reproduce.log``; ``at_once``: its runs at a time on this machine. Runs
        the same command made are reused, another command's are removed first; a seed still to run goes on
        where it stopped (an interrupted run from its checkpoint), and one a live task of another launch holds
        is left to it. RuntimeError naming a seed that did not finish, else one naming the runs still held."""
        self._check_sweep_file()
        jobs = []
        for runs in stage_runs:
            self._keep_if_same_command(runs)
            done, held = _finished_seeds(runs.directory), _held_seeds(runs.directory)
            jobs += [runs.job(i) for i, seed in enumerate(runs.seeds) if seed not in done and seed not in held]
        stage_dir = self.runs_dir / "launch" / stage
        if jobs:
            with writing(stage_dir, REPRODUCTION_NOT_WRITTEN):
                stage_dir.mkdir(parents=True, exist_ok=True)
                replace_text(stage_dir / "jobs.yaml", yaml.safe_dump(jobs, width=math.inf))
            # the workload on the command line, before each job's own overrides (the order of the runs' own
            # commands), where `python -m fl_bench` reads it first (numerics=portable's environment)
            self._run(_multirun([*self._launcher_overrides(at_once), "hydra/sweeper=fl_bench_jobs",
                                 f"hydra.sweeper.jobs={stage_dir / 'jobs.yaml'}", f"hydra.sweep.dir={stage_dir}",
                                 *self.workload]), stage_dir, check=False)
        running = {}
        for runs in stage_runs:
            done, held = _finished_seeds(runs.directory), _held_seeds(runs.directory)
            missing = [seed for seed in runs.seeds if seed not in done and seed not in held]
            if missing:
                raise RuntimeError(_not_finished(runs.what, runs.directory, missing, stage_dir / "reproduce.log"))
            running.update({seed: (runs, holder) for seed, holder in held.items() if seed in runs.seeds and seed not in done})
        if running:
            seed, (runs, holder) = next(iter(running.items()))
            raise RuntimeError(f"{len(running)} run{'s are' if len(running) > 1 else ' is'} still running ({runs.what}, "
                               f"seed {seed}: {holder}): run this command again when they end")

    def _keep_if_same_command(self, runs: Runs) -> None:
        """``runs.directory`` kept where the same command made its runs (its reproduce.log's first line),
        else emptied and the command recorded; RuntimeError where another command's runs still run there."""
        record = runs.directory / "reproduce.log"
        # (the interpreter's path may differ between machines: compare from the module on)
        if record.is_file() and record.read_text(errors="replace").split("\n", 1)[0].endswith(" ".join(runs.command[1:])):
            return
        held = _held_seeds(runs.directory)
        if held:
            seed, holder = next(iter(held.items()))
            raise RuntimeError(f"{runs.what}: the runs of its earlier command still run in {runs.directory} (seed "
                               f"{seed}: {holder}): run this command again when they end")
        shutil.rmtree(runs.directory, ignore_errors=True)
        with writing(record, REPRODUCTION_NOT_WRITTEN):
            runs.directory.mkdir(parents=True, exist_ok=True)
            replace_text(record, " ".join(runs.command) + "\n")

    def _launcher_overrides(self, at_once: int) -> list[str]:
        """The launcher and its settings for a command whose runs go ``at_once`` at a time on this machine
        (a launcher with ``n_jobs``, joblib's, takes it unless ``--override`` sets it)."""
        keys = {o.lstrip("+~").split("=", 1)[0] for o in self.launcher_overrides}
        parallel = "n_jobs" in self.launcher_keys and "hydra.launcher.n_jobs" not in keys
        return [f"hydra/launcher={self.launcher}", *([f"hydra.launcher.n_jobs={at_once}"] if parallel else []),
                *self.launcher_overrides]

    def _check_sweep_file(self) -> None:
        """ValueError unless the sweep file is still the one this reproduction read (its SHA-256): a file
        edited while the runs went on would be recorded in the seed ledger for runs it did not make."""
        now = hashlib.sha256(self.spec_path.read_bytes()).hexdigest()
        if now != self.sweep_sha256:
            raise ValueError(f"{self.spec_path} was edited after this reproduction read it (SHA-256 {self.sweep_sha256[:12]}, "
                             f"now {now[:12]}): run the command again to reproduce the file as it is now")

    def _run(self, command: list[str], log_dir: Path, check: bool = True) -> bool:
        with writing(log_dir / "reproduce.log", REPRODUCTION_NOT_WRITTEN):
            log_dir.mkdir(parents=True, exist_ok=True)
            log = open(log_dir / "reproduce.log", "w")
        with log:
            log.write(" ".join(command) + "\n")
            log.flush()
            if self.in_process:  # command is [python, -m, fl_bench, ...]
                code = run_in_process(command[3:], log)
            else:
                code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
        if code != 0 and check:
            raise RuntimeError(f"{' '.join(command[2:])} failed (exit {code}): "
                               f"{_error_in_log(log_dir / 'reproduce.log') or 'no error line'} (its log: {log_dir}/reproduce.log)")
        return code == 0

    # ------------------------------------------------------------------ tables
    def guards(self, arms: list[Arm]) -> str:
        """The guards' findings about these arms' tuning, for the table's notes (fl_bench.analysis.guards)."""
        studies = sorted({self.spec["studies"][a.study].get("setting_of", a.study) for a in arms})
        edges = [edge for study in studies for edge in tuned_edges({"study": study, **self.tuned(study)}, self.protocol.spaces)]
        if not edges:
            return ""
        return ("Guard, edge: a tuned value at the edge of its search space, so the optimum may lie beyond it "
                "(widen the space and tune again before reading these arms): " + "; ".join(map(str, edges)) + ".")

    # A tuned setting that scores this much worse on the report seeds than on the tuning seeds did
    # not carry over to unseen seeds: trips (minimize) 1.5x as many, accuracy (maximize) 5 points less.
    HELD_OUT_WORSE = {"minimize": 1.5, "maximize": 0.05}

    @staticmethod
    def _table_runs(chosen: list[Arm], directories: dict[str, Path]) -> Frames:
        """The runs, metrics and trips of a table's arms, each labelled by its arm (column ``method``)."""
        runs, metrics, trips = load_runs([directories[a.key] for a in chosen], ["algorithm.name"])
        labels = {str(directories[a.key]): a.label for a in chosen}
        label_of = runs["source"].map(lambda source: labels[str(Path(source).parent)])
        runs["method"] = label_of
        metrics["method"] = metrics["run"].map(label_of)
        trips["method"] = trips["run"].map(label_of)
        order = {a.label: i for i, a in enumerate(chosen)}
        return runs.sort_values("method", key=lambda m: m.map(order), kind="stable"), metrics, trips

    @staticmethod
    def _evidence_view(table: dict, runs: pd.DataFrame) -> tuple[pd.DataFrame, Measure]:
        """The runs a table's verdicts read (rounds for a rounds table) and the measure they read
        (FedStaleWeight's fairness table is judged on best accuracy)."""
        measure = MEASURES[table.get("measure", "trips")].verdict
        return (rounds_view(runs) if measure.in_rounds else runs), measure

    def power(self, tables: dict[str, dict], arms: dict[str, Arm]) -> dict[str, dict[str, Need]]:
        """Per table, per verdict arm: the report seeds it needs (fl_bench.analysis.power), from every arm
        run once on the protocol's pilot seeds, before any report run; {} without a power rule."""
        power = self.protocol.power
        if not power or self.smoke:
            return {}
        pilot_runs = {key: self.arm_runs(arm, power["pilot_seeds"], self.runs_dir / "pilot") for key, arm in arms.items()}
        self._launch("pilot", list(pilot_runs.values()), self.jobs)
        directories = {key: runs.directory for key, runs in pilot_runs.items()}
        needs = {}
        for name, table in tables.items():
            chosen = self.arms(table)
            runs = self._table_runs(chosen, directories)[0]
            view, measure = self._evidence_view(table, runs)
            needs[name] = {}
            for arm in chosen:
                spec = table["arms"][arm.label]
                vs = spec.get("vs", table["reference"])
                paper = paper_effect(spec, table["arms"].get(vs, {}), measure.name)
                if not paper or vs == arm.label:
                    continue
                needs[name][arm.label] = seeds_needed(samples(view, arm.label, measure.name)[0],
                                                      samples(view, vs, measure.name)[0], paper, measure.kind,
                                                      spec.get("claim", "side"), spec.get("tolerance"))
        return needs

    def record_seeds(self, tables: dict[str, list[int]], seeds: dict[str, list[int]], arms: dict[str, Arm]
                     ) -> SeedLedger | None:
        """The report seeds of every table and arm, checked against the runs directory's ledger and recorded
        there before the first report run (fl_bench.analysis.seed_ledger; None at a smoke point, which
        reports nothing)."""
        if self.smoke:
            return None
        ledger = SeedLedger.read(self.runs_dir)
        started = {key for key in arms if any((self.runs_dir / key).glob("*/summary.json"))}
        ledger.check(tables, {key: seeds[key] for key in arms}, self.protocol.amended,
                     {key: arm.label for key, arm in arms.items()}, started)
        with writing(ledger.path, REPRODUCTION_NOT_WRITTEN):
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            ledger.record(tables, {key: seeds[key] for key in arms}, self.protocol.amended, self.spec_path)
        return ledger

    def power_note(self, needs: dict[str, Need] | None, runs: pd.DataFrame) -> str:
        """The power rule's paragraph under a table: what each verdict needed and what the table ran."""
        if needs is None:
            return ""
        power = self.protocol.power
        shown = "; ".join(f"{label} {'no side (the paper is split)' if need.seeds is None else need.seeds}"
                          + ("" if need.seeds is None else f" ({need.paper_seeds} at the paper's effect, {need.pilot_seeds} "
                                                            f"at the pilot's {_scaled(need.pilot_effect, need)}"
                                                            + (f", against its closeness margin "
                                                               f"{_scaled(need.effect + need.distance, need)}"
                                                               if need.claim == "closeness" else "")
                                                            + (f": more than the cap, {power['cap']}"
                                                               if need.seeds > power["cap"] else "") + ")")
                          for label, need in needs.items())
        return (f"Seeds by power (fl_bench/analysis/power.py, registered before the report runs): on pilot seeds "
                f"{', '.join(map(str, power['pilot_seeds']))}, the report seeds each verdict needs for its 95% interval "
                f"to clear the band if the paper's effect is real, and to decide at the effect the pilot measured: "
                f"{shown or 'no verdict'}; this table ran "
                f"{int(runs.groupby('method')['seed'].nunique().min())} report seeds (at least "
                f"{Protocol.MIN_REPORT_SEEDS}, at most the cap {power['cap']}).")

    def held_out(self, arms: list[Arm], directories: dict[str, Path]) -> str:
        """Arms that run a tuned setting exactly (no overrides) whose median objective on the report
        seeds is far worse than its tuning seeds' mean: the guard the unstable one misses when most
        report seeds collapse (a median seed that missed the target is not an outlier)."""
        tuner = self.protocol.tuner
        if tuner is None or self.smoke:  # a smoke point runs another workload than the one tuned
            return ""
        findings = []
        for arm in arms:
            if arm.overrides or "setting_of" in self.spec["studies"][arm.study]:
                continue
            values = [summary[tuner["objective"]] for summary in finished_runs(directories[arm.key]).values()]
            if not values:
                continue
            found = self.tuned(arm.study)
            # a confirmed setting's mean over all its seeds (its best_value is the worst seed's)
            per_seed = found.get("best_per_seed") or {seed: found["best_value"] for seed in tuner["seeds"]}
            tuned, median = float(statistics.mean(per_seed.values())), float(statistics.median(values))
            worse = (median > self.HELD_OUT_WORSE["minimize"] * tuned if tuner["direction"] == "minimize"
                     else median < tuned - self.HELD_OUT_WORSE["maximize"])
            if worse:
                shown = (lambda v: f"{v:,.0f}") if abs(tuned) >= 100 else (lambda v: f"{v:.4g}")  # trips or accuracy
                findings.append(f"{arm.label} ({tuner['objective']} {shown(tuned)} on tuning seeds "
                                f"{', '.join(map(str, sorted(per_seed)))}, median {shown(median)} on the report seeds)")
        if not findings:
            return ""
        return ("Guard, held-out: a tuned setting that does much worse on the report seeds than on the seeds it was "
                "tuned on, so it does not carry over to unseen seeds (more tuning seeds, or a setting further from "
                "the edge of stability): " + "; ".join(findings) + ".")

    def _nested(self) -> bool:
        return any("special_case" in study for study in self.spec["studies"].values())

    def readings(self) -> str:
        """The sweep file's ``readings``: where the implementation reads the paper one way and another
        reading is possible, with the knob that switches and any measured ablation, under every table."""
        readings = self.spec.get("readings") or []
        if not readings:
            return ""
        return ("Readings (where this implementation reads the paper one way and another reading is possible):\n\n"
                + "\n".join(f"- {reading}" for reading in readings))

    def degenerate(self, table: dict) -> dict[str, str]:
        """The table's arms whose tuned setting is their study's special case (FedProx tuned to mu = 0,
        MimeXlite to beta = 0): label -> the settings that make it so ('algorithm.beta = 0.0')."""
        found = {}
        for label, arm in table["arms"].items():
            setting = (self.spec["studies"].get(arm.get("study"), {}).get("special_case") or {}).get("set")
            if not arm.get("special_case") or not setting:
                continue
            best = self.tuned(arm["study"])["best_params"]
            if all(key in best and float(best[key]) == float(value) for key, value in setting.items()):
                found[label] = ", ".join(f"{key} = {best[key]}" for key in setting)
        return found

    def table_evidence(self, table: dict, directories: dict[str, Path], needs: dict[str, Need] | None
                       ) -> tuple[Frames, pd.DataFrame]:
        """The table's runs (runs, metrics, trips) from its arms' finished runs, and its evidence (one row per arm)."""
        frames = self._table_runs(self.arms(table), directories)
        view, verdict_measure = self._evidence_view(table, frames[0])
        degenerate = self.degenerate(table)
        arms = {label: {**arm, "degenerate": degenerate[label]} if label in degenerate else arm
                for label, arm in table["arms"].items()}
        return frames, evidence(view, table["reference"], arms, verdict_measure.name, needs, (self.protocol.power or {}).get("cap"))

    def write_table(self, name: str, table: dict, directories: dict[str, Path], needs: dict[str, Need] | None,
                    ledger: SeedLedger | None, out: Path, computed: tuple[Frames, pd.DataFrame],
                    other_verdicts: dict[str, str]) -> pd.DataFrame:
        """The table's page, evidence and plots into ``out``, from :meth:`table_evidence` (``computed``) and the
        verdicts of the file's other tables ('TABLE: ARM', for its headlines' rows there); returns its runs."""
        chosen = self.arms(table)
        (runs, metrics, trips), found = computed
        tuning = sum(self.tuned(s)["wall_seconds"] for s in {a.study for a in chosen})
        measure = MEASURES[table.get("measure", "trips")]
        write_table_evidence(found, name, self.paper, table["arms"], out / f"{name}_evidence.csv")
        notes = "\n\n".join(filter(None, (fill_notes(table.get("notes", ""), found, self.spec["headlines"], name, other_verdicts),
                                            self.power_note(needs, runs),
                                            ledger.note(name, self.spec_path, tuple(self.protocol.amended)) if ledger else "",
                                            self.guards(chosen),
                                            self.held_out(chosen, directories), self.readings(),
                                            self.protocol.describe(self._nested()))))
        if measure.page == "fairness":  # FedStaleWeight: weight shares per group, with the evidence on accuracy
            shown = evidence_markdown(runs, table["reference"], table["arms"], measure.verdict.name, found)
            run_dirs = {a.label: sorted(finished_runs(directories[a.key])) for a in chosen}
            write_fairness(run_dirs, name, out, table.get("at", [500, 1000, 2000, 4000]),
                           "\n\n".join(filter(None, (shown, notes))), table["title"])
        else:
            write_report((runs, metrics, trips), name, out, table["reference"], table["arms"], table["title"], tuning,
                         notes, measure.name, found)
        return runs

    def run(self, names: list[str], out: Path, publish: str | None = None, dry_run: bool = False) -> None:
        """Make the tables ``names`` into ``out``; with ``publish`` (ENTITY/PROJECT) each also as a W&B
        Report (fl_bench.analysis.wandb_report; its runs need ``--override logger=wandb``)."""
        tables = self.tables(names)
        # Every arm of the file, as this mode would run it, composes and passes its checks before any directory is
        # made or any run starts: a misspelt override in the last arm must not wait for the others' runs.
        self.check_arms(list({arm.key: arm for table in self.spec["tables"].values()
                              for arm in self.arms(table, every=True)}.values()))
        for directory, what in ((out, "--out"), (self.runs_dir, "the runs directory (--runs-dir)"),
                                *([] if self.smoke else [(self.tuned_dir, "tuned_dir")])):
            _check_writable(directory, what)  # before hours of runs
        if not self.smoke:  # a damaged or edited ledger stops the reproduction before its tuning, not after
            SeedLedger.read(self.runs_dir)
        arms = {arm.key: arm for table in tables.values() for arm in self.arms(table)}
        studies = {arm.study for arm in arms.values()}
        studies = sorted({self.spec["studies"][s].get("setting_of", s) for s in studies})
        # The studies side by side, --jobs at a time: each is one sequential TPE search (a trial's seeds, then
        # the next trial, as registered), whose runs its own command hands to the launcher; only their
        # drivers wait here. (A launcher runs jobs, not a search that decides its next trial from the last.)
        if self.jobs == 1:  # (in this thread: a profile sees the runs)
            for study in studies:
                self.tuned(study)
        else:
            with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                list(pool.map(self.tuned, studies))
        needs = self.power(tables, arms)  # {} without a power rule (or at a smoke point)
        seeds = {key: self.seeds for key in arms}
        if needs:  # an arm in several tables runs the most seeds any of them needs
            counts: dict[str, int] = defaultdict(int)
            for name, table in tables.items():
                n = table_seeds(list(needs[name].values()), Protocol.MIN_REPORT_SEEDS, self.protocol.power["cap"])
                for arm in self.arms(table):
                    counts[arm.key] = max(counts[arm.key], n)
            seeds = {key: self.seeds[:counts[key]] for key in arms}
        ledger = self.record_seeds({name: sorted({s for a in self.arms(t) for s in seeds[a.key]}) for name, t in tables.items()},
                                   seeds, arms)
        report_runs = {key: self.arm_runs(arm, seeds[key]) for key, arm in arms.items()}
        self._launch("report", list(report_runs.values()), self.jobs)
        directories = {key: runs.directory for key, runs in report_runs.items()}
        # Every table's evidence before any page: a page's headline sentence reads rows of the others
        computed = {name: self.table_evidence(table, directories, needs.get(name)) for name, table in tables.items()}
        verdicts = {f"{name}: {arm}": verdict for name, (_, found) in computed.items()
                    for arm, verdict in zip(found["method"], found["verdict"])} if computed else {}
        for name, table in tables.items():
            with _staged(out) as staging:  # the table's files replace its earlier ones together
                runs = self.write_table(name, table, directories, needs.get(name), ledger, staging, computed[name], verdicts)
            print(f"{name}: {out / name}.md")
            if publish:
                from fl_bench.analysis.wandb_report import publish as publish_report

                print(f"{name}: W&B Report {publish_report(publish, name, out / f'{name}.md', runs, ['algorithm.name'], dry_run)}")
        rows = scoreboard.write(out, [*scoreboard.reproductions(), self.spec_path])
        print(f"scoreboard: {out / 'README.md'}: {scoreboard.counts(rows)}")


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


@contextlib.contextmanager
def _mode_from_the_command_line(arguments: list[str]):
    """Hydra composes a command's whole config once more only to read ``hydra.mode`` before it composes
    the run's (a quarter of a small run's time in-process); no fl_bench config sets ``hydra.mode``, so
    unless the command does, the mode is what ``-m`` says and that extra composition is skipped."""
    from unittest import mock

    from hydra._internal.hydra import Hydra

    if any(a.lstrip("+").startswith("hydra.mode=") for a in arguments) or not hasattr(Hydra, "get_mode"):
        yield
        return
    with mock.patch.object(Hydra, "get_mode", lambda self, config_name, overrides: None):
        yield


def _check_writable(directory: Path, what: str) -> None:
    """ValueError or ResultNotWritten in one line unless ``directory`` is (or can be made) a directory this
    process can write into."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{what} {directory} is not a directory: give a directory (it is made if missing)")
    with writing(directory, f"{what} must be a directory you can write to"):
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()


@contextlib.contextmanager
def _staged(out: Path):
    """A directory inside ``out`` to write a table's files into, moved into ``out`` once all are written: a
    table that fails part-way (a full disk) leaves its earlier files whole."""
    with writing(out, REPRODUCTION_NOT_WRITTEN):
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".table-", dir=out))
    try:
        with writing(out, REPRODUCTION_NOT_WRITTEN):
            yield staging
            for file in sorted(staging.iterdir()):
                os.replace(file, out / file.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _multirun(overrides: list[str]) -> list[str]:
    """``python -m fl_bench -m`` with ``overrides`` (and no progress bar: the output goes to a log)."""
    return [sys.executable, "-m", "fl_bench", "-m", "progress=false", *overrides]


def _launcher_keys(launcher: str, launcher_overrides: list[str], overrides: list[str]) -> frozenset[str]:
    """The keys of Hydra's launcher config ``launcher`` (conf/hydra/launcher/ or a plugin's); ValueError in
    one line for an unknown launcher, or an override it does not take (naming its keys)."""
    chosen = next((o for o in overrides if o.lstrip("+~").startswith("hydra/launcher=")), None)
    if chosen is not None:
        raise ValueError(f"--override {chosen}: choose the launcher with --launcher {chosen.split('=', 1)[1]}")
    return _checked_launcher(launcher, tuple(launcher_overrides))


@functools.lru_cache(maxsize=16)
def _checked_launcher(launcher: str, launcher_overrides: tuple[str, ...]) -> frozenset[str]:
    """:func:`_launcher_keys` once per process (a composition with Hydra's config: a second or two on a busy
    machine, and the tests make many reproductions)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from fl_bench.runs.cli import CONFIG_DIR, one_line

    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        names = GlobalHydra.instance().config_loader().get_group_options("hydra/launcher")
        if launcher not in names:
            raise ValueError(f"--launcher {launcher!r} is not a launcher: choose one of {', '.join(names)} "
                             "(conf/hydra/launcher/ and Hydra's launcher plugins)")
        keys = frozenset(compose("config", [f"hydra/launcher={launcher}"], return_hydra_config=True).hydra.launcher) - {"_target_"}
        for override in launcher_overrides:
            key = LAUNCHER_OVERRIDE.sub("", override).split("=", 1)[0].split(".", 1)[0]
            if key not in keys and not override.startswith("+"):
                raise ValueError(f"--override {override}: --launcher {launcher} has no key {key!r}: choose one of "
                                 f"{', '.join(sorted(keys))}")
            try:
                compose("config", [f"hydra/launcher={launcher}", override], return_hydra_config=True)
            except Exception as error:  # Hydra's and the launcher schema's errors, made one line
                raise ValueError(f"--override {override} is not allowed for --launcher {launcher}: "
                                 f"{one_line(error)}") from error
    return keys


def _finished_seeds(directory: Path) -> set[int]:
    return {summary["seed"] for summary in finished_runs(directory).values()}


def _held_seeds(directory: Path) -> dict[int, str]:
    """The seeds whose run in ``directory`` a live task holds (fl_bench.runs.claim), with its holder line."""
    held = {}
    for claim in sorted(directory.glob(f"*_seed*{CLAIM}")):
        seed = re.search(r"_seed(\d+)$", claim.name.removesuffix(CLAIM))
        holder = claim_holder(claim.with_name(claim.name.removesuffix(CLAIM)))
        if seed and holder is not None:
            held[int(seed.group(1))] = holder
    return held


def _not_finished(what: str, directory: Path, missing: list[int], log: Path) -> str:
    """The line for runs that did not all finish: the first such seed, why, and the first line of its own
    error (its summary's, else the error its launch's ``log`` shows for it, else the last one it shows)."""
    seed = missing[0]
    run = next(directory.glob(f"*_seed{seed}"), None)
    why = "it never started (no run directory)" if run is None else unfinished(run)
    error = (RunDirectory(run).summary() or {}).get("error") if run is not None else None
    error = error or _error_in_log(log, run)
    more = f" (and {len(missing) - 1} more seed{'s' if len(missing) > 2 else ''})" if len(missing) > 1 else ""
    return (f"{what} did not finish on seed {seed}{more}: {why}" + (f": {error}" if error else "") + f" (log: {log})")


def _error_in_log(log: Path, run: Path | None = None) -> str | None:
    """The last error a command's log shows: the one it names ``run`` with (fl_bench_jobs' line for a failed
    job), else fl_bench's one line, else an exception's last line."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    mine = f"fl_bench: error: {run}: "
    for prefix in ([mine] if run is not None else []) + ["fl_bench: error: "]:
        for line in reversed(lines):
            if line.startswith(prefix):
                return line[len(prefix):]
    return next((line for line in reversed(lines) if re.match(r"[\w.]+(Error|Exception|Interrupt)\b", line)), None)


def _scaled(effect: float, need: Need) -> str:
    """A pilot's effect as its table shows it: a ratio (kept as a log ratio in Need) or points."""
    return f"{math.exp(effect):.2f}×" if need.kind == "ratio" else f"{effect:+.2f}"


def run_in_process(arguments: list[str], log: TextIO) -> int:
    """``python -m fl_bench ARGUMENTS`` in this process, its output into ``log``: the same command (and
    the same results: every run seeds what it draws from) without a new interpreter's start-up of
    torch and Lightning. Returns its exit status."""
    import logging

    from fl_bench.runs.cli import main as fl_bench_main

    argv, handlers, level = sys.argv, logging.root.handlers[:], logging.root.level
    sys.argv = ["fl_bench", *arguments]
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), _mode_from_the_command_line(arguments):
            fl_bench_main()
        return 0
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    except Exception:  # a traceback in the log, as a subprocess would leave it
        traceback.print_exc(file=log)
        return 1
    finally:
        sys.argv = argv
        logging.root.handlers[:], logging.root.level = handlers, level  # Hydra configured logging for the run


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the documented command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.analysis.reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path, help="a sweep file, e.g. sweeps/fedbuff_smoke.yaml")
    parser.add_argument("tables", nargs="*", help="tables to make (default: all in the file)")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--runs-dir", type=Path, help="where runs go (default: the file's runs_dir)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once on this machine (--launcher local_cores: its "
                        "n_jobs), and studies searched at once")
    parser.add_argument("--launcher", default="local_cores", metavar="NAME",
                        help="the Hydra launcher of every run: local_cores (this machine's cores), slurm (a SLURM job "
                        "array per stage, from a login node), submitit_local, ...; its settings with --override "
                        "hydra.launcher.KEY=VALUE")
    parser.add_argument("--smoke", action="store_true", help="one point per table on the file's small workload")
    parser.add_argument("--every-arm", action="store_true",
                        help="with --smoke: every arm of every table once (checks that each command runs and is reported)")
    parser.add_argument("--in-process", action="store_true",
                        help="run every study and arm in this process, one at a time (no start-up per run; --jobs 1)")
    parser.add_argument("--override", nargs="+", default=[], metavar="KEY=VALUE",
                        help="Hydra overrides for every run, e.g. device=cuda data_root=/data (tuning included), and "
                        "the launcher's settings, e.g. hydra.launcher.partition=gpu")
    parser.add_argument("--publish", metavar="ENTITY/PROJECT", help="also publish each table as a W&B Report "
                        "(needs --override logger=wandb; see python -m fl_bench.analysis.report --publish)")
    parser.add_argument("--dry-run", action="store_true", help="with --publish: write each Report's specification instead")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring); errors are one line (exit 1; a malformed command line, argparse's 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        Reproduction(args.spec, args.smoke, args.runs_dir, args.jobs, args.override, args.every_arm, args.in_process,
                     args.launcher).run(args.tables, args.out, args.publish, args.dry_run)
    except (ValueError, RuntimeError, FileNotFoundError, FLBenchError) as error:
        parser.exit(1, f"fl_bench.analysis.reproduce: error: {error}\n")


if __name__ == "__main__":
    main()
