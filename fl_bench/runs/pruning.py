"""Early stopping of hopeless tuning trials: a run started by the Optuna sweeper for a trial reports
its objective at every evaluation and stops when the study's pruner says the trial cannot win.

The sweeper (hydra_plugins/fl_bench_optuna) sets ``pruning`` on each run of a trial: the study the run
reports to (a study of one tuning seed's runs, so every run is compared with the other settings' runs of
the same seed; the run asks it for a trial of its own and tells it how it ended) and the objective. At
each evaluation the
run reports the objective as if it ended there (``trips_to_target_or_shortfall``: the trips to the
target if it was reached, else the budget times 1 + the shortfall of the best accuracy so far;
``best_val_accuracy``: the best so far), at step = client trips, and asks ``should_prune``. A pruned
run stops there with status ``pruned`` and ``pruned_at_trips`` in its summary; the sweeper tells the
trial it was pruned. The pruner and its settings are the protocol's (one rule for every study of a
sweep file, so budgets stay equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from fl_bench.errors import ConfigError
from fl_bench.runs.callbacks import Callback, Target
from fl_bench.runs.config import PruningConfig

PRUNERS = {"successive_halving": ("min_resource", "reduction_factor", "min_early_stopping_rate"),
           "hyperband": ("min_resource", "max_resource", "reduction_factor")}


@dataclass
class PrunerConfig:
    """The rule that stops hopeless tuning trials early (the Optuna sweeper's ``pruner``, a sweep file's
    ``protocol.tuner.pruner``); resources are client trips; a setting left null takes Optuna's default."""

    name: Optional[str] = None  # successive_halving | hyperband; null: every run to its budget
    min_resource: Optional[int] = None  # the first rung (required)
    reduction_factor: Optional[int] = None  # 1 / the fraction of runs that go on at each rung (Optuna: 3)
    min_early_stopping_rate: Optional[int] = None  # successive_halving (Optuna: 0)
    max_resource: Optional[int] = None  # hyperband: the budget (Optuna: "auto")


def make_pruner(spec: dict[str, Any], key: str = "hydra.sweeper.pruner") -> Any:
    """Optuna's pruner named by ``spec`` (a PrunerConfig's fields; name null: no pruning, None); ConfigError
    naming ``key`` for an unknown name, a missing first rung, a setting out of range or one the pruner would
    ignore."""
    name = spec.get("name")
    given = sorted(k for k, value in spec.items() if value is not None and k != "name")
    if name is None:
        if given:
            raise ConfigError(f"{key}.{given[0]}={spec[given[0]]!r} is not allowed: it needs {key}.name "
                              f"({', '.join(PRUNERS)})")
        return None
    import optuna

    if name not in PRUNERS:
        raise ConfigError(f"{key}.name={name!r} is not allowed: choose one of {', '.join(PRUNERS)}, or null")
    if not (spec.get("min_resource") or 0) >= 1:
        raise ConfigError(f"{key}.min_resource={spec.get('min_resource')!r} is not allowed: the first rung, in client "
                          f"trips, must be >= 1")
    ignored = [k for k in given if k not in PRUNERS[name]]
    if ignored:
        raise ConfigError(f"{key}.{ignored[0]}={spec[ignored[0]]!r} is not allowed with {key}.name={name}: it takes "
                          f"{', '.join(PRUNERS[name])}")
    # Optuna's least values: hyperband would raise only at a trial's first report, inside a run
    for k, least in (("reduction_factor", 2), ("min_early_stopping_rate", 0)):
        if spec.get(k) is not None and spec[k] < least:
            raise ConfigError(f"{key}.{k}={spec[k]!r} is not allowed: must be >= {least}")
    if name == "hyperband" and spec.get("max_resource") is not None and spec["max_resource"] <= spec["min_resource"]:
        # (Optuna accepts it: a budget at or below the first rung leaves no rung to prune at)
        raise ConfigError(f"{key}.max_resource={spec['max_resource']!r} is not allowed: the budget, in client trips, "
                          f"must exceed {key}.min_resource={spec['min_resource']}")
    settings = {k: spec[k] for k in given}
    if name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(**settings)
    return optuna.pruners.HyperbandPruner(**settings)


def sqlite_directory(storage: str) -> Optional[Path]:
    """The directory of an SQLite database URL (``sqlite:///dir/file.db``); None for another database's."""
    if not storage.startswith("sqlite:///") or storage.removeprefix("sqlite:///") in ("", ":memory:"):
        return None
    return Path(storage.removeprefix("sqlite:///")).parent


class Pruning(Callback):
    """A trial of its own in its seed's run study (asked at the start, told at the end): the objective so
    far reported at each evaluation; the run stops when the study's pruner prunes it."""

    def __init__(self, cfg: PruningConfig, target: Target):
        self.cfg, self.target = cfg, target
        self.trial = None
        self.number: int | None = None  # the trial's number in the run study (kept by a checkpoint)
        self.reported: set[int] = set()  # steps the trial holds (a resumed run reports each once)
        self.pruned_at: int | None = None

    def on_start(self, run, resumed: bool) -> None:
        """Ask the run study for a trial, or go on with the checkpoint's (a resumed run reports as an
        uninterrupted one, so its pruner decides the same)."""
        import optuna  # only tuning runs load it

        directory = sqlite_directory(self.cfg.storage)
        if directory is not None and not directory.is_dir():  # (SQLite's own error names no file)
            raise ConfigError(f"pruning.storage={self.cfg.storage!r} is not allowed: its directory {directory} "
                              f"does not exist; it is the Optuna sweeper's hydra.sweeper.storage, which holds pruning.study")
        try:
            study = optuna.load_study(study_name=self.cfg.study, storage=self.cfg.storage)
        except KeyError:  # (Optuna's "Record does not exist.")
            raise ConfigError(f"pruning.study={self.cfg.study!r} is not allowed: pruning.storage={self.cfg.storage!r} "
                              f"holds no such study; the Optuna sweeper makes it (<study_name>.seed<s>)") from None
        study.pruner = make_pruner(study.user_attrs.get("pruner") or {})  # the sweeper's: the storage keeps no pruner
        if study.pruner is None:
            raise ConfigError(f"pruning.study={self.cfg.study} names no pruner: it is the Optuna sweeper's study of a "
                              f"seed's runs, which records its pruner")
        if self.number is None:
            self.trial = study.ask()
            self.number = self.trial.number
            return
        frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == self.number)
        self.trial = optuna.Trial(study, frozen._trial_id)  # (Optuna names a trial by its storage id)
        self.reported = set(frozen.intermediate_values)

    def on_evaluation(self, run, progress, row) -> bool:
        if progress.trips not in self.reported:
            value = self.target.summary(run)[self.cfg.objective]  # as if the run ended here
            self.trial.report(float(value), step=progress.trips)
            self.reported.add(progress.trips)
        if self.trial.should_prune():
            self.pruned_at = progress.trips
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"pruned_at": self.pruned_at, "trial": self.number}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pruned_at, self.number = state["pruned_at"], state["trial"]

    def summary(self, run) -> dict[str, Any]:
        return {"pruned_at_trips": self.pruned_at, "pruning_trial": self.number}

    def on_end(self, run, status: str, summary: dict[str, Any]) -> None:
        """Tell the trial how the run ended: its objective (a diverged run's too: what it reached) or pruned.
        A failed or interrupted run leaves it running: the same command goes on with it from the checkpoint
        (the sweeper fails the tuning trial of a failed run)."""
        from optuna.trial import TrialState

        if status not in ("completed", "diverged", "pruned"):
            return
        if status == "pruned":
            self.trial.study.tell(self.trial, state=TrialState.PRUNED)
        else:
            self.trial.study.tell(self.trial, float(summary[self.cfg.objective]))


def with_pruning(cfg: PruningConfig, callbacks: list[Callback]) -> list[Callback]:
    """``callbacks`` and, for a tuning trial's run (``cfg.study`` set), its Pruning after the Target it reads."""
    if cfg.study is None:
        return callbacks
    target = next(callback for callback in callbacks if isinstance(callback, Target))
    return [*callbacks, Pruning(cfg, target)]


def final_status(callbacks: list[Callback], status: str) -> str:
    """``pruned`` for a run its pruner stopped (else ``status``)."""
    pruned = any(isinstance(callback, Pruning) and callback.pruned_at is not None for callback in callbacks)
    return "pruned" if pruned and status == "completed" else status
