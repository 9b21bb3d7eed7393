"""A server link shared by every transfer in flight (``behaviour.server_bandwidth``; APPFL's shared
server bandwidth).

Downloads and uploads share the server's ``capacity`` (bytes per unit of virtual time) max-min fairly,
each transfer capped by its client's own bandwidth: transfers whose cap is below an equal share get
their cap, the rest split what is left equally (water-filling). Rates change whenever a transfer
starts or ends, so a transfer's end is known only as the run goes: the simulator asks
:meth:`SharedLink.next_completion` after every change and schedules that event, and an event of an
older ``epoch`` is stale.
"""

from __future__ import annotations

import math


class SharedLink:
    """The transfers in flight over the server link: bytes left and cap, by trip id."""

    def __init__(self, capacity: float):
        self.capacity = capacity
        self.remaining: dict[int, float] = {}  # trip id -> bytes left of its current transfer
        self.cap: dict[int, float] = {}  # trip id -> its client's bandwidth for this transfer
        self.rate: dict[int, float] = {}
        self.clock = 0.0  # when ``remaining`` was last brought up to date
        self.epoch = 0  # bumped on every change: events scheduled before it are stale

    def _advance(self, now: float) -> None:
        elapsed = now - self.clock
        if elapsed > 0:
            for trip, rate in self.rate.items():
                self.remaining[trip] -= rate * elapsed
        self.clock = now

    def _share(self) -> None:
        """Max-min fair rates under the capacity, each at most its cap (module docstring)."""
        left, count = self.capacity, len(self.cap)
        self.rate = {}
        for trip, cap in sorted(self.cap.items(), key=lambda item: (item[1], item[0])):
            rate = min(cap, left / count)
            self.rate[trip] = rate
            left -= rate
            count -= 1
        self.epoch += 1

    def add(self, trip: int, nbytes: float, cap: float, now: float) -> None:
        """Start a transfer of ``nbytes`` for ``trip`` at ``now``, at most ``cap`` bytes per unit of time."""
        self._advance(now)
        self.remaining[trip], self.cap[trip] = float(nbytes), cap
        self._share()

    def remove(self, trip: int, now: float) -> None:
        """Drop ``trip``'s transfer (it finished, or the trip was cut) at ``now``."""
        self._advance(now)
        if self.remaining.pop(trip, None) is not None:
            del self.cap[trip]
            self._share()

    def next_completion(self) -> tuple[float, int] | None:
        """(time, trip) of the transfer that finishes first at the current rates; None if none is in flight."""
        best = None
        for trip, left in self.remaining.items():
            rate = self.rate[trip]
            time = self.clock + (max(left, 0.0) / rate if rate > 0 else math.inf)
            if best is None or (time, trip) < best:
                best = (time, trip)
        return best
