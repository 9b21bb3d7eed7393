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
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_bench.config import NOT_RESULT_KEYS
from fl_bench.errors import ConfigError

CHECKPOINT = "checkpoint.pt"
FORMAT = 1


class CheckpointSchedule:
    """When to checkpoint: every ``every_steps`` server steps and/or ``every_minutes`` of wall time."""

    def __init__(self, every_steps: int | None, every_minutes: float | None):
        self.every_steps, self.every_minutes = every_steps, every_minutes
        self._last_step, self._last_time = 0, time.monotonic()

    def due(self, server_step: int) -> bool:
        if self.every_steps and server_step - self._last_step >= self.every_steps:
            return True
        return bool(self.every_minutes) and time.monotonic() - self._last_time >= 60 * self.every_minutes

    def done(self, server_step: int) -> None:
        self._last_step, self._last_time = server_step, time.monotonic()


def rng_states() -> dict[str, Any]:
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save_checkpoint(path: Path, config: dict[str, Any], simulator: dict[str, Any], run: dict[str, Any]) -> None:
    state = {"format": FORMAT, "config": config, "simulator": simulator, "rng": rng_states(), "run": run}
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with open(partial, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


def load_checkpoint(path: Path, config: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The checkpoint at ``path``, refused (one line) when it belongs to another config."""
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
    """Temporary files of a run killed while writing (the checkpoint they would replace is intact)."""
    for partial in run_dir.glob(f".{CHECKPOINT}.*.partial"):
        partial.unlink(missing_ok=True)
