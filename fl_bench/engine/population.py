"""The client population: array-backed per-client state, O(1) per event, no Python object per client.

Every client is in one of three states: *idle and available* (in the pool that selection draws
from), *idle and away* (its availability window is closed), or *busy* (on a trip, or finished and
not yet returned). Finished clients go back in the order their trips started, just before the next
selection, so the pool's order (and with it every seeded draw) does not depend on finishing order.
"""

from __future__ import annotations

import numpy as np

from fl_bench.engine.availability import Availability


class IdlePool:
    """A set of client ids with O(1) add, remove and uniform draw (swap-remove over two int arrays)."""

    def __init__(self, num_clients: int, members: np.ndarray | None = None):
        self._ids = np.arange(num_clients, dtype=np.int32)
        self._size = num_clients
        if members is not None:  # only these clients start in the pool: they come first
            self._ids = np.concatenate([np.flatnonzero(members), np.flatnonzero(~members)]).astype(np.int32)
            self._size = int(members.sum())
        self._pos = np.empty(num_clients, dtype=np.int32)
        self._pos[self._ids] = np.arange(num_clients, dtype=np.int32)

    def __len__(self) -> int:
        return self._size

    def __contains__(self, client: int) -> bool:
        return self._pos[client] < self._size

    def members(self) -> np.ndarray:
        """The clients in the pool (a view, valid until the pool changes)."""
        return self._ids[: self._size]

    def take(self, rng: np.random.Generator) -> int:
        """Remove and return a uniformly drawn member."""
        i = int(rng.integers(self._size))
        self._size -= 1
        self._swap(i, self._size)
        return int(self._ids[self._size])

    def add(self, client: int) -> None:
        """Put ``client``, not a member, into the pool."""
        self._swap(int(self._pos[client]), self._size)
        self._size += 1

    def remove(self, client: int) -> None:
        """Take ``client``, a member, out of the pool."""
        self._size -= 1
        self._swap(int(self._pos[client]), self._size)

    def _swap(self, i: int, j: int) -> None:
        ids, pos = self._ids, self._pos
        a, b = ids[i], ids[j]
        ids[i], ids[j] = b, a
        pos[b], pos[a] = i, j

    @property
    def nbytes(self) -> int:
        """Memory of the pool's two index arrays."""
        return self._ids.nbytes + self._pos.nbytes


class ClientPopulation:
    """Who is idle, who is available, when each client was last selected."""

    def __init__(self, sizes: np.ndarray, availability: Availability):
        self.sizes = sizes
        self.availability = availability
        self.available = availability.initial().copy()
        self.busy = np.zeros(len(sizes), dtype=bool)
        self.pool = IdlePool(len(sizes), None if self.available.all() else self.available)
        # Clock (time or server step, by the availability's unit) of each client's latest selection;
        # -inf: never selected. FedLaAvg's tau_i.
        self.last_selected = np.full(len(sizes), -np.inf)
        self._returning: list[tuple[int, int]] = []  # (trip id, client): finished, back before the next selection

    def __len__(self) -> int:
        return len(self.sizes)

    def advance(self, clock: float) -> None:
        """Apply every availability change up to ``clock``."""
        schedule = self.availability
        while schedule.next_change() <= clock:
            _, on, off = schedule.pop_change()
            for client in off.tolist():
                if self.available[client]:
                    self.available[client] = False
                    if not self.busy[client]:
                        self.pool.remove(client)
            for client in on.tolist():
                if not self.available[client]:
                    self.available[client] = True
                    if not self.busy[client]:
                        self.pool.add(client)

    def mark_busy(self, clients: list[int], clock: float) -> None:
        """Clients just selected (already out of the pool) start their trips."""
        busy, last = self.busy, self.last_selected
        for client in clients:  # usually one client: scalar writes beat fancy indexing
            busy[client] = True
            last[client] = clock

    def finish(self, trip_id: int, client: int) -> None:
        """A trip is over (uploaded, dropped or aborted): the client returns before the next selection."""
        self._returning.append((trip_id, client))

    def hold(self, trip_id: int, client: int) -> None:
        """Keep the client of a trip :meth:`finish` just reported busy (it waits for the server), until it is
        reported finished again."""
        self._returning.remove((trip_id, client))

    def return_finished(self) -> None:
        """Send back every client whose trip :meth:`finish` reported, in the order the trips started:
        each becomes idle and rejoins the pool if available. Called just before selecting."""
        for _, client in sorted(self._returning):
            self.busy[client] = False
            if self.available[client]:
                self.pool.add(client)
        self._returning.clear()

    @property
    def nbytes(self) -> int:
        """Memory of the per-client arrays (stated in the run summary)."""
        return self.pool.nbytes + self.available.nbytes + self.busy.nbytes + self.last_selected.nbytes

