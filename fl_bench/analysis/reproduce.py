"""Reproduce a paper's tables from one sweep file: tune every study with the same budget, rerun each
table's arms on fresh seeds, write the tables beside the paper's numbers.

    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml [TABLE ...] [--jobs 2]
    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml --smoke --out /tmp/r   # one point per table
    python -m fl_bench.analysis.reproduce sweeps/hfl_smoke.yaml --smoke --every-arm --in-process   # every arm, once
    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml --override device=cuda vmap_chunk=1024
    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml --held-out-seeds 721-740 --jobs 2   # verdicts on new seeds
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
stopped and started again at any time: SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops every process it started,
each command's process group (the Hydra process and joblib's loky workers, and the runs in them, which write
their checkpoints: fl_bench.analysis.launch.stopped_on_signal), and exits 128 + the signal in one line.

The sweep file's ``runs_dir`` and ``tuned_dir``, and the default ``--out`` and ``--registered`` (``results``),
are read from the sweep file's repository (the nearest directory above it with pyproject.toml or .git, else
its own directory: fl_bench.analysis.sweep_file.repository_of), never from the working directory, so the
command finds the kept settings and runs from anywhere; paths given on the command line are read from the
working directory. The first line says how many studies will be searched and about how long that takes
(from the earlier searches kept in tuned_dir), before any search starts, and a second line where those
studies' settings are kept under this protocol in the working directory's own ``tuned_dir`` instead.

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
import hashlib
import math
import os
import re
import shutil
import statistics
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fl_bench.analysis import held_out, scoreboard
from fl_bench.analysis.fairness import write_fairness
from fl_bench.analysis.guards import tuned_edges
from fl_bench.analysis.verdict import evidence, evidence_markdown, fill_notes, paper_effect, samples
from fl_bench.analysis.launch import (LAUNCHER_OVERRIDE, REPRODUCTION_NOT_WRITTEN, Launcher, Runs, Stopped, launcher_keys,
                                      stopped_on_signal)
from fl_bench.analysis.measures import MEASURES, Measure
from fl_bench.analysis.power import Need, seeds_needed, table_seeds
from fl_bench.analysis.protocol import Protocol, spaces_of
from fl_bench.analysis.report import write_report
from fl_bench.analysis.run_frames import Frames, load_runs, rounds_view
from fl_bench.analysis.scoreboard import write_table_evidence
from fl_bench.analysis.seed_ledger import SeedLedger
from fl_bench.analysis.sweep_file import SweepFile, Table, load_sweep_file, repository_of, resolved
from fl_bench.analysis.tuning import Studies
from fl_bench.errors import FLBenchError
from fl_bench.runs.config import register_configs
from fl_bench.runs.run_dir import finished_runs, writing


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
    no tuning.

    A pipeline of stages (:meth:`run`), each taking and returning typed values, one way: the typed sweep file
    (fl_bench.analysis.sweep_file) -> tuned settings (``studies``: fl_bench.analysis.tuning.Studies) -> seeds
    by power (:meth:`power`) -> report runs (:meth:`report_runs`, through ``launcher``:
    fl_bench.analysis.launch.Launcher, which every stage's runs go through) -> frames and verdicts
    (:meth:`table_evidence`) -> pages, evidence files and the paper record (:meth:`write_pages`). The launcher
    and the studies are parts it composes, not classes it inherits from."""

    def __init__(self, spec_path: Path, smoke: bool, runs_dir: Path | None, jobs: int, overrides: list[str] = (),
                 every_arm: bool = False, in_process: bool = False, launcher: str = "local_cores",
                 held_out_seeds: list[int] | None = None):
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"--jobs {jobs} is not allowed: it is how many runs (and studies' searches) go at once on "
                             "this machine: an integer >= 1")
        register_configs()  # plugin components the arms name (FL_BENCH_PLUGINS); one that cannot be imported is one line
        # the launcher's settings go to the commands that launch runs, not into the runs' own (or their commands)
        launcher_settings = [o for o in overrides if LAUNCHER_OVERRIDE.match(o)]
        overrides = [o for o in overrides if not LAUNCHER_OVERRIDE.match(o)]
        self.spaces = spaces_of(overrides)  # (a plugin's own search spaces among them)
        self.spec_path = Path(spec_path)
        self.spec: SweepFile = load_sweep_file(self.spec_path, self.spaces)
        self.paper = self.spec.paper or self.spec_path.stem  # its name on the scoreboard
        self.protocol = self.spec.protocol
        if every_arm and not smoke:
            raise ValueError("--every-arm is a smoke check: use it with --smoke (a full reproduction runs every arm)")
        if in_process and jobs > 1:
            raise ValueError(f"--in-process runs one command at a time in this process: use --jobs 1, not {jobs}")
        if in_process and (launcher != "local_cores" or launcher_settings):
            raise ValueError(f"--in-process runs every run in this process: use the default --launcher local_cores, "
                             f"without hydra.launcher overrides (not {' '.join([launcher, *launcher_settings])})")
        self.smoke, self.every_arm, self.jobs = smoke, every_arm, jobs
        self.held_out_seeds = self._held_out(held_out_seeds) if held_out_seeds is not None else None
        held = f"_held_out_{held_out.label(self.held_out_seeds)}" if self.held_out_seeds else ""
        self.runs_dir = runs_dir or Path(self.spec.runs_dir + ("_smoke" if smoke else "") + held)
        self.tuned_dir = Path(self.spec.tuned_dir)
        self.workload = [*self.spec.workload, *(self.spec.smoke if smoke else []), *overrides]
        self.seeds = (self.held_out_seeds or list(self.protocol.report_seeds[:1] if smoke else self.protocol.report_seeds))
        # the stages' parts, composed: the launches of every stage, and the studies (a held-out check never tunes)
        self.launcher = Launcher(self.runs_dir, tuple(self.workload), launcher,
                                 launcher_keys(launcher, launcher_settings, overrides), tuple(launcher_settings),
                                 in_process, self.spec_path, hashlib.sha256(self.spec_path.read_bytes()).hexdigest())
        self.studies = Studies(self.spec, self.spaces, self.workload, self.tuned_dir, self.launcher, smoke,
                               retune=self.held_out_seeds is None)
        if not smoke:  # they guard the tuning, which a smoke point never does
            self._check_special_cases()

    def _held_out(self, seeds: list[int]) -> list[int]:
        """The held-out check's report seeds (fl_bench.analysis.held_out): none the protocol used, at least its
        minimum, at most its cap (the first ``cap`` of them); ValueError in one line otherwise."""
        if self.smoke:
            raise ValueError("--held-out-seeds reruns the registered protocol on new report seeds: use it without --smoke")
        protocol = self.protocol
        used = {*protocol.report_seeds, *(protocol.power.pilot_seeds if protocol.power else []),
                *(protocol.tuner.seeds if protocol.tuner else []),
                *(protocol.tuner.confirm.seeds if protocol.tuner and protocol.tuner.confirm else [])}
        if used & set(seeds):
            raise ValueError(f"--held-out-seeds: seeds {sorted(used & set(seeds))} are the protocol's own (tuning, "
                             "confirmation, pilot or report seeds): give seeds it never used")
        if len(seeds) < Protocol.MIN_REPORT_SEEDS:
            raise ValueError(f"--held-out-seeds: {len(seeds)} seeds, at least {Protocol.MIN_REPORT_SEEDS} (the protocol's "
                             "minimum of report seeds)")
        return seeds[:protocol.power.cap] if protocol.power else seeds

    def _check_special_cases(self) -> None:
        """Every nested study's special case composes into a config that runs (FedProx with mu = 0):
        otherwise its first trial fails and the study starts from nowhere."""
        self._check_composes([
            ([*self.workload, *study.overrides, *(f"{k}={v}" for k, v in study.special_case.set.items())],
             f"study {name}: its special case does not run")
            for name, study in self.spec.studies.items() if study.special_case is not None])

    def check_arms(self, arms: list[Arm]) -> None:
        """Every arm's command composes into a config that passes its checks (a misspelt override or a
        value out of range), before any study is tuned or any arm run (the tuned setting, not known yet, aside)."""
        self._check_composes([([*self.workload, *self.spec.studies[arm.study].overrides, *arm.overrides],
                               f"arm {arm.label!r} ({arm.study}) does not run") for arm in arms])

    @staticmethod
    def _check_composes(configs: list[tuple[list[str], str]]) -> None:
        """Compose each (overrides, what) as a run would; ValueError naming ``what`` and the error."""
        from hydra import compose, initialize_config_dir

        from fl_bench.runs.cli import CONFIG_DIR, one_line
        from fl_bench.runs.config import to_config

        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            for overrides, what in configs:
                try:
                    to_config(compose("config", overrides=overrides))
                except Exception as error:  # Hydra's and the schema's errors, made one line
                    raise ValueError(f"{what}: {one_line(error)}") from error

    def tables(self, names: list[str]) -> dict[str, Table]:
        """The tables named ``names`` (all when empty), by name; ValueError for an unknown one."""
        tables = self.spec.tables
        unknown = [n for n in names if n not in tables]
        if unknown:
            raise ValueError(f"unknown table {', '.join(unknown)}: choose from {', '.join(tables)}")
        return {n: tables[n] for n in names or tables}

    def arms(self, table: Table, every: bool = False) -> list[Arm]:
        """The table's arms (with ``smoke`` only its reference arm unless ``every``, and each arm's smoke
        overrides); the studies they name were checked when the file was read (fl_bench.analysis.sweep_file)."""
        arms = [Arm(label, a.study, tuple([*a.overrides, *(a.smoke if self.smoke else [])]))
                for label, a in table.arms.items()]
        if self.smoke and not self.every_arm and not every:  # one point per table: its reference arm, which the others are compared with
            return [a for a in arms if a.label == table.reference]
        return arms

    def arm_runs(self, arm: Arm, seeds: list[int] | None = None, base: Path | None = None) -> Runs:
        """The arm's runs on ``seeds`` (default: the report seeds) in ``base`` (default: the runs
        directory), with its study's tuned setting (a retuned study or an edited arm is another command)."""
        seeds = self.seeds if seeds is None else list(seeds)
        best = self.studies.tuned(arm.study).params
        setting = (*self.spec.studies[arm.study].overrides, *(f"{k}={v}" for k, v in best.items()), *arm.overrides)
        return Runs((base or self.runs_dir) / arm.key, tuple(self.workload), setting, tuple(seeds), f"arm {arm.label!r}")

    def searches(self, arms: dict[str, Arm]) -> dict[str, str]:
        """The studies :meth:`tune` will tune for ``arms`` (fl_bench.analysis.tuning.Studies.to_search: each with its
        first stage, "search" or "confirm"; read from the kept files, nothing launched); none at a smoke point, in
        a held-out check, or without a tuner."""
        if self.protocol.tuner is None or self.smoke or not self.studies.retune:
            return {}
        studies = {self.spec.studies[arm.study].setting_of or arm.study for arm in arms.values()}
        return self.studies.to_search(sorted(studies))

    def planned_runs(self, arms: dict[str, Arm], searches: dict[str, str] | None = None) -> dict[str, int | str]:
        """The runs each stage will launch for ``arms`` (by key; each an ``Arm``), by stage name as its lines name
        it: a number where it is known before any run (a search's is its budget, fewer if a small space ends it;
        a study whose setting is kept has none), else when it is known. ``searches``: :meth:`searches`'s."""
        tuner, power = self.protocol.tuner, self.protocol.power
        planned: dict[str, int | str] = {}
        for study, stage in (self.searches(arms) if searches is None else searches).items():
            if stage == "search":
                planned[f"tune_{study}"] = tuner.trials * max(1, len(tuner.seeds))
            if tuner.confirm is not None:
                planned[f"confirm_{study}"] = "after its search" if stage == "search" else "its finalists"
        pilot = power and not self.smoke and not self.held_out_seeds
        if pilot:
            planned["pilot"] = len(arms) * len(power.pilot_seeds)
        planned["report"] = "after the pilot" if pilot else len(arms) * len(self.seeds)
        return planned

    # ------------------------------------------------------------------ tables
    def guards(self, arms: list[Arm]) -> str:
        """The guards' findings about these arms' tuning, for the table's notes (fl_bench.analysis.guards)."""
        studies = sorted({self.spec.studies[a.study].setting_of or a.study for a in arms})
        tuned = {study: self.studies.tuned(study) for study in studies}
        edges = [edge for study, found in tuned.items() for edge in tuned_edges(
            {"study": study, "space": found.space, "best_params": found.params}, self.spaces)]
        if not edges:
            return ""
        return ("Guard, edge: a tuned value at the edge of its search space, so the optimum may lie beyond it "
                "(widen the space and tune again before reading these arms): " + "; ".join(map(str, edges)) + ".")

    # A tuned setting that scores this much worse on the report seeds than on the tuning seeds did
    # not carry over to unseen seeds: trips (minimize) 1.5x as many, accuracy (maximize) 5 points less.
    HELD_OUT_WORSE = {"minimize": 1.5, "maximize": 0.05}

    @staticmethod
    def _table_runs(chosen: list[Arm], directories: dict[str, Path]) -> Frames:
        """The runs, metrics and trips of a table's arms, each labelled by its arm (column ``method``).
        Arms of one study and overrides share their runs (one directory): each later such arm gets a copy
        of the first's rows under its own label, so that every arm is a row of the table."""
        runs, metrics, trips = load_runs(list(dict.fromkeys(directories[a.key] for a in chosen)), ["algorithm.name"])
        labels, copies = {}, []
        for a in chosen:
            directory = str(directories[a.key])
            if directory in labels:
                copies.append((labels[directory], a.label))
            else:
                labels[directory] = a.label
        label_of = runs["source"].map(lambda source: labels[str(Path(source).parent)])
        runs["method"] = label_of
        metrics["method"] = metrics["run"].map(label_of)
        trips["method"] = trips["run"].map(label_of)
        for first, label in copies:
            runs, metrics, trips = (pd.concat([frame, frame[frame["method"] == first].assign(method=label)])
                                    for frame in (runs, metrics, trips))
        order = {a.label: i for i, a in enumerate(chosen)}
        return runs.sort_values("method", key=lambda m: m.map(order), kind="stable"), metrics, trips

    @staticmethod
    def _evidence_view(table: Table, runs: pd.DataFrame) -> tuple[pd.DataFrame, Measure]:
        """The runs a table's verdicts read (rounds for a rounds table) and the measure they read
        (FedStaleWeight's fairness table is judged on best accuracy)."""
        measure = MEASURES[table.measure].verdict
        return (rounds_view(runs) if measure.in_rounds else runs), measure

    def power(self, tables: dict[str, Table], arms: dict[str, Arm]) -> dict[str, dict[str, Need]]:
        """Per table, per verdict arm: the report seeds it needs (fl_bench.analysis.power), from every arm
        run once on the protocol's pilot seeds, before any report run; {} without a power rule."""
        power = self.protocol.power
        if not power or self.smoke or self.held_out_seeds:  # (a held-out check runs its seeds, the cap kept)
            return {}
        pilot_runs = {key: self.arm_runs(arm, power.pilot_seeds, self.runs_dir / "pilot") for key, arm in arms.items()}
        self.launcher.launch_stage("pilot", list(pilot_runs.values()), self.jobs)
        directories = {key: runs.directory for key, runs in pilot_runs.items()}
        needs = {}
        for name, table in tables.items():
            chosen = self.arms(table)
            runs = self._table_runs(chosen, directories)[0]
            view, measure = self._evidence_view(table, runs)
            needs[name] = {}
            for arm in chosen:
                spec = table.arms[arm.label]
                vs = spec.vs or table.reference
                paper = paper_effect(spec, table.arms.get(vs), measure.name)
                if not paper or vs == arm.label:
                    continue
                needs[name][arm.label] = seeds_needed(samples(view, arm.label, measure.name)[0],
                                                      samples(view, vs, measure.name)[0], paper, measure.kind,
                                                      spec.claim, spec.tolerance)
        return needs

    def record_seeds(self, tables: dict[str, list[int]], seeds: dict[str, list[int]], arms: dict[str, Arm]
                     ) -> SeedLedger | None:
        """The report seeds of every table and arm, checked against the runs directory's ledger and recorded
        there before the first report run (fl_bench.analysis.seed_ledger; None at a smoke point, which
        reports nothing)."""
        if self.smoke or self.held_out_seeds:  # (the ledger is the registered report seeds')
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
                                                            + (f": more than the cap, {power.cap}"
                                                               if need.seeds > power.cap else "") + ")")
                          for label, need in needs.items())
        return (f"Seeds by power (fl_bench/analysis/power.py, registered before the report runs): on pilot seeds "
                f"{', '.join(map(str, power.pilot_seeds))}, the report seeds each verdict needs for its 95% interval "
                f"to clear the band if the paper's effect is real, and to decide at the effect the pilot measured: "
                f"{shown or 'no verdict'}; this table ran "
                f"{int(runs.groupby('method')['seed'].nunique().min())} report seeds (at least "
                f"{Protocol.MIN_REPORT_SEEDS}, at most the cap {power.cap}).")

    def held_out(self, arms: list[Arm], directories: dict[str, Path]) -> str:
        """Arms that run a tuned setting exactly (no overrides) whose median objective on the report
        seeds is far worse than its tuning seeds' mean: the guard the unstable one misses when most
        report seeds collapse (a median seed that missed the target is not an outlier)."""
        tuner = self.protocol.tuner
        if tuner is None or self.smoke:  # a smoke point runs another workload than the one tuned
            return ""
        findings = []
        for arm in arms:
            if arm.overrides or self.spec.studies[arm.study].setting_of is not None:
                continue
            values = [summary[tuner.objective] for summary in finished_runs(directories[arm.key]).values()]
            if not values:
                continue
            found = self.studies.tuned(arm.study)
            # a confirmed setting's mean over all its seeds (its value is the worst seed's)
            per_seed = found.per_seed or {seed: found.value for seed in tuner.seeds}
            tuned, median = float(statistics.mean(per_seed.values())), float(statistics.median(values))
            worse = (median > self.HELD_OUT_WORSE["minimize"] * tuned if tuner.direction == "minimize"
                     else median < tuned - self.HELD_OUT_WORSE["maximize"])
            if worse:
                shown = (lambda v: f"{v:,.0f}") if abs(tuned) >= 100 else (lambda v: f"{v:.4g}")  # trips or accuracy
                findings.append(f"{arm.label} ({tuner.objective} {shown(tuned)} on tuning seeds "
                                f"{', '.join(map(str, sorted(per_seed)))}, median {shown(median)} on the report seeds)")
        if not findings:
            return ""
        return ("Guard, held-out: a tuned setting that does much worse on the report seeds than on the seeds it was "
                "tuned on, so it does not carry over to unseen seeds (more tuning seeds, or a setting further from "
                "the edge of stability): " + "; ".join(findings) + ".")

    def _nested(self) -> bool:
        return any(study.special_case is not None for study in self.spec.studies.values())

    def readings(self) -> str:
        """The sweep file's ``readings``: where the implementation reads the paper one way and another
        reading is possible, with the knob that switches and any measured ablation, under every table."""
        readings = self.spec.readings
        if not readings:
            return ""
        return ("Readings (where this implementation reads the paper one way and another reading is possible):\n\n"
                + "\n".join(f"- {reading}" for reading in readings))

    def degenerate(self, table: Table) -> dict[str, str]:
        """The table's arms whose tuned setting is their study's special case (FedProx tuned to mu = 0,
        MimeXlite to beta = 0): label -> the settings that make it so ('algorithm.beta = 0.0')."""
        found = {}
        for label, arm in table.arms.items():
            special = self.spec.studies[arm.study].special_case
            if not arm.special_case or special is None or not special.set:
                continue
            setting = special.set
            best = self.studies.tuned(arm.study).params
            if all(key in best and float(best[key]) == float(value) for key, value in setting.items()):
                found[label] = ", ".join(f"{key} = {best[key]}" for key in setting)
        return found

    def table_evidence(self, table: Table, directories: dict[str, Path], needs: dict[str, Need] | None
                       ) -> tuple[Frames, pd.DataFrame]:
        """The table's runs (runs, metrics, trips) from its arms' finished runs, and its evidence (one row per arm)."""
        frames = self._table_runs(self.arms(table), directories)
        view, verdict_measure = self._evidence_view(table, frames[0])
        cap = self.protocol.power.cap if self.protocol.power else None
        return frames, evidence(view, table.reference, table.arms, verdict_measure.name, needs, cap, self.degenerate(table))

    def write_table(self, name: str, table: Table, directories: dict[str, Path], needs: dict[str, Need] | None,
                    ledger: SeedLedger | None, out: Path, computed: tuple[Frames, pd.DataFrame],
                    other_verdicts: dict[str, str]) -> pd.DataFrame:
        """The table's page, evidence and plots into ``out``, from :meth:`table_evidence` (``computed``) and the
        verdicts of the file's other tables ('TABLE: ARM', for its headlines' rows there); returns its runs."""
        chosen = self.arms(table)
        (runs, metrics, trips), found = computed
        tuning = sum(self.studies.tuned(s).wall_seconds for s in {a.study for a in chosen})
        measure = MEASURES[table.measure]
        # its fidelity under its title, above its verdicts (the block the scoreboard keeps)
        fidelity = [scoreboard.page_fidelity(table.fidelity.level, table.fidelity.note)] if table.fidelity else []
        title = "\n\n".join([table.title, *fidelity])
        write_table_evidence(found, name, self.paper, table.arms, out / f"{name}_evidence.csv")
        notes = "\n\n".join(filter(None, (fill_notes(table.notes, found, self.spec.headlines, name, other_verdicts),
                                            self.power_note(needs, runs),
                                            ledger.note(name, self.spec_path, tuple(self.protocol.amended)) if ledger else "",
                                            self.guards(chosen),
                                            self.held_out(chosen, directories), self.readings(),
                                            self.protocol.describe(self._nested()))))
        if measure.page == "fairness":  # FedStaleWeight: weight shares per group, with the evidence on accuracy
            shown = evidence_markdown(runs, table.reference, table.arms, measure.verdict.name, found)
            run_dirs = {a.label: sorted(finished_runs(directories[a.key])) for a in chosen}
            write_fairness(run_dirs, name, out, table.at or [500, 1000, 2000, 4000],
                           "\n\n".join(filter(None, (shown, notes))), title)
        else:
            write_report((runs, metrics, trips), name, out, table.reference, table.arms, title, tuning,
                         notes, measure.name, found)
        return runs

    def run(self, names: list[str], out: Path, publish: str | None = None, dry_run: bool = False,
            registered: Path = Path("results")) -> None:
        """Make the tables ``names`` into ``out``, stage after stage; with ``publish`` (ENTITY/PROJECT) each also
        as a W&B Report (fl_bench.analysis.wandb_report; its runs need ``--override logger=wandb``). A held-out
        check then sets each verdict beside the registered one, from the evidence in ``registered``."""
        tables = self.tables(names)
        if self.held_out_seeds:  # (the registered evidence it compares with: before the runs, not after them)
            held_out.check_registered(registered, list(tables))
        arms = {arm.key: arm for table in tables.values() for arm in self.arms(table)}
        searches = self.searches(arms)
        progress = self.launcher.progress
        plan = (progress.searches(list(searches), self.tuned_dir, self.studies.search_estimate(
            [study for study, stage in searches.items() if stage == "search"], self.jobs), self.jobs)
            if self.protocol.tuner is not None and not self.smoke and not self.held_out_seeds else "")
        progress.begin(self.spec_path, out, self.runs_dir, len(tables), len(arms), self.planned_runs(arms, searches),
                       plan)
        elsewhere = self.kept_elsewhere(list(searches))
        if elsewhere:
            progress.say(elsewhere)
        self.check(out)
        self.tune(arms)
        needs = self.power(tables, arms)  # {} without a power rule (or at a smoke point)
        directories, ledger = self.report_runs(tables, arms, needs)
        # Every table's evidence before any page: a page's headline sentence reads rows of the others
        computed = {name: self.table_evidence(table, directories, needs.get(name)) for name, table in tables.items()}
        self.write_pages(tables, out, directories, needs, ledger, computed, publish, dry_run)
        if self.held_out_seeds:
            summary = held_out.write_comparison(registered, out, list(tables), self.spec_path, self.held_out_seeds)
            print(f"held-out check: {out / 'held_out.md'}: {summary}")

    def kept_elsewhere(self, studies: list[str]) -> str:
        """A line where settings of ``studies`` (to be searched) are kept under this protocol in the working
        directory's own tuned_dir (the file's tuned_dir read from the working directory, or from its repository):
        a sweep file copied out of its repository, whose settings stayed behind. Empty where none is."""
        if not studies:
            return ""
        mine = self.tuned_dir.absolute()
        try:
            within = mine.relative_to(repository_of(self.spec_path))
        except ValueError:  # (an absolute tuned_dir elsewhere: the file names it itself)
            return ""
        for other in dict.fromkeys([Path.cwd() / within, repository_of(Path.cwd()) / within]):
            if other == mine or not other.is_dir():
                continue
            there = Studies(self.spec, self.spaces, self.workload, other, self.launcher, self.smoke)
            try:
                kept = [study for study in studies if study not in there.to_search(studies)]
            except (ValueError, FLBenchError):  # (a damaged file there: not these settings)
                continue
            if kept:
                return (f"{other}/ keeps the settings of {', '.join(kept)} under this protocol, and {self.tuned_dir}/ "
                        f"(the sweep file's tuned_dir, read from its repository) does not: stop now and copy them "
                        f"there, or set tuned_dir, to reuse them")
        return ""

    def check(self, out: Path) -> None:
        """Before any directory is made or any run starts: every arm of the file, as this mode would run it,
        composes and passes its checks (a misspelt override in the last arm must not wait for the others'
        runs), the output directories can be written, and the seed ledger is whole."""
        directories = ((out, "--out"), (self.runs_dir, "the runs directory (--runs-dir)"),
                       *([] if self.smoke else [(self.tuned_dir, "tuned_dir")]))
        for directory, what in directories:  # a file in the way: said before composing every arm (seconds)
            if any(path.exists() and not path.is_dir() for path in (directory, *directory.parents)):
                _check_writable(directory, what)
        self.check_arms(list({arm.key: arm for table in self.spec.tables.values()
                              for arm in self.arms(table, every=True)}.values()))
        for directory, what in directories:
            _check_writable(directory, what)  # before hours of runs
        if not self.smoke:  # a damaged or edited ledger stops the reproduction before its tuning, not after
            SeedLedger.read(self.runs_dir)

    def tune(self, arms: dict[str, Arm]) -> None:
        """Every study the arms run, tuned (or its kept setting read)."""
        studies = sorted({self.spec.studies[arm.study].setting_of or arm.study for arm in arms.values()})
        # The studies side by side, --jobs at a time: each is one sequential TPE search (a trial's seeds, then
        # the next trial, as registered), whose runs its own command hands to the launcher; only their
        # drivers wait here. (A launcher runs jobs, not a search that decides its next trial from the last.)
        if self.jobs == 1:  # (in this thread: a profile sees the runs)
            for study in studies:
                self.studies.tuned(study)
        else:
            pool = ThreadPoolExecutor(max_workers=self.jobs)
            try:
                list(pool.map(self.studies.tuned, studies))
            finally:  # (stopped or failed: the studies not started yet never start)
                pool.shutdown(wait=True, cancel_futures=True)

    def report_runs(self, tables: dict[str, Table], arms: dict[str, Arm], needs: dict[str, dict[str, Need]]
                    ) -> tuple[dict[str, Path], SeedLedger | None]:
        """Every arm run on its report seeds (recorded in the ledger first): each arm's directory, and the ledger."""
        seeds = {key: self.seeds for key in arms}
        if needs:  # an arm in several tables runs the most seeds any of them needs
            counts: dict[str, int] = defaultdict(int)
            for name, table in tables.items():
                n = table_seeds(list(needs[name].values()), Protocol.MIN_REPORT_SEEDS, self.protocol.power.cap)
                for arm in self.arms(table):
                    counts[arm.key] = max(counts[arm.key], n)
            seeds = {key: self.seeds[:counts[key]] for key in arms}
        ledger = self.record_seeds({name: sorted({s for a in self.arms(t) for s in seeds[a.key]}) for name, t in tables.items()},
                                   seeds, arms)
        report_runs = {key: self.arm_runs(arm, seeds[key]) for key, arm in arms.items()}
        self.launcher.launch_stage("report", list(report_runs.values()), self.jobs)
        return {key: runs.directory for key, runs in report_runs.items()}, ledger

    def write_pages(self, tables: dict[str, Table], out: Path, directories: dict[str, Path],
                    needs: dict[str, dict[str, Need]], ledger: SeedLedger | None,
                    computed: dict[str, tuple[Frames, pd.DataFrame]], publish: str | None, dry_run: bool) -> None:
        """Each table's page from its evidence (``computed``), optionally as a W&B Report too, then the scoreboard."""
        verdicts = {f"{name}: {arm}": verdict for name, (_, found) in computed.items()
                    for arm, verdict in zip(found["method"], found["verdict"])} if computed else {}
        for name, table in tables.items():
            with _staged(out) as staging:  # the table's files replace its earlier ones together
                runs = self.write_table(name, table, directories, needs.get(name), ledger, staging, computed[name], verdicts)
            print(f"{name}: {out / name}.md")
            if publish:
                from fl_bench.analysis.wandb_report import publish as publish_report

                print(f"{name}: W&B Report {publish_report(publish, name, out / f'{name}.md', runs, ['algorithm.name'], dry_run)}")
        scoreboard.write_paper_record(out, self.spec_path, self.spec)
        rows = scoreboard.write(out, [*scoreboard.reproductions(), self.spec_path], spaces=self.spaces)
        print(f"scoreboard: {out / 'README.md'}: {scoreboard.counts(rows)}")

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


def _scaled(effect: float, need: Need) -> str:
    """A pilot's effect as its table shows it: a ratio (kept as a log ratio in Need) or points."""
    return f"{math.exp(effect):.2f}×" if need.kind == "ratio" else f"{effect:+.2f}"


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the documented command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.analysis.reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path, help="a sweep file, e.g. sweeps/fedbuff_smoke.yaml")
    parser.add_argument("tables", nargs="*", help="tables to make (default: all in the file)")
    parser.add_argument("--out", type=Path, help="where the pages go (default: the sweep file's repository's results; a "
                        "held-out check's: results/held_out/<sweep file>_<seeds> there)")
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
    parser.add_argument("--held-out-seeds", metavar="SEEDS", help="rerun the registered protocol on report seeds it never "
                        "used (e.g. 721-740 or 721,725,730-735; at most its cap), the kept tuned settings reused, into "
                        "directories of its own, and set each verdict beside the registered one (fl_bench.analysis.held_out)")
    parser.add_argument("--registered", type=Path, help="with --held-out-seeds: where the registered pages and evidence "
                        "are (default: the sweep file's repository's results)")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring); errors are one line (exit 1; a malformed command line, argparse's 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with stopped_on_signal():  # (stopped, every process it started is stopped with it)
            seeds = held_out.parse_seeds(args.held_out_seeds) if args.held_out_seeds is not None else None
            if args.registered is not None and seeds is None:  # (it would be ignored)
                raise ValueError(f"--registered {args.registered}: it names the registered results a held-out check "
                                 "compares with: use it with --held-out-seeds")
            results = resolved("results", args.spec)  # (the sweep file's repository's, as its own paths)
            out = args.out or (results / "held_out" / f"{args.spec.stem}_{held_out.label(seeds)}" if seeds else results)
            reproduction = Reproduction(args.spec, args.smoke, args.runs_dir, args.jobs, args.override, args.every_arm,
                                        args.in_process, args.launcher, seeds)
            reproduction.run(args.tables, out, args.publish, args.dry_run, args.registered or results)
    except (ValueError, RuntimeError, FileNotFoundError, FLBenchError) as error:
        parser.exit(1, f"fl_bench.analysis.reproduce: error: {error}\n")
    except Stopped as stop:
        parser.exit(128 + stop.signum, f"fl_bench.analysis.reproduce: {stop}: every process it started was stopped "
                    "(unfinished runs keep their checkpoints); run the same command again to go on\n")


if __name__ == "__main__":
    main()
