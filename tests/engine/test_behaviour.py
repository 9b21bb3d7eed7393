"""Devices as they behave (fl_bench.engine.behaviour): a trip's timing by phase on a hand-computed case,
failed trips that spend time and send nothing, communication on the clock, and one-line refusals."""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from fl_bench.engine.behaviour import UnreliableConfig, UnreliableDevices
from fl_bench.engine.link import SharedLink
from fl_bench.errors import ConfigError
from tests.conftest import compose_run_config

RUN = ("max_trips=600", "eval_every=300", "concurrency=20", "algorithm.buffer_size=5")


class Draws:
    """A stand-in generator whose uniform draws are given."""

    def __init__(self, *values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def test_a_trip_downloads_computes_then_uploads_and_a_failure_spends_what_came_before():
    devices = UnreliableDevices(UnreliableConfig(failure_rate=0.5, bandwidth=100.0, upload_fraction=0.5), 3, seed=0)
    # 200 bytes down at 100/s: 2; compute 3; 100 bytes up at 50/s: 2
    devices.rng = Draws(0.9)  # 0.9 >= 0.5: no failure
    whole = devices.shape(1, 0.0, compute=3.0, bytes_down=200, bytes_up=100)
    assert (whole.duration, whole.comm_time, whole.compute_time, whole.failed) == (7.0, 4.0, 3.0, 0)
    devices.rng = Draws(0.1, 0.5)  # fails, at 0.5 x 7 = 3.5: 2 downloading, 1.5 computing
    failed = devices.shape(1, 0.0, compute=3.0, bytes_down=200, bytes_up=100)
    assert (failed.duration, failed.comm_time, failed.compute_time, failed.failed) == (3.5, 2.0, 1.5, 1)
    devices.rng = Draws(0.1, 1 / 7)  # fails while downloading: nothing computed
    early = devices.shape(1, 0.0, compute=3.0, bytes_down=200, bytes_up=100)
    assert (early.comm_time, early.compute_time) == (pytest.approx(1.0), 0.0)


def test_a_failure_hazard_fails_long_trips_more_often(run_config):
    summary, _, trips = run_config(*RUN, "delay=exponential", "behaviour=unreliable", "behaviour.failure_rate=0",
                                   "behaviour.failure_hazard=0.5")
    failed = trips["failed"] == 1
    # at hazard h a trip of compute c survives with probability exp(-h c): under Exp(1) draws, 1 / (1 + h) = 2/3
    assert 0.27 < failed.mean() < 0.40 and summary["failed_trips"] == failed.sum()
    lasted = trips["end_time"] - trips["start_time"]
    assert lasted[failed].mean() < lasted[~failed].mean()  # a failure cuts a trip short...
    devices = UnreliableDevices(UnreliableConfig(failure_rate=0, failure_hazard=0.5), 1, seed=0)
    long = sum(devices.shape(0, 0.0, compute=10.0, bytes_down=0, bytes_up=0).failed for _ in range(400))
    short = sum(devices.shape(0, 0.0, compute=0.1, bytes_down=0, bytes_up=0).failed for _ in range(400))
    assert long > 380 and short < 20  # ...and long trips fail far more often: 1 - e^-5 against 1 - e^-0.05


def test_a_work_deadline_cuts_local_training_to_the_steps_finished_by_then():
    devices = UnreliableDevices(UnreliableConfig(failure_rate=0, bandwidth=100.0, work_deadline=4.0), 3, seed=0)
    # 10 steps in 10: by the deadline 4 it has finished 4, then uploads (1 each way at 100/s)
    cut = devices.shape(0, 0.0, compute=10.0, bytes_down=100, bytes_up=100, steps=10)
    assert (cut.duration, cut.comm_time, cut.compute_time, cut.failed, cut.steps) == (6.0, 2.0, 4.0, 0, 4)
    whole = devices.shape(0, 0.0, compute=3.0, bytes_down=100, bytes_up=100, steps=10)  # in time: all 10
    assert (whole.duration, whole.steps) == (5.0, 10)
    # 3 steps in 15: a step takes 5, none finished by 4: nothing to upload, it gives up at the deadline
    none = devices.shape(0, 0.0, compute=15.0, bytes_down=100, bytes_up=100, steps=3)
    assert (none.duration, none.comm_time, none.compute_time, none.failed, none.steps) == (5.0, 1.0, 4.0, 4, 0)
    relative = UnreliableDevices(UnreliableConfig(failure_rate=0, work_deadline=0.5, work_deadline_unit="mean_compute"),
                                 2, seed=0, client_means=np.array([2.0, 8.0]))
    assert relative.shape(1, 0.0, compute=8.0, bytes_down=0, bytes_up=0, steps=10).steps == 5  # its deadline is 4


def test_partial_trips_upload_the_steps_they_finished(run_config):
    summary, _, trips = run_config(*RUN, "behaviour=unreliable", "behaviour.failure_rate=0", "behaviour.work_deadline=0.5",
                                   "algorithm.local_epochs=3")
    full = 3 * -(-trips["num_examples"] // 32)  # synthetic's clients, batch 32, three epochs
    cut = np.isclose(trips["end_time"] - trips["start_time"], 0.5, rtol=0, atol=1e-12)
    assert 0.2 < cut.mean() < 0.8 and (trips.loc[~cut, "local_steps"] == full[~cut]).all()
    assert (trips.loc[cut, "local_steps"] < full[cut]).all()
    lost = trips["failed"] == 4  # not one step by the deadline
    assert lost.any() and (trips.loc[lost, "used"] == 0).all() and (trips.loc[lost, "local_steps"] == 0).all()
    assert (trips.loc[cut & ~lost, "local_steps"] >= 1).all() and summary["failed_trips"] == lost.sum()
    # a partial trip counts the FLOPs of the steps it ran: per step, as a whole trip of its size
    used = trips.assign(per_step=trips["flops"] / trips["local_steps"], cut=cut)[trips["used"] == 1]
    by_size = used.groupby("num_examples")
    both = by_size["cut"].nunique() == 2
    assert both.sum() > 5
    np.testing.assert_allclose(by_size["per_step"].min()[both], by_size["per_step"].max()[both], rtol=1e-9)


def test_failed_trips_spend_time_send_nothing_and_are_counted(run_config):
    summary, _, trips = run_config(*RUN, "behaviour=unreliable", "behaviour.failure_rate=0.3")
    failed = trips["failed"] == 1
    assert 0.2 < failed.mean() < 0.4  # 600 trips at 0.3: about 11 standard deviations wide
    assert (trips.loc[failed, "used"] == 0).all() and (trips.loc[failed, "bytes_up"] == 0).all()
    assert (trips.loc[failed, "end_time"] >= trips.loc[failed, "start_time"]).all()
    assert summary["failed_trips"] == failed.sum()
    assert summary["failed_compute_time"] == pytest.approx((trips.end_time - trips.start_time)[failed].sum())
    # the server saw only the uploads that arrived: K = 5 per step, the last buffer may be partial
    assert 0 <= trips["used"].sum() - 5 * summary["server_steps"] < 5


def test_communication_takes_bytes_over_bandwidth_on_the_clock(run_config):
    summary, _, trips = run_config(*RUN, "delay=constant", "delay.value=1.0", "behaviour=unreliable",
                                   "behaviour.failure_rate=0", "behaviour.bandwidth=1e4", "behaviour.upload_fraction=0.25")
    expected_comm = trips["bytes_down"] / 1e4 + trips["bytes_up"] / 2.5e3
    np.testing.assert_allclose(trips["comm_time"], expected_comm, rtol=1e-12)
    np.testing.assert_allclose(trips["end_time"] - trips["start_time"], 1.0 + expected_comm, rtol=1e-9)
    assert summary["comm_time"] == pytest.approx(expected_comm.sum()) and summary["failed_trips"] == 0


def test_a_shared_link_splits_its_capacity_max_min_fairly():
    link = SharedLink(10.0)

    def by_trip(values):
        return {int(link.trip[i]): float(values[i]) for i in range(link.count)}

    link.add(0, 4.0, 2.0, now=0.0)  # capped at 2 by its client's bandwidth
    link.add(1, 8.0, math.inf, now=0.0)
    link.add(2, 12.0, math.inf, now=0.0)
    assert by_trip(link.rate) == {0: 2.0, 1: 4.0, 2: 4.0}
    assert link.next_completion() == (2.0, 0)  # ties at 2 with trip 1: the lower id first
    link.remove(0, now=2.0)
    assert by_trip(link.remaining) == {1: 0.0, 2: 4.0} and by_trip(link.rate) == {1: 5.0, 2: 5.0}
    assert link.next_completion() == (2.0, 1)
    link.remove(1, now=2.0)
    assert link.next_completion() == (2.4, 2)  # alone: the whole 10
    link.remove(2, now=2.4)
    assert link.next_completion() is None and link.count == 0


def test_trips_over_a_shared_link_wait_for_each_other(run_config):
    # rounds of two trips that start together: each download gets half the link, 18,216 bytes at 18,216 per
    # unit take 1; compute 1; the uploads share it again: every trip lasts 3, 2 of them communicating
    summary, _, trips = run_config("max_trips=40", "eval_every=20", "concurrency=2", "algorithm=fedavg",
                                   "delay=constant", "delay.value=1.0", "behaviour=unreliable", "behaviour.failure_rate=0",
                                   "behaviour.server_bandwidth=36432")
    assert (trips["bytes_down"] == 18216).all() and (trips["bytes_up"] == 18216).all()
    np.testing.assert_allclose(trips["end_time"] - trips["start_time"], 3.0, rtol=1e-12)
    np.testing.assert_allclose(trips["comm_time"], 2.0, rtol=1e-12)
    assert summary["sim_time"] == pytest.approx(60.0)


def test_a_link_wider_than_every_transfer_changes_nothing(run_config):
    knobs = (*RUN, "behaviour=unreliable", "behaviour.failure_rate=0.2", "behaviour.bandwidth=1e5",
             "behaviour.bandwidth_sigma=1")
    _, metrics, trips = run_config(*knobs, name="own")
    _, shared_metrics, shared = run_config(*knobs, "behaviour.server_bandwidth=1e15", name="shared")
    assert trips["failed"].sum() > 20
    pd.testing.assert_frame_equal(shared.drop(columns=["end_time", "comm_time"]),
                                  trips.drop(columns=["end_time", "comm_time"]))
    np.testing.assert_allclose(shared["end_time"], trips["end_time"], rtol=1e-9)
    np.testing.assert_allclose(shared["comm_time"], trips["comm_time"], rtol=1e-6)


@pytest.mark.parametrize("link", [(), ("behaviour.server_bandwidth=1e12",)])
def test_a_trip_its_round_closes_on_is_not_a_device_failure_and_keeps_its_phases(tmp_path, link):
    # down 1 (18,216 bytes at 18,216), compute 1, up 1: every trip would end at 3, after the deadline 2.5;
    # the round closes on those still running (1 downloading + 0.5 uploading), unless they failed before.
    # No upload ever arrives, so the run fails (no server step) with its logs written.
    from fl_bench.errors import NoProgressError
    from fl_bench.runs.experiment import run_experiment

    cfg = compose_run_config("max_trips=60", "eval_every=30", "concurrency=10", "algorithm=fedavg", "algorithm.deadline=2.5",
                             "delay=constant", "delay.value=1.0", "behaviour=unreliable", "behaviour.failure_rate=0.5",
                             "behaviour.bandwidth=18216", *link)
    with pytest.raises(NoProgressError, match="the run made no server step"):
        run_experiment(cfg, tmp_path / "run")
    summary, trips = json.loads((tmp_path / "run" / "summary.json").read_text()), pd.read_csv(tmp_path / "run" / "trips.csv")
    assert summary["status"] == "failed" and summary["server_steps"] == 0
    closed = np.isclose(trips["end_time"] - trips["start_time"], 2.5, rtol=0, atol=1e-9)
    assert closed.sum() > 10 and (trips["used"] == 0).all()
    assert (trips.loc[closed, "failed"] == 0).all()  # a failure drawn after 2.5 never happened
    np.testing.assert_allclose(trips.loc[closed, "comm_time"], 1.5, rtol=1e-9)
    assert summary["failed_trips"] == (trips["failed"] == 1).sum() > 10


def test_without_behaviours_trips_csv_has_its_old_columns(run_config):
    summary, _, trips = run_config(*RUN)
    assert "failed" not in trips and "comm_time" not in trips and summary["failed_trips"] == 0


def test_each_group_of_clients_fails_at_its_own_rate(run_config):
    summary, _, trips = run_config(*RUN, "dataset=digits", "partition=one_class", "partition.num_clients=100",
                                   "behaviour=unreliable", "behaviour.failure_rate=null",
                                   "behaviour.groups=[[0,1,2,3,4],[5,6,7,8,9]]", "behaviour.group_failure_rates=[0.5,0]")
    # one_class: client c holds label c % 10, so clients with c % 10 < 5 are group 0
    flaky = trips["client"] % 10 < 5
    assert 0.35 < trips.loc[flaky, "failed"].mean() < 0.65 and trips.loc[~flaky, "failed"].sum() == 0


def test_each_group_of_clients_communicates_at_its_own_bandwidth(run_config):
    summary, _, trips = run_config(*RUN, "dataset=digits", "partition=one_class", "partition.num_clients=100",
                                   "behaviour=unreliable", "behaviour=unreliable", "behaviour.failure_rate=0",
                                   "behaviour.groups=[[0,1,2,3,4],[5,6,7,8,9]]", "behaviour.group_bandwidths=[1e3,1e5]")
    slow = trips["client"] % 10 < 5  # one_class: client c holds label c % 10
    rate = np.where(slow, 1e3, 1e5)
    np.testing.assert_allclose(trips["comm_time"], (trips["bytes_down"] + trips["bytes_up"]) / rate, rtol=1e-12)


def test_an_outage_takes_a_group_offline_together_and_cuts_its_running_trips(run_config):
    summary, _, trips = run_config(*RUN, "dataset=digits", "partition=one_class", "partition.num_clients=100",
                                   "behaviour=unreliable", "behaviour.failure_rate=0",
                                   "behaviour.outages=[{labels: [0, 1, 2, 3, 4], start: 2.0, end: 5.0}]")
    group = trips["client"] % 10 < 5  # one_class: client c holds label c % 10
    during = (trips["start_time"] >= 2.0) & (trips["start_time"] < 5.0)
    assert not (group & during).any() and (~group & during).sum() > 20  # the others go on training
    cut = trips["failed"] == 2
    assert cut.any() and (trips.loc[cut, "end_time"] == 2.0).all() and group[cut].all()
    assert (trips.loc[cut, "used"] == 0).all() and (group & (trips["start_time"] >= 5.0)).sum() > 20  # back after


def test_an_outage_of_listed_clients_takes_exactly_them_offline(run_config):
    region = list(range(0, 200, 2))  # the even half of synthetic's clients
    summary, _, trips = run_config(*RUN, "behaviour=unreliable", "behaviour.failure_rate=0",
                                   f"behaviour.outages=[{{clients: {region}, start: 1.0, end: 3.0}}]")
    mine = trips["client"].isin(region)
    during = (trips["start_time"] >= 1.0) & (trips["start_time"] < 3.0)
    assert not (mine & during).any() and (~mine & during).sum() > 20
    cut = trips["failed"] == 2
    assert cut.any() and mine[cut].all() and (trips.loc[cut, "end_time"] == 1.0).all()


@pytest.mark.parametrize("override, message", [
    ("behaviour.outages=[{labels: [0], start: 5, end: 2}]", "needs 0 <= start < end"),
    ("behaviour.outages=[{labels: [0], from: 1}]", "give labels \\(or clients\\), start and end"),
    ("behaviour.outages=[{labels: [10], start: 1, end: 2}]", "names a label outside the dataset's 0..9"),
    ("behaviour.outages=[{clients: [5000], start: 1, end: 2}]", "names a client outside the dataset's 0..999"),
])
def test_bad_outages_are_refused_in_one_line(tmp_path, override, message):
    from fl_bench.runs.experiment import run_experiment

    with pytest.raises(ConfigError, match=message):
        run_experiment(compose_run_config(*RUN, "behaviour=unreliable", override), tmp_path / "run")
    with pytest.raises(ConfigError, match="behaviour.outages is not allowed with availability.unit=steps"):
        run_experiment(compose_run_config(*RUN, "availability=diurnal", "behaviour=unreliable",
                                          "behaviour.outages=[{labels: [0], start: 1, end: 2}]"), tmp_path / "run")


def test_a_trip_cut_at_its_availability_window_keeps_its_phases_and_is_not_a_device_failure(run_config):
    summary, _, trips = run_config(*RUN, "dataset=digits", "partition=one_class", "partition.num_clients=100",
                                   "availability=diurnal", "availability.unit=time", "availability.on_unavailable=drop",
                                   "availability.period=3", "behaviour=unreliable", "behaviour.failure_rate=0",
                                   "behaviour.bandwidth=2e4")
    closed = trips["failed"] == 3
    assert closed.any() and (trips.loc[closed, "used"] == 0).all()
    assert (trips["comm_time"] <= trips["end_time"] - trips["start_time"] + 1e-12).all()
    assert summary["failed_trips"] == 0  # availability's drops are not device failures


@pytest.mark.parametrize("override, message", [
    ("behaviour.bandwidth_sigma=1", "behaviour.bandwidth_sigma=1.0 is not allowed: needs behaviour.bandwidth"),
    ("behaviour.upload_fraction=0.5", "behaviour.upload_fraction=0.5 is not allowed: needs behaviour.bandwidth"),
    ("behaviour.failure_rate=1.5", "behaviour.failure_rate=1.5 is not allowed: must be in [0, 1)"),
    ("behaviour.groups=[[0],[1]]", "behaviour.groups=[[0], [1]] is not allowed: needs behaviour.group_failure_rates or"),
    ("behaviour.groups=[[0],[1]] behaviour.group_failure_rates=[0.1,0.2]",
     "behaviour.failure_rate=0.1 is not allowed: must be null with behaviour.group_failure_rates"),
    ("behaviour.groups=[[0],[1]] behaviour.group_bandwidths=[1e5] behaviour.bandwidth=null",
     "behaviour.group_bandwidths=[100000.0] is not allowed: needs one value per group (2)"),
    ("behaviour.group_failure_rates=[0.1]", "behaviour.group_failure_rates=[0.1] is not allowed: needs behaviour.groups"),
    ("behaviour.bandwidth=0", "behaviour.bandwidth=0.0 is not allowed: must be > 0"),
    ("behaviour.bandwidth_sigma=-1", "behaviour.bandwidth_sigma=-1.0 is not allowed: must be >= 0"),
    ("behaviour.work_deadline=0", "behaviour.work_deadline=0.0 is not allowed: must be > 0"),
    ("behaviour.failure_hazard=-1", "behaviour.failure_hazard=-1.0 is not allowed: must be > 0"),
    ("behaviour.work_deadline_unit=mean_compute",
     "behaviour.work_deadline_unit='mean_compute' is not allowed: needs behaviour.work_deadline"),
    ("behaviour.bandwidth_trace_wrap=true", "behaviour.bandwidth_trace_wrap=True is not allowed: needs behaviour.bandwidth_trace"),
    ("behaviour.bandwidth_trace=cap.pkl", "behaviour.bandwidth_trace='cap.pkl' is not allowed: needs behaviour.bandwidth"),
    ("behaviour.work_deadline_unit=steps", "behaviour.work_deadline_unit='steps' is not allowed"),
])
def test_bad_values_are_refused_in_one_line(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        compose_run_config("behaviour=unreliable", *override.split())


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedbuff", "fedasync", "buffered_fedavg", "fedavg", "fedavgm", "fedprox", "fedmax",
                                       "adaptive_fedopt", "fedlaavg", "hfl", "fedstaleweight", "fedgbo", "mfl", "mimelite",
                                       "mimexlite"])
def test_every_algorithm_runs_with_every_behaviour_and_repeats_itself(tmp_path, algorithm):
    from fl_bench.runs.experiment import run_experiment

    overrides = ("max_trips=120", "eval_every=60", "concurrency=10", f"algorithm={algorithm}", "behaviour=unreliable",
                 "behaviour.failure_rate=0.2", "behaviour.bandwidth=1e5", "behaviour.bandwidth_sigma=1",
                 "behaviour.work_deadline=0.8", "behaviour.outages=[{clients: [1, 2, 3], start: 0.5, end: 1.5}]",
                 "behaviour.server_bandwidth=2e6", "behaviour.failure_hazard=0.1",
                 # HFL takes every available client at once: 40 of them, or all 1000 share the link, fail
                 # during their downloads and the server never steps (refused as no result)
                 *(["dataset.num_clients=40"] if algorithm == "hfl" else []))
    for name in ("a", "b"):
        summary = run_experiment(compose_run_config(*overrides), tmp_path / name)
        assert summary["status"] == "completed" and summary["failed_trips"] > 0 and summary["server_steps"] > 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / "trips.csv"), pd.read_csv(tmp_path / "b" / "trips.csv"))
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / "metrics.csv"), pd.read_csv(tmp_path / "b" / "metrics.csv"))
