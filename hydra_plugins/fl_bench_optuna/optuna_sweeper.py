"""A Hydra sweeper that runs an Optuna study (current Optuna; hydra-optuna-sweeper pins Optuna 2.10,
whose SQLite storage breaks under SQLAlchemy 2).

Select it with ``override /hydra/sweeper: fl_bench_optuna`` (see conf/hparams_search/). Each
trial is one Hydra job launched through the configured launcher; its objective is a key of the
run's summary.json, by default ``trips_to_target_or_budget``: client trips to the target
accuracy, or the run's budget (``max_trips``) when the target was missed. Several invocations,
one after another or at once, add trials to one study (``load_if_exists``): ``storage:
sqlite:///file.db`` on one machine or a shared file system, ``postgresql+psycopg2://user@host/db``
from several machines; give each its own ``seed``, or they repeat the same random startup trials.

``n_jobs`` trials are asked together and launched as one batch, so a parallel launcher
(``hydra/launcher=local_cores``: joblib; ``hydra/launcher=slurm``: submitit) runs them at once.

A run that diverged is a result, not a failure: its summary's objective (trips to target or the
shortfall score, or the best accuracy it reached) scores the trial, so TPE learns where settings
diverge; a run that failed otherwise fails its trial. A study that ends with no completed trial ends the
command in one line (exit 1) naming the first failed trial's error; optimization_results.yaml records it.

``seeds``: each trial runs once per seed (``seed=<s>``, in the same batch) and its objective is the
``aggregate`` over them: a setting tuned on one seed is tuned to that seed's noise. ``mean`` (default)
averages; ``worst`` scores the setting by its worst seed (the largest value when minimizing), so a
setting at the edge of stability, which collapses on some seeds, loses to one that holds on all;
``median`` ignores one outlying seed in three. ``enqueue``: settings (each value inside the search
space) evaluated first, as trials of the budget (Optuna's ``enqueue_trial``); fl_bench.analysis.reproduce
puts a nested method's special case there (FedAvg's best with momentum 0 for FedAvgM), so the nested
study starts from where its special case ended and cannot end worse on the tuning seeds.

A setting is run once: TPE re-proposes points of a discrete grid once it has converged (a learning
rate grid of 41 values got the same value 7 times in 32 trials), which would spend the budget on
repeats and leave neighbours untried. A proposal equal to an evaluated setting is told that
setting's value (TPE keeps it in its history) and asked again, outside the budget; ``n_trials``
counts settings run. A fully discrete space smaller than the budget ends when every point ran.

``pruner``: early stopping of hopeless trials under one rule (the protocol's), e.g. ``{name:
successive_halving, min_resource: 4000, reduction_factor: 3}`` (Optuna's SuccessiveHalvingPruner;
``hyperband`` takes ``max_resource`` too; resources are client trips). Each run of a trial reports the
objective so far at every evaluation (fl_bench.runs.pruning) to a trial of its own in a study of its
seed's runs (``<study_name>.seed<s>``, so a run is only compared with other settings' runs of the same
seed), and stops when that study's pruner prunes it; a trial any of whose runs was pruned is told
PRUNED, with the mean of its runs' last reported values, which TPE ranks below the completed trials.
Needs a ``storage`` the runs can reach, and an objective with a value so far.

Search space: ``hydra.sweeper.params`` maps a config key to Hydra's sweep syntax:
``interval(a, b)`` (float; ``tag(log, interval(a, b))`` log scale; ``tag(int, interval(a, b))``
integers), ``choice(x, y, ...)``, ``range(a, b[, step])``; a plain value is fixed.
"""

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import optuna
import sqlalchemy.exc
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from fl_bench.errors import ConfigError, FLBenchError
from fl_bench.runs.pruning import PrunerConfig, make_pruner, sqlite_directory
from fl_bench.runs.tuning import AGGREGATES, aggregate, ranked
from fl_bench.schema import choice, require

log = logging.getLogger(__name__)


@dataclass
class OptunaSweeperConfig:
    _target_: str = "hydra_plugins.fl_bench_optuna.optuna_sweeper.OptunaSweeper"
    study_name: str = "fl_bench"
    storage: Optional[str] = None  # e.g. sqlite:///multirun/optuna.db; null: in memory
    objective: str = "trips_to_target_or_budget"  # a key of the run's summary.json
    direction: str = "minimize"  # maximize for e.g. best_val_accuracy (FedGBO's grid)
    n_trials: int = 20  # trials this invocation adds
    n_jobs: int = 1  # trials launched together (one launcher batch): parallel with joblib or SLURM
    seed: Optional[int] = None  # TPE sampler seed
    n_startup_trials: int = 10  # random trials before TPE models the results (Optuna's default)
    params: Dict[str, str] = field(default_factory=dict)
    seeds: List[int] = field(default_factory=list)  # each trial's runs; empty: the config's own seed
    aggregate: str = "mean"  # a trial's objective over its seeds: mean | worst | median
    enqueue: List[Dict[str, Any]] = field(default_factory=list)  # settings tried first (within n_trials)
    pruner: PrunerConfig = field(default_factory=PrunerConfig)


ConfigStore.instance().store(group="hydra/sweeper", name="fl_bench_optuna", node=OptunaSweeperConfig, provider="fl_bench")


def search_space(params: Dict[str, Any]) -> Dict[str, Any]:
    """Config key -> Hydra sweep object (or a fixed value)."""
    parser = OverridesParser.create()
    return {key: parser.parse_override(f"{key}={value}").value() for key, value in params.items()}


def options(sweep: Any) -> Optional[list]:
    """The values a choice or range takes (None for an interval or a fixed value)."""
    if isinstance(sweep, ChoiceSweep):
        return list(sweep.list)
    if isinstance(sweep, RangeSweep):
        return list(range(int(sweep.start), int(sweep.stop), int(sweep.step)))
    return None


def check_space(params: Dict[str, Any], space: Dict[str, Any]) -> None:
    """ConfigError for a dimension Optuna cannot search (it would raise at the first trial)."""
    for key, sweep in space.items():
        name, text = f"hydra.sweeper.params.{key}", params[key]
        if isinstance(sweep, IntervalSweep):
            require(sweep.start <= sweep.end, name, text, "an interval's start must not exceed its end")
            require("log" not in sweep.tags or sweep.start > 0, name, text, "a log-scale interval must start above 0")
        elif isinstance(sweep, RangeSweep):
            bounds = (sweep.start, sweep.stop, sweep.step)
            require(all(float(b).is_integer() for b in bounds) and sweep.step != 0, name, text,
                    "range(start, stop[, step]) takes integers, step not 0: choice(...) lists other values")
            require(bool(options(sweep)), name, text, "the range holds no value")


def outside(value: Any, sweep: Any) -> Optional[str]:
    """What the dimension ``sweep`` allows, when ``value`` is not in it (None when it is)."""
    values = options(sweep)
    if values is not None:
        return None if value in values else f"choose one of {', '.join(map(str, values))}"
    if not isinstance(sweep, IntervalSweep):
        return None if value == sweep else f"the key is fixed at {sweep!r}, not searched"
    integer = "int" in sweep.tags
    kind = (int,) if integer else (int, float)
    if isinstance(value, kind) and not isinstance(value, bool) and sweep.start <= value <= sweep.end:
        return None
    scale = " (log scale)" if "log" in sweep.tags else ""
    return f"outside the searched {'integers' if integer else 'interval'} [{sweep.start}, {sweep.end}]{scale}"


def grid_size(space: Dict[str, Any]) -> Optional[int]:
    """How many settings a fully discrete space holds (None: it has an interval)."""
    size = 1
    for sweep in space.values():
        if isinstance(sweep, IntervalSweep):
            return None
        values = options(sweep)
        size *= 1 if values is None else len(values)  # (a fixed value: one)
    return size


REPEATS_PER_TRIAL = 200  # proposals equal to evaluated settings before one is run again anyway


def suggest(trial: optuna.Trial, key: str, space: Any) -> Any:
    if isinstance(space, IntervalSweep):
        if "int" in space.tags:
            return trial.suggest_int(key, int(space.start), int(space.end), log="log" in space.tags)
        return trial.suggest_float(key, float(space.start), float(space.end), log="log" in space.tags)
    values = options(space)
    return space if values is None else trial.suggest_categorical(key, values)  # (None: a fixed value)


# Invocations started together on a fresh database race to create Optuna's tables and the study:
# the loser's CREATE or INSERT fails, and a retry finds what the winner made.
CREATE_RACE_ERRORS = (optuna.exceptions.DuplicatedStudyError, optuna.exceptions.StorageInternalError,
                      sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError)


def open_study(attempts: int = 5, **kwargs) -> optuna.Study:
    for attempt in range(attempts):
        try:
            return optuna.create_study(load_if_exists=True, **kwargs)
        except CREATE_RACE_ERRORS:
            if attempt == attempts - 1:
                raise
            log.info("study creation raced another invocation: loading it again")
            time.sleep(0.5 * (attempt + 1))


def failure(result: Any) -> str:
    """The first line of a failed job's error as the command line shows it (fl_bench.runs.cli.one_line),
    after its type where that is not one of fl_bench's errors (whose messages say what was wrong)."""
    from fl_bench.runs.cli import one_line

    error = result._return_value  # (Hydra keeps a failed job's exception there)
    if not isinstance(error, BaseException):
        return f"its job ended {result.status.name} without an error"
    line = (one_line(error).splitlines() or [""])[0]
    return line if isinstance(error, FLBenchError) else ": ".join(filter(None, [type(error).__name__, line]))


def no_trial_completed(study_name: str, trials: List[optuna.trial.FrozenTrial]) -> str:
    """Why a study holds no completed trial: how its trials ended, and the first failed trial's error."""
    run = [t for t in trials if "repeat_of" not in t.user_attrs]
    failed, pruned = (sum(t.state == state for t in run) for state in (optuna.trial.TrialState.FAIL,
                                                                        optuna.trial.TrialState.PRUNED))
    text = f"no trial of study {study_name!r} completed ({failed} failed, {pruned} pruned)"
    first = next((t for t in run if "error" in t.user_attrs), None)
    return text if first is None else f"{text}: trial {first.number} failed: {first.user_attrs['error']}"


class OptunaSweeper(Sweeper):
    def __init__(self, study_name, storage, objective, direction, n_trials, n_jobs, seed, n_startup_trials, params,
                 seeds=(), enqueue=(), pruner=None, aggregate="mean"):
        require(n_trials >= 1, "hydra.sweeper.n_trials", n_trials, "must be >= 1: the trials this invocation adds")
        # (more than n_trials is allowed: several invocations add trials to one study, and the TPE models the
        # whole study's results once it holds n_startup_trials)
        require(n_startup_trials >= 0, "hydra.sweeper.n_startup_trials", n_startup_trials,
                "must be >= 0: the study's random trials before TPE models the results")
        require(n_jobs >= 1, "hydra.sweeper.n_jobs", n_jobs, "must be >= 1: the trials launched together")
        require(seed is None or seed >= 0, "hydra.sweeper.seed", seed, "must be >= 0, or null")
        choice("hydra.sweeper.direction", direction, ("minimize", "maximize"))
        choice("hydra.sweeper.aggregate", aggregate, AGGREGATES)
        self.aggregate = aggregate
        self.study_name, self.storage, self.objective, self.direction = study_name, storage, objective, direction
        self.n_trials, self.n_jobs, self.seed, self.n_startup_trials = n_trials, n_jobs, seed, n_startup_trials
        params = dict(params or {})
        self.space = search_space(params)
        check_space(params, self.space)
        self.seeds = [int(s) for s in seeds or ()]
        require(len(set(self.seeds)) == len(self.seeds), "hydra.sweeper.seeds", self.seeds, "a seed repeats")
        if aggregate != "mean" and len(self.seeds) < 2:  # one run per trial: nothing to aggregate
            raise ConfigError(f"hydra.sweeper.aggregate={aggregate} needs at least 2 hydra.sweeper.seeds, not {self.seeds}")
        self.enqueue = [dict(setting) for setting in enqueue or ()]
        for index, setting in enumerate(self.enqueue):
            unknown = sorted(set(setting) - set(self.space))
            if unknown:
                raise ConfigError(f"hydra.sweeper.enqueue names {unknown}: not among the searched keys "
                                  f"{sorted(self.space)}")
            # (Optuna runs an enqueued value outside the space as given, and it may become the best)
            for key, value in setting.items():
                allowed = outside(value, self.space[key])
                require(allowed is None, f"hydra.sweeper.enqueue[{index}].{key}", value, allowed)
        spec = OmegaConf.to_container(pruner) if isinstance(pruner, DictConfig) else dict(pruner or {})
        self.pruner = make_pruner(spec)
        self.pruner_spec = {key: value for key, value in spec.items() if value is not None} if self.pruner else None
        if self.pruner is not None:
            from fl_bench.runs.config import PRUNING_OBJECTIVES

            if objective not in PRUNING_OBJECTIVES:
                raise ConfigError(f"hydra.sweeper.pruner needs an objective with a value so far ({', '.join(PRUNING_OBJECTIVES)}), "
                                 f"not {objective}")
            if not storage:
                raise ConfigError("hydra.sweeper.pruner needs hydra.sweeper.storage: the runs report to the study there")

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        from fl_bench.runs.config import OBJECTIVES

        # Here, not in __init__: the objective is a key of fl_bench's summaries, where the sweeper itself
        # scores whatever the launched jobs' summary.json hold (its tests' fake jobs)
        choice("hydra.sweeper.objective", self.objective, OBJECTIVES)
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: List[str]) -> optuna.Study:
        parser = OverridesParser.create()
        fixed = parser.parse_overrides(arguments)
        swept = [o.input_line for o in fixed if o.is_sweep_override()]
        if swept:
            raise ConfigError(f"command-line sweeps {swept} are not supported with the Optuna sweeper: "
                              "put ranges in hydra.sweeper.params")
        fixed_lines = [o.input_line for o in fixed]
        directory = sqlite_directory(self.storage) if self.storage else None
        if directory is not None:  # a new study's database goes where it is asked for
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise ConfigError(f"hydra.sweeper.storage={self.storage!r} is not allowed: its directory {directory} "
                                  f"cannot be created: {error.strerror}") from None
        study = open_study(
            study_name=self.study_name, storage=self.storage, direction=self.direction,
            sampler=optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.n_startup_trials),
        )
        if not study.trials:  # a continued study already evaluated them
            for setting in self.enqueue:
                study.enqueue_trial(setting)
        # per seed, a study of that seed's runs, where the pruner compares them (module docstring)
        self.run_studies = None if self.pruner is None else [
            open_study(study_name=f"{self.study_name}.seed{s}" if s is not None else f"{self.study_name}.runs",
                       storage=self.storage, direction=self.direction, pruner=self.pruner,
                       sampler=optuna.samplers.RandomSampler(seed=0))  # (the runs' trials suggest nothing)
            for s in (self.seeds or [None])]
        for run_study in self.run_studies or []:  # where the runs read it (Optuna's storage keeps no pruner)
            run_study.set_user_attr("pruner", self.pruner_spec)
        size = grid_size(self.space)
        for start in range(0, self.n_trials, self.n_jobs):
            if size is not None and len(self.evaluated(study)) >= size:
                log.info(f"every one of the space's {size} settings ran: the study ends")
                break
            self.run_batch(study, fixed_lines, min(self.n_jobs, self.n_trials - start))
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        best = study.best_trial if done else None  # every trial may have failed or been pruned
        repeats = [t for t in study.trials if "repeat_of" in t.user_attrs]
        summary = {"study_name": self.study_name, "storage": self.storage,
                   "trials": len(study.trials) - len(repeats), "repeats_told": len(repeats),
                   "pruner": self.pruner_spec,
                   "pruned_trials": sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials),
                   "seeds": self.seeds, "aggregate": self.aggregate, "enqueued": self.enqueue,
                   "failed_trials": sum(t.state == optuna.trial.TrialState.FAIL and "repeat_of" not in t.user_attrs
                                        for t in study.trials),
                   "best_value": best.value if best else None, "best_trial": best.number if best else None,
                   "best_params": best.params if best else None,
                   # every completed setting, best first, with its runs' values per seed: the finalists a
                   # confirmation on other seeds chooses among (fl_bench.analysis.reproduce)
                   "ranked": ranked(study.trials, self.seeds or [s for s in [self.config.get("seed")] if s is not None],
                                    self.direction)}
        out = Path(self.config.hydra.sweep.dir)
        out.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(summary), out / "optimization_results.yaml")
        if best is None:  # the study found nothing: the command failed, whatever it recorded
            raise ConfigError(no_trial_completed(self.study_name, study.trials))
        log.info(f"best trial {best.number}: {best.value} with {best.params}")
        return study

    @staticmethod
    def evaluated(study: optuna.Study) -> Dict[tuple, optuna.trial.FrozenTrial]:
        """Setting -> the trial that ran it (finished, failed or running; repeats told from history left out)."""
        return {tuple(sorted(t.params.items())): t for t in study.trials
                if "repeat_of" not in t.user_attrs and t.state != optuna.trial.TrialState.WAITING and t.params}

    def ask_new(self, study: optuna.Study, batch: set) -> tuple:
        """A trial whose setting has not run: a proposal equal to one that ran is told that run's value
        (or failure) and asked again; after REPEATS_PER_TRIAL such proposals the last one runs again."""
        evaluated = self.evaluated(study)
        for attempt in range(REPEATS_PER_TRIAL + 1):
            trial = study.ask()
            values = {key: suggest(trial, key, space) for key, space in self.space.items()}
            setting = tuple(sorted(values.items()))
            earlier = evaluated.get(setting)
            if attempt == REPEATS_PER_TRIAL or (earlier is None and setting not in batch):
                batch.add(setting)
                return trial, values
            trial.set_user_attr("repeat_of", earlier.number if earlier is not None else -1)
            if earlier is not None and earlier.state == optuna.trial.TrialState.COMPLETE:
                study.tell(trial, earlier.value)
            else:  # a failed setting, or one running in this batch
                study.tell(trial, state=optuna.trial.TrialState.FAIL)

    @staticmethod
    def summary(result: Any) -> Optional[Dict[str, Any]]:
        """A finished run's summary.json; a diverged run's too (its objective scores what it reached
        before diverging: TPE then learns to avoid the setting, where a failed trial would teach it
        nothing); None for a run that failed otherwise."""
        if result.hydra_cfg is None:
            return None
        path = Path(result.hydra_cfg.hydra.runtime.output_dir) / "summary.json"
        summary = json.loads(path.read_text()) if path.exists() else None
        if result.status == JobStatus.COMPLETED or (summary or {}).get("status") == "diverged":
            return summary
        return None

    def pruning_overrides(self, seed_index: int) -> List[str]:
        """The run of a trial on the seed_index-th seed reports to that seed's run study."""
        if self.run_studies is None:
            return []
        study = self.run_studies[seed_index].study_name
        return [f'pruning.study="{study}"', f'pruning.storage="{self.storage}"', f"pruning.objective={self.objective}"]

    def run_batch(self, study: optuna.Study, fixed_lines: List[str], size: int) -> None:
        """Ask ``size`` new settings, launch them (each once per seed) as one batch, tell each its objective."""
        batch: set = set()
        trials, values = zip(*(self.ask_new(study, batch) for _ in range(size)))
        seeds = [[f"seed={s}"] for s in self.seeds] or [[]]
        overrides = [[*fixed_lines, *(f"{key}={value}" for key, value in v.items()), *seed, *self.pruning_overrides(i)]
                     for v in values for i, seed in enumerate(seeds)]
        # hydra.job.num (the run directory's prefix) is counted from trials[0].number's first run: the
        # trial's runs unless another invocation took numbers in between; run_dirs records the truth.
        try:
            results = self.launcher.launch(overrides, initial_job_idx=trials[0].number * len(seeds))
        except Exception:
            # e.g. submitit raises for the whole batch when a SLURM job dies: no trial stays RUNNING
            for trial in trials:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        for index, (trial, v) in enumerate(zip(trials, values)):
            runs = results[index * len(seeds):(index + 1) * len(seeds)]
            summaries = [self.summary(r) for r in runs]
            if any(summary is not None and summary.get("status") == "pruned" for summary in summaries):
                self.tell_pruned(study, trial, summaries, v)
                continue
            if any(summary is None for summary in summaries):
                failed = next(r for r, summary in zip(runs, summaries) if summary is None)
                trial.set_user_attr("error", failure(failed))
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                log.warning(f"trial {trial.number} failed: {failed._return_value}")
                continue
            run_dirs = [Path(r.hydra_cfg.hydra.runtime.output_dir) for r in runs]
            per_seed = [float(summary[self.objective]) for summary in summaries]
            trial.set_user_attr("run_dirs", [str(d) for d in run_dirs])
            trial.set_user_attr("per_seed", per_seed)
            value = aggregate(per_seed, self.aggregate, self.direction)
            study.tell(trial, value)
            log.info(f"trial {trial.number}: {value} (per seed {per_seed}) with {v}")

    def tell_pruned(self, study: optuna.Study, trial: optuna.Trial, summaries: List[Optional[Dict[str, Any]]],
                    setting: Dict[str, Any]) -> None:
        """A trial whose run was pruned on some seed: PRUNED, reported at the mean of its runs' last values
        (at the earliest of their last steps), which TPE ranks below the completed trials."""
        last = []
        for run_study, summary in zip(self.run_studies, summaries):
            number = (summary or {}).get("pruning_trial")
            reported = next((t.intermediate_values for t in run_study.get_trials(deepcopy=False) if t.number == number), {})
            if reported:
                last.append((max(reported), reported[max(reported)]))
        if last:
            trial.report(sum(value for _, value in last) / len(last), step=min(step for step, _ in last))
        pruned_at = [summary.get("pruned_at_trips") if summary else None for summary in summaries]
        trial.set_user_attr("pruned_at_trips", pruned_at)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        log.info(f"trial {trial.number}: pruned (at trips {pruned_at}) with {setting}")
