"""Per-trip cost of the device behaviours on the clock (results/benchmarks.md): ``UnreliableDevices.shape``
timed with everything on (failures, a failure trace, log-normal bandwidths, a work deadline, outages)
against failures alone, over 1,000 clients; and the shared server link's cost per transfer (one ends, one
starts, the next end is found) with 10, 100 and 1,000 transfers in flight. A trip makes two transfers.

    python benchmarks/behaviour_overhead.py
"""

from __future__ import annotations

import tempfile
import timeit
from pathlib import Path

import numpy as np

from fl_bench.engine.behaviour import UnreliableConfig, UnreliableDevices
from fl_bench.engine.link import SharedLink

CLIENTS, CALLS = 1000, 200_000


def devices(**knobs) -> UnreliableDevices:
    return UnreliableDevices(UnreliableConfig(**knobs), CLIENTS, seed=0, client_means=np.ones(CLIENTS))


def per_call(device: UnreliableDevices) -> float:
    """Seconds per ``shape`` call, best of 3 runs of CALLS calls over clients and start times that vary."""
    rng = np.random.default_rng(0)
    clients = rng.integers(0, CLIENTS, CALLS).tolist()
    starts = rng.uniform(0, 100, CALLS).tolist()
    computes = rng.exponential(1.0, CALLS).tolist()

    def run():
        for client, start, compute in zip(clients, starts, computes):
            device.shape(client, start, compute, 18216, 18216, np.inf, 10)

    return min(timeit.repeat(run, number=1, repeat=3)) / CALLS


def per_transfer(in_flight: int) -> float:
    """Seconds per transfer over a link with ``in_flight`` transfers of capped clients, best of 3."""
    rng = np.random.default_rng(0)
    link = SharedLink(1e6)
    for trip in range(in_flight):
        link.add(trip, 1e4, float(rng.uniform(1e3, 1e5)), 0.0)
    caps = rng.uniform(1e3, 1e5, 100_000).tolist()
    state = {"next": in_flight}

    def cycle():
        time, trip = link.next_completion()
        link.remove(trip, time)
        link.add(state["next"], 1e4, caps[state["next"] % len(caps)], time)
        state["next"] += 1

    calls = 2000
    return min(timeit.repeat(cycle, number=calls, repeat=3)) / calls


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "failures.csv"
        rng = np.random.default_rng(1)
        rows = sorted(zip(rng.integers(0, CLIENTS, 5000).tolist(), rng.uniform(0, 100, 5000).tolist()))
        trace.write_text("client,time\n" + "".join(f"{c},{t}\n" for c, t in rows))
        everything = devices(failure_rate=0.1, bandwidth=2e5, bandwidth_sigma=1.0, upload_fraction=0.5,
                             work_deadline=0.8, failure_trace=str(trace))
        everything.outages = [(10.0 * k, 10.0 * k + 5, rng.random(CLIENTS) < 0.2) for k in range(10)]
        for name, device in [("failures only", devices(failure_rate=0.1)), ("everything on", everything)]:
            print(f"{name}: {per_call(device) * 1e6:.2f} µs per trip")
    for in_flight in (10, 100, 1000):
        print(f"shared link, {in_flight} transfers in flight: {per_transfer(in_flight) * 1e6:.1f} µs per transfer")


if __name__ == "__main__":
    main()
