"""A Hydra sweeper that runs an Optuna study (current Optuna; hydra-optuna-sweeper pins Optuna 2.10,
whose SQLite storage breaks under SQLAlchemy 2).

Select it with ``override /hydra/sweeper: fl_bench_optuna`` (see conf/hparams_search/). Each
trial is one Hydra job launched through the configured launcher; its objective is a key of the
run's summary.json, by default ``trips_to_target_or_budget``: client trips to the target
accuracy, or the run's budget (``max_trips``) when the target was missed. With ``storage: sqlite:///file.db`` several invocations, on several machines
sharing the file, add trials to one study (``load_if_exists``).

Search space: ``hydra.sweeper.params`` maps a config key to Hydra's sweep syntax:
``interval(a, b)`` (float; ``tag(log, interval(a, b))`` log scale; ``tag(int, interval(a, b))``
integers), ``choice(x, y, ...)``, ``range(a, b[, step])``; a plain value is fixed.
"""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import optuna
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


@dataclass
class OptunaSweeperConfig:
    _target_: str = "hydra_plugins.fl_bench_optuna.optuna_sweeper.OptunaSweeper"
    study_name: str = "fl_bench"
    storage: Optional[str] = None  # e.g. sqlite:///multirun/optuna.db; null: in memory
    objective: str = "trips_to_target_or_budget"  # a key of the run's summary.json
    direction: str = "minimize"  # maximize for e.g. best_val_accuracy (FedGBO's grid)
    n_trials: int = 20  # trials this invocation adds
    seed: Optional[int] = None  # TPE sampler seed
    n_startup_trials: int = 10  # random trials before TPE models the results (Optuna's default)
    params: Dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="fl_bench_optuna", node=OptunaSweeperConfig, provider="fl_bench")


def search_space(params: Dict[str, Any]) -> Dict[str, Any]:
    """Config key -> Hydra sweep object (or a fixed value)."""
    parser = OverridesParser.create()
    return {key: parser.parse_override(f"{key}={value}").value() for key, value in params.items()}


def suggest(trial: optuna.Trial, key: str, space: Any) -> Any:
    if isinstance(space, IntervalSweep):
        if "int" in space.tags:
            return trial.suggest_int(key, int(space.start), int(space.end), log="log" in space.tags)
        return trial.suggest_float(key, float(space.start), float(space.end), log="log" in space.tags)
    if isinstance(space, ChoiceSweep):
        return trial.suggest_categorical(key, list(space.list))
    if isinstance(space, RangeSweep):
        return trial.suggest_categorical(key, list(range(int(space.start), int(space.stop), int(space.step))))
    return space  # fixed


class OptunaSweeper(Sweeper):
    def __init__(self, study_name, storage, objective, direction, n_trials, seed, n_startup_trials, params):
        self.study_name, self.storage, self.objective, self.direction = study_name, storage, objective, direction
        self.n_trials, self.seed, self.n_startup_trials = n_trials, seed, n_startup_trials
        self.space = search_space(dict(params or {}))

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: List[str]) -> optuna.Study:
        parser = OverridesParser.create()
        fixed = parser.parse_overrides(arguments)
        swept = [o.input_line for o in fixed if o.is_sweep_override()]
        if swept:
            raise ValueError(f"command-line sweeps {swept} are not supported with the Optuna sweeper: "
                             "put ranges in hydra.sweeper.params")
        fixed_lines = [o.input_line for o in fixed]
        if self.storage and self.storage.startswith("sqlite:///"):
            Path(self.storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        study = optuna.create_study(
            study_name=self.study_name, storage=self.storage, direction=self.direction,
            sampler=optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.n_startup_trials), load_if_exists=True,
        )
        for _ in range(self.n_trials):
            trial = study.ask()
            values = {key: suggest(trial, key, space) for key, space in self.space.items()}
            overrides = [*fixed_lines, *(f"{key}={value}" for key, value in values.items())]
            [result] = self.launcher.launch([overrides], initial_job_idx=trial.number)
            if result.status != JobStatus.COMPLETED:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                log.warning(f"trial {trial.number} failed: {result._return_value}")
                continue
            run_dir = Path(result.hydra_cfg.hydra.runtime.output_dir)
            summary = json.loads((run_dir / "summary.json").read_text())
            value = float(summary[self.objective])
            study.tell(trial, value)
            log.info(f"trial {trial.number}: {value} with {values}")
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        best = study.best_trial if done else None  # every trial may have failed (e.g. diverged)
        summary = {"study_name": self.study_name, "storage": self.storage, "trials": len(study.trials),
                   "failed_trials": sum(t.state == optuna.trial.TrialState.FAIL for t in study.trials),
                   "best_value": best.value if best else None, "best_trial": best.number if best else None,
                   "best_params": best.params if best else None}
        out = Path(self.config.hydra.sweep.dir)
        out.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(summary), out / "optimization_results.yaml")
        if best is not None:
            log.info(f"best trial {best.number}: {best.value} with {best.params}")
        else:
            log.warning(f"no trial of study {self.study_name} completed")
        return study
