"""The event loop on hand-made schedules (scripted durations, a recording server and trainer),
late uploads, byte counting, and an algorithm added the way a user adds one."""

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fl_bench.algorithms import ServerAlgorithm
from fl_bench.algorithms.buffered import FedBuff, FedBuffConfig
from fl_bench.algorithms.client_state import ClientDict
from fl_bench.algorithms.synchronous import FedAvg, FedAvgConfig
from fl_bench.contracts import Trainer
from fl_bench.engine.availability import AlwaysAvailable
from fl_bench.engine.delays import ClientDelays, Delay
from fl_bench.engine.population import ClientPopulation, IdlePool
from fl_bench.engine.protocol import BufferedAsync, Rounds, build_protocol
from fl_bench.engine.selection import AllAvailableSelection, UniformSelection
from fl_bench.engine.simulator import Simulator
from fl_bench.errors import ConfigError, DivergenceError
from fl_bench.runs.experiment import run_experiment


class ScriptedDelay(Delay):
    """Trip durations in the order trips start."""

    def __init__(self, durations):
        self.durations = list(durations)

    def sample(self, rng, num_examples):
        return self.durations.pop(0)

    def mean(self, num_examples):
        return 1.0


class RecordingTrainer(Trainer):
    """Delta = client id (so uploads can be traced); records each batch it is handed."""

    def __init__(self, vmap=True):
        self.vmap = vmap  # a batching trainer: the simulator hands it every pending trip
        self.batches = []

    def train(self, starts, clients, seeds, out):
        self.batches.append(([float(s.params[0]) for s in starts], list(clients), list(seeds)))
        for row, client in zip(out, clients):
            row.fill_(client)


class RecordingServer(ServerAlgorithm):
    def __init__(self, num_clients=10):
        super().__init__(FedBuffConfig(), torch.zeros(1), num_clients)
        self.received = []  # (server step, client, staleness, start version)

    def add(self, upload):
        assert int(upload.vector[0]) == upload.client  # the upload comes from its client
        self.received.append((self.version, upload.client, upload.staleness, upload.version))

    def _step(self):
        self.params += 1  # the model version is readable from the params


def simulate(policy, durations, *, num_clients=10, max_trips, vmap=True, eval_every=2, selection=UniformSelection):
    evals = []
    population = ClientPopulation(np.full(num_clients, 5),
                                  AlwaysAvailable(SimpleNamespace(name="always", unit="time", on_unavailable="finish"),
                                                  SimpleNamespace(num_clients=num_clients)))
    sim = Simulator(
        server=RecordingServer(num_clients), trainer=RecordingTrainer(vmap), population=population,
        selection=selection(None, population, None),
        delays=ClientDelays([ScriptedDelay(durations)], population.sizes), policy=policy,
        rng=np.random.default_rng(0), max_trips=max_trips, eval_every=eval_every,
        on_eval=lambda p: evals.append(p) and False,
    )
    return sim, sim.run(), evals


def buffered(concurrency, k=1, arrival_rate=1.0):
    return BufferedAsync(concurrency, k, arrival_rate)


def test_async_schedule_order_staleness_and_batching():
    # M = 2, arrivals at t = 0, 1. Trip 0 lasts 5, every later trip 1.
    # t=2 trip1 ends (v0->1), t=3 trip2 (v1->2), t=4 trip3 (v2->3), t=5 trip0 (downloaded v0: tau=3)
    # then trip4 (downloaded v3 at t=4: tau=1), ...
    sim, log, evals = simulate(buffered(2), [5] + [1] * 20, max_trips=6)
    cols = log.columns()
    server = sim.server
    assert sim.trips == 6 and server.version == 6
    assert list(cols["end_time"]) == [2, 3, 4, 5, 5, 6]
    assert list(cols["staleness"]) == [0, 0, 0, 3, 1, 1]
    assert list(cols["download_version"]) == [0, 1, 2, 0, 3, 4]
    assert [s for _, _, s, _ in server.received] == list(cols["staleness"])
    assert [c for _, c, _, _ in server.received] == list(cols["client"])
    assert [v for _, _, _, v in server.received] == list(cols["download_version"])
    # Training is deferred until a step needs an upload, then every started trip trains, each from
    # the version it downloaded (the params equal the version here): t=2 needs trip 1, so trips 0
    # and 1 train from v0; trips 2 and 3 alone; at t=5 trip 0's upload is ready, trip 4 (v3) waits
    # while v3 is snapshotted, then trains with trip 5 (v4) when its own upload is needed.
    assert [(starts, len(clients)) for starts, clients, _ in sim.trainer.batches] == [
        ([0, 0], 2), ([1], 1), ([2], 1), ([3, 4], 2)
    ]
    assert sim.trained == 6  # trip 6, in flight when the budget is reached, is never trained
    by_start = cols["client"][np.argsort(cols["start_time"], kind="stable")]
    assert [c for _, clients, _ in sim.trainer.batches for c in clients] == list(by_start)
    assert [e.trips for e in evals] == [0, 2, 4, 6]


def test_sequential_trainer_trains_only_the_uploads_a_step_needs():
    # The schedule above without batching: each step trains its own arrival, from the version
    # it downloaded; v0 stays snapshotted until trip 0 (started at v0) is used at t=5.
    sim, log, _ = simulate(buffered(2), [5] + [1] * 20, max_trips=6, vmap=False)
    assert [(starts, clients) for starts, clients, _ in sim.trainer.batches] == [
        ([v], [c]) for v, c in zip([0, 1, 2, 0, 3, 4], log.columns()["client"])
    ]
    assert sim.trained == 6


def test_async_concurrency_never_exceeded_and_clients_never_overlap():
    rng = np.random.default_rng(1)
    sim, log, _ = simulate(buffered(4, k=3, arrival_rate=10.0), rng.uniform(0.1, 3.0, 400).tolist(), num_clients=6,
                           max_trips=300)
    cols = log.columns()
    starts, ends = cols["start_time"], cols["end_time"]
    for t in np.unique(starts):
        assert ((starts <= t) & (ends > t)).sum() <= 4
    for c in np.unique(cols["client"]):  # a client never runs two trips at once
        mine = np.argsort(starts[cols["client"] == c])
        s, e = starts[cols["client"] == c][mine], ends[cols["client"] == c][mine]
        assert (s[1:] >= e[:-1]).all()
    assert sim.trips == 300 == len(log)
    assert (cols["staleness"] >= 0).all()


def test_arrivals_ramp_at_constant_rate_then_replace_on_finish():
    sim, log, _ = simulate(buffered(5, k=100, arrival_rate=2.0), [100.0] * 5 + [1.0] * 10, max_trips=6)
    cols = log.columns()
    # five arrivals at rate 2 fill the system; each finish starts a replacement at once
    # trips finish at 100, 100.5, 101 (trip 2 and the replacement started at 100), 101.5, 101.5
    assert sorted(cols["start_time"]) == [0.0, 0.5, 1.0, 1.5, 100.0, 100.5]
    assert sorted(cols["end_time"]) == [100.0, 100.5, 101.0, 101.0, 101.5, 101.5]


def test_round_over_selection_drops_the_slowest_but_counts_them():
    # cohort 2, over-selection 0.5 -> 3 clients a round; durations 3, 1, 2: the 3 is dropped
    sim, log, _ = simulate(Rounds(2, 0.5, None, "drop", False), [3, 1, 2, 1, 1, 4], max_trips=6)
    cols = log.columns()
    assert sim.trips == 6 and sim.server.version == 2
    assert list(cols["used"]) == [1, 1, 0, 1, 1, 0]
    assert list(cols["bytes_up"]) == [4, 4, 0, 4, 4, 0] and (cols["bytes_down"] == 4).all()
    assert sim.now == pytest.approx(2 + 1)  # round 1 closes at its 2nd fastest (2), round 2 at 1
    assert [len(b[1]) for b in sim.trainer.batches] == [2, 2]  # dropped clients are not trained
    assert all(s == 0 for _, _, s, _ in sim.server.received)
    assert len(set(cols["client"][:3])) == 3


def test_deadline_round_delivers_a_straggler_late_with_its_staleness_and_start_version():
    """Rounds of 3 clients with deadline 1; every trip takes 1 except trip 2, a straggler of 3.5
    (tau_max = 3). Rounds r = 0, 1, 2, ... span [r, r + 1); the straggler started in round 0 from
    version 0 arrives at t = 3.5, inside round 3, and reaches the server at round 3's step
    (version 3) with staleness 3. It stays busy meanwhile, so it is never selected twice at once."""
    sim, log, _ = simulate(Rounds(3, 0.0, 1.0, "deliver", False), [1.0, 1.0, 3.5] + [1.0] * 30, num_clients=4,
                           max_trips=11, eval_every=100)
    cols = log.columns()
    straggler = int(cols["client"][np.flatnonzero(cols["end_time"] == 3.5)[0]])
    late = [r for r in sim.server.received if r[1] == straggler and r[3] == 0]
    assert late == [(3, straggler, 3, 0)]  # (server step, client, staleness, start version)
    assert [sum(1 for r in sim.server.received if r[0] == step) for step in range(4)] == [2, 3, 3, 4]
    row = np.flatnonzero(cols["end_time"] == 3.5)[0]
    assert cols["used"][row] == 1 and cols["staleness"][row] == 3 and cols["download_version"][row] == 0
    assert not ((cols["client"] == straggler) & (cols["start_time"] > 0) & (cols["start_time"] < 3.5)).any()
    # With late_uploads=drop the same straggler is aborted at the deadline: a wasted trip.
    sim, log, _ = simulate(Rounds(3, 0.0, 1.0, "drop", False), [1.0, 1.0, 3.5] + [1.0] * 30, num_clients=4,
                           max_trips=6, eval_every=100)
    cols = log.columns()
    assert list(cols["used"][:3]) == [1, 1, 0] and cols["end_time"][2] == 1.0
    assert all(v == s for s, _, _, v in sim.server.received)  # nothing late reaches the server


def test_all_available_rounds_take_every_idle_client_and_wait_for_them_all():
    """HFL's synchronous kernel: each round starts every idle client (a late straggler is still busy)
    and, with no cohort, waits for all of them or the deadline."""
    sim, log, _ = simulate(Rounds(None, 0.0, 1.0, "deliver", True), [0.5, 0.5, 0.5, 2.5] + [0.5] * 30,
                           num_clients=4, max_trips=10, eval_every=100, selection=AllAvailableSelection)
    cols = log.columns()
    started_at = {t: int((cols["start_time"] == t).sum()) for t in np.unique(cols["start_time"])}
    assert started_at == {0.0: 4, 1.0: 3, 1.5: 3, 2.0: 3}  # round 0 closes at its deadline, then every 0.5
    assert [r[0] for r in sim.server.received if r[2] > 0] == [3]  # the straggler (ends 2.5) joins step 3
    assert sim.server.version == 4


def test_impossible_concurrency_is_a_config_error():
    with pytest.raises(ConfigError, match="11 clients training at once but the dataset has 10"):
        simulate(buffered(11), [1] * 5, num_clients=10, max_trips=1)
    with pytest.raises(ConfigError, match="11 clients training at once"):  # 1.3 * 8 = 11 > 10 clients
        simulate(Rounds(8, 0.3, None, "drop", False), [1] * 5, num_clients=10, max_trips=1)


def test_idle_pool_takes_distinct_clients_and_returns_them():
    pool = IdlePool(5)
    rng = np.random.default_rng(0)
    taken = [pool.take(rng) for _ in range(5)]
    assert sorted(taken) == [0, 1, 2, 3, 4] and len(pool) == 0
    pool.add(taken[2])
    assert pool.take(rng) == taken[2]
    pool = IdlePool(5, members=np.array([True, False, True, False, False]))
    assert sorted(pool.members().tolist()) == [0, 2] and 2 in pool and 1 not in pool
    pool.remove(0)
    assert pool.members().tolist() == [2]


def test_fedbuff_counts_model_down_and_delta_up_per_trip(run_config):
    summary, _, trips = run_config("algorithm=fedbuff", "max_trips=200", "eval_every=100", "concurrency=20")
    params = 60 * 64 + 64 + 64 * 10 + 10  # the default MLP on Synthetic(1,1): 60 -> 64 -> 10
    assert (trips.bytes_down == 4 * params).all() and (trips.bytes_up == 4 * params).all()
    assert summary["bytes_down"] + summary["bytes_up"] == 200 * 2 * 4 * params


class LatestAveraging(ServerAlgorithm):
    """A new algorithm written as a user would: keep every client's latest update (per-client
    state) and step with their average, w <- w - mean_i Delta_i^latest, in synchronous rounds."""

    step_policy = Rounds

    def __init__(self, cfg, params, num_clients, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self.latest = ClientDict()

    def add(self, upload):
        self.latest[upload.client] = upload.vector.clone()

    def _step(self):
        self.params -= torch.stack(list(self.latest.rows.values())).mean(0)


def test_a_new_algorithm_is_one_class_and_one_yaml_file(tmp_path, run_config):
    (tmp_path / "conf" / "algorithm").mkdir(parents=True)
    (tmp_path / "conf" / "algorithm" / "latest_avg.yaml").write_text(
        "defaults:\n  - /schema/algorithm@_here_: fedavg\n  - _self_\n"
        "name: latest_avg\n_target_: tests.engine.test_engine.LatestAveraging\nclient_lr: 0.05\n"
    )
    summary, metrics, trips = run_config(f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "algorithm=latest_avg",
                                         "max_trips=400", "eval_every=200", "concurrency=20")
    assert summary["algorithm"] == "latest_avg" and summary["server_steps"] == 20
    params = 60 * 64 + 64 + 64 * 10 + 10
    assert summary["client_state_bytes"] == trips.client.nunique() * params * 4  # one latest update per client seen
    assert metrics.val_accuracy.iloc[-1] > metrics.val_accuracy.iloc[0]


def test_the_step_policy_is_the_algorithms_declaration():
    assert FedAvg.step_policy is Rounds and FedBuff.step_policy is BufferedAsync  # FedAvg subclasses FedBuff
    rounds = build_protocol(FedAvg.step_policy, FedAvgConfig(cohort=5, over_selection=0.2), 100, None, False)
    assert isinstance(rounds, Rounds) and (rounds.cohort, rounds.round_size) == (5, 6)
    buffered = build_protocol(FedBuff.step_policy, FedBuffConfig(), 100, None, False)
    assert isinstance(buffered, BufferedAsync) and buffered.buffer_size == 10
    with pytest.raises(ConfigError, match="selection=all_available is not allowed with algorithm=fedbuff"):
        build_protocol(BufferedAsync, FedBuffConfig(), 100, None, True)
    # rounds over a config without the rounds knobs, and a class that declares no policy: one line each
    with pytest.raises(ConfigError, match="runs under Rounds, whose knobs cohort, over_selection, deadline"):
        build_protocol(Rounds, FedBuffConfig(), 100, None, False)
    with pytest.raises(ConfigError, match="declares no step policy"):
        build_protocol(getattr(ServerAlgorithm, "step_policy", None), FedBuffConfig(), 100, None, False)


def test_a_diverged_run_still_leaves_its_logs_with_its_status(tmp_path, compose_config):
    cfg = compose_config("algorithm.client_lr=1e30", "max_trips=300", "eval_every=100", "concurrency=20")
    with pytest.raises(DivergenceError, match="diverged"):
        run_experiment(cfg, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # the model is checked after every server step: the first step (10 uploads) broke it
    assert summary["status"] == "diverged" and summary["diverged_at_step"] == 1 and summary["client_trips"] == 10
    assert len(pd.read_csv(tmp_path / "run" / "metrics.csv")) == 1  # the initial evaluation
    assert len(pd.read_csv(tmp_path / "run" / "trips.csv")) == 10


def test_a_round_waiting_for_busy_stragglers_starts_when_one_returns():
    """Every trip outlasts the deadline: round 0 closes with nothing in and no idle client is left;
    the next round starts as soon as a late trip frees its client (not 'stuck')."""
    sim, log, _ = simulate(Rounds(None, 0.0, 0.5, "deliver", True), [1.0] * 60, num_clients=3, max_trips=12,
                           eval_every=100, selection=AllAvailableSelection)
    cols = log.columns()
    assert sim.trips >= 12 and sim.server.version >= 1
    assert (cols["used"] == 1).all() and (cols["staleness"][:3] == 0).all()
    assert sorted(set(cols["start_time"]))[:2] == [0.0, 1.0]  # the second round starts when the stragglers return
