"""When each client can be selected: availability schedules (``conf/availability/``).

A schedule is a list of change events on its clock, ``unit=time`` (the virtual clock) or
``unit=steps`` (server steps: synchronous rounds, as FedLaAvg counts iterations). The population
applies the changes up to the current clock before it selects; a client that becomes unavailable
mid-trip either finishes (``on_unavailable=finish``) or is aborted when its window closes, a
wasted trip (``drop``; needs ``unit=time``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from omegaconf import MISSING

from fl_bench.data.label_groups import groups_by_label
from fl_bench.errors import ConfigError
from fl_bench.schema import choice, require, schema
from fl_bench.traces.formats import AVAILABILITY_FORMATS, read_windows

_NONE = np.zeros(0, dtype=np.int64)


class Availability(ABC):
    """The contract the engine relies on.

    ``initial()`` is the availability mask before any change; ``next_change()`` the clock of the
    next change not yet applied (``inf``: none), and ``pop_change()`` returns it as
    ``(clock, clients that become available, clients that become unavailable)``, in clock order.
    ``max_available()`` bounds how many clients are ever available at once (start-up checks), and
    ``window_end(client, t)`` is when the client's current availability window closes.
    """

    def __init__(self, cfg, num_clients: int):
        self.name: str = cfg.name
        self.unit: str = cfg.unit
        self.on_unavailable: str = cfg.on_unavailable
        self.num_clients = num_clients
        if self.on_unavailable == "drop" and self.unit != "time":
            raise ConfigError(
                f"availability.on_unavailable=drop is not allowed with availability.unit={self.unit}: "
                "a trip can only be cut at a window's end on the time clock (use unit=time)"
            )

    @abstractmethod
    def initial(self) -> np.ndarray:
        """The availability mask before any change is applied: a bool array of ``num_clients``,
        True where the client can be selected."""

    def next_change(self) -> float:
        """The clock of the next change not yet popped; ``inf`` when none is left (the default:
        a schedule that never changes)."""
        return math.inf

    def pop_change(self) -> tuple[float, np.ndarray, np.ndarray]:
        """Consume the next change: ``(clock, clients that become available, clients that become
        unavailable)``, int arrays, in clock order. Call only while :meth:`next_change` is finite."""
        raise IndexError("no availability change left")

    @abstractmethod
    def max_available(self) -> int:
        """The most clients available at once over the whole schedule; the simulator refuses,
        before the run, a step policy that needs more at once (and a schedule where this is 0)."""

    def window_end(self, client: int, t: float) -> float:
        """When the availability window of ``client`` that is open at clock ``t`` closes (``inf``:
        never); with ``on_unavailable=drop`` a trip started at ``t`` is cut there."""
        return math.inf

    def describe(self) -> str:
        """A short label of the schedule for error messages (default: its option name)."""
        return self.name


class AlwaysAvailable(Availability):
    """Full client availability (FedLaAvg's FCA): every client, all the time."""

    def __init__(self, cfg, data):
        super().__init__(cfg, data.num_clients)

    def initial(self):
        return np.ones(self.num_clients, dtype=bool)

    def max_available(self):
        return self.num_clients


class Diurnal(Availability):
    """FedLaAvg Fig. 1: client groups take turns. Group g (clients whose main label is in
    ``groups[g]``) is available for ``period * ratio**g`` clock units, then the next group, cycling;
    ``ratio`` skews how long each group is on (1: equal turns)."""

    def __init__(self, cfg, data):
        super().__init__(cfg, data.num_clients)
        group = groups_by_label(data.y.cpu().numpy(), data.offsets, data.num_classes, cfg.groups, "availability.groups")
        self.group = group
        self.members = [np.flatnonzero(group == g) for g in range(len(cfg.groups))]
        for g, members in enumerate(self.members):
            if not len(members):
                raise ConfigError(f"availability.groups[{g}]={cfg.groups[g]} holds no client: its turns would have no one available")
        self.on_time = [cfg.period * cfg.ratio**g for g in range(len(cfg.groups))]
        self.turn_start = np.concatenate([[0.0], np.cumsum(self.on_time)[:-1]])
        self.cycle = float(sum(self.on_time))
        self._boundary = 1  # boundary k starts group k % G's turn in cycle k // G

    def initial(self):
        return self.group == 0

    def _boundary_clock(self, k: int) -> float:
        cycle, g = divmod(k, len(self.members))
        return cycle * self.cycle + float(self.turn_start[g])

    def next_change(self):
        return math.inf if len(self.members) == 1 else self._boundary_clock(self._boundary)

    def pop_change(self):
        k, groups = self._boundary, len(self.members)
        self._boundary += 1
        return self._boundary_clock(k), self.members[k % groups], self.members[(k - 1) % groups]

    def max_available(self):
        return max(len(m) for m in self.members)

    def window_end(self, client, t):
        g = int(self.group[client])
        k = math.floor((t - self.turn_start[g]) / self.cycle)
        return k * self.cycle + float(self.turn_start[g]) + self.on_time[g]


class Trace(Availability):
    """Per-client availability windows from a trace file (fl_bench.traces.formats: fl_bench's CSV
    ``client,start,end``, FedScale's behaviour trace or FLGo's ping log): client i is available during
    its windows ``[start, end)`` on the schedule's clock; a client's windows must not overlap. Clients
    without a window are never available."""

    def __init__(self, cfg, data):
        super().__init__(cfg, data.num_clients)
        windows = read_windows(cfg.format, cfg.path, data.num_clients, "availability.path", cfg.wrap,
                               cfg.repeat_until, cfg.time_scale)
        clients, starts, ends = windows.clients, windows.starts, windows.ends
        self._first = np.searchsorted(clients, np.arange(data.num_clients + 1))  # CSR: client c's windows
        self._starts, self._ends = starts, ends
        # Change events in clock order; at one clock, windows that end there close before new ones open.
        clocks = np.concatenate([starts, ends])
        kind = np.concatenate([np.ones(len(starts), dtype=np.int8), np.zeros(len(ends), dtype=np.int8)])
        who = np.concatenate([clients, clients])
        by = np.lexsort((kind, clocks))
        self._clocks, self._kind, self._who = clocks[by], kind[by], who[by]
        self._cursor = 0
        running = np.cumsum(np.where(self._kind == 1, 1, -1))
        self._max = int(running.max()) if len(running) else 0
        if self._max == 0:
            raise ConfigError(f"availability.path={cfg.path} has no availability window: no client is ever available")

    def initial(self):
        return np.zeros(self.num_clients, dtype=bool)  # every window opens with a change event

    def next_change(self):
        return float(self._clocks[self._cursor]) if self._cursor < len(self._clocks) else math.inf

    def pop_change(self):
        clock = self._clocks[self._cursor]
        end = int(np.searchsorted(self._clocks, clock, side="right"))
        kind, who = self._kind[self._cursor : end], self._who[self._cursor : end]
        self._cursor = end
        return float(clock), who[kind == 1], who[kind == 0]

    def max_available(self):
        return self._max

    def window_end(self, client, t):
        lo, hi = self._first[client], self._first[client + 1]
        i = lo + int(np.searchsorted(self._starts[lo:hi], t, side="right")) - 1
        return float(self._ends[i]) if i >= lo and self._ends[i] > t else t


AVAILABILITY_UNITS = ("time", "steps")


ON_UNAVAILABLE = ("finish", "drop")


@dataclass
class AvailabilityConfig:
    """When each client can be selected (fl_bench.engine.availability)."""

    name: str = MISSING
    _target_: str = MISSING
    # The schedule's clock: time (the virtual clock) or steps (server steps = synchronous rounds).
    unit: str = "time"
    # A client that becomes unavailable mid-trip: finish (its trip completes) or drop (aborted when
    # its window closes; a wasted trip; needs unit=time).
    on_unavailable: str = "finish"

    def __post_init__(self) -> None:
        choice("availability.unit", self.unit, AVAILABILITY_UNITS)
        choice("availability.on_unavailable", self.on_unavailable, ON_UNAVAILABLE)


@schema("availability", "always", AlwaysAvailable)
class AlwaysAvailableConfig(AvailabilityConfig):
    """Every client available all the time (FedLaAvg's full client availability)."""


@schema("availability", "diurnal", Diurnal)
class DiurnalAvailabilityConfig(AvailabilityConfig):
    """FedLaAvg Fig. 1: groups of clients (by main label) take turns; group g is on for
    period * ratio**g clock units."""

    unit: str = "steps"
    groups: list[list[int]] = field(default_factory=lambda: [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
    period: float = 10.0
    ratio: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.groups) >= 1 and all(self.groups), "availability.groups", self.groups, "need >= 1 non-empty label lists")
        labels = [label for group in self.groups for label in group]
        require(len(labels) == len(set(labels)), "availability.groups", self.groups, "label groups must be disjoint")
        require(self.period > 0, "availability.period", self.period, "must be > 0")
        require(self.ratio > 0, "availability.ratio", self.ratio, "must be > 0")


@schema("availability", "trace", Trace)
class TraceAvailabilityConfig(AvailabilityConfig):
    """Per-client availability windows from a trace file (fl_bench.traces.formats)."""

    path: str = MISSING
    # csv: client,start,end rows | fedscale: FedScale's client_behave_trace | flgo_pings: FLGo's ping log
    format: str = "csv"
    # a trace with fewer clients than the dataset: refused (false) or client i takes entry i mod M (true)
    wrap: bool = False
    # fedscale / flgo_pings repeat with their period (finish_time, the log's length) until this trace time
    # (null: played once; then no client is available again)
    repeat_until: Optional[float] = None
    time_scale: float = 1.0  # virtual time per unit of trace time (e.g. 1/3600: hours of a trace in seconds)

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("availability.format", self.format, AVAILABILITY_FORMATS)
        require(math.isfinite(self.time_scale) and self.time_scale > 0, "availability.time_scale", self.time_scale,
                "must be > 0")
        require(self.repeat_until is None or self.repeat_until > 0, "availability.repeat_until", self.repeat_until,
                "must be > 0 (trace time) or null")
        require(self.format != "csv" or self.repeat_until is None, "availability.repeat_until", self.repeat_until,
                "needs a periodic trace (format fedscale or flgo_pings); csv windows are played as written")
        require(self.format != "csv" or not self.wrap, "availability.wrap", self.wrap,
                "needs format fedscale or flgo_pings (csv rows name their clients)")
