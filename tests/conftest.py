"""Shared fixtures: compose a run config the way the command line does, and run it in-process."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pandas as pd
import pytest
from absl import logging as absl_logging
from hydra import compose, initialize_config_dir

from fl_bench.runs.cli import CONFIG_DIR
from tests.helpers.mirror import data_mirror  # noqa: F401 (a fixture: a loopback data mirror)

# absl (dp-accounting's logging) binds its handler to the sys.stderr of its import and closes that stream
# when logging is configured again (Hydra, in an in-process run) unless it is the interpreter's own: under
# pytest's capture it closed the capture, and the session stopped with "lost sys.stderr".
absl_logging.get_absl_handler().python_handler.setStream(sys.__stderr__)


@pytest.fixture(autouse=True)
def _logging_left_as_found():
    """Every test leaves the root logger's handlers as it found them. A Hydra run in this process (the refusal
    table calls the command's main) adds a console handler bound to that test's captured stderr and a file handler
    into its tmp_path; left behind, they wrote a later test's log records into a closed stream, and its stderr got a
    '--- Logging error ---' traceback (a one-line check failed on it when xdist ran the two on one worker)."""
    before, level = set(logging.root.handlers), logging.root.level
    yield
    for handler in [h for h in logging.root.handlers if h not in before and type(h).__module__ != "_pytest.logging"]:
        logging.root.removeHandler(handler)
        handler.close()
    logging.root.setLevel(level)


@pytest.fixture(autouse=True)
def _seeded_torch():
    """Every test starts from the same global torch generator, so a draw a test leaves unseeded does not
    depend on which tests its xdist worker ran before it (a tolerance failed on one such draw in CI)."""
    import torch

    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    """Every test computes with one torch intra-op thread, as every run does (``threads=1``, the default, which
    fl_bench.numerics.kernels sets inside a run): a test that trains outside a run (build_experiment, a client's
    trips, a model's batched forward) took torch's default of one thread per core, and beside the suite's other
    xdist worker (one per core) OpenMP's threads stalled at every barrier (a test of 1 s took 12)."""
    import torch

    torch.set_num_threads(1)


def compose_run_config(*overrides: str, config_dir: str = CONFIG_DIR):
    """The typed Config for these overrides (progress bar off), as ``python -m fl_bench`` builds it."""
    from fl_bench.runs.config import to_config

    with initialize_config_dir(config_dir, version_base="1.3"):
        return to_config(compose("config", overrides=["progress=false", *overrides]))


@pytest.fixture
def compose_config():
    return compose_run_config


@pytest.fixture
def run_config(tmp_path):
    """Run a config in-process; returns (summary, metrics, trips) from the run directory it writes."""
    from fl_bench.runs.experiment import run_experiment

    def run(*overrides: str, name: str = "run"):
        run_dir = Path(tmp_path) / name
        summary = run_experiment(compose_run_config(*overrides), run_dir)
        return summary, pd.read_csv(run_dir / "metrics.csv"), pd.read_csv(run_dir / "trips.csv")

    return run


@pytest.fixture
def cli_in_process(monkeypatch):
    """``python -m fl_bench ARGS`` in this process from directory ``cwd``: (exit status, its output,
    stdout and stderr together). For what does not depend on a new process: the same command, without
    an interpreter's start-up of torch and Lightning (fl_bench.analysis.launch.run_in_process)."""
    import io

    from fl_bench.analysis.launch import run_in_process

    def run(*args: str, cwd: Path) -> tuple[int, str]:
        monkeypatch.chdir(cwd)
        log = io.StringIO()
        return run_in_process(list(args), log), log.getvalue()

    return run


@pytest.fixture(scope="session")
def shared_data_root(tmp_path_factory):
    """One data root for the session's end-to-end tests: a generated dataset (MNIST-1D's 60,000 curves
    take seconds to make) is made once, into its cache there, and read by every test after."""
    return tmp_path_factory.mktemp("data")
