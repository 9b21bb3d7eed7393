"""Work schedules: how many local steps a trip trains, decided by the server as the trip starts (a component
kind, chosen with ``algorithm/work_schedule=<name>``, its knobs ``algorithm.work_schedule.<key>=...``).

A trip's duration drawn from its client's delay law is the time of the client's *full work* (the workload's
``local_epochs`` or ``local_steps``: the same for every algorithm); a trip assigned Q local steps out of a full
work of F computes for Q / F of it, so every method's clients step at the same speed.

- :class:`FixedWork` (``fixed``, every algorithm's default): every trip does its client's full work.
- :class:`CompassSchedule` (``compass``): FedCompass's scheduler (Li et al., ICLR 2024; its release
  APPFL/FedCompass@af96db2, ``src/appfl/scheduler/compass_scheduler.py``, read, not copied): it estimates each
  client's time per local step and gives each trip the steps that make clients of similar speed arrive
  together, in *arrival groups* that the server aggregates at once (:class:`fl_bench.engine.protocol.Compass`).

A plugin adds a schedule as every component: a :class:`WorkSchedule` subclass, its config with
``@schema("work_schedule", name, cls)``, and ``conf/algorithm/work_schedule/<name>.yaml``
(docs/extending/plugins.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np
from omegaconf import MISSING

from fl_bench.contracts import TripView
from fl_bench.schema import import_path, require, schema

# floor((T - t) / S) on floating-point times: an exact quotient computed as 2.9999999 counts as 3
_EXACT = 1e-9


class WorkSchedule:
    """The local steps of each trip, decided at its start (module docstring). The engine calls :meth:`assign`
    for the trips it starts and :meth:`observe` for each trip that ends, before the step policy sees it. The
    base gives every trip its full work and learns nothing."""

    # every trip does its client's full work (the engine then passes no step counts to the trainer)
    fixed: ClassVar[bool] = True
    # the step policy (fl_bench.engine.protocol) whose steps the schedule needs, if one: its name
    step_policy: ClassVar[Optional[str]] = None

    def __init__(self, cfg=None):
        self.cfg = cfg

    def assign(self, clients: list[int], now: float, full: np.ndarray) -> list[int]:
        """The local steps of trips of ``clients`` starting at ``now``; ``full[i]`` is client i's full work."""
        return [int(f) for f in full]

    def observe(self, trip: TripView) -> None:
        """A trip ended (its ``start``, ``end``, ``steps`` trained, ``aborted``)."""


class FixedWork(WorkSchedule):
    """Every trip does its client's full work: ``local_epochs`` epochs, or ``local_steps`` steps."""


@dataclass
class WorkScheduleConfig:
    """The base schema of the work schedules: an algorithm's config types its ``work_schedule`` as this, so that
    any option composes over it (OmegaConf merges only subclasses of the node's type). Left as it is (an
    algorithm YAML that chooses no option), the fixed schedule."""

    name: str = MISSING
    # The class that :func:`fl_bench.schema.build` makes the schedule from, with this config
    _target_: str = import_path(FixedWork)

    def __post_init__(self) -> None:
        option = "fixed" if type(self) is WorkScheduleConfig else type(self).name
        require(self.name == option, "algorithm.work_schedule.name", self.name,
                "is set by the option: choose it with algorithm/work_schedule=<name>")


@schema("work_schedule", "fixed", FixedWork)
class FixedWorkConfig(WorkScheduleConfig):
    """Every trip does its client's full work (``algorithm.local_epochs`` / ``algorithm.local_steps``)."""


def schema_work_schedule() -> WorkScheduleConfig:
    """An algorithm config's default work schedule: the base schema (the fixed one), over which a YAML's choice
    composes."""
    return WorkScheduleConfig(name="fixed")


@dataclass
class Group:
    """A FedCompass arrival group: the clients still training for it (``pending``, in the order they joined), the
    trips that arrived in time (``arrived``), its expected arrival time T_a and its latest one T_max, and whether
    the server has aggregated it (then nobody joins it, and a member still pending arrives late)."""

    pending: list[int]
    arrived: list
    expected: float
    latest: float
    open: bool = True


class CompassSchedule(WorkSchedule):
    """FedCompass's scheduler (module docstring; the file and line numbers are the release's,
    ``compass_scheduler.py`` @af96db2). Symbols: S_i the client's time per local step, Q_i a trip's steps in
    [Q_min, Q_max], lambda the latest-time factor, beta the speed momentum.

    - Speed (``_record_info``, 91-121): at each arrival, m = (end - start) / steps trained; S_i = m at the
      client's first, else S_i <- (1 - beta) S_i + beta m (beta weighs the new measurement, as in the code).
    - A client whose speed is not known yet trains ``first_trip_steps`` (Q_min as the paper's Figure 1; Q_max
      as the released configs) in no group: its arrival is a server step of its own (``_single_update``).
    - AssignGroup (264-304), fastest client first: JoinGroup (306-339) gives it Q = floor((T_a - t) / S_i)
      steps in the open group where that is largest within [Q_min, Q_max] (ties: the later group); else
      CreateGroup (341-407): Q = the largest floor((T_max^g + S_fast^g Q_max - t) / S_i) <= Q_max over the
      groups with t < T_max^g (S_fast^g their fastest member's S), raised to Q_min, or Q_max where no group
      qualifies; the new group expects it at T_a = t + Q S_i, and waits until T_max = t + lambda Q S_i.
    - An arrival after T_max (strictly) or after its group was aggregated is late: its upload waits in the
      general buffer for the next aggregation of any group (``_group_update``, 176).

    Every floor is of (x + 1e-9): a quotient that is exact in real numbers counts as its integer on the
    virtual clock's floating-point times. All state is plain data (the checkpoint pickles it)."""

    fixed = False
    step_policy = "Compass"  # its groups are aggregated by that policy, and by no other

    def __init__(self, cfg):
        super().__init__(cfg)
        self.q_min, self.q_max = cfg.q_min, cfg.q_max
        self.speed: dict[int, float] = {}  # S_i, per client whose speed is known
        self.group_of: dict[int, int] = {}  # client -> the group its running trip aims at
        self.groups: dict[int, Group] = {}  # in creation order (JoinGroup's tie-break)
        self.created: list[tuple[float, int]] = []  # (T_max, group) of groups created since the policy last took them
        self._next_group = 0

    # ------------------------------------------------------------------ the engine's calls
    def assign(self, clients: list[int], now: float, full: np.ndarray) -> list[int]:
        """Each client's steps: the fastest known client first (it may create the group the slower ones join),
        clients of unknown speed ``first_trip_steps`` in no group."""
        first = self.q_min if self.cfg.first_trip_steps == "min" else self.q_max
        steps = {c: first for c in clients}
        for client in sorted((c for c in clients if c in self.speed), key=lambda c: self.speed[c]):
            steps[client] = self._join(client, now) or self._create(client, now)
        return [steps[c] for c in clients]

    def observe(self, trip: TripView) -> None:
        """The speed estimate (class docstring), from a trip that trained."""
        if trip.aborted or trip.steps <= 0:
            return
        measured = (trip.end - trip.start) / trip.steps
        known = self.speed.get(trip.client)
        beta = self.cfg.speed_momentum
        self.speed[trip.client] = measured if known is None else (1 - beta) * known + beta * measured

    # ------------------------------------------------------------------ the step policy's calls
    def arrive(self, trip: TripView, now: float) -> tuple[str, int | None]:
        """Where a trip that ended goes, with its group: ``single`` (it was in no group: a step of its own),
        ``late``, ``lost`` (it brought no upload), ``waits`` (on time, others of its group still out) or
        ``complete`` (on time, the last of its group)."""
        group_id = self.group_of.pop(trip.client, None)
        if group_id is None:
            return ("lost" if trip.aborted else "single"), None
        group = self.groups[group_id]
        group.pending.remove(trip.client)
        if trip.aborted or not group.open or now > group.latest:
            if not group.pending and not group.arrived:
                del self.groups[group_id]
            return ("lost" if trip.aborted else "late"), group_id
        group.arrived.append(trip)
        return ("waits" if group.pending else "complete"), group_id

    def due(self, group_id: int) -> bool:
        """Whether a group's T_max timer aggregates it: it is still open and some upload arrived in time."""
        group = self.groups.get(group_id)
        return group is not None and group.open and bool(group.arrived)

    def close(self, group_id: int) -> list:
        """Aggregate a group: its on-time trips, in arrival order; nobody can join it any more."""
        group = self.groups[group_id]
        arrived, group.arrived, group.open = group.arrived, [], False
        if not group.pending:
            del self.groups[group_id]
        return arrived

    # ------------------------------------------------------------------ AssignGroup
    def _join(self, client: int, now: float) -> int:
        """JoinGroup: the steps in the best open group (0: none fits)."""
        best, chosen = 0, None
        speed = self.speed[client]
        for group_id, group in self.groups.items():
            if not group.open:
                continue
            steps = math.floor((group.expected - now) / speed + _EXACT)
            if self.q_min <= steps <= self.q_max and steps >= best:
                best, chosen = steps, group_id
        if chosen is None:
            return 0
        self.groups[chosen].pending.append(client)
        self.group_of[client] = chosen
        return best

    def _create(self, client: int, now: float) -> int:
        """CreateGroup: a new group for ``client``; its steps."""
        speed, steps = self.speed[client], -1
        for group in self.groups.values():
            if group.open and now < group.latest:
                members = [*group.pending, *(t.client for t in group.arrived)]
                fastest = min(self.speed[c] for c in members)
                candidate = math.floor((group.latest + fastest * self.q_max - now) / speed + _EXACT)
                if candidate <= self.q_max:
                    steps = max(steps, candidate)
        steps = self.q_max if steps < 0 else max(steps, self.q_min)
        group_id, self._next_group = self._next_group, self._next_group + 1
        latest = now + self.cfg.latest_time_factor * steps * speed
        self.groups[group_id] = Group([client], [], now + steps * speed, latest)
        self.group_of[client] = group_id
        self.created.append((latest, group_id))
        return steps


FIRST_TRIP_STEPS = ("min", "max")


@schema("work_schedule", "compass", CompassSchedule)
class CompassScheduleConfig(WorkScheduleConfig):
    """FedCompass's scheduler (:class:`CompassSchedule`). Defaults: the released configs' Q_max/Q_min ratio of 5,
    lambda 1.5 and beta 0.9 (every released config; the paper's lambda could not be read here), and the paper's
    Figure 1 first trips of Q_min steps."""

    q_min: int = 20  # Q_min
    q_max: int = 100  # Q_max
    latest_time_factor: float = 1.5  # lambda: T_max = t + lambda (T_a - t)
    speed_momentum: float = 0.9  # beta: the new measurement's weight in S_i
    first_trip_steps: str = "min"  # a client of unknown speed trains Q_min (min) or Q_max (max) steps

    def __post_init__(self) -> None:
        super().__post_init__()
        w = "algorithm.work_schedule."
        require(self.q_min >= 1, w + "q_min", self.q_min, "must be >= 1")
        require(self.q_max >= self.q_min, w + "q_max", self.q_max, f"must be >= q_min ({self.q_min})")
        require(math.isfinite(self.latest_time_factor) and self.latest_time_factor >= 1, w + "latest_time_factor",
                self.latest_time_factor, "must be >= 1 (T_max is never before T_a)")
        require(0 < self.speed_momentum <= 1, w + "speed_momentum", self.speed_momentum, "must be in (0, 1]")
        require(self.first_trip_steps in FIRST_TRIP_STEPS, w + "first_trip_steps", self.first_trip_steps,
                "must be min (Q_min, the paper's Figure 1) or max (Q_max, the released configs)")

