"""A run's directory: held by one process at a time, removed again when the run never started, and an
earlier run in it kept whole until a new one has finished.

The lock is an advisory ``flock`` on ``<run dir>/.lock``: the kernel drops it when its holder
exits, however it exits (SIGKILL included), so a killed run's directory can be resumed at once, while
a second live run refuses, naming the holder, instead of the last writer silently winning.

A run that starts over in a directory holding an earlier run (another config's finished run,
``resume=false``, a failed run's files) first moves that run aside into ``<run dir>/.replaced/``
(:meth:`RunDirectory.set_aside`). A run never gives way to a worse one: when the new run completes,
the earlier one is deleted (:meth:`RunDirectory.replaced`); when it ends diverged or pruned and the
earlier one completed, the completed run moves back and the new one goes to ``<run dir>/.diverged/``
(``.pruned/``), where the error line says it is (:meth:`RunDirectory.keep_completed`); when it fails,
for bad input or mid-run, its files are deleted and the earlier run moved back, byte for byte
(:meth:`RunDirectory.restore`). An interrupted run keeps the earlier one aside: the same command
resumes the new run, and ``.replaced/`` holds the old one until that run ends.

A run is a result only when it finished (:func:`unfinished`): its ``summary.json`` is written last,
atomically, with status completed or diverged and the size of every file the run wrote before it, and
those files are all still there, whole (a completed run's ``model.pt`` verified against its digest).
A run killed, interrupted or stopped by a full disk at any point before that leaves no such summary.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from fl_bench.errors import ConfigError, FLBenchError, ResultNotWritten
from fl_bench.runs.atomic import replace_text

LOCK = ".lock"
SUMMARY = "summary.json"
FINISHED = ("completed", "diverged")  # results; pruned (a tuning trial stopped early), interrupted, failed are not
# What a finished run wrote before its summary: metrics.csv (and trips.csv, the simulator's runs), the
# final model.pt with its digest (completed runs) and Hydra's configs (runs from the command line).
RESULT_FILES = ("metrics.csv", "trips.csv", "model.pt", "model.pt.sha256", ".hydra/config.yaml", ".hydra/hydra.yaml",
                ".hydra/overrides.yaml")
REPLACED = ".replaced"  # an earlier run, moved aside while a new one runs in its directory
# Where a run that ended no better than the completed one it would replace goes, by its status
BESIDE = {"diverged": ".diverged", "pruned": ".pruned"}
# What Hydra puts in a run directory before the run starts: its (empty) job log.
_HYDRA_ENTRIES = {"cli.log"}


class RunDirectory:
    """A run directory, held by one process at a time (:meth:`locked`) and removed again when the
    run never started (:meth:`remove_if_fresh`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        # Holds nothing of an earlier run (at most what Hydra made for this one): removed again if
        # this run fails to start.
        self.fresh = not self.path.exists() or not {entry.name for entry in self.path.iterdir()} - _HYDRA_ENTRIES
        self._lock_file = None

    @contextmanager
    def locked(self) -> Iterator["RunDirectory"]:
        """Hold the directory (made if missing) inside the block; ConfigError naming the holder when
        another live process holds it."""
        self._lock()
        try:
            yield self
        finally:
            self._lock_file.close()  # releases the flock

    def _lock(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"cannot create the run directory {self.path} ({error.strerror}): "
                              "set hydra.run.dir to a writable path") from None
        file = open(self.path / LOCK, "a+")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip() or "another process"
            file.close()
            raise ConfigError(f"run directory {self.path} is in use by {holder}: wait for that run to end, "
                              "or choose another hydra.run.dir") from None
        file.seek(0)
        file.truncate()
        file.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        file.flush()
        self._lock_file = file

    def remove_if_fresh(self) -> None:
        """A run stopped by bad input before it started leaves no directory behind."""
        if not self.fresh:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        # and the dated parents Hydra made for it (runs/<date>/), up to the working directory
        cwd, parent = Path.cwd().resolve(), self.path.resolve().parent
        while parent != cwd and cwd in parent.parents and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent

    @property
    def _aside(self) -> Path:
        return self.path / REPLACED

    def set_aside(self) -> None:
        """Move the earlier run this directory holds into ``.replaced/`` (nothing to do when it holds
        none, or when an interrupted replacement already set one aside: what else is here is that
        attempt's, and goes)."""
        if self.fresh:
            return
        _close_file_logs(self.path)  # a log opened on the earlier run's cli.log must not write into it
        if self._aside.exists():
            self._clear()
            return
        self._aside.mkdir()
        for entry in self._entries():
            entry.rename(self._aside / entry.name)

    def restore(self) -> None:
        """A failed run: delete what it wrote and move the earlier run back where it was."""
        if not self._aside.exists():
            return
        _close_file_logs(self.path, detach=True)  # nothing more of the failed run into the earlier run's cli.log
        self._clear()
        self._bring_back()

    def keep_completed(self, status: str) -> Path | None:
        """The new run ended ``status`` (diverged, pruned: no better than a completed run): when the earlier
        run set aside completed, it moves back and the new run's files go to ``<run dir>/.<status>/``
        (replacing an earlier such attempt). Returns that directory (None: nothing completed was set aside,
        and the new run stays where it is)."""
        earlier = finished_summary(self._aside) if self._aside.exists() else None
        if earlier is None or earlier.get("status") != "completed":
            return None
        kept = self.path / BESIDE[status]
        _move_file_logs(self.path, kept)  # the new run's last log lines follow its files, not into the earlier cli.log
        moved = self._entries()
        kept.mkdir()
        for entry in moved:
            entry.rename(kept / entry.name)
        if (self._aside / kept.name).exists():  # an earlier such attempt: this one supersedes it
            shutil.rmtree(self._aside / kept.name)
        self._bring_back()
        return kept

    def _bring_back(self) -> None:
        """The earlier run set aside moved back where it was."""
        for entry in list(self._aside.iterdir()):
            entry.rename(self.path / entry.name)
        self._aside.rmdir()

    def replaced(self) -> dict[str, Any] | None:
        """A finished run: delete the earlier one set aside. Returns its summary (None: none was set aside,
        or it had none)."""
        if not self._aside.exists():
            return None
        summary = _read_summary(self._aside)
        shutil.rmtree(self._aside)
        return summary

    def _entries(self) -> list[Path]:
        return [entry for entry in self.path.iterdir() if entry.name not in (LOCK, REPLACED)]

    def _clear(self) -> None:
        for entry in self._entries():
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()

    def save_configs(self, files: dict[str, Any]) -> None:
        """Hydra's ``.hydra/*.yaml`` of this run, written once the directory is ours (Hydra's own
        writing is off: it would overwrite a running run's config before the lock could refuse)."""
        with writing(self.path / ".hydra"):
            (self.path / ".hydra").mkdir(exist_ok=True)
        for name, config in files.items():
            with writing(self.path / ".hydra" / name):
                OmegaConf.save(config, self.path / ".hydra" / name)

    def summary(self) -> dict[str, Any] | None:
        """The directory's summary.json, or None when there is none to read."""
        return _read_summary(self.path)


def _read_summary(directory: Path) -> dict[str, Any] | None:
    try:
        summary = json.loads((directory / SUMMARY).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def write_summary(directory: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """``summary.json``, the last file a run writes: it lists the size of every other file the run has
    written (``files``), and is renamed into place whole. Returns the summary as written."""
    files = {name: (directory / name).stat().st_size for name in RESULT_FILES if (directory / name).is_file()}
    summary = {**summary, "files": files}
    with writing(directory / SUMMARY):
        replace_text(directory / SUMMARY, json.dumps(summary, indent=2) + "\n")
    return summary


def unfinished(directory: Path) -> str | None:
    """Why the run in ``directory`` is no result (None: it finished, and every file its summary lists is
    there at its size, a completed run's model.pt matching its digest)."""
    return _unfinished(directory, _read_summary(directory))


def _unfinished(directory: Path, summary: dict[str, Any] | None) -> str | None:
    if summary is None:
        return "no summary.json: it never finished" if not (directory / SUMMARY).exists() else "its summary.json is unreadable"
    status = summary.get("status")
    if status not in FINISHED:
        return f"status {status}"
    promised = summary.get("files")
    if not isinstance(promised, dict):
        return "its summary.json lists no files (written by an older fl_bench, or by hand): run it again"
    needed = {"metrics.csv", *(["model.pt"] if status == "completed" else [])}
    missing = sorted(needed - set(promised))
    if missing:
        return f"{missing[0]} was never written"
    for name, size in promised.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if (written := path.stat().st_size) != size:
            return f"{name} has {written} bytes, not the {size} it was written with"
    if status == "completed":
        from fl_bench.runs.checkpoint import verify  # (torch: imported only where a model is checked)

        try:
            verify(directory / "model.pt")
        except FLBenchError:
            return "model.pt does not match its digest"
    return None


def finished_summary(directory: Path) -> dict[str, Any] | None:
    """The summary of the finished run in ``directory`` (:func:`unfinished`), else None."""
    summary = _read_summary(directory)
    return None if _unfinished(directory, summary) else summary


def finished_runs(directory: Path) -> dict[Path, dict[str, Any]]:
    """The finished runs in the directories just below ``directory`` (a multirun's jobs), by run directory."""
    found = {run.parent: finished_summary(run.parent) for run in sorted(Path(directory).glob(f"*/{SUMMARY}"))}
    return {run: summary for run, summary in found.items() if summary is not None}


def error_line(error: BaseException | None) -> str | None:
    """A failed run's error as its summary keeps it: the first line of its message (with the error's
    type where the message alone would not say what went wrong)."""
    if error is None:
        return None
    text = (str(error).strip().splitlines() or [""])[0]
    return text if isinstance(error, FLBenchError) and text else f"{type(error).__name__}: {text}".rstrip(": ")


RUN_NOT_WRITTEN = ("the run is not finished (free space, raise the file-size limit or choose a writable hydra.run.dir, "
                   "then run the same command again)")


@contextmanager
def writing(path: Path, consequence: str = RUN_NOT_WRITTEN) -> Iterator[None]:
    """Errors writing ``path`` as one line naming it and ``consequence`` (OSError, and torch.save's
    RuntimeError for a write that failed part-way)."""
    try:
        yield
    except OSError as error:
        raise ResultNotWritten(f"cannot write {error.filename or path}: {error.strerror or error}; {consequence}") from None
    except RuntimeError as error:
        if not any(mark in str(error) for mark in ("PytorchStreamWriter", "inline_container")):
            raise  # (only torch.save's zip writer reports a failed write as a RuntimeError)
        detail = str(error).splitlines()[0].rpartition("] ")[2].strip(" .")
        raise ResultNotWritten(f"cannot write {path}: the write stopped part-way ({detail}); {consequence}") from None


def _file_handlers(directory: Path) -> Iterator[tuple[logging.Logger, logging.FileHandler]]:
    """The logging file handlers writing into ``directory`` (Hydra's cli.log), each with its logger."""
    directory = directory.resolve()
    for logger in [logging.root, *(item for item in logging.root.manager.loggerDict.values()
                                    if isinstance(item, logging.Logger))]:
        for handler in list(logger.handlers):
            if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).resolve().parent == directory:
                yield logger, handler


def _move_file_logs(source: Path, destination: Path) -> None:
    """Point the logging file handlers writing into ``source`` at the same file names in ``destination``
    (closed: they reopen there on their next line)."""
    for _, handler in _file_handlers(source):
        handler.close()
        handler.baseFilename = str(Path(destination).resolve() / Path(handler.baseFilename).name)


def _close_file_logs(directory: Path, detach: bool = False) -> None:
    """Close the logging file handlers writing into ``directory`` (Hydra's cli.log): they reopen the file
    at its path on their next line; ``detach``: removed from their loggers, so they write no more."""
    for logger, handler in _file_handlers(directory):
        handler.close()
        if detach:
            logger.removeHandler(handler)
