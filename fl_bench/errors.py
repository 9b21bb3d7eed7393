"""Errors that reach the user as one line (see fl_bench.runs.cli), never as a traceback."""

from __future__ import annotations


class FLBenchError(Exception):
    """Base class: the message alone must tell the user what was wrong and what is allowed."""


class ConfigError(FLBenchError):
    """A config value is out of range or inconsistent with another."""


class DataMissingError(FLBenchError):
    """A dataset's files are not prepared; the message names the command that prepares them."""


class DivergenceError(FLBenchError):
    """Training produced a non-finite model or loss; says at which client trip and server step."""

    def __init__(self, message: str, trips: int | None = None, server_step: int | None = None):
        super().__init__(message)
        self.trips, self.server_step = trips, server_step

    def advice(self, rates: str) -> str:
        """What to change: ``rates`` (lower the learning rates that sized the steps), unless the run diverged
        before its first step, where the initial model's loss was not finite, which no rate causes."""
        if self.server_step == 0:
            return ("the loss was not finite before any training step, on the initial model, which no learning rate "
                    "causes: check the task's loss (the model's output and the loss function on it, e.g. a log of 0)")
        return rates


class NoProgressError(FLBenchError):
    """A run that ended without a single server step: its model never changed, so it is no result."""


class ResultNotWritten(FLBenchError):
    """A result's files could not be written (a full disk, a file-size limit, a read-only directory):
    the run or table is not finished, and the earlier result at that place is kept."""
