"""Ctrl-C and SIGTERM (what SLURM sends before preemption) stop a run cleanly.

While the event loop runs, the first signal only asks it to stop: the loop finishes the event at
hand, writes a checkpoint (complete only between events) and raises KeyboardInterrupt there; the
run's logs are then written with status interrupted. A second signal, or one outside the loop
(loading data), interrupts at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """The signal that asked the loop to stop, if any: inside :meth:`deferred` the first signal is
    kept for :meth:`raise_if_requested`; any other raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.signal: int | None = None  # the signal that asked the loop to stop
        self.deferring = False  # inside the event loop: stop at the next event boundary

    def handle(self, signum, frame) -> None:
        """The signal handler: keep the first signal while deferring, else raise KeyboardInterrupt."""
        if self.deferring and self.signal is None:
            self.signal = signum
            return
        raise KeyboardInterrupt(f"signal {signum}")

    def raise_if_requested(self) -> None:
        """Raise KeyboardInterrupt if a kept signal is waiting (the loop calls this between
        events, after a checkpoint)."""
        if self.signal is not None:
            raise KeyboardInterrupt(f"signal {self.signal}")

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Signals inside this block wait for :meth:`raise_if_requested`."""
        self.signal, self.deferring = None, True
        try:
            yield
        finally:
            self.deferring = False


STOP = StopRequest()


@contextmanager
def stop_signals_handled() -> Iterator[None]:
    """Route Ctrl-C and SIGTERM through :data:`STOP` for the duration of a run (only the main thread
    may install handlers: a run in another thread keeps the defaults)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, STOP.handle) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
