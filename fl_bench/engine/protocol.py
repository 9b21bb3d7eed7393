"""Step policies: when trips start and when the server steps, on the one event loop.

- :class:`BufferedAsync` (FedBuff, FedAsync; FedBuff Sec. 6, App. B.2): clients arrive at a
  constant rate until ``concurrency`` trips are in flight; a finished trip is replaced at once; the
  server steps every ``buffer_size`` uploads.
- :class:`Rounds` (the FedAvg family): a round starts ``ceil((1 + over_selection) * cohort)``
  clients on one model version (or every available one) and closes when ``cohort`` of its uploads
  are in, when all its trips are over, or at its ``deadline`` (only then with ``fixed_rounds``); then the server steps and the next
  round starts. A trip still running at the close is dropped (a wasted trip, as over-selection does)
  or, with ``late_uploads=deliver``, finishes and joins the round open when it arrives, with its
  staleness and start version (HFL's stragglers). The role FLSim gives ``should_update_global_model``.

- :class:`Compass` (FedCompass, Li et al., ICLR 2024): ``concurrency`` clients train at once, each trip's local
  steps set by the Compass work schedule (:class:`fl_bench.engine.work.CompassSchedule`) so that clients of
  similar speed arrive together in a group; the server steps when a group's last member arrives or at its
  latest time T_max, and at once on each arrival of a client of unknown speed.

Each policy also decides when trips *count*: asynchronously as each trip ends, synchronously when
its round closes (evaluations and the trip budget see whole rounds, as before). Both implement
:class:`fl_bench.contracts.StepPolicy`, whose docstrings are the hooks' contract.
"""

from __future__ import annotations

import math
from typing import Any

from fl_bench.contracts import StepPolicy, TripView
from fl_bench.engine.work import CompassSchedule
from fl_bench.errors import ConfigError


class BufferedAsync(StepPolicy):
    """FedBuff's asynchronous protocol (Sec. 6, App. B.2): clients arrive at ``arrival_rate`` (null:
    concurrency / mean trip duration) until ``concurrency`` trips are in flight, a finished trip is
    replaced at once (or when a client becomes available), and the server steps every
    ``buffer_size`` uploads. Each trip counts as it ends."""

    knobs = ("buffer_size",)

    @classmethod
    def from_config(cls, cfg, concurrency, arrival_rate, takes_all):
        if takes_all:
            raise ConfigError(
                f"selection=all_available is not allowed with algorithm={cfg.name}: it starts every available client "
                "at once, which only a synchronous round does (use selection=uniform)"
            )
        return cls(concurrency, cfg.buffer_size, arrival_rate)

    def __init__(self, concurrency: int, buffer_size: int, arrival_rate: float | None):
        self.concurrency = concurrency
        self.buffer_size = buffer_size
        self.arrival_rate = arrival_rate  # null: concurrency / mean trip duration
        self.ramped = 0  # ramp-up arrivals so far; concurrency of them fill the system
        self.missing = 0  # trips that found no available client, started when some become available
        self._next_arrival = 0.0

    def clients_at_once(self):
        return self.concurrency

    def begin(self, sim):
        self.arrival_rate = self.arrival_rate or self.concurrency / sim.delays.mean()
        sim.schedule_tick(0.0)

    def on_tick(self, sim):
        self._next_arrival += 1.0 / self.arrival_rate  # constant-rate arrivals until M are in flight
        self.ramped += 1
        self._start(sim, 1)
        if self.ramped < self.concurrency:
            sim.schedule_tick(self._next_arrival)

    def on_trip_end(self, sim, trip):
        if not trip.aborted:
            sim.buffer.append(trip)
        sim.count_trips()
        if len(sim.buffer) == self.buffer_size:
            sim.server_step()
        if sim.evaluate_if_due():
            return
        # A new client takes the finished one's place (and any place left empty for lack of clients).
        missing, self.missing = self.missing, 0
        self._start(sim, 1 + missing)

    def on_availability(self, sim):
        if self.missing:
            missing, self.missing = self.missing, 0
            self._start(sim, missing)

    def _start(self, sim, count):
        started = len(sim.start_trips(count))
        if started < count:
            self.missing += count - started
            sim.wait_for_clients()


class Rounds(StepPolicy):
    """Synchronous rounds (module docstring): a round starts ``round_size`` = ceil((1 + over_selection)
    cohort) trips on one model version, or every available client with ``takes_all``; it closes when
    ``cohort`` of its uploads are in, all its trips are over, or at its ``deadline`` (only then with
    ``fixed_rounds``); the server then steps once and the round's trips count."""

    knobs = ("cohort", "over_selection", "deadline", "late_uploads", "fixed_rounds")
    synchronous = True

    @classmethod
    def from_config(cls, cfg, concurrency, arrival_rate, takes_all):
        # cohort null: the run's concurrency, or, when every available client is selected, all of them
        cohort = cfg.cohort or (None if takes_all else concurrency)
        return cls(cohort, cfg.over_selection, cfg.deadline, cfg.late_uploads, takes_all, cfg.fixed_rounds)

    def __init__(self, cohort: int | None, over_selection: float, deadline: float | None, late_uploads: str, takes_all: bool,
                 fixed_rounds: bool = False):
        self.cohort = cohort  # uploads that close a round; None: all of its trips
        # Trips a round starts (a selection that takes every available client ignores it).
        self.round_size = math.ceil((1 + over_selection) * cohort) if cohort else 0
        self.deadline = deadline
        self.fixed_rounds = fixed_rounds  # close at the deadline only (rounds of one length)
        self.late_uploads = late_uploads
        self.takes_all = takes_all  # the selection takes every available client
        self.round = -1
        self.open = False
        self._trips: dict[int, TripView] = {}  # this round's trips still running
        self._started = self._ended = self._uploads = 0

    def clients_at_once(self):
        return 1 if self.takes_all else self.round_size

    def begin(self, sim):
        self._start_round(sim)

    def on_availability(self, sim):  # a round waiting for available clients
        if not self.open:
            self._start_round(sim)

    def _start_round(self, sim):
        self.round += 1
        trips = sim.start_trips(self.round_size, round_id=self.round)
        if not trips:
            self.round -= 1
            sim.wait_for_clients()
            return
        self.open = True
        self._trips = {t.id: t for t in trips}
        self._started, self._ended, self._uploads = len(trips), 0, 0
        if self.deadline is not None:
            sim.schedule_deadline(sim.now + self.deadline, self.round)

    def on_trip_end(self, sim, trip):
        if not trip.aborted:
            sim.buffer.append(trip)  # this round's upload, or a late one from an earlier round
        if not self.open:  # the next round waits for clients: a late trip just freed one
            self._start_round(sim)
            return
        if trip.round != self.round:
            return
        del self._trips[trip.id]
        self._ended += 1
        self._uploads += not trip.aborted
        if self.fixed_rounds:
            return
        if self._uploads >= min(self.cohort or self._started, self._started) or self._ended == self._started:
            self._close(sim)

    def on_deadline(self, sim, round_id):
        if round_id == self.round and self.open:
            self._close(sim)

    def _close(self, sim):
        self.open = False
        if self.late_uploads == "drop":  # stragglers are aborted now, slowest last
            for trip in sorted(self._trips.values(), key=lambda t: (t.end, t.id)):
                sim.abort(trip)
        self._trips = {}
        if sim.buffer:
            sim.server_step()
        sim.count_trips()
        if sim.evaluate_if_due() or sim.budget_spent():
            return
        self._start_round(sim)


class Compass(StepPolicy):
    """FedCompass's semi-asynchronous protocol (Li et al., ICLR 2024; the release APPFL/FedCompass@af96db2,
    ``src/appfl/scheduler/compass_scheduler.py``, lines cited; read, not copied), on the work schedule's groups
    (:class:`fl_bench.engine.work.CompassSchedule`). All ``concurrency`` trips start at once; at each arrival:

    - a client in no group (its speed was unknown; ``_single_update``, 123-156): a server step on its upload
      alone, then a new trip;
    - late, after its group's T_max or aggregation (``_group_update``, 176-179): its upload waits in the general
      buffer, with no step; a new trip;
    - on time (187-201): its upload waits in its group and its client waits with it (no new trip); the last
      member's arrival aggregates the group, and so does its T_max timer if any member arrived in time
      (``_group_aggregation``, 204-262). An aggregation steps on the general buffer's uploads and the group's,
      in that order, and the group's clients go back; as many new trips start.

    A trip whose client takes no part is replaced by another client's (cross-device: ``concurrency`` below the
    number of clients): a finished client goes back to the idle clients, and each new trip goes to a client the
    run's ``selection`` picks, with the steps the schedule assigns it (its group, from its speed estimate). With
    ``concurrency`` = the number of clients (the paper's cross-silo setting) the same clients run again, as in
    the release. A trip that brings no upload (a failure) frees its client without a step: the server does not
    learn of it, and the group waits for its timer. Each trip counts as it ends."""

    knobs = ()
    work_schedule = CompassSchedule  # its groups

    @classmethod
    def from_config(cls, cfg, concurrency, arrival_rate, takes_all):
        if takes_all:
            raise ConfigError(f"selection=all_available is not allowed with algorithm={cfg.name}: Compass starts "
                              f"concurrency trips and replaces each as it ends (use selection=uniform)")
        if arrival_rate is not None:
            raise ConfigError(f"arrival_rate={arrival_rate} is not allowed with algorithm={cfg.name}: Compass starts "
                              f"every trip at once (leave arrival_rate null)")
        return cls(concurrency)

    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self.general: list[TripView] = []  # the general buffer: late uploads, for the next aggregation
        self.missing = 0  # trips that found no available client, started when some become available

    def clients_at_once(self):
        return self.concurrency

    def begin(self, sim):
        self._start(sim, self.concurrency)

    def on_trip_end(self, sim, trip):
        sim.count_trips()
        where, group = sim.work.arrive(trip, sim.now)
        freed = 1
        if where == "single":
            sim.buffer.append(trip)
            sim.server_step([trip])
        elif where == "late":
            sim.buffer.append(trip)
            self.general.append(trip)
        elif where in ("waits", "complete"):
            sim.buffer.append(trip)
            sim.hold(trip)  # its client waits for the group's step
            freed = self._aggregate(sim, group) if where == "complete" else 0
        if sim.evaluate_if_due():
            return
        self._start(sim, freed)

    def on_deadline(self, sim, group):
        if sim.work.due(group):  # its T_max: aggregate what arrived in time
            self._start(sim, self._aggregate(sim, group))

    def on_availability(self, sim):
        if self.missing:
            missing, self.missing = self.missing, 0
            self._start(sim, missing)

    def _aggregate(self, sim, group) -> int:
        """One server step on the general buffer and the group's uploads; its clients go back. Returns how many."""
        arrived = sim.work.close(group)
        sim.server_step(self.general + arrived)
        self.general = []
        sim.release(arrived)
        return len(arrived)

    def _start(self, sim, count):
        missing, self.missing = self.missing, 0
        count += missing
        if count:
            started = len(sim.start_trips(count))
            if started < count:
                self.missing = count - started
                sim.wait_for_clients()
        for latest, group in sim.work.created:  # the new groups' T_max timers
            sim.schedule_deadline(latest, group)
        sim.work.created.clear()


def build_protocol(policy: type[StepPolicy] | None, cfg: Any, concurrency: int, arrival_rate: float | None,
                   takes_all: bool) -> StepPolicy:
    """The step policy an algorithm declares, built from its config; one line if the algorithm
    declares none or its config lacks the policy's knobs."""
    if not (isinstance(policy, type) and issubclass(policy, StepPolicy)):
        raise ConfigError(f"algorithm={cfg.name} ({cfg._target_}) declares no step policy: set its class attribute "
                          "step_policy to BufferedAsync, Rounds or Compass (fl_bench.engine.protocol)")
    from hydra.utils import get_object

    schedule = get_object(cfg.work_schedule._target_)
    needs = getattr(schedule, "step_policy", None)
    if policy.work_schedule is not None and not (isinstance(schedule, type) and issubclass(schedule, policy.work_schedule)):
        raise ConfigError(f"algorithm/work_schedule={cfg.work_schedule.name} is not allowed with algorithm={cfg.name}: its "
                          f"groups are the {policy.__name__} schedule's (algorithm/work_schedule={policy.__name__.lower()})")
    if needs not in (None, policy.__name__):
        raise ConfigError(f"algorithm/work_schedule={cfg.work_schedule.name} is not allowed with algorithm={cfg.name}: its "
                          f"trips are scheduled for the {needs} step policy's server steps, and this algorithm steps under "
                          f"{policy.__name__} (use algorithm/work_schedule=fixed, or algorithm=fedcompass)")
    missing = [knob for knob in policy.knobs if not hasattr(cfg, knob)]
    if missing:
        raise ConfigError(f"algorithm={cfg.name} runs under {policy.__name__}, whose knobs {', '.join(missing)} its config "
                          f"lacks: extend the schema of that protocol (AsyncConfig or SyncConfig, fl_bench.algorithms.base)")
    return policy.from_config(cfg, concurrency, arrival_rate, takes_all)
