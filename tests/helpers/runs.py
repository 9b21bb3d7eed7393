"""Run directories as a finished run leaves them, for tests of what reads runs (the report, the
reproduction driver) without training; and a run killed after a checkpoint and resumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fl_bench.runs.checkpoint import save_verified
from fl_bench.runs.run_dir import write_summary


def write_finished_run(run_dir: Path, summary: dict[str, Any]) -> Path:
    """``run_dir`` holding a completed run with ``summary`` (status completed unless it says otherwise): its
    metrics.csv (a header, unless already written), model.pt with its digest, and summary.json written last."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "metrics.csv").exists():
        (run_dir / "metrics.csv").write_text("trips,server_step,sim_time,val_accuracy,val_loss\n")
    save_verified({"weight": torch.zeros(1)}, run_dir / "model.pt")
    write_summary(run_dir, {"status": "completed", **summary})
    return run_dir


def launched_jobs(command: list[str]) -> list[dict[str, str]]:
    """The jobs a stage's command launches (fl_bench.analysis.reproduce: the fl_bench_jobs sweeper), each as
    its overrides by key."""
    import yaml

    jobs = Path(next(word.split("=", 1)[1] for word in command if word.startswith("hydra.sweeper.jobs=")))
    return [dict(override.split("=", 1) for override in job) for job in yaml.safe_load(jobs.read_text())]


def job_run_dir(job: dict[str, str]) -> Path:
    """The run directory of a launched job (its algorithm named ``alg``)."""
    return Path(job["hydra.sweep.dir"]) / job["hydra.sweep.subdir"].replace("${algorithm.name}", "alg")


def killed_and_resumed(overrides: tuple[str, ...], run_dir: Path, after_version: int) -> None:
    """Run ``overrides`` into ``run_dir``, killed right after its first checkpoint at a server version of
    ``after_version`` or more, then resumed to the end by ``run_experiment`` (as a restarted job is)."""
    import pytest

    from fl_bench.numerics import kernels
    from fl_bench.runs.experiment import Run, result_config, run_experiment
    from tests.conftest import compose_run_config

    class Stop(Exception):
        pass

    cfg = compose_run_config(*overrides)
    run = Run(cfg, run_dir, result_config(cfg))
    run_dir.mkdir()
    run.build()
    original = run.checkpoint

    def checkpoint_then_die():
        original()
        if run.exp.server.version >= after_version:
            raise Stop

    run.checkpoint = checkpoint_then_die
    with pytest.raises(Stop), kernels(cfg.numerics, cfg.threads):  # as run_experiment computes
        run.execute(None)
    run_experiment(compose_run_config(*overrides), run_dir)


def runs_only(repro, monkeypatch) -> list[list[str]]:
    """``repro`` (fl_bench.analysis.reproduce.Reproduction) with a launch that leaves each job's run finished and
    nothing composed or written around it (the arm check, the evidence and the pages: their own tests'); returns
    the list the launched commands go into."""
    commands: list[list[str]] = []

    def fake_run(command, log_dir, check=True):
        commands.append(command)
        for job in launched_jobs(command):
            write_finished_run(job_run_dir(job), {"seed": int(job["seed"])})
        return True

    monkeypatch.setattr(repro.launcher, "run", fake_run)
    monkeypatch.setattr(repro, "check", lambda out: None)
    monkeypatch.setattr(repro, "table_evidence", lambda *args: None)
    monkeypatch.setattr(repro, "write_pages", lambda *args: None)
    return commands
