"""Checkpoints: everything a run needs to go on exactly where it stopped.

One ``torch.save`` pickles the simulator's whole object graph (the server algorithm with its
optimizer and per-client stores, the event queue, in-flight and pending trips, snapshots of model
versions still awaited, trained uploads not yet aggregated, the population's idle pool, selection,
delays, step policy, the trip log and the numpy Generator), with the global torch / numpy / Python
RNG states (dropout draws) and the run's own progress (metric rows, target crossing). Pickling the
graph in one call keeps shared references shared: the server optimizer's parameter stays the
server's ``params``. A checkpoint is taken between two events, where that state is complete, so a
resumed run replays the remaining events bit for bit. It is written to a temporary file and renamed:
a run killed mid-write keeps its previous checkpoint.

Every file saved here (the checkpoint, the final ``model.pt``) gets a ``<name>.sha256`` beside it
in ``sha256sum`` format, and loading verifies it before unpickling anything: torch's zip files do
not check their own CRCs, so a damaged tensor would otherwise load and silently change the run.
The digest file is rewritten around the rename so that it always names the file in place, even for
a run killed between the two writes (:func:`save_verified`).
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_bench.errors import ConfigError
from fl_bench.runs.atomic import replace_text, write_partial
from fl_bench.runs.config import NOT_RESULT_KEYS

CHECKPOINT = "checkpoint.pt"
FORMAT = 3  # 2: with a SHA-256 digest file; 3: DP inside the server (fl_bench.privacy.PrivateServer), the trainer's state always kept


class CheckpointSchedule:
    """When to checkpoint: every ``every_steps`` server steps and/or ``every_minutes`` of wall time."""

    def __init__(self, every_steps: int | None, every_minutes: float | None):
        self.every_steps, self.every_minutes = every_steps, every_minutes
        self._last_step, self._last_time = 0, time.monotonic()

    def due(self, server_step: int) -> bool:
        """Whether a checkpoint is due at ``server_step``: ``every_steps`` server steps or
        ``every_minutes`` of wall time since the last :meth:`done`."""
        if self.every_steps and server_step - self._last_step >= self.every_steps:
            return True
        return bool(self.every_minutes) and time.monotonic() - self._last_time >= 60 * self.every_minutes

    def done(self, server_step: int) -> None:
        """A checkpoint was taken (or restored) at ``server_step``: both intervals start again."""
        self._last_step, self._last_time = server_step, time.monotonic()


def rng_states() -> dict[str, Any]:
    """The global torch, numpy and Python RNG states, and CUDA's once initialised."""
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore the states of :func:`rng_states` (CUDA's where this process has a GPU)."""
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def digest_path(path: Path) -> Path:
    """The digest file beside ``path``: ``<name>.sha256``."""
    return path.with_name(path.name + ".sha256")


def sha256(path: Path) -> str:
    """The hex SHA-256 of the file's bytes."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _listed_digests(path: Path) -> list[str]:
    """The digests ``path``'s digest file allows for it (empty: no digest file)."""
    try:
        lines = digest_path(path).read_text().splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    return [line.split()[0] for line in lines if line.strip()]


def _write_digests(path: Path, digests: list[str]) -> None:
    text = "".join(f"{digest}  {path.name}\n" for digest in digests)
    replace_text(digest_path(path), text)


def save_verified(obj: Any, path: Path) -> None:
    """``torch.save(obj)`` to ``path`` atomically, with its SHA-256 in ``path.sha256``. While the new
    file replaces the old one the digest file lists both, so a kill at any point leaves a file
    that its digest file vouches for."""
    partial = write_partial(path, lambda file: torch.save(obj, file))
    new = sha256(partial)
    current = _listed_digests(path) if path.exists() else []  # all: one of them names the file in place
    _write_digests(path, [new, *current])
    os.replace(partial, path)
    _write_digests(path, [new])


def verify(path: Path) -> None:
    """Refuse (one line) a file whose bytes its digest file does not vouch for."""
    listed = _listed_digests(path)
    if not listed:
        raise ConfigError(f"{path} has no {digest_path(path).name} to verify it against (written by an older "
                          "fl_bench, or the digest file was removed): it cannot be trusted")
    if sha256(path) not in listed:
        raise ConfigError(f"{path} is damaged: its SHA-256 does not match {digest_path(path).name}, written with it")


def load_verified(path: Path | str, map_location: Any = None, weights_only: bool = True) -> Any:
    """``torch.load`` of a file saved by :func:`save_verified` (a run's ``model.pt``), after checking
    its digest: ``load_verified("runs/.../model.pt")`` gives the final model's state_dict."""
    path = Path(path)
    verify(path)
    return torch.load(path, map_location=map_location, weights_only=weights_only)


def save_checkpoint(path: Path, config: dict[str, Any], simulator: dict[str, Any], run: dict[str, Any]) -> None:
    """Save a resumable checkpoint atomically with its digest (:func:`save_verified`): the result
    ``config``, the simulator's state_dict, the RNG states and the run's progress (``run``)."""
    state = {"format": FORMAT, "config": config, "simulator": simulator, "rng": rng_states(), "run": run}
    save_verified(state, path)


def remove_checkpoint(path: Path) -> None:
    """A finished run keeps no checkpoint (nor its digest file)."""
    path.unlink(missing_ok=True)
    digest_path(path).unlink(missing_ok=True)


def load_checkpoint(path: Path, config: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The checkpoint at ``path``, refused (one line) when it is damaged, unverifiable or belongs to
    another config."""
    try:
        verify(path)
    except ConfigError as error:
        raise ConfigError(f"{error}: delete it (and {digest_path(path).name}) or run with resume=false to start over") from None
    try:
        state = torch.load(path, map_location=device, weights_only=False)  # our own file: the run's objects
    except Exception as error:  # truncated or foreign file
        raise ConfigError(f"{path} is not a readable checkpoint ({type(error).__name__}): delete it or run with resume=false") from None
    if state.get("format") != FORMAT:
        raise ConfigError(f"{path} was written by another fl_bench version (format {state.get('format')}): run with resume=false")
    differences = config_differences(state["config"], config)
    if differences:
        raise ConfigError(
            f"{path.parent} holds a checkpoint of another config ({'; '.join(differences[:3])}): "
            "choose another hydra.run.dir, or resume=false to start over there"
        )
    return state


def config_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """'key: old -> new' for every result-changing key that differs."""
    differences = []
    for key in sorted(set(old) | set(new)):
        if not prefix and key in NOT_RESULT_KEYS:
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            differences += config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            differences.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return differences


def remove_partial_checkpoints(run_dir: Path) -> None:
    """Temporary files of a run killed while writing (the checkpoint and digest file they would
    replace are intact)."""
    for partial in run_dir.glob(f".{CHECKPOINT}.*.partial"):
        partial.unlink(missing_ok=True)
