"""A run's directory: held by one process at a time, and removed again when the run never started.

The lock is an advisory ``flock`` on ``<run dir>/.lock``: the kernel drops it when its holder
exits, however it exits (SIGKILL included), so a killed run's directory can be resumed at once, while
a second live run refuses, naming the holder, instead of the last writer silently winning.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from fl_bench.errors import ConfigError

LOCK = ".lock"
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

    def save_configs(self, files: dict[str, Any]) -> None:
        """Hydra's ``.hydra/*.yaml`` of this run, written once the directory is ours (Hydra's own
        writing is off: it would overwrite a running run's config before the lock could refuse)."""
        (self.path / ".hydra").mkdir(exist_ok=True)
        for name, config in files.items():
            OmegaConf.save(config, self.path / ".hydra" / name)

    def summary(self) -> dict[str, Any] | None:
        """The directory's summary.json, or None when there is none to read."""
        path = self.path / "summary.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None
