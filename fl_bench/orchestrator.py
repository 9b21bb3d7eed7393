"""Discrete-event simulation of federated training on a virtual clock.

Asynchronous mode (FedBuff Sec. 6, App. B.2): clients arrive at a constant rate until
``concurrency`` trips are in flight; a trip's duration is drawn from the delay distribution; when
a trip finishes, its upload goes to the server algorithm and a new client starts at once.
Synchronous mode (FedAvg family): a round starts ``ceil((1 + over_selection) * cohort)`` clients
on the same model version, keeps the fastest ``cohort`` uploads, then the server steps; every
started trip counts.

Local training is lazy: a trip is trained only when a server step needs its upload, from the
model version it downloaded (older versions are kept as snapshots while a pending trip needs
them), and trips in flight when the run stops are never trained. With the batching (vmap)
trainer every trip started so far trains in that one ``trainer.train`` call, the largest batch
the dependencies allow. Memory stays O(concurrency): a heap of in-flight finish events, the
snapshots (one per model version still awaited), reused upload rows (K, or one per in-flight
trip when batching), and an array-backed idle pool (no Python object per idle client).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from array import array
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch

from fl_bench.algorithms import ServerAlgorithm
from fl_bench.delays import Delay
from fl_bench.errors import ConfigError


class Trainer(Protocol):
    vmap: bool  # a batching trainer: every pending trip is handed over at once

    def train(self, starts: list[torch.Tensor], clients: list[int], seeds: list[int], out: list[torch.Tensor]) -> None: ...


class IdlePool:
    """Clients not training, sampled uniformly; O(1) take/put by swap-remove over two int arrays."""

    def __init__(self, num_clients: int, rng: np.random.Generator):
        self._ids = np.arange(num_clients, dtype=np.int64)
        self._pos = np.arange(num_clients, dtype=np.int64)
        self._size = num_clients
        self._rng = rng

    def __len__(self) -> int:
        return self._size

    def take(self) -> int:
        i = int(self._rng.integers(self._size))
        self._size -= 1
        self._swap(i, self._size)
        return int(self._ids[self._size])

    def put(self, client: int) -> None:
        self._swap(int(self._pos[client]), self._size)
        self._size += 1

    def _swap(self, i: int, j: int) -> None:
        ids, pos = self._ids, self._pos
        a, b = ids[i], ids[j]
        ids[i], ids[j] = b, a
        pos[b], pos[a] = i, j


class TripLog:
    """Columnar per-trip record (8 bytes a field), cheap to append at 10^6 trips."""

    COLUMNS = ("client", "num_examples", "download_version", "start_time", "end_time", "staleness", "used")

    def __init__(self) -> None:
        self.client, self.num_examples, self.download_version = array("q"), array("q"), array("q")
        self.start_time, self.end_time = array("d"), array("d")
        self.staleness, self.used = array("q"), array("b")

    def append(self, client, num_examples, version, start, end, staleness, used) -> None:
        self.client.append(client)
        self.num_examples.append(num_examples)
        self.download_version.append(version)
        self.start_time.append(start)
        self.end_time.append(end)
        self.staleness.append(staleness)
        self.used.append(used)

    def __len__(self) -> int:
        return len(self.client)

    def columns(self) -> dict[str, np.ndarray]:
        return {name: np.frombuffer(getattr(self, name), dtype=getattr(self, name).typecode) for name in self.COLUMNS}


@dataclass
class Progress:
    trips: int  # client trips finished (synchronous: all started trips of closed rounds)
    server_step: int
    sim_time: float


class Orchestrator:
    def __init__(
        self,
        *,
        server: ServerAlgorithm,
        trainer: Trainer,
        client_sizes: np.ndarray,
        delay: Delay,
        concurrency: int,
        rng: np.random.Generator,
        max_trips: int,
        eval_every: int,
        on_eval: Callable[[Progress], bool],
        seed: int = 0,
        arrival_rate: float | None = None,
        over_selection: float = 0.0,
    ):
        self.server = server
        self.trainer = trainer
        self.sizes = client_sizes
        self.delay = delay
        self.concurrency = concurrency
        self.rng = rng
        self.max_trips = max_trips
        self.eval_every = eval_every
        self.on_eval = on_eval
        self.over_selection = over_selection
        self.started = self.trips = 0
        self.trained = 0  # trips whose local training ran (lazy: a trip unused when the run stops is not trained)
        self.now = 0.0
        self.log = TripLog()
        self._seed_base = seed << 32  # per-trip shuffling seeds: distinct across trips and runs
        num_clients = len(client_sizes)
        self._round_size = math.ceil((1 + over_selection) * concurrency) if server.synchronous else concurrency
        if self._round_size > num_clients:
            limit = int(num_clients / (1 + over_selection)) if server.synchronous else num_clients
            raise ConfigError(
                f"concurrency={concurrency} is impossible: it needs {self._round_size} clients training at once "
                f"but the dataset has {num_clients} (a client never runs two trips at once); use concurrency <= {limit}"
            )
        mean_delay = delay.mean(float(np.mean(client_sizes)))
        self.arrival_rate = arrival_rate or concurrency / mean_delay
        self.idle = IdlePool(num_clients, rng)
        self._next_eval = 0

    # ------------------------------------------------------------------ shared
    def _upload_buffer(self, rows: int) -> torch.Tensor:
        """[rows, P] upload rows, allocated once and reused (fresh buffers page-fault every time)."""
        params = self.server.params
        return torch.empty(rows, params.numel(), dtype=params.dtype, device=params.device)

    def _train(self, starts: list[torch.Tensor], clients: list[int], seeds: list[int], out: list[torch.Tensor]) -> None:
        self.trainer.train(starts, clients, seeds, out)
        self.trained += len(clients)
        if self.server.upload == "model":  # y_Q = y_0 - Delta
            for start, row in zip(starts, out):
                torch.sub(start, row, out=row)

    def _evaluate_if_due(self, force: bool = False) -> bool:
        """Evaluate each time trips cross a multiple of eval_every; True means stop."""
        if self.trips < self._next_eval and not force:
            return False
        self._next_eval = (self.trips // self.eval_every + 1) * self.eval_every
        return self.on_eval(Progress(self.trips, self.server.version, self.now))

    def run(self) -> TripLog:
        self._evaluate_if_due()  # the initial model
        stopped = self._run_sync() if self.server.synchronous else self._run_async()
        if not stopped and self.trips % self.eval_every:
            self._evaluate_if_due(force=True)  # the final model
        return self.log

    # ------------------------------------------------------------------ asynchronous
    def _run_async(self) -> bool:
        m, k = self.concurrency, self.server.buffer_size
        batch_all = self.trainer.vmap  # batching pays only for the vmap trainer
        free_slots = list(range(m + k - 1, -1, -1))  # one slot per trip in flight or in the buffer
        slot_trip: list[tuple[int, int, float] | None] = [None] * (m + k)  # (client, version, start)
        pending: dict[int, tuple[int, int]] = {}  # slot -> (client, seed): started, not trained yet
        # Older model versions that pending trips downloaded, with how many still need each.
        snapshots: dict[int, torch.Tensor] = {}
        waiting = Counter()
        # Trained uploads: one row per slot when every pending trip trains at once (m x P);
        # otherwise only the step's K arrivals are trained, into K rows (memory: snapshots only).
        uploads = self._upload_buffer(m + k if batch_all else k)
        arrived: list[int] = []  # slots whose uploads make up the next server step
        heap: list[tuple[float, int, int]] = []  # (end time, trip id, slot)
        next_arrival = 0.0

        def start() -> None:
            client = self.idle.take()
            slot = free_slots.pop()
            trip_id = self.started
            self.started += 1
            slot_trip[slot] = (client, self.server.version, self.now)
            pending[slot] = (client, self._seed_base + trip_id)
            waiting[self.server.version] += 1
            end = self.now + self.delay.sample(self.rng, int(self.sizes[client]))
            heapq.heappush(heap, (end, trip_id, slot))

        def train(slots: list[int], rows: list[torch.Tensor]) -> None:
            """Train these pending trips in one batch, each from the version it downloaded."""
            versions = [slot_trip[s][1] for s in slots]
            starts = [snapshots.get(v, self.server.params) for v in versions]
            self._train(starts, [pending[s][0] for s in slots], [pending[s][1] for s in slots], rows)
            for s, v in zip(slots, versions):
                del pending[s]
                waiting[v] -= 1
                if not waiting[v]:
                    del waiting[v]
                    snapshots.pop(v, None)

        def server_step() -> None:
            # Training is deferred to the last moment an upload is needed (trips unused when the
            # run stops are never trained). The vmap trainer then takes every trip started so far:
            # the largest batch the dependencies allow.
            if batch_all:
                if any(s in pending for s in arrived):
                    slots = list(pending)
                    train(slots, [uploads[s] for s in slots])
                vectors = [uploads[s] for s in arrived]
            else:
                vectors = list(uploads[: len(arrived)])
                train(arrived, vectors)
            for s, vector in zip(arrived, vectors):
                client, version, _ = slot_trip[s]
                self.server.add(vector, int(self.sizes[client]), self.server.version - version)
                free_slots.append(s)
            arrived.clear()
            if waiting[self.server.version]:
                snapshots[self.server.version] = self.server.params.clone()  # it is about to move
            self.server.step()

        while self.trips < self.max_trips:
            if len(heap) < m and (not heap or next_arrival <= heap[0][0]):
                self.now = next_arrival  # ramp-up: constant-rate arrivals until m are in flight
                next_arrival += 1.0 / self.arrival_rate
                start()
                continue
            end, _, slot = heapq.heappop(heap)
            self.now = end
            client, version, started_at = slot_trip[slot]
            num_examples = int(self.sizes[client])
            self.log.append(client, num_examples, version, started_at, end, self.server.version - version, 1)
            self.idle.put(client)
            arrived.append(slot)
            self.trips += 1
            if len(arrived) == k:
                server_step()
            if self._evaluate_if_due():
                return True
            start()  # a new client takes the finished one's place
        return False

    # ------------------------------------------------------------------ synchronous
    def _run_sync(self) -> bool:
        cohort = self.concurrency
        uploads = self._upload_buffer(cohort)
        while self.trips < self.max_trips:
            clients = [self.idle.take() for _ in range(self._round_size)]
            durations = [self.delay.sample(self.rng, int(self.sizes[c])) for c in clients]
            order = sorted(range(len(clients)), key=durations.__getitem__)
            kept, dropped = order[:cohort], order[cohort:]
            first_trip = self.started
            self.started += len(clients)
            seeds = [self._seed_base + first_trip + k for k in kept]
            self._train([self.server.params] * cohort, [clients[k] for k in kept], seeds, uploads)
            round_end = self.now + durations[kept[-1]]
            version = self.server.version
            for row, k in enumerate(kept):  # in finishing order
                n = int(self.sizes[clients[k]])
                self.server.add(uploads[row], n, 0)
                self.log.append(clients[k], n, version, self.now, self.now + durations[k], 0, 1)
            for k in dropped:  # over-selected stragglers: aborted when the round closes, still counted
                self.log.append(clients[k], int(self.sizes[clients[k]]), version, self.now, round_end, 0, 0)
            self.server.step()
            self.now = round_end
            self.trips += len(clients)
            for c in clients:
                self.idle.put(c)
            if self._evaluate_if_due():
                return True
        return False
