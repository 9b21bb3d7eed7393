"""Readers of device and availability trace files, as the projects that publish them store them.

- ``csv``: fl_bench's own availability windows, a header ``client,start,end`` and one window
  ``[start, end)`` a row.
- ``fedscale``: FedScale's client behaviour trace (``client_behave_trace``, a pickled dict
  ``{key: {"active": [...], "inactive": [...], "finish_time": t, ...}}``, seconds): entry j's sessions
  are ``[active[k], inactive[k]]``, and FedScale's ``ClientMetadata.is_active`` reads the trace modulo
  ``finish_time``, so a client's sessions repeat with that period.
- ``flgo_pings``: the ping log FLGo's phone simulator reads (Kaggle's ``pings.csv``: columns ``id`` and
  ``timestamp``): a user who pinged at t is online for the ``bucket`` (15 units) that holds t, times are
  shifted to start at 0, and the log repeats over its length. Users are ranked by their number of pings
  (FLGo's default, its most active users first).
- failure times: a CSV file with a header ``client,time``: the device of ``client`` fails at ``time``
  (times of a client in increasing order).
- ``fedscale_capacity``: FedScale's device capacity trace (``client_device_capacity``, a pickled dict
  ``{key: {"computation": ms per sample, "communication": kbps}}``).

Entry i of a trace (in the file's order; for pings, the i-th most active user) belongs to client i. A
trace with fewer entries than the dataset has clients is refused unless ``wrap`` reuses them, client i
taking entry i mod M as FedScale's client manager does. Pickle files run code when they are loaded:
read only traces you trust.
"""

from __future__ import annotations

import codecs
import csv
import math
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fl_bench.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

AVAILABILITY_FORMATS = ("csv", "fedscale", "flgo_pings")


@dataclass
class Windows:
    """Availability windows ``[starts[i], ends[i])`` of client ``clients[i]``, sorted by client, then start."""

    clients: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def sorted(self) -> "Windows":
        order = np.lexsort((self.starts, self.clients))
        return Windows(self.clients[order], self.starts[order], self.ends[order])


def _missing(path: Path, key: str, what: str) -> None:
    if not path.is_file():
        raise ConfigError(f"{key}={path} does not exist: give {what}")


def entry_of_client(num_entries: int, num_clients: int, key: str, path: Path, wrap: bool) -> np.ndarray:
    """Which trace entry each client takes: entry i for client i, or entry i mod M with ``wrap``."""
    if num_entries == 0:
        raise ConfigError(f"{key}={path} holds no client")
    if num_entries < num_clients and not wrap:
        raise ConfigError(f"{key}={path} has {num_entries} clients but the dataset has {num_clients}: give a trace with "
                          f">= {num_clients} clients, or reuse its entries by position (FedScale's client_id mod M) with "
                          f"wrap=true")
    return np.arange(num_clients) % num_entries


def _load_pickle(path: Path, key: str, what: str) -> dict:
    _missing(path, key, f"a pickled dict, {what}")
    try:
        with path.open("rb") as f:
            trace = pickle.load(f)
    except Exception as error:  # any unpickling failure is a bad file
        raise ConfigError(f"{key}={path} is not a pickled trace ({type(error).__name__}): give {what}") from None
    if not isinstance(trace, dict):
        raise ConfigError(f"{key}={path} holds a {type(trace).__name__}, not a dict: give {what}")
    return trace


def _not_text(path: Path, key: str, what: str, why: str) -> ConfigError:
    """The one-line refusal of a file that a CSV reader cannot read as text (binary, NUL bytes)."""
    return ConfigError(f"{key}={path} is not a CSV text file ({why}): give {what}")


def _check_text(path: Path, key: str, what: str) -> None:
    """Refuse a binary file before a CSV reader makes something of it: NUL bytes, or not UTF-8, in its
    first 64 KiB."""
    with path.open("rb") as f:
        head = f.read(1 << 16)
    if b"\0" in head:
        raise _not_text(path, key, what, "NUL bytes")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a character cut at the end is fine
    except UnicodeDecodeError:
        raise _not_text(path, key, what, "not UTF-8") from None


def read_table(path: Path, key: str, what: str, **read_csv) -> pd.DataFrame:
    """A CSV file read by pandas (``read_csv``'s keyword arguments); ConfigError in one line when it is
    missing, empty, binary or not CSV."""
    import pandas as pd

    _missing(path, key, what)
    _check_text(path, key, what)
    try:
        return pd.read_csv(path, **read_csv)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{key}={path} is empty: give {what}") from None
    except UnicodeDecodeError:
        raise _not_text(path, key, what, "not UTF-8") from None
    except (pd.errors.ParserError, ValueError) as error:  # ragged rows, NUL bytes, missing columns
        raise ConfigError(f"{key}={path}: {str(error).strip().splitlines()[0]}: give {what}") from None


def read_csv_windows(path: Path, num_clients: int | None, key: str) -> Windows:
    """fl_bench's ``client,start,end`` file (module docstring); client ids must be 0..num_clients-1
    (None: any id >= 0)."""
    what = "a CSV file with columns client,start,end"
    _missing(path, key, what)
    _check_text(path, key, what)
    rows = []
    try:
        with path.open(newline="") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            if not header:
                raise ConfigError(f"{key}={path} is empty: give {what}")
            if header != ["client", "start", "end"]:
                raise ConfigError(f"{key}={path} row 1: header {header} is not allowed: it must be client,start,end")
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                try:
                    client, start, end = int(row[0]), float(row[1]), float(row[2])
                    if len(row) != 3:
                        raise ValueError
                except (ValueError, IndexError):
                    raise ConfigError(f"{key}={path} row {line}: {','.join(row)!r} is not 'client,start,end' "
                                      "(an integer client id and two numbers)") from None
                if client < 0 or (num_clients is not None and client >= num_clients):
                    ids = "ids are >= 0" if num_clients is None else f"ids are 0..{num_clients - 1}"
                    raise ConfigError(f"{key}={path} row {line}: client {client} is unknown: {ids}")
                if not (math.isfinite(start) and end > start):
                    raise ConfigError(f"{key}={path} row {line}: window [{start:g}, {end:g}) is empty or not finite: "
                                      "need start < end")
                rows.append((client, start, end, line))
    except (UnicodeDecodeError, csv.Error) as error:
        raise _not_text(path, key, what, type(error).__name__) from None
    if not rows:
        return Windows(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))
    c, s, e, lines = (np.array(column) for column in zip(*rows))
    windows = Windows(c.astype(np.int64), s.astype(float), e.astype(float))
    order = np.lexsort((windows.starts, windows.clients))
    clash = np.flatnonzero((c[order][1:] == c[order][:-1]) & (s[order][1:] < e[order][:-1]))
    if len(clash):
        i, j = order[clash[0]], order[clash[0] + 1]
        raise ConfigError(f"{key}={path}: rows {lines[i]} and {lines[j]} overlap for client {c[i]} ([{s[i]:g}, {e[i]:g}) "
                          f"and [{s[j]:g}, {e[j]:g})): windows of a client must not overlap")
    return windows.sorted()


def _periodic(sessions: list[tuple[np.ndarray, np.ndarray]], periods: np.ndarray, repeat_until: float | None) -> Windows:
    """Client i's sessions, repeated every ``periods[i]`` until ``repeat_until`` (None: played once)."""
    clients, starts, ends = [], [], []
    for client, ((s, e), period) in enumerate(zip(sessions, periods)):
        copies = 1 if repeat_until is None else max(1, math.ceil(repeat_until / period))
        shift = np.repeat(np.arange(copies) * period, len(s))
        clients.append(np.full(len(s) * copies, client, dtype=np.int64))
        starts.append(np.tile(s, copies) + shift)
        ends.append(np.tile(e, copies) + shift)
    windows = Windows(np.concatenate(clients), np.concatenate(starts), np.concatenate(ends))
    if repeat_until is not None:
        keep = windows.starts < repeat_until
        windows = Windows(windows.clients[keep], windows.starts[keep], windows.ends[keep])
    return windows.sorted()


def read_fedscale_behaviour(path: Path, num_clients: int, key: str, wrap: bool = False,
                            repeat_until: float | None = None) -> Windows:
    """FedScale's behaviour trace (module docstring). Sessions of zero length (``active == inactive``,
    an instant) are left out: a window is ``[active, inactive)``."""
    what = "FedScale's client_behave_trace ({key: {active: [...], inactive: [...], finish_time: t}})"
    trace = _load_pickle(path, key, what)
    entries = list(trace.items())
    take = entry_of_client(len(entries), num_clients, key, path, wrap)
    sessions, periods = [], np.empty(num_clients)
    for client, index in enumerate(take):
        name, entry = entries[index]
        try:
            active = np.asarray(entry["active"], dtype=float)
            inactive = np.asarray(entry["inactive"], dtype=float)
            finish = float(entry["finish_time"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{key}={path}: entry {name!r} is not {{active: [...], inactive: [...], finish_time: t}}"
                              ) from None
        if active.shape != inactive.shape or active.ndim != 1:
            raise ConfigError(f"{key}={path}: entry {name!r} has {active.size} active and {inactive.size} inactive times: "
                              f"they must pair up")
        if not (np.all(np.isfinite(active)) and np.all(active >= 0) and np.all(inactive >= active)
                and np.all(active[1:] >= inactive[:-1])):
            raise ConfigError(f"{key}={path}: entry {name!r}'s sessions are not sorted, disjoint times >= 0 "
                              f"(active[k] <= inactive[k] <= active[k + 1])")
        if not (finish > 0 and (not len(inactive) or inactive[-1] <= finish)):
            raise ConfigError(f"{key}={path}: entry {name!r} has finish_time {finish:g}: it must be > 0 and >= its last "
                              f"inactive time (the trace repeats with that period)")
        keep = inactive > active
        sessions.append((active[keep], inactive[keep]))
        periods[client] = finish
    return _periodic(sessions, periods, repeat_until)


def read_pings(path: Path, key: str) -> pd.DataFrame:
    """FLGo's ping log as a frame of ``id`` and numeric ``timestamp``, at least one ping."""
    import pandas as pd

    pings = read_table(path, key, "a CSV ping log with columns id and timestamp (FLGo's phone simulator)",
                       usecols=["id", "timestamp"])
    times = pd.to_numeric(pings["timestamp"], errors="coerce").to_numpy(dtype=float)
    if not np.all(np.isfinite(times)):
        bad = pings["timestamp"][~np.isfinite(times)].iloc[0]
        raise ConfigError(f"{key}={path}: timestamp {bad!r} is not a number")
    if len(times) == 0:
        raise ConfigError(f"{key}={path} holds no ping")
    return pings.assign(timestamp=times)


def read_flgo_pings(path: Path, num_clients: int, key: str, wrap: bool = False, repeat_until: float | None = None,
                    bucket: float = 15.0) -> Windows:
    """FLGo's ping log (module docstring): each ping puts its user online for the bucket that holds it."""
    import pandas as pd

    pings = read_pings(path, key)
    times = pings["timestamp"].to_numpy(dtype=float)
    times = times - times.min()
    slots = np.floor(times / bucket)
    users = pings["id"].value_counts(sort=True)  # most pings first, FLGo's default choice of users
    ranked = users.index.to_numpy()
    take = entry_of_client(len(ranked), num_clients, key, path, wrap)
    user_rank = pd.Series(np.arange(len(ranked)), index=ranked)[pings["id"]].to_numpy()
    order = np.lexsort((slots, user_rank))
    user_rank, slots_by_user = user_rank[order], slots[order]
    of_user = np.searchsorted(user_rank, np.arange(len(ranked) + 1))  # user r's pings: [of_user[r], of_user[r + 1])
    period = (slots.max() + 1) * bucket  # the log's length, whole buckets
    sessions = []
    for index in take:
        s = np.unique(slots_by_user[of_user[index] : of_user[index + 1]])
        breaks = np.flatnonzero(np.diff(s) > 1)  # consecutive buckets make one window
        first, last = np.r_[s[0], s[breaks + 1]], np.r_[s[breaks], s[-1]]
        sessions.append((first * bucket, (last + 1) * bucket))
    return _periodic(sessions, np.full(num_clients, period), repeat_until)


def read_windows(fmt: str, path: str, num_clients: int, key: str, wrap: bool = False,
                 repeat_until: float | None = None, time_scale: float = 1.0) -> Windows:
    """The windows of a trace in format ``fmt`` (one of AVAILABILITY_FORMATS), client i's from its entry, on
    the virtual clock: trace time times ``time_scale``; ``repeat_until`` (trace time) repeats periodic ones."""
    path = Path(path).expanduser()
    if fmt == "csv":
        windows = read_csv_windows(path, num_clients, key)
    elif fmt == "fedscale":
        windows = read_fedscale_behaviour(path, num_clients, key, wrap, repeat_until)
    else:
        windows = read_flgo_pings(path, num_clients, key, wrap, repeat_until)
    return Windows(windows.clients, windows.starts * time_scale, windows.ends * time_scale)


def trace_entries(fmt: str, path: Path, key: str) -> int:
    """How many entries (clients) a trace in format ``fmt`` holds, the file read and checked as a whole
    (its windows, pings or pickled entries); ConfigError in one line for a bad file."""
    if fmt == "csv":
        windows = read_csv_windows(path, None, key)
        return int(windows.clients.max()) + 1 if len(windows.clients) else 0
    if fmt == "flgo_pings":
        return int(read_pings(path, key)["id"].nunique())
    return len(_load_pickle(path, key, "a pickled dict of FedScale trace entries"))


def read_fedscale_capacity(path: str, num_clients: int, key: str, wrap: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each client's (computation ms per sample, communication kbps) from FedScale's capacity trace."""
    path = Path(path).expanduser()
    trace = _load_pickle(path, key, "FedScale's client_device_capacity ({key: {computation: ms, communication: kbps}})")
    entries = list(trace.items())
    take = entry_of_client(len(entries), num_clients, key, path, wrap)
    values = np.empty((num_clients, 2))
    for client, index in enumerate(take):
        name, entry = entries[index]
        try:
            values[client] = float(entry["computation"]), float(entry["communication"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{key}={path}: entry {name!r} is not {{computation: ms, communication: kbps}}") from None
        if not (np.all(np.isfinite(values[client])) and np.all(values[client] > 0)):
            raise ConfigError(f"{key}={path}: entry {name!r} has computation {values[client, 0]:g} and communication "
                              f"{values[client, 1]:g}: both must be > 0")
    return values[:, 0], values[:, 1]


def read_failure_times(path: str, num_clients: int, key: str) -> tuple[np.ndarray, np.ndarray]:
    """A ``client,time`` failure trace as CSR arrays: client c's failure times are
    ``times[first[c]:first[c + 1]]``, increasing."""
    import pandas as pd

    path = Path(path).expanduser()
    table = read_table(path, key, "a CSV file with columns client,time", skipinitialspace=True)
    if list(table.columns) != ["client", "time"]:
        raise ConfigError(f"{key}={path} row 1: header {list(table.columns)} is not allowed: it must be client,time")
    clients = pd.to_numeric(table["client"], errors="coerce").to_numpy()
    times = pd.to_numeric(table["time"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(clients) & np.isfinite(times))
    bad |= ~bad & ((clients != np.round(clients)) | (clients < 0) | (clients >= num_clients) | (times < 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"{key}={path} row {i + 2}: {table.iloc[i, 0]},{table.iloc[i, 1]} is not a client id in "
                          f"0..{num_clients - 1} and a time >= 0")
    clients = clients.astype(np.int64)
    order = np.argsort(clients, kind="stable")
    c, t = clients[order], times[order]
    unsorted = np.flatnonzero((c[1:] == c[:-1]) & (t[1:] < t[:-1]))
    if len(unsorted):
        i = int(order[unsorted[0] + 1])
        raise ConfigError(f"{key}={path} row {i + 2}: client {clients[i]}'s time {times[i]:g} comes before its previous "
                          f"one: give each client's times in increasing order")
    return np.searchsorted(c, np.arange(num_clients + 1)), t
