"""A Hydra sweeper that launches a list of jobs, each its own overrides, as one batch of the configured
launcher: how fl_bench.analysis.reproduce runs a stage (a study's confirmation, the pilot, the report
runs), every arm's seeds together, on this machine's cores (``hydra/launcher=local_cores``) or as one
SLURM job array (``hydra/launcher=slurm``)::

    python -m fl_bench -m hydra/sweeper=fl_bench_jobs hydra.sweeper.jobs=jobs.yaml hydra/launcher=local_cores

``jobs``: a YAML file holding a list of jobs, each a list of overrides (its arm's setting, its seed, and
its run directory as ``hydra.sweep.dir`` and ``hydra.sweep.subdir``); the command line's own overrides go
to every job. Hydra's basic sweeper cannot say this: it sweeps the product of values, and the arms of a
stage differ in which keys they set.

Each job first claims its run directory (fl_bench.runs.claim): a job whose run a live task of another
launch holds leaves it to that task and ends at once, so that no two tasks ever run the same run. A job
that fails is named with its error on stderr; the command then ends with the first job's error, as
Hydra's basic sweeper does. What finished is read from the run directories.
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List

import yaml
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import MISSING, DictConfig

from fl_bench.errors import ConfigError
from hydra_plugins.fl_bench_optuna.optuna_sweeper import failure


@dataclass
class JobsSweeperConfig:
    _target_: str = "hydra_plugins.fl_bench_jobs.jobs_sweeper.JobsSweeper"
    jobs: str = MISSING  # a YAML file: a list of jobs, each a list of overrides


ConfigStore.instance().store(group="hydra/sweeper", name="fl_bench_jobs", node=JobsSweeperConfig, provider="fl_bench")


class ClaimedJob:
    """The task function, run by the task that claims the job's run directory; None from one that finds
    it held (a module-level class: submitit pickles it into each SLURM task)."""

    def __init__(self, task_function: Any) -> None:
        self.task_function = task_function

    def __call__(self, cfg: DictConfig) -> Any:
        from fl_bench.runs.claim import claimed

        run_dir = Path(HydraConfig.get().runtime.output_dir)
        with claimed(run_dir) as holder:
            if holder is not None:
                print(f"fl_bench: {run_dir} is left to the task that holds it ({holder})", file=sys.stderr)
                return None
            return self.task_function(cfg)


class JobsSweeper(Sweeper):
    def __init__(self, jobs: str) -> None:
        self.jobs = Path(jobs)

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=ClaimedJob(task_function), config=config)

    def sweep(self, arguments: List[str]) -> Any:
        try:
            jobs = yaml.safe_load(self.jobs.read_text())
        except OSError as error:
            raise ConfigError(f"hydra.sweeper.jobs={self.jobs}: {error.strerror}: give a YAML file listing the jobs, "
                              "each a list of overrides") from None
        except yaml.YAMLError:
            jobs = None
        if not (isinstance(jobs, list) and jobs and all(isinstance(job, list) for job in jobs)):
            raise ConfigError(f"hydra.sweeper.jobs={self.jobs} holds no list of jobs: give a YAML file listing the jobs, "
                              "each a list of overrides")
        # (no validate_batch_is_legal: fl_bench.analysis.reproduce composed every arm's command before any run,
        # and composing a report stage's thousand jobs once more would take minutes on a login node)
        results = self.launcher.launch([[*arguments, *map(str, job)] for job in jobs], initial_job_idx=0)
        failed = [result for result in results if result.status == JobStatus.FAILED]
        for result in failed:
            print(f"fl_bench: error: {result.hydra_cfg.hydra.runtime.output_dir}: {failure(result)}", file=sys.stderr)
        if failed:
            raise failed[0]._return_value  # (the command's exit status and last line, as Hydra's basic sweeper)
        return results
