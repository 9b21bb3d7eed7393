"""Checkpoint and exact resume: a run killed at a random point and resumed ends bit for bit where the
uninterrupted run ends (final model, metrics.csv, trips.csv)."""

import json
import os
import random
import struct
import subprocess
import sys
import zipfile

import pytest
import torch

from fl_bench.errors import ConfigError, DivergenceError
from fl_bench.runs.checkpoint import CHECKPOINT, load_verified, save_verified, sha256
from fl_bench.runs.experiment import Run, run_experiment
from fl_bench.runs.run_dir import RunDirectory
from tests.conftest import compose_run_config

pytestmark = pytest.mark.slow  # runs killed and resumed against uninterrupted ones

WORKLOAD = ("max_trips=1200", "eval_every=200", "concurrency=50")


def assert_same_run(a, b):
    assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
    assert (a / "trips.csv").read_bytes() == (b / "trips.csv").read_bytes()
    model_a, model_b = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert model_a.keys() == model_b.keys() and all(torch.equal(model_a[k], model_b[k]) for k in model_a)


# One algorithm through a real SIGKILL (a subprocess costs seconds of start-up: the run killed is the
# only one in its own process); every algorithm's state is covered bit for bit by the in-process kill below.
@pytest.mark.parametrize("algorithm", ["fedbuff"])
def test_a_run_killed_with_sigkill_at_a_random_point_and_resumed_ends_identical(tmp_path, algorithm, cli_in_process):
    overrides = ["progress=false", f"algorithm={algorithm}", "max_trips=2000", "eval_every=100", "checkpoint_every=2"]
    assert cli_in_process(*overrides, f"hydra.run.dir={tmp_path / 'whole'}", cwd=tmp_path)[0] == 0
    killed = tmp_path / "killed"
    # A random point, the same on every run of this test: after this many evaluations were written.
    evaluations = random.Random(algorithm).randint(3, 15)
    command = [sys.executable, "-m", "fl_bench", *overrides, f"hydra.run.dir={killed}"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = killed / "metrics.csv"
    while process.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) > evaluations and (killed / CHECKPOINT).exists():
            process.kill()  # SIGKILL: nothing runs after it
        try:
            process.wait(timeout=0.02)
        except subprocess.TimeoutExpired:
            pass
    assert process.returncode == -9 and not (killed / "summary.json").exists()
    status, output = cli_in_process(*overrides, f"hydra.run.dir={killed}", cwd=tmp_path)  # the same command again
    assert status == 0, output
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["status"] == "completed" and 0 < summary["resumed_at_trips"][0] < 2000
    assert not (killed / CHECKPOINT).exists()  # a finished run keeps no checkpoint
    assert_same_run(tmp_path / "whole", killed)


UNRELIABLE = ("behaviour=unreliable", "behaviour.failure_rate=0.3", "behaviour.bandwidth=2e5", "behaviour.bandwidth_sigma=1")


class Killed(BaseException):
    """Stands in for SIGKILL in-process: nothing catches it."""


@pytest.mark.parametrize("overrides", [
    ("algorithm=fedbuff", "vmap_clients=false"),  # one trip at a time (auto batches this MLP)
    ("algorithm=fedbuff", "vmap_clients=true"),
    ("algorithm=fedasync", "checkpoint_every=25"),  # a server step per trip
    ("algorithm=fedavg", "algorithm.over_selection=0.3"),
    ("algorithm=fedprox", "algorithm.deadline=1.0", "algorithm.late_uploads=deliver"),
    ("experiment=hfl_convex_smoke", "max_rounds=40", "eval_every=200"),  # past models, stragglers' late uploads
    ("experiment=fedstaleweight_fig2_smoke", "concurrency=15", "max_rounds=120", "eval_every=100"),  # per-client staleness EMAs
    ("experiment=fedlaavg_table2_smoke", "algorithm=fedlaavg", "concurrency=10", "max_trips=400", "eval_every=20",
     "algorithm.lr_decay=0.99"),  # the N x P gradient table, longest-absent selection, diurnal availability
    ("experiment=fedlaavg_table2_smoke", "algorithm=fedlaavg", "concurrency=10", "max_trips=400", "eval_every=20",
     "algorithm.gradient=mean_step"),  # the other reading of App. E's gradient (each client's Q_i)
    ("experiment=hfl_shared_smoke", "max_rounds=30", "eval_every=200", "algorithm.straggler_weights=global",
     "algorithm.kernel_only_until_tau_max=true"),  # HFL's other readings of eq. 9's p_i and eq. 4
    ("experiment=hfl_shared_smoke", "max_rounds=30", "eval_every=200", "algorithm.lambda_schedule=since_merge",
     "dataset.num_centres=10"),  # each straggler's last merge round (eq. 8 read so), the shared input centres
    ("algorithm=fedbuff", "dp=ftrl", "dp.noise_multiplier=0.5", "dp.restart_every=7",
     "dp.max_participations=2"),  # the tree's nodes, the noise RNG, each client's uploads and the discarded ones
    # (400 trips, not 1,200: the checkpoint at every step holds every client's cached update; writing them was most of the time)
    # FedCompass: speed estimates, groups in order, pending T_max timers, the general buffer, clients held for a
    # group, and lost trips (failures) on the way
    ("algorithm=fedcompass", "algorithm.work_schedule.q_min=1", "algorithm.work_schedule.q_max=6", "speed=two_tier",
     "behaviour=unreliable", "behaviour.failure_rate=0.1", "dataset.num_clients=60", "concurrency=30", "max_trips=300",
     "eval_every=100"),
    ("algorithm=ca2fl", "max_trips=400"),  # every client's cached update and their mean h_t
    ("algorithm=ca2fl", "algorithm.cache_mean_over=seen", "max_trips=400"),  # and the count of clients seen before a step
    ("algorithm=fadas", "algorithm.delay_rule=divide",
     "algorithm.server_optimizer.bias_correction=true"),  # AMSGrad's m, v, vhat and step count; delay-adaptive rates
    ("algorithm=fedgbo", "algorithm.optimizer=adam", "max_trips=400", "concurrency=20", "eval_every=100"),  # the global statistics s_t in every broadcast
    ("algorithm=mfl", "vmap_clients=true", "concurrency=10"),  # statistics uploaded and averaged
    ("algorithm=mimexlite", "concurrency=10", "max_trips=300", "eval_every=100"),  # uploaded gradients
    ("algorithm=fedavgm", "algorithm/server_optimizer=adam", "model=cnn4", "dataset=digits", "partition=iid",
     "partition.num_clients=100", "concurrency=10", "max_trips=300", "eval_every=50"),
    # failures and bandwidths drawn from the behaviour's own generator (fl_bench.engine.behaviour)
    ("algorithm=fedbuff", *UNRELIABLE),
    ("algorithm=fedavg", "algorithm.deadline=1.0", *UNRELIABLE, "behaviour.work_deadline=0.7",
     "algorithm.step_normalisation=fednova"),  # partial work, FedNova's step sums
    ("algorithm=fedbuff", *UNRELIABLE, "behaviour.outages=[{labels: [0, 1, 2], start: 0.5, end: 2.0}]",
     "behaviour.server_bandwidth=1e6", "behaviour.failure_hazard=0.2"),  # a shared link's phases and state
], ids=lambda o: "-".join(o))
def test_every_algorithm_resumes_bit_for_bit_from_any_checkpoint(tmp_path, monkeypatch, overrides):
    cfg = compose_run_config(*WORKLOAD, "checkpoint_every=1", *overrides)
    run_experiment(cfg, tmp_path / "whole")
    written = []
    stop_after = random.Random(str(overrides)).randint(2, 12)  # checkpoints before the "kill"
    checkpoint = Run.checkpoint

    def checkpoint_then_die(self):
        checkpoint(self)
        written.append(self.exp.server.version)
        if len(written) == stop_after:
            raise Killed

    monkeypatch.setattr(Run, "checkpoint", checkpoint_then_die)
    with pytest.raises(Killed):
        run_experiment(cfg, tmp_path / "killed")
    monkeypatch.setattr(Run, "checkpoint", checkpoint)
    summary = run_experiment(cfg, tmp_path / "killed")
    assert summary["resumed_at_trips"] and summary["status"] == "completed"
    assert_same_run(tmp_path / "whole", tmp_path / "killed")


def test_a_checkpoint_of_another_config_is_refused_and_resume_false_starts_over(tmp_path, monkeypatch):
    monkeypatch.setattr(Run, "execute", lambda self, checkpoint: {"status": "completed",  # stop before running
                                                                 "resumed": checkpoint is not None})
    cfg = compose_run_config(*WORKLOAD)
    from fl_bench.runs.checkpoint import save_checkpoint
    from fl_bench.runs.experiment import result_config

    save_checkpoint(tmp_path / CHECKPOINT, result_config(cfg), {}, {})
    other = compose_run_config(*WORKLOAD, "algorithm.client_lr=0.5")
    with pytest.raises(ConfigError, match=r"another config \(algorithm.client_lr: [\d.]+ -> 0.5\)"):
        run_experiment(other, tmp_path)
    assert run_experiment(compose_run_config(*WORKLOAD, "progress=true"), tmp_path)["resumed"]  # display keys may change
    assert not run_experiment(compose_run_config(*WORKLOAD, "algorithm.client_lr=0.5", "resume=false"), tmp_path)["resumed"]
    with pytest.raises(ConfigError, match="resume=true but .* holds no checkpoint.pt"):
        run_experiment(compose_run_config(*WORKLOAD, "resume=true"), tmp_path / "empty")


def test_a_finished_run_is_not_run_again_and_a_held_directory_is_refused(tmp_path, cli_in_process):
    run_dir = tmp_path / "run"
    code, _ = cli_in_process("progress=false", "max_trips=200", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert code == 0
    metrics = (run_dir / "metrics.csv").read_bytes()
    code, out = cli_in_process("progress=false", "max_trips=200", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert code == 0 and "already holds this run (completed): nothing to do" in out
    assert (run_dir / "metrics.csv").read_bytes() == metrics
    with RunDirectory(run_dir).locked():  # a run holds it
        code, out = cli_in_process("progress=false", "max_trips=300", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert code == 1 and out.count("\n") == 1
    assert f"run directory {run_dir} is in use by pid " in out
    assert (run_dir / "metrics.csv").read_bytes() == metrics  # untouched, its config too
    assert "max_trips: 200" in (run_dir / ".hydra" / "config.yaml").read_text()
    code, out = cli_in_process("progress=false", "max_trips=300", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert code == 0 and "held a finished run (completed): replaced by this run" in out
    assert not (run_dir / ".replaced").exists()
    assert json.loads((run_dir / "summary.json").read_text())["client_trips"] == 300


def _killed_after_checkpoints(cfg, run_dir, monkeypatch, count=3):
    """Run ``cfg`` in ``run_dir`` until it has written ``count`` checkpoints, then 'kill' it."""
    checkpoint, written = Run.checkpoint, []

    def checkpoint_then_die(self):
        checkpoint(self)
        written.append(1)
        if len(written) == count:
            raise Killed

    monkeypatch.setattr(Run, "checkpoint", checkpoint_then_die)
    with pytest.raises(Killed):
        run_experiment(cfg, run_dir)
    monkeypatch.setattr(Run, "checkpoint", checkpoint)


def _flip_bytes_inside_a_tensor(path):
    """Invert 8 bytes in the middle of the checkpoint's largest tensor record."""
    with zipfile.ZipFile(path) as archive:
        record = max((r for r in archive.infolist() if "/data/" in r.filename), key=lambda r: r.file_size)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[record.header_offset + 26:record.header_offset + 30])
    middle = record.header_offset + 30 + name_length + extra_length + record.file_size // 2
    data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
    path.write_bytes(bytes(data))


def test_a_checkpoint_damaged_inside_a_tensor_is_refused_with_one_line_and_no_run(tmp_path, monkeypatch, cli_in_process):
    overrides = ("progress=false", *WORKLOAD, "checkpoint_every=5")
    run_dir = tmp_path / "run"
    _killed_after_checkpoints(compose_run_config(*overrides), run_dir, monkeypatch)
    checkpoint = run_dir / CHECKPOINT
    assert (run_dir / "checkpoint.pt.sha256").read_text().split() == [sha256(checkpoint), CHECKPOINT]
    _flip_bytes_inside_a_tensor(checkpoint)
    torch.load(checkpoint, weights_only=False)  # torch itself loads it without complaint
    before = {name: (run_dir / name).read_bytes() for name in ("metrics.csv", "trips.csv", "summary.json")}
    code, out = cli_in_process(*overrides, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert code == 1 and out.count("\n") == 1, out
    assert out.startswith(f"fl_bench: error: {checkpoint} is damaged: its SHA-256 does not match checkpoint.pt.sha256")
    assert "run with resume=false to start over" in out
    assert all((run_dir / name).read_bytes() == data for name, data in before.items())  # no run


def test_a_checkpoint_without_its_digest_file_is_refused(tmp_path, monkeypatch):
    cfg = compose_run_config(*WORKLOAD, "checkpoint_every=5")
    _killed_after_checkpoints(cfg, tmp_path, monkeypatch, count=1)
    (tmp_path / "checkpoint.pt.sha256").unlink()
    with pytest.raises(ConfigError, match="checkpoint.pt has no checkpoint.pt.sha256 to verify it against"):
        run_experiment(cfg, tmp_path)


@pytest.mark.parametrize("killed_at_rename", [2, 3])
def test_a_save_killed_between_its_renames_leaves_a_file_its_digest_vouches_for(tmp_path, monkeypatch, killed_at_rename):
    """save_verified renames three times: the digest file listing old and new, the file, the digest
    file listing the new one. A kill before the 2nd leaves the old file, before the 3rd the new one."""
    path = tmp_path / "model.pt"
    save_verified({"w": torch.zeros(3)}, path)
    renames, replace = [], os.replace

    def replace_or_die(source, target):
        renames.append(target)
        if len(renames) == killed_at_rename:
            raise Killed
        replace(source, target)

    monkeypatch.setattr(os, "replace", replace_or_die)
    with pytest.raises(Killed):
        save_verified({"w": torch.ones(3)}, path)
    monkeypatch.setattr(os, "replace", replace)
    expected = torch.zeros(3) if killed_at_rename == 2 else torch.ones(3)
    assert torch.equal(load_verified(path)["w"], expected)


def test_the_final_model_is_saved_with_its_digest_and_verified_on_load(tmp_path):
    run_experiment(compose_run_config(*WORKLOAD), tmp_path)
    model = tmp_path / "model.pt"
    assert (tmp_path / "model.pt.sha256").read_text() == f"{sha256(model)}  model.pt\n"  # sha256sum -c reads it
    assert load_verified(model).keys() == torch.load(model).keys()
    assert not (tmp_path / "checkpoint.pt.sha256").exists()  # a finished run keeps no checkpoint
    _flip_bytes_inside_a_tensor(model)
    with pytest.raises(ConfigError, match="model.pt is damaged: its SHA-256 does not match model.pt.sha256"):
        load_verified(model)


def test_a_divergence_right_after_a_resume_names_the_checkpoint_as_a_suspect(tmp_path, monkeypatch):
    cfg = compose_run_config(*WORKLOAD, "checkpoint_every=5")
    _killed_after_checkpoints(cfg, tmp_path, monkeypatch)
    restore = Run.restore

    def restore_a_damaged_state(self, state):  # as a checkpoint written from damaged memory would be
        restore(self, state)
        self.exp.server.params.fill_(float("nan"))

    monkeypatch.setattr(Run, "restore", restore_a_damaged_state)
    with pytest.raises(DivergenceError, match=r"this run went on from checkpoint.pt at trips \d+ and diverged before its "
                                              r"first evaluation since: suspect the checkpoint .* else lower algorithm.client_lr"):
        run_experiment(cfg, tmp_path)


def test_a_checkpoint_without_callback_states_is_refused_with_one_line(tmp_path, compose_config):
    run = Run(compose_config(*WORKLOAD), tmp_path, {})
    with pytest.raises(ConfigError, match="written by an older fl_bench.*resume=false"):
        run.restore({"run": {"reached": {}, "rows": []}, "simulator": {}, "rng": {}})
