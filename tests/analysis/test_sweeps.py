"""Optuna search through Hydra's multirun: trials end to end, one SQLite study shared by two runs,
trials scored over several tuning seeds, settings enqueued before the sampler's. The sweeps run in
this process (tests/conftest.py's cli_in_process: the same command, without a new interpreter)."""

import json
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf

from fl_bench.errors import ConfigError
from hydra_plugins.fl_bench_optuna.optuna_sweeper import search_space, suggest

pytestmark = pytest.mark.slow  # Hydra multiruns and Optuna studies


def test_two_invocations_share_one_sqlite_study_and_record_the_best_trial(tmp_path, cli_in_process):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    common = ["-m", "hparams_search=fedbuff_synthetic", f"hydra.sweeper.storage={storage}", "max_trips=300",
              "eval_every=100", "concurrency=20", "target_accuracy=0.12", "progress=false"]
    for trials, sweep_dir in [(2, tmp_path / "first"), (1, tmp_path / "second")]:
        code, out = cli_in_process(*common, f"hydra.sweeper.n_trials={trials}", f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
        assert code == 0, out
    study = optuna.load_study(study_name="fedbuff_synthetic", storage=storage)
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    ran = [t for t in study.trials if "repeat_of" not in t.user_attrs]
    # The second invocation continued the study with the same sampler seed: its first two proposals
    # were the first invocation's settings, told their values instead of run again.
    assert [t.number for t in ran] == [0, 1, 4] and len({tuple(sorted(t.params.items())) for t in ran}) == 3
    assert [(t.user_attrs["repeat_of"], t.value) for t in study.trials if t not in ran] == [(0, ran[0].value), (1, ran[1].value)]
    recorded = OmegaConf.load(tmp_path / "second" / "optimization_results.yaml")
    assert recorded.trials == 3 and recorded.best_value == min(t.value for t in study.trials)
    assert set(recorded.best_params) == {"algorithm.client_lr", "algorithm.server_optimizer.lr", "algorithm.server_optimizer.momentum"}
    # every trial's objective is its trips to target, or the 300-trip budget when it missed
    assert all(0 <= t.value <= 300 for t in study.trials)


def test_search_space_syntax_maps_to_optuna_distributions():
    space = search_space({"a": "tag(log, interval(1e-8, 1e4))", "b": "choice(0.0, 0.9)", "c": "tag(int, interval(1, 8))",
                          "d": "range(1, 4)", "e": "3"})
    trial = optuna.create_study().ask()
    values = {key: suggest(trial, key, s) for key, s in space.items()}
    assert 1e-8 <= values["a"] <= 1e4 and values["b"] in (0.0, 0.9) and values["d"] in (1, 2, 3) and values["e"] == 3
    assert isinstance(values["c"], int) and 1 <= values["c"] <= 8
    assert trial.distributions["a"].log and isinstance(trial.distributions["b"], optuna.distributions.CategoricalDistribution)


def test_every_search_space_composes_and_parses():
    from hydra import compose, initialize_config_dir

    from fl_bench.runs.cli import CONFIG_DIR

    spaces = {}
    for name, algorithm in [("fedbuff_synthetic", None), ("fedbuff_sent140", None), ("fedgbo_grid_femnist", None),
                            ("synthetic_lr", None), ("synthetic_lr_fedasync", None),
                            ("fedbuff_smoke_server_momentum", "fedavgm"), ("fedbuff_smoke_server_sgd", "fedavg"),
                            ("fedbuff_smoke_fedprox", "fedprox"), ("fedbuff_smoke_fedasync", "fedasync")]:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", overrides=[f"hparams_search={name}", *([f"algorithm={algorithm}"] if algorithm else [])], return_hydra_config=True)
        sweeper = cfg.hydra.sweeper
        assert sweeper._target_.endswith("OptunaSweeper") and sweeper.study_name.startswith(name)
        spaces[name] = search_space(dict(sweeper.params))
        assert spaces[name] and all(OmegaConf.select(cfg, key) is not None for key in spaces[name])  # keys exist
    assert len(spaces["fedgbo_grid_femnist"]["algorithm.client_lr"].list) == 61  # 10^[-5, 1] by 0.1 of the exponent


def test_a_failing_trial_is_recorded_and_the_study_goes_on(tmp_path, cli_in_process):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    # FedAsync's mixing weight must be in (0, 1]: every trial fails at start-up, none ends the sweep, and a
    # study that ends with no trial completed is an error naming a trial's own
    code, out = cli_in_process("-m", "hparams_search=synthetic_lr_fedasync", "hydra.sweeper.n_trials=2", "algorithm.staleness.exponent=-1",
                      f"hydra.sweeper.storage={storage}", f"hydra.sweep.dir={tmp_path / 'sweep'}", "progress=false",
                      cwd=tmp_path)
    assert code == 1 and "no trial of study 'synthetic_lr_fedasync' completed (2 failed, 0 pruned)" in out, out
    study = optuna.load_study(study_name="synthetic_lr_fedasync", storage=storage)
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"]
    recorded = OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml")
    assert recorded.failed_trials == 2 and recorded.best_value is None


def test_each_trial_scores_the_mean_over_its_tuning_seeds_and_an_enqueued_setting_is_tried_first(tmp_path, cli_in_process):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    start = {"algorithm.client_lr": 0.05, "algorithm.server_optimizer.lr": 1.0, "algorithm.server_optimizer.momentum": 0.0}
    code, out = cli_in_process("-m", "hparams_search=fedbuff_synthetic", "max_trips=300", "eval_every=100", "concurrency=20",
                      "target_accuracy=0.12", "progress=false", "hydra.sweeper.n_trials=1", "hydra.sweeper.seeds=[3,4]",
                      "hydra.sweeper.enqueue=[{" + ",".join(f"{k}:{v}" for k, v in start.items()) + "}]",
                      f"hydra.sweeper.storage={storage}", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert code == 0, out
    (trial,) = optuna.load_study(study_name="fedbuff_synthetic", storage=storage).trials
    assert trial.params == start  # the enqueued setting is the first trial, inside the budget
    summaries = [json.loads((Path(d) / "summary.json").read_text()) for d in trial.user_attrs["run_dirs"]]
    assert [s["seed"] for s in summaries] == [3, 4]
    assert trial.value == pytest.approx(sum(s["trips_to_target_or_budget"] for s in summaries) / 2)


def test_an_enqueued_setting_must_name_only_searched_keys(tmp_path, cli_in_process):
    code, out = cli_in_process("-m", "hparams_search=fedbuff_synthetic", "progress=false", "hydra.sweeper.enqueue=[{algorithm.prox_mu:0.1}]",
                      f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert code != 0 and "hydra.sweeper.enqueue names ['algorithm.prox_mu']: not among the searched keys" in out


class _ScoringLauncher:
    """Launches nothing: writes each job's summary.json with an objective computed from its overrides."""

    def __init__(self, root, score, outcome=lambda values: "completed"):
        self.root, self.score, self.outcome, self.launched = root, score, outcome, []

    def launch(self, overrides, initial_job_idx):
        from hydra.core.utils import JobReturn, JobStatus

        results = []
        for i, lines in enumerate(overrides):
            values = dict(line.split("=", 1) for line in lines)
            self.launched.append(values)
            run_dir = self.root / str(initial_job_idx + i)
            run_dir.mkdir(parents=True)
            outcome = self.outcome(values)  # completed | diverged (a summary, a failed job) | crashed (no summary)
            if outcome != "crashed":
                (run_dir / "summary.json").write_text(json.dumps({"objective": self.score(values), "status": outcome}))
            status = JobStatus.COMPLETED if outcome == "completed" else JobStatus.FAILED
            result = JobReturn(status=status, _return_value=None if outcome == "completed" else RuntimeError(outcome))
            result.hydra_cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(run_dir)}}})
            results.append(result)
        return results


def test_a_setting_runs_once_and_a_discrete_space_smaller_than_the_budget_ends_when_every_point_ran(tmp_path):
    from hydra_plugins.fl_bench_optuna.optuna_sweeper import OptunaSweeper

    sweeper = OptunaSweeper("grid", None, "objective", "minimize", n_trials=20, n_jobs=2, seed=0, n_startup_trials=2,
                            params={"a": "choice(1, 2, 3)", "b": "choice(10, 20)"})
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    sweeper.launcher = _ScoringLauncher(tmp_path / "runs", lambda v: float(v["a"]) * float(v["b"]))
    study = sweeper.sweep([])
    settings = [(v["a"], v["b"]) for v in sweeper.launcher.launched]
    assert len(settings) == 6 and len(set(settings)) == 6  # the 3 x 2 grid, each point once, then the study ends
    recorded = OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml")
    assert recorded.trials == 6 and recorded.best_params == {"a": 1, "b": 10}
    repeats = [t for t in study.trials if "repeat_of" in t.user_attrs]
    assert recorded.repeats_told == len(repeats)
    for trial in repeats:  # a repeat was told the value its setting already got, not run
        if trial.state.name == "COMPLETE":
            assert trial.value == study.trials[trial.user_attrs["repeat_of"]].value


def test_a_diverged_run_scores_its_trial_and_a_crashed_one_fails_it(tmp_path):
    from hydra_plugins.fl_bench_optuna.optuna_sweeper import OptunaSweeper

    sweeper = OptunaSweeper("grid", None, "objective", "minimize", n_trials=3, n_jobs=1, seed=0, n_startup_trials=3,
                            params={"a": "choice(1, 2, 3)"})
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    outcomes = {"1": "completed", "2": "diverged", "3": "crashed"}
    sweeper.launcher = _ScoringLauncher(tmp_path / "runs", lambda v: 10.0 * float(v["a"]), lambda v: outcomes[v["a"]])
    study = sweeper.sweep([])
    by_a = {t.params["a"]: t for t in study.trials}
    assert by_a[1].value == 10.0 and by_a[2].value == 20.0  # diverged: scored by what its summary says
    assert by_a[3].state.name == "FAIL" and by_a[3].value is None


def test_a_pruner_stops_hopeless_trials_at_its_rungs_and_the_best_is_a_completed_trial(tmp_path, cli_in_process):
    """Successive halving on two tuning seeds: each run is compared with the other settings' runs of its
    seed; a trial with a pruned run is told PRUNED, and its runs stopped at a rung, not at the budget."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    code, out = cli_in_process("-m", "hparams_search=synthetic_lr", "hydra.sweeper.n_trials=6", "hydra.sweeper.n_startup_trials=4",
                      f"hydra.sweeper.storage={storage}", "hydra.sweeper.seeds=[1,2]",
                      "hydra.sweeper.objective=trips_to_target_or_shortfall",
                      "hydra.sweeper.pruner={name:successive_halving,min_resource:200,reduction_factor:3}",
                      "max_trips=900", "eval_every=100", "progress=false", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                      cwd=tmp_path)
    assert code == 0, out
    study = optuna.load_study(study_name="synthetic_lr_fedbuff", storage=storage)
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert pruned and all(t.intermediate_values for t in pruned)
    recorded = OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml")
    assert recorded.pruned_trials == len(pruned) and recorded.pruner.name == "successive_halving"
    assert study.trials[recorded.best_trial].state.name == "COMPLETE"
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/summary.json")]
    stopped = [s for s in summaries if s["status"] == "pruned"]
    assert stopped and all(s["client_trips"] == s["pruned_at_trips"] in (200, 600) for s in stopped)
    for seed in (1, 2):  # one run study per tuning seed, holding that seed's runs
        runs = optuna.load_study(study_name=f"synthetic_lr_fedbuff.seed{seed}", storage=storage)
        assert len(runs.trials) == 6 and {s.get("seed") for s in summaries} == {1, 2}


@pytest.mark.parametrize("how, best", [("mean", {"a": 2}), ("worst", {"a": 1})])
def test_a_trial_scores_its_seeds_by_the_protocol_s_aggregate_and_worst_prefers_the_setting_that_holds(tmp_path, how, best):
    """a=2 is better on average but collapses on seed 2 (minimizing trips: 40 on seed 2); a=1 holds on both."""
    from hydra_plugins.fl_bench_optuna.optuna_sweeper import OptunaSweeper

    sweeper = OptunaSweeper("agg", None, "objective", "minimize", n_trials=2, n_jobs=1, seed=0, n_startup_trials=2,
                            params={"a": "choice(1, 2)"}, seeds=[1, 2], aggregate=how)
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    trips = {("1", "1"): 20.0, ("1", "2"): 22.0, ("2", "1"): 1.0, ("2", "2"): 40.0}
    sweeper.launcher = _ScoringLauncher(tmp_path / "runs", lambda v: trips[v["a"], v["seed"]])
    study = sweeper.sweep([])
    values = {t.params["a"]: t.value for t in study.trials}
    assert values == ({1: 21.0, 2: 20.5} if how == "mean" else {1: 22.0, 2: 40.0})
    recorded = OmegaConf.to_container(OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml"))
    assert recorded["best_params"] == best
    # every setting ranked with its values per seed: what a confirmation on other seeds chooses among
    assert [r["params"] for r in recorded["ranked"]] == [best, {"a": 3 - best["a"]}]
    assert {r["params"]["a"]: r["per_seed"] for r in recorded["ranked"]} == {1: {1: 20.0, 2: 22.0}, 2: {1: 1.0, 2: 40.0}}


def test_an_unknown_aggregate_is_refused_in_one_line():
    from hydra_plugins.fl_bench_optuna.optuna_sweeper import OptunaSweeper

    with pytest.raises(ConfigError, match=r"hydra.sweeper.aggregate='max' is not allowed: choose one of mean, worst, median"):
        OptunaSweeper("agg", None, "objective", "minimize", n_trials=2, n_jobs=1, seed=0, n_startup_trials=2,
                      params={"a": "choice(1, 2)"}, aggregate="max")
