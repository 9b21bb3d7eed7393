"""Trace files as other simulators publish them (fl_bench.traces.formats), written small by the tests in
those formats, and the ``python -m fl_bench.traces`` command."""

import pickle
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from fl_bench.engine.behaviour import UnreliableConfig, UnreliableDevices
from fl_bench.engine.delays import TraceSpeedConfig, speed_trace
from fl_bench.errors import ConfigError
from fl_bench.traces.__main__ import availability_summary, main
from fl_bench.traces.formats import read_failure_times, read_fedscale_behaviour, read_flgo_pings, read_windows


def write_pickle(path, value):
    path.write_bytes(pickle.dumps(value))
    return path


BEHAVE = {  # FedScale's client_behave_trace: seconds, sessions [active, inactive], period finish_time
    "u1": {"duration": 10, "active": [1, 3, 6, 9], "inactive": [1, 4, 7, 10], "finish_time": 10, "model": "x"},
    "u2": {"duration": 20, "active": [0], "inactive": [5], "finish_time": 20, "model": "y"},
}


def test_fedscale_behaviour_sessions_become_windows_that_repeat_every_finish_time(tmp_path):
    path = write_pickle(tmp_path / "client_behave_trace", BEHAVE)
    once = read_fedscale_behaviour(path, 2, "availability.path")
    # u1's instant at 1 (active == inactive) is left out; client 1 is u2
    assert once.clients.tolist() == [0, 0, 0, 1]
    assert once.starts.tolist() == [3, 6, 9, 0] and once.ends.tolist() == [4, 7, 10, 5]
    repeated = read_fedscale_behaviour(path, 2, "availability.path", repeat_until=25)
    mine = repeated.clients == 0  # period 10: copies at 0, 10, 20
    assert repeated.starts[mine].tolist() == [3, 6, 9, 13, 16, 19, 23]
    assert repeated.starts[~mine].tolist() == [0, 20] and repeated.ends[~mine].tolist() == [5, 25]
    wrapped = read_fedscale_behaviour(path, 3, "availability.path", wrap=True)  # client 2 takes entry 0 again
    assert wrapped.starts[wrapped.clients == 2].tolist() == [3, 6, 9]
    scaled = read_windows("fedscale", str(path), 2, "availability.path", time_scale=0.5)
    assert scaled.ends.tolist() == [2, 3.5, 5, 2.5]


@pytest.mark.parametrize("trace, message", [
    (BEHAVE, "has 2 clients but the dataset has 3"),
    ({"u": {"active": [3, 1], "inactive": [4, 2], "finish_time": 10}}, "sessions are not sorted"),
    ({"u": {"active": [1], "inactive": [2, 3], "finish_time": 10}}, "1 active and 2 inactive times"),
    ({"u": {"active": [1], "inactive": [12], "finish_time": 10}}, "finish_time 10: it must be > 0 and >= its last"),
    ({"u": {"start": [1]}}, "entry 'u' is not {active"),
    ([1, 2], "holds a list, not a dict"),
])
def test_bad_fedscale_behaviour_traces_are_refused_in_one_line(tmp_path, trace, message):
    path = write_pickle(tmp_path / "trace", trace)
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("[", r"\[")):
        read_fedscale_behaviour(path, 3 if trace is BEHAVE else 1, "availability.path")


def test_flgo_pings_put_a_user_online_for_the_buckets_it_pinged_in(tmp_path):
    path = tmp_path / "pings.csv"
    # times shift to start at 100; user 7 pings most (client 0), user 3 next (client 1)
    path.write_text("id,timestamp\n7,100\n7,110\n7,118\n3,160\n7,170\n3,161\n5,130\n7,131\n3,100\n")
    windows = read_flgo_pings(path, 2, "availability.path")
    # user 7: buckets [0,15) [15,30) [30,45) merged, and [60,75); user 3: [0,15) and [60,75)
    assert windows.clients.tolist() == [0, 0, 1, 1]
    assert windows.starts.tolist() == [0, 60, 0, 60] and windows.ends.tolist() == [45, 75, 15, 75]
    repeated = read_flgo_pings(path, 1, "availability.path", repeat_until=100)  # the log lasts 75: again at 75
    assert repeated.starts.tolist() == [0, 60, 75] and repeated.ends.tolist() == [45, 75, 120]
    with pytest.raises(ConfigError, match="has 3 clients but the dataset has 4"):
        read_flgo_pings(path, 4, "availability.path")
    (tmp_path / "bad.csv").write_text("user,time\n1,2\n")
    with pytest.raises(ConfigError, match="give a CSV ping log with columns id and timestamp"):
        read_flgo_pings(tmp_path / "bad.csv", 1, "availability.path")


def test_capacity_trace_sets_speeds_and_bandwidths_relative_to_the_median(tmp_path):
    capacity = {1: {"computation": 50.0, "communication": 1000.0}, 2: {"computation": 100.0, "communication": 4000.0},
                3: {"computation": 400.0, "communication": 2000.0}}
    path = write_pickle(tmp_path / "client_device_capacity", capacity)
    data = SimpleNamespace(num_clients=3, sizes=np.array([10, 10, 10]))
    delays = speed_trace(TraceSpeedConfig(path=str(path)), SimpleNamespace(_target_="fl_bench.engine.delays.ConstantDelay",
                                                                          value=2.0), data)
    assert [delays.sample(np.random.default_rng(0), c) for c in range(3)] == [1.0, 2.0, 8.0]
    devices = UnreliableDevices(UnreliableConfig(failure_rate=0, bandwidth=100.0, bandwidth_trace=str(path)), 3, seed=0)
    assert devices.bandwidth.tolist() == [50.0, 200.0, 100.0]
    with pytest.raises(ConfigError, match="has 3 clients but the dataset has 4"):
        UnreliableDevices(UnreliableConfig(failure_rate=0, bandwidth=1.0, bandwidth_trace=str(path)), 4, seed=0)
    wrapped = UnreliableDevices(UnreliableConfig(failure_rate=0, bandwidth=100.0, bandwidth_trace=str(path),
                                                 bandwidth_trace_wrap=True), 4, seed=0)
    assert wrapped.bandwidth[3] == wrapped.bandwidth[0]  # relative to the median of the run's 4 clients
    bad = write_pickle(tmp_path / "bad", {1: {"computation": 0.0, "communication": 1.0}})
    with pytest.raises(ConfigError, match="computation 0 and communication 1: both must be > 0"):
        speed_trace(TraceSpeedConfig(path=str(bad)), None, SimpleNamespace(num_clients=1, sizes=np.array([1])))


def test_a_failure_trace_fails_the_trip_running_at_each_listed_time(tmp_path):
    path = tmp_path / "failures.csv"
    path.write_text("client,time\n1,2.5\n0,4\n1,9\n")
    devices = UnreliableDevices(UnreliableConfig(failure_rate=0, failure_trace=str(path)), 2, seed=0)
    hit = devices.shape(1, 1.0, compute=3.0, bytes_down=0, bytes_up=0)  # runs over 2.5
    assert (hit.duration, hit.failed, hit.compute_time) == (1.5, 1, 1.5)
    assert devices.shape(1, 3.0, compute=3.0, bytes_down=0, bytes_up=0).failed == 0  # (3, 6) holds no failure
    assert devices.shape(0, 0.0, compute=4.0, bytes_down=0, bytes_up=0).failed == 0  # ends as it fails: uploaded
    (tmp_path / "unsorted.csv").write_text("client,time\n1,5\n1,2\n")
    with pytest.raises(ConfigError, match="row 3: client 1's time 2 comes before its previous one"):
        read_failure_times(str(tmp_path / "unsorted.csv"), 2, "behaviour.failure_trace")
    (tmp_path / "unknown.csv").write_text("client,time\n2,5\n")
    with pytest.raises(ConfigError, match="row 2: 2,5 is not a client id in 0..1"):
        read_failure_times(str(tmp_path / "unknown.csv"), 2, "behaviour.failure_trace")


def test_a_run_replays_fedscale_traces_for_availability_speed_and_bandwidth(tmp_path, run_config):
    rng = np.random.default_rng(0)
    behave = {f"u{i}": {"active": [0.0, 3600.0 * (1 + i % 3)], "inactive": [1800.0, 3600.0 * (1 + i % 3) + 5400],
                        "finish_time": 6 * 3600.0} for i in range(1000)}
    capacity = {i: {"computation": float(c), "communication": float(b)}
                for i, (c, b) in enumerate(zip(rng.lognormal(4, 0.5, 1000), rng.lognormal(7, 1, 1000)))}
    behave_path = write_pickle(tmp_path / "client_behave_trace", behave)
    capacity_path = write_pickle(tmp_path / "client_device_capacity", capacity)
    summary, _, trips = run_config(
        "max_trips=400", "eval_every=200", "concurrency=20", "availability=trace", "availability.format=fedscale",
        f"availability.path={behave_path}", "availability.repeat_until=100000", "availability.time_scale=0.001",
        "availability.on_unavailable=drop", "speed=trace", f"speed.path={capacity_path}", "behaviour=unreliable",
        "behaviour.failure_rate=0", "behaviour.bandwidth=1e5", f"behaviour.bandwidth_trace={capacity_path}")
    assert summary["status"] == "completed" and summary["client_trips"] == 400
    hour = (trips["start_time"] / 0.001) % (6 * 3600)  # trace seconds within the 6-hour period
    offset = 3600.0 * (1 + trips["client"] % 3)
    online = (hour < 1800) | ((hour >= offset) & (hour < offset + 5400))
    assert online.all()  # every trip starts inside one of its client's sessions
    assert (trips["failed"] == 3).any()  # and some are cut at a session's end (drop)


@pytest.mark.slow
def test_the_traces_command_summarises_and_generates_traces(tmp_path, capsys):
    path = tmp_path / "w.csv"
    path.write_text("client,start,end\n0,0,3600\n1,1800,5400\n")  # 2 clients over 2 hours
    totals, by_hour = availability_summary(read_windows("csv", str(path), 2, "trace"), 2, 3600.0)
    assert totals["online_fraction"] == 0.5 and totals["windows"] == 2
    assert by_hour["online_fraction"].tolist() == [0.75, 0.25]  # hour 0: 1 + 0.5 clients; hour 1: 0.5
    out = tmp_path / "synthetic.pkl"
    main(["generate", str(out), "--format", "fedscale", "--clients", "200", "--online", "0.3", "--session", "600",
          "--span", "86400"])
    main(["summarise", str(out), "--format", "fedscale"])
    printed = capsys.readouterr().out
    fraction = float(printed.split("online_fraction ")[1].split()[0])
    assert abs(fraction - 0.3) < 0.03 and "clients 200" in printed
    assert len(pickle.loads(out.read_bytes())) == 200
    failed = subprocess.run([sys.executable, "-m", "fl_bench.traces", "summarise", str(tmp_path / "none.csv")],
                            capture_output=True, text=True)
    assert failed.returncode == 1 and failed.stderr.strip().splitlines() == [
        f"fl_bench: error: trace={tmp_path / 'none.csv'} does not exist: give a CSV file with columns client,start,end"]
    with pytest.raises(SystemExit):
        main(["generate", str(out), "--format", "fedscale_capacity", "--computation", "-1"])
    assert "--computation -1.0, --communication 2000.0" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # an option the format does not read would be ignored
        main(["summarise", str(path), "--repeat-until", "5"])
    assert "--repeat-until 5.0 is not allowed with --format csv" in capsys.readouterr().err
