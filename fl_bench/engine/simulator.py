"""The event loop: one discrete-event simulation on a virtual clock for every protocol.

Events are trip ends, scheduled starts (ramp-up arrivals, rounds waiting for clients), round
deadlines and availability changes that someone waits for; the step policy
(:mod:`fl_bench.engine.protocol`) reacts to them. The simulator owns what every protocol shares:
starting trips (selection from the population, a duration from the client's delay law), the
server step, lazy training, the trip log, byte counting and evaluation. It drives the server, the
trainer and the step policy through their contracts (:mod:`fl_bench.contracts`), every hook alike.

Local training is lazy: a trip is trained only when a server step needs its upload, from the
:class:`Broadcast` it downloaded (older versions are kept as snapshots while a pending trip needs
them), and trips in flight when the run stops are never trained. A batching (vmap) trainer gets
every trip started so far in that one ``train`` call, the largest batch the dependencies allow.
Memory stays O(concurrency): in-flight trips, one snapshot per model version still awaited, reused
upload rows, and the population's arrays (no Python object per idle client).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from fl_bench.contracts import Broadcast, Server, StepPolicy, Trainer, Upload
from fl_bench.engine.delays import ClientDelays
from fl_bench.engine.population import ClientPopulation
from fl_bench.engine.selection import Selection
from fl_bench.engine.trip_log import TripLog
from fl_bench.engine.work import FixedWork, WorkSchedule
from fl_bench.errors import ConfigError, DivergenceError


@dataclass
class Progress:
    """Where the run stands at an evaluation (what ``on_eval`` gets)."""

    trips: int  # client trips counted so far (synchronous: the trips of closed rounds)
    server_step: int
    sim_time: float


@dataclass(eq=False)
class Trip:
    """The loop's record of one client trip: its client, the model version it downloaded, when it
    runs, whether it was cut short, and its upload row and trip-log row."""

    __slots__ = ("id", "client", "version", "start", "end", "round", "aborted", "row", "log_row", "failed", "comm_time",
                 "steps", "down_time", "compute_time")
    id: int
    client: int
    version: int  # the model version downloaded
    start: float
    end: float
    round: int  # the round that started it (-1: asynchronous)
    aborted: bool  # over before uploading (availability drop, a failure, or a round closed on it)
    row: int  # its upload row (batching trainer), -1 otherwise
    log_row: int  # its row in the trip log once it is over, -1 before
    failed: int  # 0, or why it was lost part-way (fl_bench.engine.behaviour): 1 the device failed, 2 an outage,
    # 3 its availability window closed, 4 no local step by the work deadline
    comm_time: float  # of its duration, the time spent downloading and uploading
    steps: int  # local steps it trains: its client's full work, or fewer under a work deadline (0: not known)
    # under a behaviour: how long its download takes (inf over a shared link until it is over) and its compute
    down_time: float
    compute_time: float


# Event priorities at equal times: scheduled starts first (a ramp-up arrival that ties with a trip
# end starts first), then transfers over a shared link and computes ending, then trip ends, then
# deadlines (an upload exactly at the deadline is on time).
_TICK, _LINK, _COMPUTED, _END, _DEADLINE, _AVAILABILITY = 0, 1, 2, 3, 4, 5


class UploadRows:
    """A reused [rows, P] upload buffer handed out row by row (fresh multi-MB buffers page-fault on
    every trip); it doubles when every row is taken."""

    def __init__(self, like: torch.Tensor, capacity: int, width: int):
        self.data = like.new_empty(max(capacity, 1), width)
        self._free = list(range(len(self.data) - 1, -1, -1))

    def take(self) -> int:
        """A free row of :attr:`data`, doubling the buffer when none is left; the caller holds it until
        :meth:`release`."""
        if not self._free:
            old = self.data
            self.data = old.new_empty(2 * len(old), old.shape[1])
            self.data[: len(old)] = old
            self._free = list(range(len(self.data) - 1, len(old) - 1, -1))
        return self._free.pop()

    def release(self, row: int) -> None:
        """Hand ``row`` back for reuse."""
        self._free.append(row)


class Simulator:
    """The event loop of one run (module docstring). The step ``policy`` decides when trips start and
    when the server steps; the loop runs until ``max_trips`` trips (or ``max_steps`` server steps) are
    counted or ``on_eval``, called every ``eval_every`` counted trips, returns True."""

    def __init__(
        self,
        *,
        server: Server,
        trainer: Trainer,
        population: ClientPopulation,
        selection: Selection,
        delays: ClientDelays,
        policy: StepPolicy,
        rng: np.random.Generator,
        max_trips: int,
        eval_every: int,
        on_eval: Callable[[Progress], bool],
        seed: int = 0,
        concurrency: int | None = None,
        between_events: Callable[[], None] | None = None,
        max_steps: int | None = None,
        flops_by_client: np.ndarray | None = None,
        steps_by_client: np.ndarray | None = None,
        behaviour=None,
        work: WorkSchedule | None = None,
    ):
        self.server, self.trainer, self.population = server, trainer, population
        self.selection, self.delays, self.policy, self.rng = selection, delays, policy, rng
        self.max_trips, self.eval_every, self.on_eval = max_trips, eval_every, on_eval
        self.max_steps = max_steps  # a budget of server steps (rounds) as well, for round-based papers
        self.between_events = between_events  # e.g. checkpoints: the state is complete only there
        self.sizes = population.sizes
        self.availability = population.availability
        self._check_enough_clients(concurrency)
        self.now = 0.0
        self.started = 0  # trips started
        self.trips = 0  # trips counted (the budget and evaluations see these)
        self.ended = 0  # trips over (counted when the policy says)
        self.trained = 0  # trips whose local training ran
        self.stopped = False
        # fl_bench.engine.behaviour.UnreliableDevices: failures and communication time; None: neither
        self.behaviour = behaviour
        self.work = FixedWork() if work is None else work  # each trip's local steps (fl_bench.engine.work)
        # whether the trainer must be told each trip's steps: they may differ from its client's full work
        self._steps_vary = not self.work.fixed or (behaviour is not None and behaviour.partial)
        # fl_bench.engine.link.SharedLink: the server link all transfers share, whose end times the loop
        # learns as it goes; each trip over it: (why it is cut at its _END event, whether it gives up
        # before uploading)
        self.link = behaviour.link if behaviour is not None else None
        self._phases: dict[int, tuple[int, bool]] = {}
        self._link_epoch = -1  # the link state whose next completion is scheduled
        self.log = TripLog(behaviour=behaviour is not None, steps=not self.work.fixed)
        self.buffer: list[Trip] = []  # uploads for the next server step, in arrival order
        self._in_flight: dict[int, Trip] = {}
        self._pending: dict[int, Trip] = {}  # started, not trained yet
        self._snapshots: dict[int, Broadcast] = {}  # older versions pending trips downloaded
        self._waiting = Counter()  # version -> pending trips that downloaded it
        self._events: list[tuple] = []
        self._seq = 0
        self._waiting_for_clients = False
        self._seed_base = seed << 32  # per-trip shuffling seeds: distinct across trips and runs
        self._next_eval = 0
        self._batch_all = trainer.vmap  # batching pays only for the vmap trainer
        params = server.params
        self._upload_keys = server.upload_keys  # extras after Delta in each upload row
        width = params.numel() * (1 + len(self._upload_keys))
        self._rows = UploadRows(params, policy.clients_at_once() + 16, width) if self._batch_all else None
        self._scratch = params.new_empty(0, width)
        self.weight_by_client = np.zeros(len(population))  # each client's total share of the steps so far
        # What the trainer sends beside the server's messages (a LightningModule's federated buffers) is
        # counted in its own dtypes: it may travel in another form here (fl_bench.clients.lightning_trainer)
        self.bytes_down = server.broadcast().nbytes + trainer.extra_download_bytes
        self.bytes_up = server.upload_nbytes() + trainer.extra_upload_bytes
        # FLOPs of one trip's local training, per client (fl_bench.clients.costs); 0 where not counted
        self.flops_by_client = np.zeros(len(population)) if flops_by_client is None else flops_by_client
        # local steps of one trip's full work, per client (uploads carry them); 0 where not known
        self.steps_by_client = np.zeros(len(population), dtype=np.int64) if steps_by_client is None else steps_by_client
        self.costs = {"bytes_down": 0, "bytes_up": 0, "flops": 0.0}  # totals over the trips over so far
        self.failures = {"failed_trips": 0, "failed_compute_time": 0.0}  # trips lost part-way, the compute they spent

    def _check_enough_clients(self, concurrency: int | None) -> None:
        needed, num_clients = self.policy.clients_at_once(), len(self.population)
        name = f"concurrency={concurrency}" if concurrency is not None else f"{needed} clients at once"
        if needed > num_clients:
            limit = concurrency * num_clients // needed if concurrency else num_clients
            raise ConfigError(
                f"{name} is impossible: it needs {needed} clients training at once but the dataset has "
                f"{num_clients} (a client never runs two trips at once); use concurrency <= {limit}"
            )
        most = self.availability.max_available()
        if most == 0:
            raise ConfigError(f"availability={self.availability.describe()} never makes any client available")
        if needed > most:
            raise ConfigError(
                f"{name} is impossible under availability={self.availability.describe()}: it needs {needed} clients "
                f"at once but at most {most} are ever available at once"
            )

    # ------------------------------------------------------------------ checkpoints
    _NOT_STATE = ("trainer", "on_eval", "between_events")  # the code around the state, rebuilt on resume

    def state_dict(self) -> dict:
        """Everything the loop needs to go on (fl_bench.runs.checkpoint pickles it in one piece)."""
        state = {name: value for name, value in vars(self).items() if name not in self._NOT_STATE}
        state["trainer_state"] = self.trainer.state_dict()  # the trainer's own (a LightningModule's buffers)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Take the state of :meth:`state_dict` (the trainer and callbacks stay this simulator's);
        then ``run(resume=True)`` goes on from it."""
        state = dict(state)
        self.trainer.load_state_dict(state.pop("trainer_state"))
        vars(self).update(state)

    # ------------------------------------------------------------------ the loop
    def run(self, resume: bool = False) -> TripLog:
        """Run to the end of the budget; ``resume``: go on from a loaded state instead of starting."""
        if not resume:
            self.evaluate_if_due()  # the initial model
            self.policy.begin(self)
            if self.link is not None:
                self._schedule_link()
        between_events = self.between_events or (lambda: None)
        while not self.stopped and not self.budget_spent():
            if not self._events:
                raise ConfigError(
                    f"the run is stuck at time {self.now:g} (server step {self.server.version}): no trip is in flight "
                    f"and availability={self.availability.describe()} makes no idle client available again"
                )
            time, kind, _, payload = heapq.heappop(self._events)
            if kind == _END:
                trip = self._in_flight.pop(payload, None)
                if trip is None:  # aborted earlier (its round closed), or over the link before its cut
                    continue
                self.now = time
                if trip.id in self._phases:  # still moving over the shared link: cut here
                    trip.failed, trip.aborted = self._leave_link(trip), True
                    self._forget(trip)
                self._end(trip)
                self.work.observe(trip)
                self.policy.on_trip_end(self, trip)
            elif kind == _LINK:
                epoch, trip_id = payload
                if epoch != self.link.epoch:  # the link changed since: a later event holds its next end
                    continue
                self.now = time
                self._transfer_done(trip_id)
            elif kind == _COMPUTED:
                trip = self._in_flight.get(payload)
                if trip is None:  # cut while computing
                    continue
                self.now = time
                self._computed(trip)
            else:
                self.now = time
                if kind == _TICK:
                    self.policy.on_tick(self)
                elif kind == _DEADLINE:
                    self.policy.on_deadline(self, payload)
                else:
                    self._waiting_for_clients = False
                    self.policy.on_availability(self)
            if self.link is not None and self._link_epoch != self.link.epoch:
                self._schedule_link()
            between_events()
        if not self.stopped and self.trips % self.eval_every:
            self.evaluate_if_due(force=True)  # the final model
        return self.log

    def _push(self, time: float, kind: int, key: int, payload) -> None:
        heapq.heappush(self._events, (time, kind, key, payload))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # ------------------------------------------------------------------ for step policies
    def schedule_tick(self, time: float) -> None:
        """Call the policy's ``on_tick`` at ``time`` (before trip ends at the same time)."""
        self._push(time, _TICK, self._next_seq(), None)

    def schedule_deadline(self, time: float, round_id: int) -> None:
        """Call the policy's ``on_deadline(round_id)`` at ``time``, after trip ends at the same time
        (an upload exactly at the deadline is on time)."""
        self._push(time, _DEADLINE, self._next_seq(), round_id)

    def wait_for_clients(self) -> None:
        """Call the policy's ``on_availability`` at the next availability change (time clock) or
        after the next server step (steps clock)."""
        if self.availability.unit == "steps" or self._waiting_for_clients:
            self._waiting_for_clients = True
            return
        change = self.availability.next_change()
        if math.isfinite(change):
            self._waiting_for_clients = True
            self._push(max(change, self.now), _AVAILABILITY, self._next_seq(), None)

    def clock(self) -> float:
        """The availability schedule's clock: virtual time or server steps."""
        return self.server.version if self.availability.unit == "steps" else self.now

    def start_trips(self, count: int, round_id: int = -1) -> list[Trip]:
        """Select up to ``count`` idle available clients and start their trips now; returns the
        trips. Clients are drawn first, then their durations, in selection order."""
        population = self.population
        population.advance(self.clock())
        population.return_finished()
        clients = self.selection.select(population, count, self.rng)
        if not clients:
            return []
        population.mark_busy(clients, self.clock())
        durations = [self.delays.sample(self.rng, c) for c in clients]
        full = [int(self.steps_by_client[c]) for c in clients]  # each client's full work
        assigned = full if self.work.fixed else self.work.assign(clients, self.now, np.asarray(full))
        version, drop = self.server.version, self.availability.on_unavailable == "drop"
        trips = []
        for client, duration, steps, full_steps in zip(clients, durations, assigned, full):
            if steps != full_steps:  # the delay law times the full work; its steps all take as long
                duration *= steps / full_steps
            trip = Trip(self.started, client, version, self.now, self.now + duration, round_id, False, -1, -1, 0, 0.0,
                        steps, 0.0, 0.0)
            closes = self.availability.window_end(client, self.now) if drop else math.inf
            if self.link is not None:  # its transfers are timed over the link as the run goes
                shape = self.behaviour.shape(client, self.now, duration, self.bytes_down, self.bytes_up, closes, steps)
                trip.steps, trip.end = shape.steps, math.inf
                trip.down_time, trip.compute_time = math.inf, shape.compute_time
                trip.aborted = shape.certain or shape.gives_up  # it will send nothing
                trip.failed = shape.failed if shape.certain else 0
                self._phases[trip.id] = (shape.failed, shape.gives_up)
                self.link.add(trip.id, self.bytes_down, self.behaviour.client_bandwidth(client, False), self.now)
            elif self.behaviour is not None:  # its phases, partial work, failure, outage or window's end (failed=3)
                shape = self.behaviour.shape(client, self.now, duration, self.bytes_down, self.bytes_up, closes, steps)
                trip.end, trip.comm_time, trip.failed = self.now + shape.duration, shape.comm_time, shape.failed
                trip.steps, trip.down_time, trip.compute_time = shape.steps, shape.download, shape.compute_time
                trip.aborted = bool(shape.failed)  # a lost trip spends its time and sends nothing
            elif trip.end > closes:  # cut at the end of the client's availability window
                trip.end, trip.aborted = closes, True
            self.started += 1
            self._in_flight[trip.id] = trip
            if not trip.aborted:
                self._pending[trip.id] = trip
                self._waiting[version] += 1
                if self._batch_all:
                    trip.row = self._rows.take()
            if self.link is None:
                self._push(trip.end, _END, trip.id, trip.id)
            elif math.isfinite(shape.duration):  # cut then, if it is still running
                self._push(self.now + shape.duration, _END, trip.id, trip.id)
            trips.append(trip)
        return trips

    def abort(self, trip: Trip) -> None:
        """End a running trip now without an upload (its round closed on it)."""
        del self._in_flight[trip.id]
        if trip.id in self._phases:
            self._leave_link(trip)
        if self.behaviour is not None:  # its round closed on it, not a device: the time spent so far, by phase
            trip.failed, trip.comm_time = 0, self._comm_until(trip)
        trip.aborted = True
        trip.end = self.now
        self._forget(trip)
        self._end(trip)

    def hold(self, trip: Trip) -> None:
        """Keep the client of a trip that just ended out of the idle clients (it waits for a server step:
        FedCompass's group) until :meth:`release`."""
        self.population.hold(trip.id, trip.client)

    def release(self, trips: list[Trip]) -> None:
        """Send the clients that :meth:`hold` kept back to the idle clients, before the next selection."""
        for trip in trips:
            self.population.finish(trip.id, trip.client)

    def count_trips(self) -> None:
        """Trips that are over so far now count (budget, evaluations)."""
        self.trips = self.ended

    def settled_trips(self) -> int:
        """How many rows of the trip log are final: all but those of uploads still waiting in the
        buffer, whose ``weight`` their server step writes (trips.csv appends only final rows)."""
        return min((trip.log_row for trip in self.buffer), default=len(self.log))

    def budget_spent(self) -> bool:
        """Whether the counted trips reached ``max_trips`` or the server steps ``max_steps``."""
        return self.trips >= self.max_trips or (self.max_steps is not None and self.server.version >= self.max_steps)

    def evaluate_if_due(self, force: bool = False) -> bool:
        """Evaluate each time counted trips cross a multiple of eval_every; True means stop."""
        if self.trips < self._next_eval and not force:
            return False
        self._next_eval = (self.trips // self.eval_every + 1) * self.eval_every
        self.stopped = bool(self.on_eval(Progress(self.trips, self.server.version, self.now)))
        return self.stopped

    def server_step(self, trips: list[Trip] | None = None) -> None:
        """Hand the buffered uploads to the server and step (``trips``: only these of :attr:`buffer`, in this
        order; the others stay for a later step). Training is deferred to this moment; the batching trainer then
        takes every trip started so far."""
        server, everything = self.server, trips is None
        if everything:
            trips = self.buffer
        if self._batch_all:
            if any(t.id in self._pending for t in trips):
                pending = list(self._pending.values())
                self._train(pending, [self._rows.data[t.row] for t in pending])
            vectors = [self._rows.data[t.row] for t in trips]
        else:
            if len(self._scratch) < len(trips):
                self._scratch = self._scratch.new_empty(len(trips), self._scratch.shape[1])
            vectors = list(self._scratch[: len(trips)])
            self._train(trips, vectors)
        size = server.params.numel()
        for trip, row in zip(trips, vectors):
            staleness = server.version - trip.version
            vector, *extras = row.view(-1, size).unbind(0)
            server.add(Upload(trip.client, trip.version, staleness, int(self.sizes[trip.client]), vector,
                              dict(zip(self._upload_keys, extras)), trip.steps))
        for trip in trips:
            if trip.row >= 0:
                self._rows.release(trip.row)
        if everything:
            self.buffer = []
        else:  # (FedCompass: the uploads other groups hold stay)
            stepped = {trip.id for trip in trips}
            self.buffer = [trip for trip in self.buffer if trip.id not in stepped]
        if self._waiting[server.version]:
            self._snapshots[server.version] = self._broadcast().clone()  # it is about to move
        server.step()
        self.trainer.after_server_step([self._seed_base + t.id for t in trips], [t.client for t in trips],
                                       server.step_weights)
        if server.step_weights:  # fairness logs: each upload's share of this step
            for trip, weight in zip(trips, server.step_weights):
                self.log.weight[trip.log_row] = weight
                self.weight_by_client[trip.client] += weight
        if not torch.isfinite(server.params).all():  # stop at once, not at the next evaluation
            raise DivergenceError(f"the model has NaN/Inf values after server step {server.version}",
                                  trips=self.trips, server_step=server.version)
        if self._waiting_for_clients and self.availability.unit == "steps":
            self._waiting_for_clients = False
            self.policy.on_availability(self)

    # ------------------------------------------------------------------ the shared link
    def _schedule_link(self) -> None:
        """Schedule the link's next transfer completion (events of older link states are stale)."""
        self._link_epoch = self.link.epoch
        upcoming = self.link.next_completion()
        if upcoming is not None:
            time, trip_id = upcoming
            self._push(max(time, self.now), _LINK, self._next_seq(), (self.link.epoch, trip_id))

    def _transfer_done(self, trip_id: int) -> None:
        """The transfer of trip ``trip_id`` over the link is over: a download starts the trip's compute, an
        upload ends the trip."""
        self.link.remove(trip_id, self.now)
        trip = self._in_flight[trip_id]
        if trip.down_time == math.inf:  # downloaded: compute
            trip.down_time = self.now - trip.start
            self._push(self.now + trip.compute_time, _COMPUTED, self._next_seq(), trip_id)
            return
        self._finish_over_link(trip)

    def _computed(self, trip: Trip) -> None:
        """A trip over the link finished computing: it uploads, or gives up (no step by the work deadline)."""
        if self._phases[trip.id][1]:
            trip.failed = 4
            self._finish_over_link(trip)
            return
        self.link.add(trip.id, self.bytes_up, self.behaviour.client_bandwidth(trip.client, True), self.now)

    def _finish_over_link(self, trip: Trip) -> None:
        """End a trip over the link now: uploaded, or given up after its compute."""
        del self._in_flight[trip.id]
        self._leave_link(trip)
        self._end(trip)
        self.work.observe(trip)
        self.policy.on_trip_end(self, trip)

    def _leave_link(self, trip: Trip) -> int:
        """Take a trip off the link now: drop its transfer, set its end and the time it spent communicating;
        returns why it would be cut at its _END event (0: it would not)."""
        reason, _ = self._phases.pop(trip.id)
        self.link.remove(trip.id, self.now)
        trip.end = self.now
        trip.comm_time = self._comm_until(trip)
        return reason

    def _comm_until(self, trip: Trip) -> float:
        """Of a trip's time up to now, the part spent communicating: its download (all of it, or so far),
        then whatever comes after its compute (its upload)."""
        elapsed = self.now - trip.start
        return min(elapsed, trip.down_time) + max(elapsed - trip.down_time - trip.compute_time, 0.0)

    # ------------------------------------------------------------------ internals
    def _end(self, trip: Trip) -> None:
        """Log a trip that is over and send its client back."""
        staleness = self.server.version - trip.version
        used = not trip.aborted
        trip.log_row = len(self.log)
        up, flops = (self.bytes_up, float(self.flops_by_client[trip.client])) if used else (0, 0.0)
        full = int(self.steps_by_client[trip.client])
        if used and trip.steps != full:  # partial or assigned work: its share of the full work's FLOPs
            flops *= trip.steps / full
        self.log.append(trip.client, int(self.sizes[trip.client]), trip.version, trip.start, trip.end, staleness,
                        int(used), self.bytes_down, up, flops, trip.failed, trip.comm_time, trip.steps if used else 0)
        if trip.failed in (1, 2, 4):  # lost to the device, an outage or the work deadline (3 is availability's drop)
            self.failures["failed_trips"] += 1
            self.failures["failed_compute_time"] += max(trip.end - trip.start - trip.comm_time, 0.0)
        self.costs["bytes_down"] += self.bytes_down
        self.costs["bytes_up"] += up
        self.costs["flops"] += flops
        self.population.finish(trip.id, trip.client)
        self.ended += 1

    def _forget(self, trip: Trip) -> None:
        """A pending trip that will never be trained."""
        if self._pending.pop(trip.id, None) is not None:
            self._release_version(trip.version)
        if trip.row >= 0:
            self._rows.release(trip.row)
            trip.row = -1

    def _release_version(self, version: int) -> None:
        self._waiting[version] -= 1
        if not self._waiting[version]:
            del self._waiting[version]
            self._snapshots.pop(version, None)

    def _broadcast(self) -> Broadcast:
        """The current version's download: the server's broadcast, with what the trainer sends
        beside it (a LightningModule's federated buffers: fl_bench.clients.lightning_trainer)."""
        broadcast = self.server.broadcast()
        extra = self.trainer.broadcast_state()
        return Broadcast(broadcast.version, broadcast.params, {**broadcast.state, **extra}) if extra else broadcast

    def _train(self, trips: list[Trip], out: list[torch.Tensor]) -> None:
        """Train these pending trips in one batch, each from the version it downloaded."""
        live = self._broadcast()
        starts = [self._snapshots.get(t.version, live) for t in trips]
        clients, seeds = [t.client for t in trips], [self._seed_base + t.id for t in trips]
        if self._steps_vary:
            self.trainer.train(starts, clients, seeds, out, [t.steps for t in trips])
        else:  # a trainer written before partial work takes no steps
            self.trainer.train(starts, clients, seeds, out)
        self.trained += len(trips)
        if self.server.upload == "model":  # y_Q = y_0 - Delta
            size = self.server.params.numel()
            for start, row in zip(starts, out):
                torch.sub(start.params, row[:size], out=row[:size])
        for trip in trips:
            del self._pending[trip.id]
            self._release_version(trip.version)
