"""The report on a tiny multirun: its table must equal what the metrics CSVs say."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from fl_bench.analysis.report import load_runs, load_wandb_runs, write_report
from fl_bench.analysis.sections import trips_to_target_table
from fl_bench.analysis.report import main as report_main
from fl_bench.analysis.launch import run_in_process
from helpers.runs import write_finished_run
from tests.helpers.arms import as_arms


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    root = tmp_path_factory.mktemp("multirun")
    log = io.StringIO()  # (the command in this process: fl_bench.analysis.launch.run_in_process)
    code = run_in_process(["-m", "algorithm=fedbuff,fedavgm", "seed=0,1", "max_trips=600", "eval_every=200",
                           "concurrency=20", "target_accuracy=0.15", "progress=false", f"hydra.sweep.dir={root}"], log)
    assert code == 0, log.getvalue()
    return root


def test_trips_to_target_table_matches_the_metrics_csvs(multirun, tmp_path, capsys):
    report_main([str(multirun), "--name", "tiny", "--out", str(tmp_path), "--reference", "fedavgm"])
    # it names every file it wrote, and only those
    (said,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("written to ")]
    assert said.startswith(f"written to {tmp_path}: ")
    assert sorted(said.split(": ", 1)[1].split(", ")) == sorted(p.name for p in tmp_path.iterdir())
    assert {"tiny.md", "tiny.csv", "tiny_curves.png", "tiny_staleness.png", "tiny_examples.png"} <= set(said.split(": ", 1)[1].split(", "))
    table = pd.read_csv(tmp_path / "tiny.csv").set_index("method")
    expected = {}
    for algorithm in ["fedbuff", "fedavgm"]:
        per_seed = []
        for seed in [0, 1]:
            metrics = pd.read_csv(next(multirun.glob(f"*_{algorithm}_seed{seed}")) / "metrics.csv")
            hit = metrics[metrics.val_accuracy >= 0.15]
            per_seed.append(hit.trips.iloc[0] if len(hit) else None)
        expected[algorithm] = float("nan") if None in per_seed else sum(per_seed) / 2
        assert table.loc[algorithm, "seeds"] == 2
    for algorithm, trips in expected.items():
        assert table.loc[algorithm, "trips_to_target"] == pytest.approx(trips, nan_ok=True)
    assert table.loc["fedbuff", "vs_reference"] == pytest.approx(expected["fedbuff"] / expected["fedavgm"], nan_ok=True)
    assert not pd.isna(table.loc["fedbuff", "trips_to_target"])  # the tiny run must exercise a reached target
    text = (tmp_path / "tiny.md").read_text()
    for algorithm, trips in expected.items():
        assert (f"{trips:,.0f}" if trips == trips else ">600") in text
    assert (tmp_path / "tiny_curves.png").stat().st_size > 0 and (tmp_path / "tiny_staleness.png").stat().st_size > 0


def test_unknown_reference_and_empty_directory_fail_in_one_line(multirun, tmp_path, capsys):
    with pytest.raises(SystemExit) as bad:
        report_main([str(multirun), "--reference", "fedx", "--out", str(tmp_path)])
    assert bad.value.code == 2 and "reference method 'fedx' is not among the runs: fedbuff, fedavgm" in capsys.readouterr().err
    with pytest.raises(SystemExit) as empty:
        report_main([str(tmp_path)])
    err = capsys.readouterr().err
    assert empty.value.code == 2 and "no finished runs" in err and "Traceback" not in err


class StubRun:
    """The parts of wandb.apis.public.Run the report reads, filled from a local run directory the
    way run_log puts them into W&B (nested config, summary, metric history, per-trip table file)."""

    def __init__(self, run_dir, number):
        self.id, self.state, self._dir = f"run{number}", "finished", run_dir
        self.config = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra" / "config.yaml"))
        self.summary = {**json.loads((run_dir / "summary.json").read_text()),
                        "trips_table": {"_type": "table-file", "path": "media/table/trips_table.table.json"}}

    def history(self, keys, samples, pandas):
        assert pandas
        return pd.read_csv(self._dir / "metrics.csv")[keys].assign(_step=lambda d: d.trips)

    def file(self, path):
        run_dir = self._dir

        class File:
            def download(self, root, replace):
                trips = pd.read_csv(run_dir / "trips.csv")
                target = Path(root) / run_dir.name / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps({"columns": list(trips.columns), "data": trips.values.tolist()}))
                return open(target)

        return File()


class StubApi:
    def __init__(self, runs):
        self._runs = runs

    def runs(self, path):
        assert path == "me/fl_bench"
        return self._runs


def test_wandb_source_gives_the_same_report_as_the_run_directories(multirun, tmp_path):
    local = write_report(load_runs([multirun], ["algorithm.name"]), "local", tmp_path, "fedavgm")
    api = StubApi([StubRun(d, i) for i, d in enumerate(sorted(p.parent for p in multirun.rglob("summary.json")))])
    remote = write_report(load_wandb_runs("me/fl_bench", ["algorithm.name"], api=api), "remote", tmp_path, "fedavgm")
    pd.testing.assert_frame_equal(local, remote)
    assert (tmp_path / "remote_staleness.png").stat().st_size > 0


BASE = {"dataset": {"name": "synthetic", "num_samples": 1000, "root": "${data_root}"}, "partition": {"name": "natural"},
        "algorithm": {"name": "fedbuff", "client_lr": 0.1}, "seed": 0, "concurrency": 20, "max_trips": 600,
        "target_accuracy": 0.5, "device": "cpu", "data_root": "~/.cache/fl_bench", "wandb": {"project": "fl_bench"}}


def fake_run(root, name, trips_to_target, config):
    """A finished run directory whose config is BASE with ``config`` (dotted keys) over it, and which
    reaches the target at ``trips_to_target``."""
    run_dir = root / name
    (run_dir / ".hydra").mkdir(parents=True)
    cfg = OmegaConf.create(BASE)
    for key, value in config.items():
        OmegaConf.update(cfg, key, value)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    pd.DataFrame({"trips": [0, trips_to_target], "server_step": [0, 1], "sim_time": [0.0, trips_to_target / 10],
                  "val_accuracy": [0.1, 0.6], "val_loss": [2.0, 1.0]}).to_csv(run_dir / "metrics.csv", index=False)
    pd.DataFrame({"staleness": [0, 1], "used": [1, 1], "num_examples": [5, 7]}).to_csv(run_dir / "trips.csv",
                                                                                       index=False)
    write_finished_run(run_dir, {
        "algorithm": cfg.algorithm.name, "seed": cfg.seed, "concurrency": cfg.concurrency, "max_trips": cfg.max_trips,
        "target_accuracy": cfg.target_accuracy, "trips_to_target": trips_to_target,
        "sim_time_to_target": trips_to_target / 10, "final_val_accuracy": 0.6, "wall_seconds": 1.0,
    })


def table_of(root):
    return trips_to_target_table(load_runs([root], ["algorithm.name"])[0], None).set_index("method")


@pytest.mark.parametrize("other, labels", [
    # a dataset brings its own size and partition: its name tells the rows apart
    ({"dataset.name": "mnist1d", "dataset.num_samples": 5000, "partition.name": "dirichlet"},
     ["fedbuff [dataset.name=synthetic]", "fedbuff [dataset.name=mnist1d]"]),
    ({"max_trips": 2000}, ["fedbuff [max_trips=600]", "fedbuff [max_trips=2000]"]),
])
def test_runs_of_one_algorithm_with_different_configs_are_not_averaged(tmp_path, capsys, other, labels):
    for seed in (0, 1):
        fake_run(tmp_path, f"base_seed{seed}", 200, {"seed": seed})
        fake_run(tmp_path, f"other_seed{seed}", 400, {"seed": seed, **other})
    table = table_of(tmp_path)
    assert list(table.index) == labels and list(table["seeds"]) == [2, 2]
    assert list(table["trips_to_target"]) == [200, 400]
    assert f"runs of fedbuff differ in {', '.join(other)} besides the seed" in capsys.readouterr().err


def test_runs_that_differ_only_in_the_seed_and_where_they_ran_are_averaged(tmp_path, capsys):
    fake_run(tmp_path, "seed0", 200, {"seed": 0})
    fake_run(tmp_path, "seed1", 400, {"seed": 1, "accelerator": "cuda", "data_root": "/data", "wandb.project": "other"})
    table = table_of(tmp_path)
    assert list(table.index) == ["fedbuff"] and table.loc["fedbuff", "seeds"] == 2
    assert table.loc["fedbuff", "trips_to_target"] == 300
    assert capsys.readouterr().err == ""


def _runs(rows):
    """A runs frame as load_runs makes it, from (method, seed, best accuracy, steps to target) rows."""
    return pd.DataFrame([
        {"method": m, "algorithm": m.split()[0], "seed": seed, "status": "completed", "max_trips": 1000,
         "server_steps": 100, "best_val_accuracy": best, "final_val_accuracy": best - 0.01,
         "steps_to_target": steps, "trips_to_target": None if steps is None else 10 * steps,
         "concurrency": 10, "target_accuracy": 0.8, "sim_time_to_target": steps, "mean_client_time": 1.0,
         "trips_to_target_resolution": 10}
        for m, seed, best, steps in rows])


def test_best_accuracy_table_shows_differences_of_means_as_data_with_no_judgement_of_its_own():
    runs = _runs([("fedavg ICA", 1, 0.80, 50), ("fedavg ICA", 2, 0.82, 60),
                  ("fedlaavg ICA", 1, 0.85, 40), ("fedlaavg ICA", 2, 0.87, 44)])
    from fl_bench.analysis.sections import best_accuracy_table, differences_of_means

    table = best_accuracy_table(runs, "fedavg ICA").set_index("method")
    assert table.loc["fedlaavg ICA", "best_accuracy"] == pytest.approx(86.0)
    assert table.loc["fedlaavg ICA", "best_std"] == pytest.approx(1.0)
    assert table.loc["fedlaavg ICA", "vs_reference"] == pytest.approx(5.0)
    arms = {"fedavg ICA": {"paper": {"accuracy": 56.75}}, "fedlaavg ICA": {"paper": {"accuracy": 60.98}}}
    compared = differences_of_means(best_accuracy_table(runs, "fedavg ICA"), as_arms(arms), "fedavg ICA")
    assert compared.set_index("method").loc["fedlaavg ICA", "difference"] == "+5.00 vs fedavg ICA"
    assert compared.set_index("method").loc["fedavg ICA", "difference"] == ""  # the arm compared with itself: none
    # the judgement is the evidence's alone: no paper, direction or margin column beside the means
    assert not {"paper", "paper difference", "direction", "margin / seed std"} & set(compared.columns)


def test_rounds_to_target_come_from_the_server_steps(tmp_path):
    from fl_bench.analysis.report import rounds_view

    runs = _runs([("base", 1, 0.9, 100), ("base", 2, 0.9, 120), ("small N", 1, 0.9, 330), ("small N", 2, 0.9, None)])
    table = trips_to_target_table(rounds_view(runs), "base").set_index("method")
    assert table.loc["base", "trips_to_target"] == pytest.approx(110)  # rounds, not the 1,100 trips
    assert pd.isna(table.loc["small N", "trips_to_target"]) and table.loc["small N", "budget"] == 100  # >100 rounds
    assert table.loc["base", "resolution"] == 0  # every round is evaluated


def test_the_accuracy_table_gives_the_median_normal_and_straggler_accuracy_where_runs_recorded_them():
    from fl_bench.analysis.sections import accuracy_markdown, best_accuracy_table

    runs = _runs([("hfl", 1, 0.6, None), ("hfl", 2, 0.6, None), ("hfl", 3, 0.6, None), ("ssgd", 1, 0.8, None)])
    plain = best_accuracy_table(runs, None)
    assert "normal acc" not in plain and "straggler acc" not in plain  # no run has stragglers
    runs["final_val_accuracy_by_group"] = [{"normal": 0.7, "straggler": 0.1}, {"normal": 0.9, "straggler": 0.2},
                                           {"normal": 0.8, "straggler": 0.6}, float("nan")]  # ssgd: speed=none
    table = best_accuracy_table(runs, None).set_index("method")
    assert table.loc["hfl", "normal acc"] == pytest.approx(80.0) and table.loc["hfl", "straggler acc"] == pytest.approx(20.0)
    assert pd.isna(table.loc["ssgd", "normal acc"])
    shown = accuracy_markdown(table.reset_index())
    assert "| normal acc" in shown and "80.00" in shown and "–" in shown
    assert pd.isna(table.loc["hfl", "straggler weight"])  # no run logged step shares
    runs["straggler_step_weight"] = [3.0, 1.0, 2.0, float("nan")]
    table = best_accuracy_table(runs, None).set_index("method")
    assert table.loc["hfl", "straggler weight"] == pytest.approx(2.0) and pd.isna(table.loc["ssgd", "straggler weight"])
