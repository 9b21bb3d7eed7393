"""The discrete-event orchestrator on hand-made schedules (scripted durations, recording server)."""

import numpy as np
import pytest
import torch

from fl_bench.algorithms import ServerAlgorithm
from fl_bench.config import FedBuffConfig
from fl_bench.delays import Delay
from fl_bench.errors import ConfigError
from fl_bench.orchestrator import IdlePool, Orchestrator


class ScriptedDelay(Delay):
    """Trip durations in the order trips start."""

    def __init__(self, durations):
        self.durations = list(durations)
        self.calls = 0

    def sample(self, rng, num_examples):
        self.calls += 1
        return self.durations.pop(0)

    def mean(self, mean_examples):
        return 1.0


class RecordingTrainer:
    """Delta = client id (so uploads can be traced); records each batch it is handed."""

    def __init__(self, vmap=True):
        self.vmap = vmap  # a batching trainer: the orchestrator hands it every pending trip
        self.batches = []

    def train(self, starts, clients, seeds, out):
        self.batches.append(([float(s[0]) for s in starts], list(clients), list(seeds)))
        for row, client in zip(out, clients):
            row.fill_(client)


class RecordingServer(ServerAlgorithm):
    def __init__(self, buffer_size=1, synchronous=False):
        super().__init__(FedBuffConfig(), torch.zeros(1), buffer_size)
        self.synchronous = synchronous
        self.received = []

    def add(self, update, num_examples, staleness):
        self.received.append((int(update[0]), staleness))

    def _step(self):
        self.params += 1  # the model version is readable from the params


def orchestrate(server, durations, *, concurrency, num_clients=10, max_trips, arrival_rate=1.0, over_selection=0.0,
                vmap=True):
    evals = []
    orch = Orchestrator(
        server=server, trainer=RecordingTrainer(vmap), client_sizes=np.full(num_clients, 5), delay=ScriptedDelay(durations),
        concurrency=concurrency, rng=np.random.default_rng(0), max_trips=max_trips, eval_every=2,
        on_eval=lambda p: evals.append(p) and False, arrival_rate=arrival_rate, over_selection=over_selection,
    )
    return orch, orch.run(), evals


def test_async_schedule_order_staleness_and_batching():
    # M = 2, arrivals at t = 0, 1. Trip 0 lasts 5, every later trip 1.
    # t=2 trip1 ends (v0->1), t=3 trip2 (v1->2), t=4 trip3 (v2->3), t=5 trip0 (downloaded v0: tau=3)
    # then trip4 (downloaded v3 at t=4: tau=1), ...
    server = RecordingServer(buffer_size=1)
    orch, log, evals = orchestrate(server, [5] + [1] * 20, concurrency=2, max_trips=6)
    cols = log.columns()
    assert orch.trips == 6 and server.version == 6
    assert list(cols["end_time"]) == [2, 3, 4, 5, 5, 6]
    assert list(cols["staleness"]) == [0, 0, 0, 3, 1, 1]
    assert list(cols["download_version"]) == [0, 1, 2, 0, 3, 4]
    assert [s for _, s in server.received] == list(cols["staleness"])
    # uploads reach the server from the right client
    assert [c for c, _ in server.received] == list(cols["client"])
    # Training is deferred until a step needs an upload, then every started trip trains, each from
    # the version it downloaded (the params equal the version here): t=2 needs trip 1, so trips 0
    # and 1 train from v0; trips 2 and 3 alone; at t=5 trip 0's upload is ready, trip 4 (v3) waits
    # while v3 is snapshotted, then trains with trip 5 (v4) when its own upload is needed.
    assert [(starts, len(clients)) for starts, clients, _ in orch.trainer.batches] == [
        ([0, 0], 2), ([1], 1), ([2], 1), ([3, 4], 2)
    ]
    assert orch.trained == 6  # trip 6, in flight when the budget is reached, is never trained
    by_start = cols["client"][np.argsort(cols["start_time"], kind="stable")]
    assert [c for _, clients, _ in orch.trainer.batches for c in clients] == list(by_start)
    assert [e.trips for e in evals] == [0, 2, 4, 6]


def test_sequential_trainer_trains_only_the_uploads_a_step_needs():
    # The schedule above without batching: each step trains its own arrival, from the version
    # it downloaded; v0 stays snapshotted until trip 0 (started at v0) is used at t=5.
    server = RecordingServer(buffer_size=1)
    orch, log, _ = orchestrate(server, [5] + [1] * 20, concurrency=2, max_trips=6, vmap=False)
    assert [(starts, clients) for starts, clients, _ in orch.trainer.batches] == [
        ([v], [c]) for v, c in zip([0, 1, 2, 0, 3, 4], log.columns()["client"])
    ]
    assert orch.trained == 6


def test_async_concurrency_never_exceeded_and_clients_never_overlap():
    rng = np.random.default_rng(1)
    server = RecordingServer(buffer_size=3)
    orch, log, _ = orchestrate(server, rng.uniform(0.1, 3.0, 400).tolist(), concurrency=4, num_clients=6,
                               max_trips=300, arrival_rate=10.0)
    cols = log.columns()
    starts, ends = cols["start_time"], cols["end_time"]
    for t in np.unique(starts):
        assert ((starts <= t) & (ends > t)).sum() <= 4
    for c in np.unique(cols["client"]):  # a client never runs two trips at once
        mine = np.argsort(starts[cols["client"] == c])
        s, e = starts[cols["client"] == c][mine], ends[cols["client"] == c][mine]
        assert (s[1:] >= e[:-1]).all()
    assert orch.trips == 300 == len(log)
    # staleness = server steps between download and use
    assert (cols["staleness"] >= 0).all()


def test_arrivals_ramp_at_constant_rate_then_replace_on_finish():
    server = RecordingServer(buffer_size=100)
    orch, log, _ = orchestrate(server, [100.0] * 5 + [1.0] * 10, concurrency=5, max_trips=6, arrival_rate=2.0)
    cols = log.columns()
    # five arrivals at rate 2 fill the system; each finish starts a replacement at once
    # trips finish at 100, 100.5, 101 (trip 2 and the replacement started at 100), 101.5, 101.5
    assert sorted(cols["start_time"]) == [0.0, 0.5, 1.0, 1.5, 100.0, 100.5]
    assert sorted(cols["end_time"]) == [100.0, 100.5, 101.0, 101.0, 101.5, 101.5]


def test_sync_over_selection_drops_the_slowest_but_counts_them():
    # cohort 2, over-selection 0.5 -> 3 clients a round; durations 3, 1, 2: the 3 is dropped
    server = RecordingServer(buffer_size=2, synchronous=True)
    orch, log, _ = orchestrate(server, [3, 1, 2, 1, 1, 4], concurrency=2, max_trips=6, over_selection=0.5)
    cols = log.columns()
    assert orch.trips == 6 and server.version == 2
    assert list(cols["used"]) == [1, 1, 0, 1, 1, 0]
    assert orch.now == pytest.approx(2 + 1)  # round 1 closes at its 2nd fastest (2), round 2 at 1
    assert [len(b[1]) for b in orch.trainer.batches] == [2, 2]  # dropped clients are not trained
    assert all(s == 0 for _, s in server.received)
    clients_round1 = list(cols["client"][:3])
    assert len(set(clients_round1)) == 3


def test_impossible_concurrency_is_a_config_error():
    with pytest.raises(ConfigError, match="concurrency=11"):
        orchestrate(RecordingServer(), [1] * 5, concurrency=11, num_clients=10, max_trips=1)
    with pytest.raises(ConfigError, match="concurrency=8"):  # 1.3 * 8 = 11 > 10 clients
        orchestrate(RecordingServer(synchronous=True), [1] * 5, concurrency=8, num_clients=10, max_trips=1,
                    over_selection=0.3)


def test_idle_pool_takes_distinct_clients_and_returns_them():
    pool = IdlePool(5, np.random.default_rng(0))
    taken = [pool.take() for _ in range(5)]
    assert sorted(taken) == [0, 1, 2, 3, 4] and len(pool) == 0
    pool.put(taken[2])
    assert pool.take() == taken[2]
