"""FedCompass (Li et al., ICLR 2024) on hand-computed schedules: the Compass work schedule's speed estimates,
JoinGroup and CreateGroup, the step policy's group aggregations, T_max timers and general buffer, and the server's
weighted sum, on the event loop with scripted per-step times (every number below is worked out by hand from the
rules in fl_bench/engine/work.py's and fl_bench/algorithms/fedcompass.py's docstrings)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fl_bench.algorithms.fedcompass import FedCompass, FedCompassConfig
from fl_bench.algorithms.server_optimizers import MomentumServerOptimizerConfig, SGDServerOptimizerConfig
from fl_bench.contracts import Trainer
from fl_bench.engine.availability import AlwaysAvailable
from fl_bench.engine.delays import ClientDelays, Delay
from fl_bench.engine.population import ClientPopulation
from fl_bench.engine.protocol import Compass, build_protocol
from fl_bench.engine.selection import UniformSelection
from fl_bench.engine.simulator import Simulator
from fl_bench.algorithms.weightings import PolynomialStalenessConfig
from fl_bench.engine.work import CompassSchedule, CompassScheduleConfig
from fl_bench.errors import ConfigError

R = 2 ** -0.5  # s(1) = (1 + 1)^-0.5


class PerStepDelay(Delay):
    """A client of ``n`` examples takes ``per_step[n]`` per local step: the full work (``full`` steps) takes
    ``full * per_step[n]``; ``slow[(n, k)]`` replaces the per-step time of that client's k-th trip (0-based)."""

    def __init__(self, per_step, full, slow=None):
        self.per_step, self.full, self.slow, self.drawn = per_step, full, slow or {}, {}

    def sample(self, rng, num_examples):
        k = self.drawn.get(num_examples, 0)
        self.drawn[num_examples] = k + 1
        return self.full * self.slow.get((num_examples, k), self.per_step[num_examples])

    def mean(self, num_examples):
        return 1.0


class ConstantUploads(Trainer):
    """Delta = ``deltas[client]`` on every trip, whatever the steps."""

    def __init__(self, deltas):
        self.deltas, self.steps = deltas, []

    def train(self, starts, clients, seeds, out, steps=None):
        self.steps.extend(steps)
        for row, client in zip(out, clients):
            row.fill_(self.deltas[client])


def compass_run(per_step, *, q_min, q_max, latest, max_trips, slow=None, deltas=None, momentum=None, first="min"):
    """Clients 0..N-1 of 1..N examples, all training at once; returns the simulator after ``max_trips`` trips."""
    n = len(per_step)
    sizes = np.arange(1, n + 1)
    cfg = FedCompassConfig(concurrent_clients=n, work_schedule=CompassScheduleConfig(
        q_min=q_min, q_max=q_max, latest_time_factor=latest, first_trip_steps=first),
        staleness=PolynomialStalenessConfig(exponent=0.5),  # s(tau) = (1 + tau)^-0.5, as its YAML chooses
        server_optimizer=SGDServerOptimizerConfig(lr=0.9) if momentum is None else
        MomentumServerOptimizerConfig(lr=0.9, momentum=momentum))
    server = FedCompass(cfg, torch.zeros(1), n, sizes)
    population = ClientPopulation(sizes, AlwaysAvailable(SimpleNamespace(name="always", unit="time", on_unavailable="finish"),
                                                         SimpleNamespace(num_clients=n)))
    law = PerStepDelay(dict(zip(sizes.tolist(), per_step)), q_max, slow)
    sim = Simulator(server=server, trainer=ConstantUploads(deltas or [1.0 + c for c in range(n)]), population=population,
                    selection=UniformSelection(None, population, None), delays=ClientDelays([law], sizes),
                    policy=build_protocol(FedCompass.step_policy, cfg, n, None, False), rng=np.random.default_rng(0),
                    max_trips=max_trips, eval_every=1000, on_eval=lambda p: False,
                    steps_by_client=np.full(n, q_max), work=CompassSchedule(cfg.work_schedule))
    sim.run()
    return sim


def rows(sim, *names):
    """The trip log's rows that are over, as tuples of (end, client, start, *names), sorted by end time, then
    client (trips that end at one time arrive in the order they started, which the selection's order sets)."""
    cols = sim.log.columns()
    keys = ("end_time", "client", "start_time", *names)
    return sorted(zip(*(cols[k].tolist() for k in keys)))


def trips(sim):
    """(client, start, end) of every trip over, by end time, then client."""
    return [(c, s, e) for e, c, s in rows(sim)]


def test_scenario_a_groups_form_from_speeds_and_each_step_is_a_weighted_sum():
    # Per-step times 1, 2, 5; Q_min 2, Q_max 6, lambda 1.2; Delta 1, 2, 3; every step 0.9 * (1/3) s(tau) Delta.
    sim = compass_run([1.0, 2.0, 5.0], q_min=2, q_max=6, latest=1.2, max_trips=15)
    assert trips(sim) == [
        (0, 0, 2), (1, 0, 4),  # first trips of Q_min = 2: single steps; c0 creates g0 (Q_max = 6, T_a 8), c1 joins (Q 2)
        (0, 2, 8), (1, 4, 8),  # g0 complete at 8: c0 creates g1 (Q 6, T_a 14), c1 joins it (Q 3)
        (2, 0, 10),  # c2's first (S = 5): Join floor(4/5) = 0 < Q_min; Create via g1: floor((15.2 + 6 - 10)/5) = 2, T_a 20
        (0, 8, 14), (1, 8, 14),  # g1: c0 joins g2 with floor(6/1) = 6, c1 with floor(6/2) = 3
        (0, 14, 20), (1, 14, 20), (2, 10, 20),  # g2: c0 creates g3 (Q 6), c1 joins (3); c2 creates g4 (Q 2, T_a 30)
        (0, 20, 26), (1, 20, 26),  # g3: c0 joins g4 with floor(4/1) = 4, c1 with floor(4/2) = 2
        (0, 26, 30), (1, 26, 30), (2, 20, 30)]
    assert sim.server.version == 8
    staleness = [r[3] for r in rows(sim, "staleness", "weight")]
    weights = [r[4] for r in rows(sim, "staleness", "weight")]
    assert staleness == [0, 1, 1, 0, 3, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1]
    expected = [1, R, R, 1, 0.5, R, R, 1, 1, R, 1, 1, 1, 1, R]  # s(tau): each upload's weight is p s(tau) = s / 3
    assert np.allclose(weights, [s / 3 for s in expected])
    # w after the 8 steps: -(0.3 + 0.424264 + 0.812132 + 0.45 + 0.636396 + 1.536396 + 0.9 + 1.536396)
    assert float(sim.server.params) == pytest.approx(-6.595584, abs=1e-6)
    # the steps each trip was given: 2, 2, 6, 2, 2, 6, 3, 2, 6, 3, 6, 3, 2, 4, 2 in start order
    assert sorted(sim.trainer.steps) == sorted([2, 2, 2, 6, 2, 6, 3, 2, 6, 3, 6, 3, 2, 4, 2])


def test_the_step_at_t8_is_the_groups_sum():
    sim = compass_run([1.0, 2.0, 5.0], q_min=2, q_max=6, latest=1.2, max_trips=4)
    # w_3 = w_2 - (0.9 / 3) [(1 + 1)^-0.5 * 1 + (1 + 0)^-0.5 * 2] = -0.724264 - 0.3 (0.707107 + 2)
    assert float(sim.server.params) == pytest.approx(-1.536396, abs=1e-6)


def test_scenario_b_the_timer_steps_without_the_late_member_whose_upload_waits_in_the_general_buffer():
    # As scenario A, but c1's trip from t = 14 (its fourth) runs at 3 per step: its 3 steps end at 23, after g2's
    # T_max = 22 (g2 created at 10 with Q 2 by c2 of S = 5: 10 + 1.2 * 10).
    sim = compass_run([1.0, 2.0, 5.0], q_min=2, q_max=6, latest=1.2, max_trips=14, slow={(2, 3): 3.0})
    ended = trips(sim)
    assert ended[7:] == [
        (0, 14, 20), (2, 10, 20),  # on time for g2, which the T_max timer at 22 aggregates without c1
        (1, 14, 23),  # late: S1 = 0.1 * 2 + 0.9 * 3 = 2.9; joins g4 (T_a 32) with floor(9 / 2.9) = 3 steps
        (0, 22, 28),  # g3 (created by c0 at 22, Q 6) complete: steps on the general buffer (c1) and c0
        (1, 23, 29),  # on time for g4 (its measured 2 per step: S1 = 0.1 * 2.9 + 0.9 * 2 = 2.09)
        (0, 28, 32), (2, 22, 32)]  # g4 complete: c1, c2, c0
    assert sim.work.speed[1] == pytest.approx(2.09)
    # the steps from t = 20 on: v5->6 at 22 on {c2 tau 1, c0 tau 0}; v6->7 at 28 on {c1 tau 1 (downloaded v5), c0};
    # v7->8 at 32 on {c1 tau 1, c2 tau 1, c0 tau 0}
    later = rows(sim, "staleness", "download_version")[7:]
    assert [r[3] for r in later] == [0, 1, 1, 0, 1, 0, 1]  # (the log's staleness is at each trip's end)
    assert [r[4] for r in later] == [5, 4, 5, 6, 6, 7, 6]
    assert sim.server.version == 8
    assert float(sim.server.params) == pytest.approx(-5.644113, abs=1e-6)


def test_figure_1_of_the_paper_with_lambda_1():
    # Five clients at 0.1, 0.2, 0.25, 0.4, 0.5 per step, Q_min 20, Q_max 100, first trips Q_min (Figure 1).
    per_step = [0.1, 0.2, 0.25, 0.4, 0.5]
    sim = compass_run(per_step, q_min=20, q_max=100, latest=1.0, max_trips=18)
    got = [(c, round(s, 9), round(e, 9), round((e - s) / per_step[c])) for c, s, e in trips(sim)]
    assert got == [
        (0, 0, 2, 20), (1, 0, 4, 20), (2, 0, 5, 20), (3, 0, 8, 20), (4, 0, 10, 20),  # first trips of Q_min
        # g1, created by c0 (Q_max); c1, c2 join. c3's floor(4 / 0.4) = 10 < Q_min: it creates g2 (T_a 22); c4 joins
        (0, 2, 12, 100), (1, 4, 12, 40), (2, 5, 12, 28),
        (0, 12, 22, 100), (1, 12, 22, 50), (2, 12, 22, 40), (3, 8, 22, 35), (4, 10, 22, 24),  # g1's join g2 at 12
        (0, 22, 32, 100), (1, 22, 32, 50), (2, 22, 32, 40), (3, 22, 32, 25), (4, 22, 32, 20)]  # c0 creates g3


def test_momentum_is_fedcompass_plus_m():
    # the same group steps through the server optimizer: m <- 0.5 m + g, w <- w - 0.9 m
    plain = compass_run([1.0, 2.0, 5.0], q_min=2, q_max=6, latest=1.2, max_trips=2)
    moving = compass_run([1.0, 2.0, 5.0], q_min=2, q_max=6, latest=1.2, max_trips=2, momentum=0.5)
    g1, g2 = 1 / 3, R * 2 / 3
    assert float(plain.server.params) == pytest.approx(-0.9 * (g1 + g2))
    assert float(moving.server.params) == pytest.approx(-0.9 * (g1 + (0.5 * g1 + g2)))


def test_first_trips_of_q_max_as_the_released_configs():
    # first trips of Q_max = 6: c0 at 6 (single; g0 Q 6, T_a 12), c1 at 12 (single, tau 1; Create via g0:
    # floor((13.2 + 6 - 12) / 2) = 3, T_a 18), and c0 arrives on time at 12 too: g0 steps with it alone
    # (c1's first trip started before c0's second, so it arrives first at 12), then c0 joins g1 with 6
    sim = compass_run([1.0, 2.0, 5.0], q_min=2, q_max=6, latest=1.2, max_trips=5, first="max")
    assert trips(sim) == [(0, 0, 6), (0, 6, 12), (1, 0, 12), (0, 12, 18), (1, 12, 18)]
    assert [r[3] for r in rows(sim, "staleness")] == [0, 1, 1, 0, 1]  # c0 at 12 downloaded v1, stepped at v2
    assert sim.server.version == 4


def test_the_protocol_refuses_what_it_cannot_honour():
    cfg = FedCompassConfig(concurrent_clients=3)
    with pytest.raises(ConfigError, match="algorithm/work_schedule=fixed is not allowed with algorithm=fedcompass"):
        build_protocol(Compass, cfg, 3, None, False)
    compass = FedCompassConfig(concurrent_clients=3, work_schedule=CompassScheduleConfig())
    with pytest.raises(ConfigError, match="arrival_rate=2.0 is not allowed with algorithm=fedcompass"):
        build_protocol(Compass, compass, 3, 2.0, False)
    with pytest.raises(ConfigError, match="selection=all_available is not allowed with algorithm=fedcompass"):
        build_protocol(Compass, compass, 3, None, True)
