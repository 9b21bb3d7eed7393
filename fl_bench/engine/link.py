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


import numpy as np


class SharedLink:
    """The transfers in flight over the server link, packed in the first ``count`` rows of numpy arrays
    (bytes left, cap, rate, trip id), so that an event costs a few vectorised passes, not a Python loop."""

    def __init__(self, capacity: float):
        self.capacity = capacity
        self.count = 0
        self.row: dict[int, int] = {}  # trip id -> its transfer's row
        self.trip = np.zeros(16, dtype=np.int64)
        self.remaining = np.zeros(16)  # bytes left
        self.cap = np.zeros(16)  # its client's bandwidth for this transfer
        self.rate = np.zeros(16)
        self.clock = 0.0  # when ``remaining`` was last brought up to date
        self.epoch = 0  # bumped on every change: events scheduled before it are stale

    def _advance(self, now: float) -> None:
        elapsed = now - self.clock
        if elapsed > 0 and self.count:
            self.remaining[: self.count] -= self.rate[: self.count] * elapsed
        self.clock = now

    def _share(self) -> None:
        """Max-min fair rates under the capacity, each at most its cap (module docstring): in increasing
        order of caps, a transfer whose cap is below an equal share of what is left takes its cap; from the
        first that is not, all take that share."""
        n = self.count
        self.epoch += 1
        if not n:
            return
        caps = self.cap[:n]
        if caps.min() * n >= self.capacity:  # nobody is capped below an equal share
            self.rate[:n] = self.capacity / n
            return
        order = np.argsort(caps, kind="stable")
        sorted_caps = caps[order]
        before = np.concatenate([[0.0], np.cumsum(sorted_caps)[:-1]])  # taken by the smaller caps
        share = (self.capacity - before) / np.arange(n, 0, -1)
        uncapped = np.flatnonzero(sorted_caps > share)
        k = int(uncapped[0]) if len(uncapped) else n
        self.rate[order[:k]] = sorted_caps[:k]
        if k < n:
            self.rate[order[k:]] = share[k]

    def add(self, trip: int, nbytes: float, cap: float, now: float) -> None:
        """Start a transfer of ``nbytes`` for ``trip`` at ``now``, at most ``cap`` bytes per unit of time."""
        self._advance(now)
        if self.count == len(self.trip):  # full: double the rows
            self.trip, self.remaining, self.cap, self.rate = (np.resize(a, 2 * len(a)) for a in
                                                               (self.trip, self.remaining, self.cap, self.rate))
        row = self.count
        self.count += 1
        self.row[trip] = row
        self.trip[row], self.remaining[row], self.cap[row] = trip, float(nbytes), cap
        self._share()

    def remove(self, trip: int, now: float) -> None:
        """Drop ``trip``'s transfer (it finished, or the trip was cut) at ``now``."""
        row = self.row.pop(trip, None)
        if row is None:
            return
        self._advance(now)
        last = self.count - 1
        if row != last:  # the last row fills the hole
            moved = int(self.trip[last])
            self.trip[row], self.remaining[row], self.cap[row] = moved, self.remaining[last], self.cap[last]
            self.row[moved] = row
        self.count = last
        self._share()

    def next_completion(self) -> tuple[float, int] | None:
        """(time, trip) of the transfer that finishes first at the current rates (ties: the lowest trip id);
        None if none is in flight."""
        n = self.count
        if not n:
            return None
        left = np.maximum(self.remaining[:n], 0.0) / self.rate[:n]  # every rate is > 0
        first = int(np.argmin(left))
        ties = np.flatnonzero(left == left[first])
        if len(ties) > 1:
            first = int(ties[np.argmin(self.trip[ties])])
        return self.clock + float(left[first]), int(self.trip[first])
