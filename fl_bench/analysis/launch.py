"""The runs stage of a reproduction: each stage's runs (a study's confirmation, the pilot, the report runs)
launched through Hydra's launcher as one multirun of the fl_bench_jobs sweeper, each seed's run a job of
its own, reusing the runs the same command made (fl_bench.analysis.reproduce drives it).

Every command a launch starts (a stage's multirun, a study's search) runs in a process group of its own, with
the processes it starts in turn (joblib's loky workers, each running a run): stopping the driver stops them
all (:func:`stopped_on_signal`: SIGTERM, SIGINT, SIGHUP, or an error leaving it), and a command that ends
(killed by itself, or its loky workers orphaned by a killed Hydra process) leaves none of its group behind
(:func:`stop_group`). Each is sent SIGTERM first, which a run answers by writing its checkpoint and stopping
(fl_bench.runs.interrupt), then SIGKILL after ``STOP_GRACE`` seconds. A SLURM launcher's tasks are SLURM's
(they run on; their claims keep a later driver from running them twice)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from fl_bench.analysis.progress import Progress
from fl_bench.runs.atomic import replace_text
from fl_bench.runs.claim import SUFFIX as CLAIM
from fl_bench.runs.claim import holder as claim_holder
from fl_bench.runs.run_dir import FINISHED, SUMMARY, RunDirectory, finished_runs, finished_summary, unfinished, writing

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
        return multirun([*self.workload, *self.setting, f"seed={','.join(map(str, self.seeds))}",
                         f"hydra.sweep.dir={self.directory}"])

    def job(self, index: int) -> list[str]:
        """The command's job ``index`` (the run of seed ``seeds[index]``, in the run directory the command
        gives it: Hydra's ``<job num>_<algorithm>_seed<seed>``, conf/config.yaml), less the workload, which
        the launch's command line gives every job."""
        seed = self.seeds[index]
        return [*self.setting, f"seed={seed}", f"hydra.sweep.dir={self.directory}",
                f"hydra.sweep.subdir={index}_${{algorithm.name}}_seed{seed}"]


@dataclass
class Launcher:
    """A reproduction's launches (fl_bench.analysis.reproduce composes one; the studies' searches use it too):
    where runs go (``runs_dir``), their ``workload``, the launcher and its settings (``launcher``,
    ``launcher_keys``, ``launcher_overrides``), whether every run goes ``in_process``, and the sweep file read
    (``spec_path``, ``sweep_sha256``: a file edited meanwhile stops the next launch). Each stage says its
    progress through ``progress`` (fl_bench.analysis.progress; a test sets its own)."""

    runs_dir: Path
    workload: tuple[str, ...]
    launcher: str
    launcher_keys: frozenset[str]
    launcher_overrides: tuple[str, ...]
    in_process: bool
    spec_path: Path
    sweep_sha256: str
    progress: Progress = field(default_factory=Progress)

    def launch_stage(self, stage: str, stage_runs: list[Runs], at_once: int) -> None:
        """Every run of ``stage_runs`` finished (a diverged seed is a result), as one multirun of the
        fl_bench_jobs sweeper through the launcher (hydra_plugins/fl_bench_jobs), logged in
        ``<runs_dir>/launch/<stage>/reproduce.log``; ``at_once``: its runs at a time on this machine. Runs
        the same command made are reused, another command's are removed first; a seed still to run goes on
        where it stopped (an interrupted run from its checkpoint), and one a live task of another launch holds
        is left to it. RuntimeError naming a seed that did not finish, else one naming the runs still held."""
        self.check_sweep_file()
        jobs, launched, reused = [], [], 0
        for runs in stage_runs:
            self._keep_if_same_command(runs)
            done, held = _finished_seeds(runs.directory), _held_seeds(runs.directory)
            todo = [i for i, seed in enumerate(runs.seeds) if seed not in done and seed not in held]
            jobs += [runs.job(i) for i in todo]
            launched += [(runs.directory, f"{i}_*_seed{runs.seeds[i]}") for i in todo]  # (its run directory, runs.job)
            reused += sum(seed in done for seed in runs.seeds)
        stage_dir = self.runs_dir / "launch" / stage
        with self.progress.stage(stage, sum(len(runs.seeds) for runs in stage_runs), reused, len(jobs), at_once,
                                 functools.partial(_ended, launched, FINISHED)):
            if jobs:
                with writing(stage_dir, REPRODUCTION_NOT_WRITTEN):
                    stage_dir.mkdir(parents=True, exist_ok=True)
                    replace_text(stage_dir / "jobs.yaml", yaml.safe_dump(jobs, width=math.inf))
                # the workload on the command line, before each job's own overrides (the order of the runs' own
                # commands), where `python -m fl_bench` reads it first (numerics=portable's environment)
                self.run(multirun([*self.launcher_settings(at_once), "hydra/sweeper=fl_bench_jobs",
                                    f"hydra.sweeper.jobs={stage_dir / 'jobs.yaml'}", f"hydra.sweep.dir={stage_dir}",
                                    *self.workload]), stage_dir, check=False)
        running = {}
        for runs in stage_runs:
            _release_dead_claims(runs.directory)
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
        if record.is_file() and _same_command(record.read_text(errors="replace").split("\n", 1)[0], runs.command):
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

    def launcher_settings(self, at_once: int) -> list[str]:
        """The launcher and its settings for a command whose runs go ``at_once`` at a time on this machine
        (a launcher with ``n_jobs``, joblib's, takes it unless ``--override`` sets it)."""
        keys = {o.lstrip("+~").split("=", 1)[0] for o in self.launcher_overrides}
        parallel = "n_jobs" in self.launcher_keys and "hydra.launcher.n_jobs" not in keys
        return [f"hydra/launcher={self.launcher}", *([f"hydra.launcher.n_jobs={at_once}"] if parallel else []),
                *self.launcher_overrides]

    def check_sweep_file(self) -> None:
        """ValueError unless the sweep file is still the one this reproduction read (its SHA-256): a file
        edited while the runs went on would be recorded in the seed ledger for runs it did not make."""
        now = hashlib.sha256(self.spec_path.read_bytes()).hexdigest()
        if now != self.sweep_sha256:
            raise ValueError(f"{self.spec_path} was edited after this reproduction read it (SHA-256 {self.sweep_sha256[:12]}, "
                             f"now {now[:12]}): run the command again to reproduce the file as it is now")

    def run(self, command: list[str], log_dir: Path, check: bool = True) -> bool:
        """``command`` (``python -m fl_bench ...``) with its output in ``log_dir``/reproduce.log, in a process of
        its own or in this one (``in_process``); RuntimeError naming its error where it fails and ``check``."""
        with writing(log_dir / "reproduce.log", REPRODUCTION_NOT_WRITTEN):
            log_dir.mkdir(parents=True, exist_ok=True)
            log = open(log_dir / "reproduce.log", "w")
        with log:
            log.write(" ".join(command) + "\n")
            log.flush()
            if self.in_process:  # command is [python, -m, fl_bench, ...]
                code = run_in_process(command[3:], log)
            else:
                code = run_in_group(command, log)
        if code != 0 and check:
            raise RuntimeError(f"{' '.join(command[2:])} failed (exit {code}): "
                               f"{_error_in_log(log_dir / 'reproduce.log') or 'no error line'} (its log: {log_dir}/reproduce.log)")
        return code == 0


# ------------------------------------------------------------------ the processes a launch starts

STOP_GRACE = 10.0  # seconds a stopped process group has after SIGTERM (a run writes its checkpoint), then SIGKILL
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_groups: dict[int, subprocess.Popen] = {}  # the process groups of the commands under way, by group id
_groups_lock = threading.Lock()
_stopping = threading.Event()  # set once the driver was told to stop: no command starts after it


class Stopped(KeyboardInterrupt):
    """The driver was stopped by ``signum`` (SIGTERM, SIGINT, SIGHUP); raised in its main thread once every
    process group its launches started was told to stop (a KeyboardInterrupt: what Ctrl-C raises)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


def run_in_group(command: list[str], log: TextIO) -> int:
    """``command`` in a process group of its own (a new session), its output into ``log``; its exit status
    (negative: the signal that killed it). When it ends, or the wait is left (a signal, an error), the
    processes of its group still alive are stopped (:func:`stop_group`): a Hydra process killed by itself
    leaves no loky worker running a run."""
    if _stopping.is_set():
        raise Stopped(signal.SIGTERM)
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    with _groups_lock:
        _groups[child.pid] = child
    try:
        return child.wait()
    finally:
        try:
            stop_group(child)
        finally:
            with _groups_lock:
                _groups.pop(child.pid, None)


def stop_group(child: subprocess.Popen, grace: float | None = None) -> None:
    """Every process of ``child``'s group (``child`` leads it: its group id is its pid) ended: SIGTERM, then
    SIGKILL to those still alive after ``grace`` seconds (default STOP_GRACE); ``child`` reaped."""
    grace = STOP_GRACE if grace is None else grace
    if not _group_alive(child.pid) and child.poll() is not None:
        return
    _signal_group(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=grace)
    while _group_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.02)  # (its other processes, orphaned: not this process's children, so not waited for)
    if _group_alive(child.pid):
        _signal_group(child.pid, signal.SIGKILL)
        child.wait()


def stop_groups(signum: int = signal.SIGTERM) -> None:
    """Every command under way told to stop (``signum`` to each process group), no command started after it."""
    _stopping.set()
    with _groups_lock:
        groups = list(_groups)
    for group in groups:
        _signal_group(group, signum)


@contextlib.contextmanager
def stopped_on_signal():
    """While the block runs (the reproduction driver's command), SIGTERM, SIGINT and SIGHUP stop every process
    group a launch started (:func:`stop_groups`) and raise :class:`Stopped` in the main thread; however the block
    is left early (that, or an error), the groups still under way are ended before it returns (:func:`stop_group`).
    Only the main thread can take signals: elsewhere the block only ends the groups left."""
    main = threading.current_thread() is threading.main_thread()

    def handle(signum, frame):
        # (a run answers SIGTERM by its checkpoint; a second signal while they stop kills them at once)
        stop_groups(signal.SIGKILL if _stopping.is_set() else signal.SIGTERM)
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS} if main else {}
    try:
        yield
    except BaseException:
        _stopping.set()
        with _groups_lock:
            children = list(_groups.values())
        for child in children:
            stop_group(child)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stopping.clear()


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _group_alive(group: int) -> bool:
    """Whether a process of group ``group`` is alive (a zombie, ended but not yet reaped, is not)."""
    proc = Path("/proc")
    if not proc.is_dir():  # (not Linux: a zombie counts as alive)
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # (the command's name, in parentheses, may hold spaces)
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False


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


def multirun(overrides: list[str]) -> list[str]:
    """``python -m fl_bench -m`` with ``overrides`` (and no progress bar: the output goes to a log)."""
    return [sys.executable, "-m", "fl_bench", "-m", "progress=false", *overrides]


def launcher_keys(launcher: str, launcher_overrides: list[str], overrides: list[str]) -> frozenset[str]:
    """The keys of Hydra's launcher config ``launcher`` (conf/hydra/launcher/ or a plugin's); ValueError in
    one line for an unknown launcher, or an override it does not take (naming its keys)."""
    chosen = next((o for o in overrides if o.lstrip("+~").startswith("hydra/launcher=")), None)
    if chosen is not None:
        raise ValueError(f"--override {chosen}: choose the launcher with --launcher {chosen.split('=', 1)[1]}")
    return _checked_launcher(launcher, tuple(launcher_overrides))


@functools.lru_cache(maxsize=16)
def _checked_launcher(launcher: str, launcher_overrides: tuple[str, ...]) -> frozenset[str]:
    """:func:`launcher_keys` once per process (a composition with Hydra's config: a second or two on a busy
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


def _ended(runs: list[tuple[Path, str]], statuses: tuple[str, ...]) -> int:
    """How many of ``runs`` (each its multirun's directory and its run directory's pattern there) have ended
    with one of ``statuses`` in their summary (read, not checked whole: a stage's progress, not its result)."""
    return sum(any(_status(summary) in statuses for summary in directory.glob(f"{pattern}/{SUMMARY}"))
               for directory, pattern in runs)


def ended_runs(directory: Path, statuses: tuple[str, ...]) -> int:
    """How many runs of the multirun in ``directory`` (a search's) have ended with one of ``statuses``."""
    return sum(_status(summary) in statuses for summary in directory.glob(f"*/{SUMMARY}"))


def _status(summary: Path) -> str | None:
    try:
        found = json.loads(summary.read_text())
    except (OSError, ValueError):
        return None
    return found.get("status") if isinstance(found, dict) else None


def _finished_seeds(directory: Path) -> set[int]:
    return {summary["seed"] for summary in finished_runs(directory).values()}


def _release_dead_claims(directory: Path) -> None:
    """Remove the claims left on finished runs by tasks that died after finishing them (a command's process
    group stopped as it ended can catch a task between its summary and its claim's release): nothing is left
    for them to hold."""
    for claim in directory.glob(f"*_seed*{CLAIM}"):
        run = claim.with_name(claim.name.removesuffix(CLAIM))
        if claim_holder(run) is None and finished_summary(run) is not None:
            claim.unlink(missing_ok=True)


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


def _same_command(recorded: str, command: list[str]) -> bool:
    """Whether a runs directory's recorded command line is ``command``. From the module on: the interpreter's
    path may differ between machines. The runs directory named in it (``hydra.sweep.dir``) aside: the record
    lies in that directory, so a name relative or absolute (``--runs-dir /abs/multirun/x`` for the file's
    ``multirun/x``), or a directory moved whole, names the same runs; comparing the names emptied it."""
    def words(line: str) -> list[str]:
        return ["hydra.sweep.dir=<its directory>" if w.startswith("hydra.sweep.dir=") else w for w in line.split(" ")]

    tail = words(" ".join(command[1:]))
    return words(recorded)[-len(tail):] == tail


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
