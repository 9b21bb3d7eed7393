"""A run directory's claim, ``<run dir>.claim`` beside it: the one task that may run it, among the tasks of
every launch (a reproduction's job array, and the array of a reproduction started again while the first
one's tasks still run).

A claim appears whole and already held: the claimant writes its holder line into a file of its own, takes
an ``flock`` on it, then hard-links it to the claim's name, which fails when the name exists (atomic on
local and network file systems, where ``O_EXCL`` is not everywhere). The holder keeps the flock until it
releases the claim (removing the file) or dies: the kernel (or the file server) drops the lock however
its holder ends, SIGKILL, preemption or a lost node included, so a claim whose file is there but whose
lock is free is a dead task's, and the next claimant takes it over. The file system must carry flocks
between machines (NFS does; Lustre when mounted with ``flock``), as a run directory's lock already needs
(fl_bench.runs.run_dir).
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUFFIX = ".claim"


def claim_path(run_dir: Path) -> Path:
    return Path(run_dir).with_name(Path(run_dir).name + SUFFIX)


def _holder_line() -> str:
    """Who holds a claim: its SLURM job (an array task's own id), process, machine and start."""
    job = os.environ.get("SLURM_JOB_ID")
    return (f"{f'SLURM job {job}, ' if job else ''}pid {os.getpid()} on {socket.gethostname()} "
            f"since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")


@contextmanager
def claimed(run_dir: Path) -> Iterator[str | None]:
    """Hold ``run_dir``'s claim inside the block and yield None; where a live task holds it, yield that
    task's holder line instead (holding nothing)."""
    path = claim_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    file = _take(path)
    if isinstance(file, str):
        yield file
        return
    try:
        yield None
    finally:
        path.unlink(missing_ok=True)  # (while still locked: a claimant waiting on this file retries on the name)
        file.close()


def _take(path: Path):
    """The claim's file, locked by this process; or the live holder's line."""
    while True:
        own = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.{threading.get_ident()}")
        file = open(own, "w+")
        fcntl.flock(file, fcntl.LOCK_EX)
        file.write(_holder_line())
        file.flush()
        try:
            os.link(own, path)
            return file
        except FileExistsError:
            file.close()
        finally:
            own.unlink()
        try:
            file = open(path, "r+")
        except FileNotFoundError:  # released meanwhile: claim it again
            continue
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = file.read().strip() or "another task"
            file.close()
            return holder
        if _same_file(file, path):  # its holder died without releasing it: taken over
            file.seek(0)
            file.truncate()
            file.write(_holder_line())
            file.flush()
            return file
        file.close()  # released (and perhaps claimed anew) between the open and the lock: again


def holder(run_dir: Path) -> str | None:
    """The holder line of a live task's claim on ``run_dir`` (None: unclaimed, or a dead task's claim),
    without claiming it (a shared lock for an instant: a task taking a dead task's claim over in that instant
    leaves the run to the next launch)."""
    try:
        file = open(claim_path(run_dir))
    except FileNotFoundError:
        return None
    with file:
        try:
            fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return file.read().strip() or "another task"
    return None


def _same_file(file, path: Path) -> bool:
    try:
        return os.fstat(file.fileno()).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False
