"""The per-trip record of a run (``trips.csv``)."""

from __future__ import annotations

from array import array

import numpy as np


class TripLog:
    """Columnar per-trip record (8 bytes a field), cheap to append at 10^6 trips. A row is written
    when a trip is over: uploaded (``used=1``) or dropped / aborted (``used=0``, nothing uploaded)."""

    COLUMNS = ("client", "num_examples", "download_version", "start_time", "end_time", "staleness", "used",
               "bytes_down", "bytes_up", "flops", "weight")
    # under behaviour=unreliable (fl_bench.engine.behaviour): why a trip was lost part-way (0: it was not;
    # 1: the device failed; 2: an outage took its group offline; 3: on_unavailable=drop cut it at its window's
    # end; 4: the work deadline came before its first step), the time spent communicating
    # (end - start - comm_time is compute) and the local steps an uploaded trip trained (0 for a lost one);
    # absent otherwise, so that a run without behaviours writes the same trips.csv as before
    BEHAVIOUR_COLUMNS = ("failed", "comm_time", "local_steps")
    # weight: the upload's normalised share of its server step, where the algorithm defines one
    # (FedStaleWeight), else NaN
    # flops: the local training of an uploaded trip (FedGBO App. B), 0 for one that uploaded nothing
    _TYPES = {"start_time": "d", "end_time": "d", "used": "b", "flops": "d", "weight": "d", "failed": "b",
              "comm_time": "d"}

    def __init__(self, behaviour: bool = False, steps: bool = False) -> None:
        """``steps``: the trips' local steps vary by the server's choice (a work schedule: fl_bench.engine.work), so
        ``local_steps`` is kept without the behaviour's other columns."""
        self.names = self.COLUMNS + (self.BEHAVIOUR_COLUMNS if behaviour else ("local_steps",) if steps else ())
        for name in self.COLUMNS + self.BEHAVIOUR_COLUMNS:
            setattr(self, name, array(self._TYPES.get(name, "q")))

    def append(self, client, num_examples, version, start, end, staleness, used, bytes_down, bytes_up, flops,
               failed=0, comm_time=0.0, local_steps=0) -> None:
        """Add the row of a trip that is over; its ``weight`` stays NaN until its server step writes it."""
        self.client.append(client)
        self.num_examples.append(num_examples)
        self.download_version.append(version)
        self.start_time.append(start)
        self.end_time.append(end)
        self.staleness.append(staleness)
        self.used.append(used)
        self.bytes_down.append(bytes_down)
        self.bytes_up.append(bytes_up)
        self.flops.append(flops)
        self.weight.append(float("nan"))
        self.failed.append(failed)
        self.comm_time.append(comm_time)
        self.local_steps.append(local_steps)

    def __len__(self) -> int:
        return len(self.client)

    def columns(self) -> dict[str, np.ndarray]:
        """Every column as a zero-copy numpy array over the log. Drop them before the next
        :meth:`append`: a column whose buffer is exported cannot grow."""
        return {name: np.frombuffer(getattr(self, name), dtype=getattr(self, name).typecode) for name in self.names}
