"""Sweeps across cores and machines: the Optuna sweeper with Hydra's joblib and submitit launchers,
and one study shared by invocations running at once on PostgreSQL."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from hydra_plugins.fl_bench_optuna.optuna_sweeper import open_study
from tests.runs.test_cli import fl_bench

pytestmark = pytest.mark.slow  # SLURM and PostgreSQL sweeps

TINY = ["hparams_search=fedbuff_synthetic", "max_trips=300", "eval_every=100", "concurrency=20",
        "target_accuracy=0.12", "progress=false"]


def complete_trials(study_name, storage):
    trials = optuna.load_study(study_name=study_name, storage=storage).trials
    assert all(t.state.name == "COMPLETE" for t in trials), [t.state.name for t in trials]
    return trials


def test_joblib_launcher_runs_each_batch_of_trials_together(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    result = fl_bench("-m", *TINY, "hydra/launcher=local_cores", "hydra.launcher.n_jobs=2", "hydra.sweeper.n_jobs=2",
                      "hydra.sweeper.n_trials=4", f"hydra.sweeper.storage={storage}",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (result.stdout + result.stderr).count("Joblib.Parallel(n_jobs=2") == 2  # two batches of two trials
    trials = complete_trials("fedbuff_synthetic", storage)
    assert [t.number for t in trials] == [0, 1, 2, 3]
    # each trial's run directory is its own (hydra.job.num = trial number), and the study records it
    assert [[Path(d).name for d in t.user_attrs["run_dirs"]] for t in trials] == [[f"{n}_fedbuff_seed0"] for n in range(4)]
    assert all((Path(d) / "summary.json").exists() for t in trials for d in t.user_attrs["run_dirs"])


def test_slurm_launcher_config_extends_the_submitit_schema():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    from fl_bench.runs.cli import CONFIG_DIR

    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", return_hydra_config=True, overrides=[
            "hparams_search=fedbuff_synthetic", "hydra/launcher=slurm", "hydra.launcher.partition=gpu",
            "hydra.launcher.gpus_per_node=1", "+hydra.launcher.additional_parameters.mail-type=END",
            "hydra.sweeper.n_jobs=8"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.partition, launcher.gpus_per_node, launcher.timeout_min) == ("gpu", 1, 240)
    assert launcher.cpus_per_task and launcher.mem_gb and launcher.array_parallelism
    assert launcher.additional_parameters == {"mail-type": "END"}
    assert cfg.hydra.sweeper.n_jobs == 8
    # the plugin's schema still checks the keys: a misspelt field is an error, not a silent no-op
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"), pytest.raises(ConfigCompositionException, match="parition"):
        compose("config", return_hydra_config=True, overrides=["hydra/launcher=slurm", "hydra.launcher.parition=gpu"])


def postgres_bin_dir():
    """The directory of initdb, pg_ctl and postgres: on PATH, else Debian's versioned directory."""
    on_path = shutil.which("postgres")
    candidates = [Path(on_path).parent] if on_path else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    return next((d for d in candidates if all((d / name).exists() for name in ("initdb", "pg_ctl", "postgres"))), None)


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    """A throw-away PostgreSQL server on localhost (trust auth); yields a function that creates a
    fresh database and returns its SQLAlchemy URL."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (Debian: apt-get install postgresql)")
    # postgres refuses to run as root: run the server as the postgres user, in a directory it owns
    # (tmp_path is inside root's 0700 directory, so a fresh /tmp directory instead)
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    base = Path(tempfile.mkdtemp(prefix="fl_bench_pg_"))
    if as_owner:
        shutil.chown(base, "postgres", "postgres")
    data, port = base / "data", free_port()
    url = f"postgresql+psycopg2://postgres@localhost:{port}"

    def run(*cmd):
        return subprocess.run([*as_owner, *cmd], check=True, capture_output=True, text=True, timeout=120)

    try:
        run(bin_dir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
        run(bin_dir / "pg_ctl", "-D", data, "-l", base / "server.log", "-w", "start", "-o",
            f"-p {port} -k {base} -c listen_addresses=localhost -c fsync=off")
    except subprocess.CalledProcessError as error:
        log = (base / "server.log").read_text() if (base / "server.log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {error.stderr}{log}") from error

    def new_database(name):
        engine = sqlalchemy.create_engine(f"{url}/postgres", isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
        engine.dispose()
        return f"{url}/{name}"

    try:
        yield new_database
    finally:
        subprocess.run([*as_owner, bin_dir / "pg_ctl", "-D", data, "stop", "-m", "immediate"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def test_invocations_racing_to_create_tables_and_study_on_a_fresh_database_all_get_it(postgres):
    storage = postgres("race")
    barrier, studies, errors = threading.Barrier(4), [], []

    def open_together():
        barrier.wait()
        try:
            studies.append(open_study(study_name="race", storage=storage))
        except Exception as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=open_together) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(studies) == 4
    assert {s._study_id for s in studies} == {studies[0]._study_id}


def test_two_invocations_at_once_add_distinct_trials_to_one_postgresql_study(postgres, tmp_path):
    storage = postgres("shared")
    # each invocation has its own seed: with one seed both would propose the same random startup trials;
    # one torch thread each, as two processes share the 2 cores (more threads thrash: ~10x slower)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "fl_bench", "-m", *TINY, f"hydra.sweeper.storage={storage}", "hydra.sweeper.n_trials=2",
         f"hydra.sweeper.seed={seed}", f"hydra.sweep.dir={tmp_path / f'sweep{seed}'}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}) for seed in (1, 2)]
    stderrs = [proc.communicate(timeout=300)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], stderrs
    trials = complete_trials("fedbuff_synthetic", storage)
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 4
    assert all(0 <= t.value <= 300 for t in trials)
