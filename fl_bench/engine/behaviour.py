"""How devices behave during a trip (``conf/behaviour/``, issue 32): trips that fail part-way and
communication that takes time on the virtual clock.

The delay law and speed model (fl_bench.engine.delays) give a trip's *compute* time. With
``behaviour=unreliable``:

- **communication**: the download takes ``bytes_down / bandwidth`` and the upload
  ``bytes_up / (bandwidth * upload_fraction)``, the bandwidth persistent per client: drawn once from a
  log-normal with median ``bandwidth`` (bytes per unit of virtual time; per group: ``group_bandwidths``)
  and log-spread ``bandwidth_sigma`` (APPFL's and FedScale's device profiles draw per-device network
  speeds), or from FedScale's device capacity trace (``bandwidth_trace``: ``bandwidth`` times the
  device's kbps over the clients' median). So the bytes every algorithm moves (FedGBO's broadcast of its
  server state, Mimelite's full-batch gradient upload) become time; a trip lasts download + compute +
  upload. With ``server_bandwidth`` every transfer in flight also shares the server's link
  (fl_bench.engine.link: max-min fair, each capped by its client's bandwidth): transfers slow each other
  down and their ends are found as the run goes.
- **failures**: each trip fails with probability ``failure_rate``, or its client's group's rate
  (``groups`` by main label, ``group_failure_rates``) (FLGo's and FedScale's dropped clients), at a time
  uniform over its duration (at its own bandwidth, which a shared link only lengthens): it spends that
  time, sends nothing, frees its concurrency slot, and the server never sees it (trips.csv: ``used=0``,
  ``failed=1``). With a hazard (``failure_hazard``, failures per unit of time) a trip fails at its
  first Exp(hazard) arrival, so long trips fail more often; a failure trace (``failure_trace``, CSV
  ``client,time``) fails the trip its client runs at each listed time.
- **partial work**: with ``work_deadline`` a trip's local training may last at most that long (virtual
  time, or with ``work_deadline_unit=mean_compute`` that many times the client's expected compute time).
  A trip whose compute draw c is longer stops at the deadline D and uploads the update of the
  floor(Q * D / c) local steps it finished out of its Q (FLGo's "completeness"; FedProx's partial
  work of stragglers); the step count travels in the upload (``Upload.steps``, trips.csv
  ``local_steps``), where FedNova-style normalisation can use it (``algorithm.step_normalisation``).
  One that finishes no step uploads nothing (``failed=4``).
- **correlated outages**: ``outages``, windows ``{labels, start, end}`` in which every client whose
  main label is in ``labels`` (a label group), or ``{clients, start, end}`` every listed client (a
  region), is offline together: none of them is selected, and their trips running at ``start`` fail
  there (trips.csv: ``failed=2``).

Draws come from a generator of their own (seeded from the run's seed), so a run without them makes
the same draws as before and its results stay byte-identical (``behaviour=reliable``, the default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from omegaconf import MISSING

from fl_bench.data.label_groups import groups_by_label, majority_labels
from fl_bench.engine.availability import Availability
from fl_bench.engine.link import SharedLink
from fl_bench.errors import ConfigError
from fl_bench.schema import choice, require, schema
from fl_bench.traces.formats import read_failure_times, read_fedscale_capacity


@dataclass
class BehaviourConfig:
    """How devices behave during a trip (module docstring)."""

    name: str = MISSING
    _target_: str = MISSING


def reliable(cfg, data, seed: int, client_means=None) -> None:
    """behaviour=reliable: no failures, free communication (the engine skips the behaviour step)."""
    return None


@schema("behaviour", "reliable", reliable)
class ReliableConfig(BehaviourConfig):
    """behaviour=reliable: every trip computes in full and communication costs no time."""


@dataclass
class TripShape:
    """One trip's timing: how long it lasts (to its upload's arrival, or to its failure or outage), and of
    that the time spent communicating and computing (download, then compute, then upload)."""

    duration: float
    comm_time: float
    compute_time: float
    failed: int  # 0; 1: the device failed; 2: an outage took it offline; 3: its availability window closed;
    # 4: the work deadline came before its first local step
    steps: int  # local steps it trains (its full work, or what it finished by the work deadline)
    # With a shared server link (its transfers' times unknown at the start): ``duration`` is when the trip is
    # cut (inf: never) for reason ``failed``, ``certain`` whether it is cut for sure (a failure drawn within
    # its duration at its own bandwidth, which the link only lengthens) or only if it is still running then,
    # and ``gives_up`` whether it uploads nothing when its compute ends (no step by the work deadline)
    certain: bool = True
    gives_up: bool = False
    download: float = 0.0  # of ``comm_time``, the download at its own bandwidth (what comes before computing)


class UnreliableDevices:
    """Per-client bandwidths and a failure draw per trip (module docstring). All its state (the
    bandwidths, its generator) is pickled with the simulator, so a resumed run draws as an
    uninterrupted one."""

    def __init__(self, cfg: "UnreliableConfig", num_clients: int, seed: int, group_of: np.ndarray | None = None,
                 client_means: np.ndarray | None = None):
        # each client's failure probability: one for all, or its group's (``group_of``: client -> group)
        self.failure_rate = (np.asarray(cfg.group_failure_rates)[group_of] if cfg.group_failure_rates is not None
                             else np.full(num_clients, cfg.failure_rate))
        self.rng = np.random.default_rng([seed, 0x5EED32])  # a stream of its own (module docstring)
        self.failure_hazard = cfg.failure_hazard  # failures per unit of virtual time (None: none)
        self.bandwidth = None
        if cfg.bandwidth_trace is not None:
            _, kbps = read_fedscale_capacity(cfg.bandwidth_trace, num_clients, "behaviour.bandwidth_trace",
                                             cfg.bandwidth_trace_wrap)
            self.bandwidth = cfg.bandwidth * kbps / np.median(kbps)
        elif cfg.bandwidth is not None or cfg.group_bandwidths is not None:  # a median for all, or its group's
            median = cfg.bandwidth if cfg.group_bandwidths is None else np.asarray(cfg.group_bandwidths)[group_of]
            self.bandwidth = median * np.exp(cfg.bandwidth_sigma * self.rng.standard_normal(num_clients))
        # the server link every transfer shares (None: each client's bandwidth is its own)
        self.link = SharedLink(cfg.server_bandwidth) if cfg.server_bandwidth is not None else None
        # client c's failure times (failure trace): times[first[c]:first[c + 1]]
        self.failure_times = None
        if cfg.failure_trace is not None:
            self.failure_times = read_failure_times(cfg.failure_trace, num_clients, "behaviour.failure_trace")
        self.upload_fraction = cfg.upload_fraction
        # each client's work deadline: the most time its local training may take (None: no deadline)
        self.work_deadline = None
        if cfg.work_deadline is not None:
            scale = 1.0 if cfg.work_deadline_unit == "time" else np.asarray(client_means, dtype=float)
            self.work_deadline = np.broadcast_to(cfg.work_deadline * scale, (num_clients,)).copy()
        self.outages: list[tuple[float, float, np.ndarray]] = []  # (start, end, its clients), set by ``unreliable``

    def traced_failure(self, client: int, start: float, end: float) -> float | None:
        """The first failure time of ``client`` in its failure trace within its trip over (start, end)."""
        if self.failure_times is None:
            return None
        first, times = self.failure_times
        mine = times[first[client] : first[client + 1]]
        i = int(np.searchsorted(mine, start, side="right"))
        return float(mine[i]) if i < len(mine) and mine[i] < end else None

    def outage_cut(self, client: int, start: float, end: float) -> float | None:
        """When an outage of ``client`` begins during its trip over [start, end) (None: none does)."""
        cuts = [s for s, e, clients in self.outages if start < s < end and clients[client]]
        return min(cuts) if cuts else None

    def with_outages(self, availability: Availability) -> Availability:
        """``availability`` with the outage windows' clients offline during them."""
        return availability if not self.outages else OutageAvailability(availability, self.outages)

    def client_bandwidth(self, client: int, upload: bool) -> float:
        """``client``'s bandwidth for a download or an upload (inf: not limited by its own link)."""
        if self.bandwidth is None:
            return math.inf
        return float(self.bandwidth[client]) * (self.upload_fraction if upload else 1.0)

    @property
    def partial(self) -> bool:
        """Whether trips may train fewer than their full local steps (a work deadline is set)."""
        return self.work_deadline is not None

    def shape(self, client: int, start: float, compute: float, bytes_down: int, bytes_up: int,
              window_end: float = math.inf, steps: int = 1) -> TripShape:
        """The timing of a trip of ``client`` from ``start`` whose local training of ``steps`` local steps
        takes ``compute``; with ``availability.on_unavailable=drop``, ``window_end`` is when its
        availability window closes."""
        down = bytes_down / self.client_bandwidth(client, False)  # 0 without bandwidths
        up = bytes_up / self.client_bandwidth(client, True)
        gives_up = False
        if self.work_deadline is not None and compute > self.work_deadline[client]:
            budget = float(self.work_deadline[client])
            steps = int(steps * budget / compute)  # the steps finished; the one in progress is lost
            compute = budget
            if steps == 0:  # nothing to upload: it gives up at the deadline
                up, gives_up = 0.0, True
        elapsed, failed, certain = down + compute + up, 0, False
        rate = self.failure_rate[client]
        if rate and self.rng.random() < rate:
            elapsed, failed, certain = self.rng.random() * elapsed, 1, True
        # the times that cut it short: up to its end, or with a shared link (whose end is not known yet) any
        end = start + elapsed if self.link is None or certain else math.inf
        if self.failure_hazard:  # a device that fails at rate h: the first failure, Exp(1 / h) after the start
            at = start + self.rng.exponential(1.0 / self.failure_hazard)
            if at < end:
                end, failed = at, 1
        traced = self.traced_failure(client, start, end)
        if traced is not None:
            end, failed = traced, 1
        cut = self.outage_cut(client, start, end)
        if cut is not None:
            end, failed = cut, 2
        if end > window_end:  # dropped at its window's end (not a device failure)
            end, failed = window_end, 3
        if self.link is not None:  # the simulator times its transfers over the link
            return TripShape(end - start, 0.0, compute, failed, 0 if gives_up else steps, certain, gives_up)
        elapsed = end - start
        if not failed and not gives_up:
            return TripShape(elapsed, down + up, compute, 0, steps, download=down)
        computed = min(max(elapsed - down, 0.0), compute)  # what it spent before, by phase
        return TripShape(elapsed, elapsed - computed, computed, failed or 4, 0, download=down)


def unreliable(cfg: "UnreliableConfig", data, seed: int, client_means: np.ndarray | None = None) -> UnreliableDevices:
    """The devices of ``data``'s clients, grouped by main label when ``cfg.groups`` is set;
    ``client_means``: each client's expected compute time (``work_deadline_unit=mean_compute``)."""
    group_of = None
    if cfg.groups is not None:
        group_of = groups_by_label(data.y.cpu().numpy(), data.offsets, data.num_classes, cfg.groups, "behaviour.groups")
    devices = UnreliableDevices(cfg, data.num_clients, seed, group_of, client_means)
    labels = None
    for i, outage in enumerate(cfg.outages or []):  # shapes checked by UnreliableConfig: ranges against the data here
        key = f"behaviour.outages[{i}]"
        start, end = float(outage["start"]), float(outage["end"])
        if "clients" in outage:
            require(all(0 <= c < data.num_clients for c in outage["clients"]), key, dict(outage),
                    f"names a client outside the dataset's 0..{data.num_clients - 1}")
            members = np.zeros(data.num_clients, dtype=bool)
            members[list(outage["clients"])] = True
        else:
            require(all(0 <= label < data.num_classes for label in outage["labels"]), key, dict(outage),
                    f"names a label outside the dataset's 0..{data.num_classes - 1}")
            if labels is None:
                labels = majority_labels(data.y.cpu().numpy(), data.offsets, data.num_classes)
            members = np.isin(labels, list(outage["labels"]))
        devices.outages.append((start, end, members))
    return devices


WORK_DEADLINE_UNITS = ("time", "mean_compute")
OUTAGE_EXAMPLE = "{labels: [0, 1], start: 100, end: 200} or {clients: [3, 17], start: 100, end: 200}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_outage(key: str, outage: Any) -> None:
    """One outage window's shape (before any run): a mapping of labels or clients (lists of integers
    >= 0), start and end (numbers, 0 <= start < end)."""
    shown = dict(outage) if isinstance(outage, dict) else outage
    allowed = f"give labels (or clients), start and end, e.g. {OUTAGE_EXAMPLE}"
    require(isinstance(outage, dict) and set(outage) in ({"labels", "start", "end"}, {"clients", "start", "end"}),
            key, shown, allowed)
    members = "clients" if "clients" in outage else "labels"
    ids = outage[members]
    require(isinstance(ids, list) and ids and all(_is_int(i) and i >= 0 for i in ids), f"{key}.{members}", ids,
            f"must be a non-empty list of integer {'client ids' if members == 'clients' else 'labels'} >= 0, e.g. [3, 17]")
    for bound in ("start", "end"):
        value = outage[bound]
        require(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
                f"{key}.{bound}", value, "must be a number (virtual time)")
    require(0 <= outage["start"] < outage["end"], key, shown, "needs 0 <= start < end (virtual time)")


@schema("behaviour", "unreliable", unreliable)
class UnreliableConfig(BehaviourConfig):
    """behaviour=unreliable: trips fail with ``failure_rate`` (or their group's rate); with ``bandwidth``
    set, communication takes bytes / bandwidth on the clock (module docstring)."""

    failure_rate: Optional[float] = 0.1  # probability that a trip fails part-way, in [0, 1); null with group rates
    # Per group: group g holds the clients whose main label is in groups[g] (as speed=by_group); its trips fail
    # with group_failure_rates[g] (e.g. a region on flaky links) and its median bandwidth is group_bandwidths[g]
    groups: Optional[list[list[int]]] = None
    group_failure_rates: Optional[list[float]] = None
    group_bandwidths: Optional[list[float]] = None
    # Windows in which a group of clients (by main label, or listed) is offline together:
    # [{labels: [0, 1], start: 100, end: 200}, {clients: [3, 17], start: 50, end: 80}]
    outages: Optional[list[Any]] = None
    failure_trace: Optional[str] = None  # a CSV client,time: each client's device fails at its listed times
    # failures per unit of virtual time while a trip runs (a hazard: longer trips fail more often); null: none
    failure_hazard: Optional[float] = None
    bandwidth: Optional[float] = None  # median bytes per unit of virtual time; null: communication is free
    bandwidth_sigma: float = 0.0  # log-normal spread of the clients' bandwidths (0: all equal)
    upload_fraction: float = 1.0  # upload bandwidth / download bandwidth (uplinks are often slower)
    # FedScale's client_device_capacity: client i's bandwidth is `bandwidth` times its device's kbps over the
    # clients' median (in place of bandwidth_sigma); _wrap: fewer devices than clients reuse them (i mod M)
    bandwidth_trace: Optional[str] = None
    bandwidth_trace_wrap: bool = False
    # the server's link, shared max-min fairly by every transfer in flight (bytes per unit of virtual time;
    # null: no shared bottleneck, each transfer runs at its client's bandwidth)
    server_bandwidth: Optional[float] = None
    # Partial work: a trip's local training lasts at most this long and uploads the steps it finished
    # (null: every trip does its full work)
    work_deadline: Optional[float] = None
    # time: work_deadline is virtual time | mean_compute: a multiple of the client's expected compute time
    work_deadline_unit: str = "time"

    def __post_init__(self) -> None:
        b = "behaviour."
        for i, outage in enumerate(self.outages or []):
            check_outage(f"{b}outages[{i}]", outage)
        for key in ("group_failure_rates", "group_bandwidths"):
            values = getattr(self, key)
            if values is None:
                continue
            require(self.groups is not None, b + key, values, "needs behaviour.groups (the label sets it belongs to)")
            require(len(values) == len(self.groups), b + key, values, f"needs one value per group ({len(self.groups)})")
        if self.groups is not None:  # else they would be ignored
            require(self.group_failure_rates is not None or self.group_bandwidths is not None, b + "groups",
                    self.groups, "needs behaviour.group_failure_rates or behaviour.group_bandwidths (what differs by group)")
        if self.group_failure_rates is None:
            require(self.failure_rate is not None and 0 <= self.failure_rate < 1, b + "failure_rate",
                    self.failure_rate, "must be in [0, 1): at 1 every trip fails and the server never steps")
        else:
            require(self.failure_rate is None, b + "failure_rate", self.failure_rate,
                    "must be null with behaviour.group_failure_rates (which gives each group's)")
            require(all(0 <= rate <= 1 for rate in self.group_failure_rates), b + "group_failure_rates",
                    self.group_failure_rates, "must each be in [0, 1]")
            require(min(self.group_failure_rates) < 1, b + "group_failure_rates", self.group_failure_rates,
                    "must not all be 1: every trip would fail and the server never step")
        if self.group_bandwidths is not None:
            require(self.bandwidth is None, b + "bandwidth", self.bandwidth,
                    "must be null with behaviour.group_bandwidths (which gives each group's median)")
            require(all(math.isfinite(v) and v > 0 for v in self.group_bandwidths), b + "group_bandwidths",
                    self.group_bandwidths, "must each be > 0 (bytes per unit of virtual time)")
        require(self.bandwidth is None or (math.isfinite(self.bandwidth) and self.bandwidth > 0), b + "bandwidth",
                self.bandwidth, "must be > 0 (bytes per unit of virtual time) or null (free communication)")
        require(math.isfinite(self.bandwidth_sigma) and self.bandwidth_sigma >= 0, b + "bandwidth_sigma",
                self.bandwidth_sigma, "must be >= 0")
        require(math.isfinite(self.upload_fraction) and self.upload_fraction > 0, b + "upload_fraction",
                self.upload_fraction, "must be > 0")
        require(self.work_deadline is None or (math.isfinite(self.work_deadline) and self.work_deadline > 0),
                b + "work_deadline", self.work_deadline, "must be > 0 or null (every trip does its full work)")
        choice(b + "work_deadline_unit", self.work_deadline_unit, WORK_DEADLINE_UNITS)
        require(self.work_deadline is not None or self.work_deadline_unit == "time", b + "work_deadline_unit",
                self.work_deadline_unit, "needs behaviour.work_deadline (the deadline it is the unit of)")
        require(self.bandwidth_trace is not None or not self.bandwidth_trace_wrap, b + "bandwidth_trace_wrap",
                self.bandwidth_trace_wrap, "needs behaviour.bandwidth_trace (the trace whose entries it reuses)")
        require(self.failure_hazard is None or (math.isfinite(self.failure_hazard) and self.failure_hazard > 0),
                b + "failure_hazard", self.failure_hazard, "must be > 0 (failures per unit of virtual time) or null")
        require(self.server_bandwidth is None or (math.isfinite(self.server_bandwidth) and self.server_bandwidth > 0),
                b + "server_bandwidth", self.server_bandwidth, "must be > 0 (bytes per unit of virtual time) or null")
        if self.bandwidth_trace is not None:
            require(self.bandwidth is not None, b + "bandwidth_trace", self.bandwidth_trace,
                    "needs behaviour.bandwidth (the median the trace's relative speeds scale)")
            require(self.bandwidth_sigma == 0, b + "bandwidth_sigma", self.bandwidth_sigma,
                    "must be 0 with behaviour.bandwidth_trace (the trace gives the spread)")
        if self.bandwidth is None and self.group_bandwidths is None:  # no communication time for them to shape
            require(self.bandwidth_sigma == 0, b + "bandwidth_sigma", self.bandwidth_sigma,
                    "needs behaviour.bandwidth (the median it spreads around)")
            require(self.upload_fraction == 1, b + "upload_fraction", self.upload_fraction,
                    "needs behaviour.bandwidth (the downlink it is a fraction of)")


class OutageAvailability(Availability):
    """An availability schedule with outage windows laid over it: a client can be selected when the
    schedule says so and no outage of its holds it offline (``unit=time`` only: outages are times)."""

    def __init__(self, base: Availability, outages: list[tuple[float, float, np.ndarray]]):
        if base.unit != "time":
            raise ConfigError(f"behaviour.outages is not allowed with availability.unit={base.unit}: outages are windows "
                              f"of virtual time; use availability.unit=time")
        self.base, self.name, self.unit, self.on_unavailable = base, base.name, base.unit, base.on_unavailable
        self.num_clients = base.num_clients
        self.base_up = base.initial().copy()
        self.offline = np.zeros(self.num_clients, dtype=np.int64)  # outages holding each client now
        # (clock, +1 starts / -1 ends, clients), ends before starts at one clock
        self.events = sorted([(s, 1, c) for s, _, c in outages] + [(e, -1, c) for _, e, c in outages],
                             key=lambda event: (event[0], event[1]))
        self.cursor = 0

    def initial(self):
        return self.base_up & (self.offline == 0)

    def next_change(self):
        own = self.events[self.cursor][0] if self.cursor < len(self.events) else math.inf
        return min(self.base.next_change(), own)

    def pop_change(self):
        clock = self.next_change()
        before = self.initial()
        while self.base.next_change() == clock:
            _, on, off = self.base.pop_change()
            self.base_up[off] = False
            self.base_up[on] = True
        while self.cursor < len(self.events) and self.events[self.cursor][0] == clock:
            _, sign, clients = self.events[self.cursor]
            self.offline[clients] += sign
            self.cursor += 1
        after = self.initial()
        return clock, np.flatnonzero(after & ~before), np.flatnonzero(before & ~after)

    def max_available(self):
        return self.base.max_available()

    def window_end(self, client, t):
        return self.base.window_end(client, t)

    def describe(self):
        return f"{self.base.describe()} with outages"
