"""Client availability (diurnal turns, trace windows), persistent client speeds and selection
policies: end to end from trips.csv, on scripted populations, and the one-line errors bad input gets."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fl_bench.data import build_dataset
from fl_bench.data.label_groups import majority_labels
from fl_bench.engine.availability import (
    AlwaysAvailable,
    AlwaysAvailableConfig,
    Availability,
    Diurnal,
    DiurnalAvailabilityConfig,
    Trace,
    TraceAvailabilityConfig,
)
from fl_bench.engine.population import ClientPopulation
from fl_bench.engine.selection import (
    AllAvailableSelection,
    AllAvailableSelectionConfig,
    LongestAbsentSelection,
    LongestAbsentSelectionConfig,
    WeightedSelection,
    WeightedSelectionConfig,
)
from fl_bench.errors import ConfigError
from fl_bench.runs.experiment import build_experiment
from fl_bench.schema import build
from tests.conftest import compose_run_config

DIURNAL = ("algorithm=fedavg", "availability=diurnal", "partition=one_class", "dataset=digits",
           "partition.num_clients=200", "concurrency=20")


def main_labels(*overrides: str) -> np.ndarray:
    """Each client's majority training label, recomputed from the data the run's config builds."""
    cfg = compose_run_config(*overrides)
    data = build_dataset(cfg.dataset, cfg.partition)
    return majority_labels(data.y.numpy(), data.offsets, data.num_classes)


def assert_no_client_overlaps(trips: pd.DataFrame) -> None:
    """A client never runs two trips at once: per client, by start, each trip starts after the previous ended."""
    for _, mine in trips.sort_values(["client", "start_time", "end_time"]).groupby("client"):
        assert (mine.start_time.to_numpy()[1:] >= mine.end_time.to_numpy()[:-1]).all()


# ----------------------------------------------------------------------------- diurnal
def test_diurnal_turns_by_server_step_select_only_the_group_that_is_on(run_config):
    """unit=steps: group 0 (main labels 0-4) is on in rounds with v mod 6 < 3, group 1 (5-9) otherwise."""
    _, _, trips = run_config(*DIURNAL, "availability.period=3", "max_trips=720", "eval_every=720")
    labels = main_labels(*DIURNAL)
    group = (labels >= 5).astype(int)  # groups [[0..4], [5..9]]
    assert len(trips) == 720 and trips.download_version.max() == 35  # 36 rounds of 20
    assert (trips.groupby("download_version").size() == 20).all()
    on = np.where(trips.download_version % 6 < 3, 0, 1)
    assert (group[trips.client] == on).all(), "a trip started on a client whose group was off"
    # The labels trained alternate: rounds 0-2 only 0-4, rounds 3-5 only 5-9, ...
    seen = pd.Series(labels[trips.client]).groupby(trips.download_version.to_numpy()).agg(set)
    for v, round_labels in seen.items():
        allowed = set(range(5)) if v % 6 < 3 else set(range(5, 10))
        assert round_labels <= allowed and len(round_labels) >= 3, f"round {v} trained labels {sorted(round_labels)}"
    assert set().union(*seen) == set(range(10))
    assert trips.groupby("download_version").client.nunique().min() == 20  # no client twice in a round


def test_diurnal_on_the_time_clock_with_unequal_turns(run_config):
    """unit=time, ratio=2: group 0 is on during [9k, 9k + 3), group 1 during [9k + 3, 9k + 9);
    constant unit delays make round r start at time r."""
    overrides = (*DIURNAL, "availability.period=3", "availability.ratio=2", "availability.unit=time", "delay=constant")
    _, _, trips = run_config(*overrides, "max_trips=600", "eval_every=600")
    assert (trips.end_time - trips.start_time == 1.0).all()
    assert (trips.start_time == trips.download_version).all()  # round r starts at time r
    group = (main_labels(*DIURNAL) >= 5).astype(int)
    on = np.where(trips.start_time % 9 < 3, 0, 1)
    assert (group[trips.client] == on).all(), "a trip started on a client whose group was off"
    rounds = np.arange(30)
    assert sorted(trips.start_time.unique()) == list(rounds)
    assert (trips.start_time % 9 < 3).sum() == 20 * int((rounds % 9 < 3).sum())


def test_diurnal_drop_on_the_time_clock_cuts_trips_when_the_groups_turn_ends(run_config):
    """unit=time, on_unavailable=drop: a trip still running when its group's turn ends is cut there."""
    overrides = ("algorithm=fedbuff", "availability=diurnal", "partition=one_class", "dataset=digits",
                 "partition.num_clients=200", "concurrency=20", "availability.period=3", "availability.ratio=2",
                 "availability.unit=time", "availability.on_unavailable=drop")
    _, _, trips = run_config(*overrides, "max_trips=1000", "eval_every=1000")
    group = (main_labels(*overrides) >= 5).astype(int)[trips.client]
    turn_start = np.where(group == 0, 0.0, 3.0)
    assert (np.where(trips.start_time % 9 < 3, 0, 1) == group).all()
    turn_end = (trips.start_time - turn_start) // 9 * 9 + turn_start + np.where(group == 0, 3.0, 6.0)
    dropped, used = trips.used == 0, trips.used == 1
    assert dropped.sum() >= 20 and used.sum() >= 500
    assert (trips.end_time[dropped] == turn_end[dropped]).all() and (trips.bytes_up[dropped] == 0).all()
    assert (trips.end_time[used] <= turn_end[used]).all()
    assert_no_client_overlaps(trips)


def test_diurnal_schedule_and_window_ends():
    """Group g is on for period * ratio**g, in turn: with period 3 and ratio 2, group 0 during
    [9k, 9k + 3) and group 1 during [9k + 3, 9k + 9)."""
    data = SimpleNamespace(y=torch.tensor([0, 0, 6, 1, 9, 9, 2]), offsets=np.array([0, 2, 3, 4, 7]), num_classes=10,
                           num_clients=4)  # main labels 0, 6, 1, 9 (client 3: 9, 9, 2)
    diurnal = Diurnal(DiurnalAvailabilityConfig(unit="time", period=3, ratio=2), data)
    assert diurnal.initial().tolist() == [True, False, True, False] and diurnal.max_available() == 2
    changes = []
    while diurnal.next_change() < 30:
        clock, on, off = diurnal.pop_change()
        changes.append((clock, on.tolist(), off.tolist()))
    assert changes == [(3, [1, 3], [0, 2]), (9, [0, 2], [1, 3]), (12, [1, 3], [0, 2]), (18, [0, 2], [1, 3]),
                       (21, [1, 3], [0, 2]), (27, [0, 2], [1, 3])]
    assert [diurnal.window_end(0, t) for t in (0, 2.5, 9, 10)] == [3, 3, 12, 12]
    assert [diurnal.window_end(1, t) for t in (3, 8.5, 12, 17)] == [9, 9, 18, 18]


# ----------------------------------------------------------------------------- trace
TRACE = ("dataset=digits", "partition=iid", "partition.num_clients=20", "algorithm=fedbuff", "concurrency=3",
         "availability=trace")


def write_trace(path, num_clients=18, horizon=2000.0, length=(1.0, 4.0), gap=(0.5, 6.0), seed=0):
    """Random non-overlapping windows per client for clients 0..num_clients-1 (the rest have none)."""
    rng = np.random.default_rng(seed)
    rows = []
    for client in range(num_clients):
        t = float(rng.uniform(0, 3))
        while t < horizon:
            end = t + float(rng.uniform(*length))
            rows.append((client, t, end))
            t = end + float(rng.uniform(*gap))
    rng.shuffle(rows)  # the file need not be sorted
    path.write_text("client,start,end\n" + "".join(f"{c},{s!r},{e!r}\n" for c, s, e in rows))
    return pd.DataFrame(rows, columns=["client", "start", "end"])


def window_of(trips: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """For every trip, the window of its client that holds its start time (NaN: none)."""
    found = []
    by_client = {c: w.sort_values("start") for c, w in windows.groupby("client")}
    for client, start in zip(trips.client, trips.start_time):
        w = by_client.get(client)
        hit = None if w is None else w[(w.start <= start) & (start < w.end)]
        found.append((np.nan, np.nan) if hit is None or hit.empty else (hit.start.iloc[0], hit.end.iloc[0]))
    return pd.DataFrame(found, columns=["start", "end"], index=trips.index)


def test_trace_trips_start_only_inside_their_clients_windows(tmp_path, run_config):
    windows = write_trace(tmp_path / "trace.csv")
    _, _, trips = run_config(*TRACE, f"availability.path={tmp_path / 'trace.csv'}", "max_trips=500", "eval_every=500")
    assert len(trips) == 500
    inside = window_of(trips, windows)
    assert inside.start.notna().all(), trips[inside.start.isna()].head()
    assert not set(trips.client) & {18, 19}  # clients without a row are never available
    assert trips.groupby("client").size().min() >= 5 and trips.client.nunique() == 18
    # Clients come back in later windows (not just the first one each).
    assert inside.groupby(trips.client).start.nunique().min() >= 3
    assert (trips.used == 1).all()  # on_unavailable=finish: trips past the window still upload
    assert (trips.end_time > inside.end).any()
    assert_no_client_overlaps(trips)


def test_trace_drop_cuts_trips_at_the_window_end(tmp_path, run_config):
    """on_unavailable=drop with constant unit trips: a trip started at s in window [a, b) is cut at
    b (used=0, no upload) exactly when s + 1 > b, and otherwise uploads at s + 1 <= b."""
    windows = write_trace(tmp_path / "trace.csv", length=(0.5, 3.0), gap=(0.2, 3.0))
    _, _, trips = run_config(*TRACE, f"availability.path={tmp_path / 'trace.csv'}", "availability.on_unavailable=drop",
                             "delay=constant", "max_trips=600", "eval_every=600")
    inside = window_of(trips, windows)
    assert inside.start.notna().all()
    clear = (trips.start_time + 1 - inside.end).abs() > 1e-9  # leave out float ties at the window end
    cut = trips.start_time + 1 > inside.end
    dropped, kept = trips[cut & clear], trips[~cut & clear]
    assert len(dropped) >= 30 and len(kept) >= 100 and clear.mean() > 0.99
    assert (dropped.used == 0).all() and (dropped.bytes_up == 0).all() and (dropped.bytes_down > 0).all()
    assert (dropped.end_time == inside.end[dropped.index]).all()
    assert (kept.used == 1).all() and (kept.bytes_up > 0).all()
    assert np.allclose(kept.end_time, kept.start_time + 1) and (kept.end_time <= inside.end[kept.index]).all()
    # Every used=1 trip ends inside its window; every used=0 trip ends at the window's close.
    assert (trips.end_time[trips.used == 1] <= inside.end[trips.used == 1]).all()
    assert (trips.end_time[trips.used == 0] == inside.end[trips.used == 0]).all()
    assert_no_client_overlaps(trips)


def test_trace_schedule_moves_clients_in_and_out_of_the_pool(tmp_path):
    """Windows that touch keep a client available; a client whose window closes mid-trip is not
    returned to the pool until a window of it opens again."""
    path = tmp_path / "trace.csv"
    path.write_text("client,start,end\n0,2,4\n1,1,3\n0,0,2\n2,5,6\n0,7,9\n")
    trace = Trace(TraceAvailabilityConfig(path=str(path)), SimpleNamespace(num_clients=4))
    assert trace.max_available() == 2  # at 2, client 0's window closes before its next one opens
    assert (trace.window_end(0, 1.5), trace.window_end(0, 2.0), trace.window_end(1, 1.0), trace.window_end(2, 5.5)) == (
        2.0, 4.0, 3.0, 6.0)
    population = ClientPopulation(np.full(4, 5), trace)
    pool = lambda: sorted(population.pool.members().tolist())  # noqa: E731
    assert pool() == []
    population.advance(0.0)
    assert pool() == [0]
    population.advance(1.0)
    assert pool() == [0, 1]
    population.pool.remove(0)
    population.mark_busy([0], 1.5)  # client 0 starts a trip
    population.advance(2.0)
    assert population.available[0] and pool() == [1]
    population.advance(3.0)
    assert pool() == []
    population.finish(0, 0)
    population.return_finished()
    assert pool() == [0]  # back in the pool: its second window [2, 4) is open
    population.pool.remove(0)
    population.mark_busy([0], 3.5)
    population.advance(5.0)  # 0's window closed at 4 while it was busy; 2's opened at 5
    assert not population.available[0] and pool() == [2]
    population.finish(1, 0)
    population.return_finished()
    assert pool() == [2] and not population.busy[0]
    population.advance(8.0)  # 2's window closed at 6, 0's third opened at 7
    assert pool() == [0]
    assert trace.next_change() == 9.0
    population.advance(9.0)
    assert pool() == [] and trace.next_change() == float("inf")


# ----------------------------------------------------------------------------- bad input
def trace_file(tmp_path, body: str) -> str:
    path = tmp_path / "trace.csv"
    path.write_text("client,start,end\n" + body)
    return f"availability.path={path}"


def build_it(*overrides: str):
    return build_experiment(compose_run_config(*overrides), on_eval=lambda p: False)


@pytest.mark.parametrize(
    "body, message",
    [
        ("0,0,5\n1,0,5\n25,1,2\n", r"row 4: client 25 is unknown: ids are 0\.\.19"),
        ("0,0,5\n1,zero,5\n", r"row 3: '1,zero,5' is not 'client,start,end'"),
        ("0,0,5\n1,0,4,7\n", r"row 3: '1,0,4,7' is not 'client,start,end'"),
        ("0,3,1\n", r"row 2: window \[3, 1\) is empty"),
        ("1,0,5\n0,0,5\n1,4,8\n", r"rows 2 and 4 overlap for client 1 \(\[0, 5\) and \[4, 8\)\)"),
        ("", r"has no availability window: no client is ever available"),
    ],
    ids=["unknown_client", "unparsable", "four_fields", "empty_window", "overlap", "no_window"],
)
def test_bad_trace_is_a_one_line_config_error_naming_the_row(tmp_path, body, message):
    path = trace_file(tmp_path, body)
    with pytest.raises(ConfigError, match=message) as error:
        build_it(*TRACE, path)
    assert "\n" not in str(error.value) and "availability.path=" in str(error.value)


def test_trace_with_a_wrong_header_or_no_file_is_a_config_error(tmp_path):
    (tmp_path / "bad.csv").write_text("id,from,to\n0,0,1\n")
    with pytest.raises(ConfigError, match=r"row 1: header \['id', 'from', 'to'\] is not allowed"):
        build_it(*TRACE, f"availability.path={tmp_path / 'bad.csv'}")
    with pytest.raises(ConfigError, match=r"nope\.csv does not exist"):
        build_it(*TRACE, f"availability.path={tmp_path / 'nope.csv'}")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ((*DIURNAL, "availability.groups=[[0,1,2,3,4],[5,6,7,8]]"),
         r"availability\.groups=\[\[0, 1, 2, 3, 4\], \[5, 6, 7, 8\]\] leaves out label\(s\) \[9\]"),
        ((*DIURNAL, "availability.groups=[[0,1,2,3,4],[5,6,7,8,9,10]]"),
         r"availability\.groups=.* names label 10, but the dataset's labels are 0\.\.9"),
        ((*DIURNAL[:-1], "concurrency=150"),
         r"concurrency=150 is impossible under availability=diurnal: it needs 150 clients at once but at most 10\d "
         r"are ever available at once"),
        ((*DIURNAL, "algorithm.over_selection=5"),  # ceil(6 * 20) = 120 clients per round
         r"concurrency=20 is impossible under availability=diurnal: it needs 120 clients"),
        ((*DIURNAL, "availability.on_unavailable=drop"),
         r"availability\.on_unavailable=drop is not allowed with availability\.unit=steps"),
        (("speed=two_tier", "speed.slow_factor=0"), r"speed\.slow_factor=0(\.0)? is not allowed: must be > 0"),
        (("speed=two_tier", "speed.slow_fraction=1.5"), r"speed\.slow_fraction=1\.5 is not allowed"),
        (("dataset=digits", "algorithm=fedbuff", "selection=all_available"),
         r"selection=all_available is not allowed with algorithm=fedbuff"),
        (("dataset=digits", "partition=label_groups", "speed=by_group", "speed.groups=[[4,5,6,7,8,9],[0,1,2]]"),
         r"speed\.groups=.* leaves out label\(s\) \[3\]"),
        (("dataset=digits", "partition=label_groups", "speed=by_group", "speed.groups=[[0,1,2,3,4,5,6,7,8,9]]"),
         r"speed\.delays has 2 entries but speed\.groups has 1"),
    ],
    ids=["diurnal_missing_label", "diurnal_unknown_label", "diurnal_concurrency", "diurnal_over_selection",
         "drop_on_steps", "slow_factor_0", "slow_fraction", "all_available_async", "by_group_missing_label",
         "by_group_lengths"],
)
def test_bad_availability_speed_or_selection_is_a_one_line_config_error(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        build_it(*overrides)
    assert "\n" not in str(error.value)


def test_bad_trace_through_the_command_line_prints_one_error_line(tmp_path, cli_in_process, monkeypatch):
    path = trace_file(tmp_path, "0,0,5\n3,1,2\n20,0,1\n")
    monkeypatch.setenv("WANDB_MODE", "offline")
    code, out = cli_in_process(*TRACE, path, "progress=false", cwd=tmp_path)
    assert code == 1
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    expected = r"fl_bench: error: availability\.path=\S+trace\.csv row 4: client 20 is unknown: ids are 0\.\.19"
    assert re.fullmatch(expected, lines[0]), lines[0]


# ----------------------------------------------------------------------------- persistent speeds
def test_two_tier_slow_clients_are_persistently_slower(run_config):
    overrides = ("dataset=digits", "algorithm=fedbuff", "concurrency=10", "speed=two_tier", "speed.slow_fraction=0.3",
                 "speed.slow_factor=5", "delay=uniform")
    _, _, trips = run_config(*overrides, "max_trips=1000", "eval_every=1000")
    cfg = compose_run_config(*overrides)
    data = build_dataset(cfg.dataset, cfg.partition)
    factor = build(cfg.speed, cfg.delay, data).factor
    assert sorted(np.unique(factor)) == [1.0, 5.0] and (factor == 5).sum() == round(0.3 * data.num_clients)
    duration = trips.end_time - trips.start_time
    slow = factor[trips.client] == 5
    assert slow.sum() >= 100 and (~slow).sum() >= 100
    assert duration[~slow].max() <= 2.0 and duration[slow].max() > 8  # U(0, 2) and 5 x U(0, 2)
    ratio = duration[slow].mean() / duration[~slow].mean()
    assert 4.5 <= ratio <= 5.5, ratio
    assert_no_client_overlaps(trips)


def test_by_group_speeds_follow_each_clients_main_label(run_config):
    overrides = ("speed=by_group", "partition=label_groups", "dataset=digits", "algorithm=fedbuff")
    _, _, trips = run_config(*overrides, "max_trips=600", "eval_every=600")
    slow = main_labels(*overrides)[trips.client] <= 3
    duration = trips.end_time - trips.start_time
    assert slow.sum() >= 30 and (~slow).sum() >= 300
    assert duration[slow].between(8, 12).all() and duration[~slow].between(1, 2).all()
    assert trips.client.nunique() == 15
    assert_no_client_overlaps(trips)


# ----------------------------------------------------------------------------- selection
class Scripted(Availability):
    """Clients in ``on`` are available, the rest never."""

    def __init__(self, on):
        super().__init__(SimpleNamespace(name="scripted", unit="time", on_unavailable="finish"), len(on))
        self.on = np.asarray(on, dtype=bool)

    def initial(self):
        return self.on.copy()

    def max_available(self):
        return int(self.on.sum())


def always(sizes) -> ClientPopulation:
    sizes = np.asarray(sizes)
    return ClientPopulation(sizes, AlwaysAvailable(AlwaysAvailableConfig(), SimpleNamespace(num_clients=len(sizes))))


def round_trip(population: ClientPopulation, chosen: list[int], clock: float, first_id: int) -> None:
    """The engine's cycle for one round: selected clients start at ``clock``, finish, come back."""
    population.mark_busy(chosen, clock)
    for i, client in enumerate(chosen):
        population.finish(first_id + i, client)
    population.return_finished()


def test_longest_absent_takes_never_selected_then_oldest_selection_first():
    population = always(np.full(6, 10))
    population.last_selected[:] = [5, -np.inf, 2, 7, -np.inf, 1]
    policy = LongestAbsentSelection(LongestAbsentSelectionConfig(), population, None)
    rng = np.random.default_rng(0)

    first = policy.select(population, 2, rng)
    assert set(first) == {1, 4}  # never selected
    population.mark_busy(first, 10)
    second = policy.select(population, 2, rng)  # 1 and 4 are busy
    assert second == [5, 2]  # last selected at 1, then at 2, in that order
    population.mark_busy(second, 11)
    for i, client in enumerate(first + second):
        population.finish(i, client)
    population.return_finished()
    assert population.last_selected.tolist() == [5, 10, 11, 7, 10, 11]

    third = policy.select(population, 3, rng)  # 0 (5), 3 (7), then one of the tie 1/4 (10)
    assert third[:2] == [0, 3] and third[2] in (1, 4)
    round_trip(population, third, 12, 10)
    fourth = policy.select(population, 2, rng)  # the other of 1/4 (10), then one of the tie 2/5 (11)
    assert fourth[0] == ({1, 4} - {third[2]}).pop() and fourth[1] in (2, 5)
    round_trip(population, fourth, 13, 20)
    fifth = policy.select(population, 6, rng)  # everyone, the leftover of 2/5 first
    assert fifth[0] == ({2, 5} - {fourth[1]}).pop() and sorted(fifth) == list(range(6))
    assert len(population.pool) == 0


def test_longest_absent_breaks_ties_at_random():
    picks = []
    for seed in range(40):
        population = always(np.full(20, 3))
        population.last_selected[10:] = 0.0  # clients 0-9 never selected, tied; 10-19 selected at 0, tied
        chosen = LongestAbsentSelection(None, population, None).select(population, 5, np.random.default_rng(seed))
        assert len(chosen) == len(set(chosen)) == 5 and len(population.pool) == 15
        assert max(chosen) < 10  # the never-selected come first
        picks.append(frozenset(chosen))
        population = always(np.full(20, 3))
        population.last_selected[:] = 4.0  # all tied: the set size is still the count asked for
        chosen = LongestAbsentSelection(None, population, None).select(population, 12, np.random.default_rng(seed))
        assert len(set(chosen)) == 12
    assert picks[0] != picks[1] and len(set(picks)) > 30
    assert set().union(*picks) == set(range(10))  # every tied client gets picked by some seed


def test_longest_absent_only_picks_available_idle_clients():
    population = ClientPopulation(np.full(8, 4), Scripted([1, 1, 0, 1, 1, 0, 1, 1]))
    population.last_selected[:] = [3, 0, -np.inf, 2, 1, -np.inf, 9, 8]  # 2 and 5 are never available
    population.pool.remove(1)  # 1 is on a trip (selected, as a policy takes it)
    population.mark_busy([1], 20)
    chosen = LongestAbsentSelection(None, population, None).select(population, 4, np.random.default_rng(0))
    assert chosen == [4, 3, 0, 7]


def test_weighted_by_examples_draws_in_proportion_to_size_and_skips_busy_clients():
    sizes = np.array([1, 2, 3, 4, 10, 20])
    population = always(sizes)
    policy = WeightedSelection(WeightedSelectionConfig(by="examples"), population, None)
    rng = np.random.default_rng(0)
    counts = np.zeros(len(sizes))
    for i in range(6000):  # one client at a time: P(client) = n_i / sum n
        (client,) = policy.select(population, 1, rng)
        counts[client] += 1
        round_trip(population, [client], i, i)
    assert np.allclose(counts / counts.sum(), sizes / sizes.sum(), atol=0.015), counts

    busy = policy.select(population, 2, rng)
    population.mark_busy(busy, 0)
    for _ in range(300):
        chosen = policy.select(population, 3, rng)
        assert len(chosen) == 3 and not set(chosen) & set(busy)
        for client in chosen:
            population.pool.add(client)  # put them back without marking them busy
    assert len(policy.select(population, 10, rng)) == 4  # only the 4 idle ones are left


def test_weighted_selection_rejects_non_positive_weights():
    with pytest.raises(ConfigError, match="selection.by=mean_delay gives a client weight <= 0"):
        WeightedSelection(WeightedSelectionConfig(by="mean_delay"), always([1, 2, 3]), np.array([1.0, 0.0, 2.0]))


def test_all_available_takes_every_idle_available_client():
    population = ClientPopulation(np.full(8, 4), Scripted([1, 1, 0, 1, 1, 0, 1, 1]))
    policy = AllAvailableSelection(AllAvailableSelectionConfig(), population, None)
    assert policy.takes_all
    rng = np.random.default_rng(0)
    first = policy.select(population, 1, rng)  # count is ignored
    assert sorted(first) == [0, 1, 3, 4, 6, 7] and len(population.pool) == 0
    population.mark_busy(first, 0)
    population.finish(0, 3)
    population.finish(1, 6)
    population.return_finished()
    assert sorted(policy.select(population, 1, rng)) == [3, 6]
    assert policy.select(population, 1, rng) == []
