"""A run is a result only once it finished: summary.json is written last and vouches for every file the
run wrote; a run whose writing fails part-way is no result and leaves an earlier run in its directory whole."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from fl_bench.errors import ResultNotWritten
from fl_bench.runs import experiment
from fl_bench.runs.experiment import run_experiment
from fl_bench.runs.run_dir import finished_summary, unfinished

pytestmark = pytest.mark.slow  # end-to-end runs
RUN = ("max_trips=40", "eval_every=20")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run's directory (each test works on a copy)."""
    from conftest import compose_run_config

    run_dir = tmp_path_factory.mktemp("finished") / "run"
    summary = run_experiment(compose_run_config(*RUN), run_dir)
    assert set(summary["files"]) >= {"metrics.csv", "trips.csv", "model.pt", "model.pt.sha256"}
    return run_dir


def _digests(directory):
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_a_run_whose_model_cannot_be_written_is_no_result_and_the_earlier_run_stays(tmp_path, finished, compose_config,
                                                                                     monkeypatch):
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    assert unfinished(run_dir) is None and finished_summary(run_dir)["status"] == "completed"
    before = _digests(run_dir)

    real = experiment.save_verified

    def full(obj, path):  # the disk fills while the final model is written
        if path.name == "model.pt":
            raise OSError(28, "No space left on device")
        return real(obj, path)

    monkeypatch.setattr(experiment, "save_verified", full)
    with pytest.raises(ResultNotWritten, match=f"cannot write {run_dir / 'model.pt'}: No space left on device; "
                                               "the run is not finished"):
        run_experiment(compose_config(*RUN, "algorithm.client_lr=0.3"), run_dir)  # another config: replaces the run
    assert _digests(run_dir) == before  # the earlier run came back whole
    assert not (run_dir / ".replaced").exists()

    fresh = tmp_path / "fresh"  # no earlier run: the failed one stays, unfinished, and the same command redoes it
    with pytest.raises(ResultNotWritten):
        run_experiment(compose_config(*RUN), fresh)
    assert unfinished(fresh) is not None
    monkeypatch.setattr(experiment, "save_verified", real)
    assert run_experiment(compose_config(*RUN), fresh)["status"] == "completed" and unfinished(fresh) is None


def test_a_finished_run_whose_files_changed_since_is_no_result(tmp_path, finished):
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())

    trips = (run_dir / "trips.csv").read_bytes()
    (run_dir / "trips.csv").write_bytes(trips[: len(trips) // 2])  # cut short (a copy that stopped part-way)
    assert unfinished(run_dir) == f"trips.csv has {len(trips) // 2} bytes, not the {len(trips)} it was written with"
    (run_dir / "trips.csv").write_bytes(trips)

    model = (run_dir / "model.pt").read_bytes()
    (run_dir / "model.pt").write_bytes(model[:-1] + bytes([model[-1] ^ 1]))  # one bit flipped
    assert unfinished(run_dir) == "model.pt does not match its digest"
    (run_dir / "model.pt").unlink()
    assert unfinished(run_dir) == "model.pt is missing"

    for status in ("interrupted", "failed", "pruned"):
        (run_dir / "summary.json").write_text(json.dumps({**summary, "status": status}))
        assert unfinished(run_dir) == f"status {status}"
    (run_dir / "summary.json").write_text(json.dumps({key: v for key, v in summary.items() if key != "files"}))
    assert "lists no files" in unfinished(run_dir)


def test_a_failed_run_keeps_the_first_line_of_its_error_in_its_summary(tmp_path, compose_config, monkeypatch):
    def broken(self, p):
        raise ValueError("the evaluation broke\nsecond line")

    monkeypatch.setattr(experiment.Run, "on_eval", broken)
    with pytest.raises(ValueError):
        run_experiment(compose_config(*RUN), tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == "ValueError: the evaluation broke"
    assert unfinished(tmp_path / "run") == "status failed"


def test_a_run_that_ends_worse_than_a_completed_one_never_takes_its_place(tmp_path, finished, compose_config, monkeypatch):
    """Each way a run can end, into a directory holding another config's completed run: diverged (twice) and
    pruned keep the completed run where it was and go to .diverged/ (.pruned/), the line saying so; failed
    deletes itself and moves it back; interrupted keeps it whole in .replaced/ until the same command,
    resumed, completes, which replaces it."""
    from fl_bench.errors import DivergenceError
    from fl_bench.runs.callbacks import Callback

    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    before = _digests(run_dir)

    def whole() -> bool:
        return {k: v for k, v in _digests(run_dir).items() if not k.startswith((".diverged/", ".pruned/"))} == before

    for attempt in range(2):  # the second attempt's files replace the first's
        with pytest.raises(DivergenceError) as error:
            run_experiment(compose_config(*RUN, "algorithm.server_optimizer.lr=1e30", f"seed={attempt}"), run_dir)
        assert str(error.value).endswith(f"; {run_dir} keeps the completed run it held (another config's), and this "
                                         f"diverged run is in {run_dir / '.diverged'}"), error.value
        assert whole() and not (run_dir / ".replaced").exists()
        kept = json.loads((run_dir / ".diverged" / "summary.json").read_text())
        assert kept["status"] == "diverged" and kept["seed"] == attempt and unfinished(run_dir / ".diverged") is None

    class Prune(Callback):  # the tuner stops the trial at its first evaluation
        def on_evaluation(self, run, progress, row):
            return True

    monkeypatch.setattr(experiment, "final_status", lambda callbacks, status: "pruned")
    assert run_experiment(compose_config(*RUN, "seed=5"), run_dir, callbacks=[Prune()])["status"] == "pruned"
    assert whole() and json.loads((run_dir / ".pruned" / "summary.json").read_text())["status"] == "pruned"
    monkeypatch.undo()

    class Stop(Callback):  # Ctrl-C at the first evaluation after trip 0
        def on_evaluation(self, run, progress, row):
            if progress.trips:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(compose_config(*RUN, "seed=7"), run_dir, callbacks=[Stop()])
    aside = {k.removeprefix(".replaced/"): v for k, v in _digests(run_dir).items() if k.startswith(".replaced/")}
    assert {k: v for k, v in aside.items() if not k.startswith((".diverged/", ".pruned/"))} == before  # whole, aside
    with pytest.raises(ValueError, match="the failure"):  # a failure now: the completed run comes back
        monkeypatch.setattr(experiment.Run, "execute", lambda self, checkpoint: (_ for _ in ()).throw(ValueError("the failure")))
        run_experiment(compose_config(*RUN, "seed=7"), run_dir)
    monkeypatch.undo()
    assert whole() and not (run_dir / ".replaced").exists()
    summary = run_experiment(compose_config(*RUN, "seed=7"), run_dir)  # completed: replaces it, and what stood beside it
    assert summary["status"] == "completed" and summary["seed"] == 7
    assert not any((run_dir / name).exists() for name in (".replaced", ".diverged", ".pruned"))
