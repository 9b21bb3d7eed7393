"""Early stopping of tuning trials (fl_bench.runs.pruning): a run reports its objective so far to a trial
of its seed's run study at every evaluation, stops with status pruned when the study's pruner says so,
and tells the trial how it ended."""

import optuna
import pytest

from fl_bench.runs.experiment import run_experiment
from tests.conftest import compose_run_config

PRUNER = {"name": "successive_halving", "min_resource": 100, "reduction_factor": 3}
RUN = ("max_trips=600", "eval_every=100", "target_accuracy=0.45")


def run_study(tmp_path, direction="minimize"):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="lr.seed1", storage=storage, direction=direction,
                                pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=100, reduction_factor=3))
    study.set_user_attr("pruner", PRUNER)  # what the sweeper records for its runs
    return study, storage


def test_a_run_worse_than_the_others_at_the_first_rung_is_pruned_there(tmp_path):
    study, storage = run_study(tmp_path)
    for _ in range(3):  # three runs of other settings that had reached the target by trips 100
        trial = study.ask()
        for step in (0, 100, 300):
            trial.report(100.0, step)
            assert not trial.should_prune()
        study.tell(trial, 100.0)
    cfg = compose_run_config(*RUN, "pruning.study=lr.seed1", f'pruning.storage="{storage}"')
    summary = run_experiment(cfg, tmp_path / "run")
    assert summary["status"] == "pruned" and summary["pruned_at_trips"] == 100
    assert summary["client_trips"] == 100  # it stopped there, not at its budget of 600
    trial = study.trials[summary["pruning_trial"]]
    assert trial.state == optuna.trial.TrialState.PRUNED
    # what it reported: the objective as if it ended there, the budget times 1 + the shortfall (target missed)
    assert sorted(trial.intermediate_values) == [0, 100]
    assert trial.intermediate_values[100] > 600


def test_a_run_the_pruner_lets_through_completes_and_tells_its_objective(tmp_path):
    study, storage = run_study(tmp_path, direction="maximize")
    cfg = compose_run_config(*RUN, "pruning.study=lr.seed1", f'pruning.storage="{storage}"',
                             "pruning.objective=best_val_accuracy")
    summary = run_experiment(cfg, tmp_path / "run")
    assert summary["status"] == "completed" and summary["pruned_at_trips"] is None
    trial = study.trials[summary["pruning_trial"]]
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == pytest.approx(summary["best_val_accuracy"])
    assert sorted(trial.intermediate_values) == list(range(0, 601, 100))
    assert max(trial.intermediate_values.values()) == pytest.approx(summary["best_val_accuracy"])


def test_a_study_without_the_sweepers_pruner_is_refused_in_one_line(tmp_path):
    from fl_bench.errors import ConfigError

    storage = f"sqlite:///{tmp_path}/optuna.db"
    optuna.create_study(study_name="other", storage=storage)
    cfg = compose_run_config(*RUN, "pruning.study=other", f'pruning.storage="{storage}"')
    with pytest.raises(ConfigError, match="pruning.study=other names no pruner"):
        run_experiment(cfg, tmp_path / "run")


@pytest.mark.slow
def test_a_tuning_run_killed_and_resumed_reports_to_its_trial_as_an_uninterrupted_one(tmp_path, monkeypatch):
    """Killed after 5 checkpoints (before its first rung) and resumed: the same trial of the run study goes
    on (no second trial), with the values and the pruning an uninterrupted run gets."""
    from fl_bench.runs.experiment import Run

    class Killed(Exception):
        pass

    trials = {}
    for name in ("whole", "killed"):
        (tmp_path / name).mkdir()
        study, storage = run_study(tmp_path / name)
        for _ in range(3):
            trial = study.ask()
            for step in (0, 100, 300):
                trial.report(100.0, step)
                trial.should_prune()
            study.tell(trial, 100.0)
        cfg = compose_run_config(*RUN, "checkpoint_every=1", "pruning.study=lr.seed1", f'pruning.storage="{storage}"')
        if name == "killed":
            checkpoint, written = Run.checkpoint, []

            def checkpoint_then_die(self):
                checkpoint(self)
                written.append(1)
                if len(written) == 5:
                    raise Killed

            monkeypatch.setattr(Run, "checkpoint", checkpoint_then_die)
            with pytest.raises(Killed):
                run_experiment(cfg, tmp_path / name / "run")
            monkeypatch.setattr(Run, "checkpoint", checkpoint)
        summary = run_experiment(cfg, tmp_path / name / "run")
        trials[name] = (summary["pruned_at_trips"], len(study.trials), study.trials[summary["pruning_trial"]])
    assert trials["killed"][:2] == trials["whole"][:2] == (100, 4)
    assert trials["killed"][2].intermediate_values == trials["whole"][2].intermediate_values
    assert trials["killed"][2].state == trials["whole"][2].state == optuna.trial.TrialState.PRUNED
