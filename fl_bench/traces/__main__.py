"""``python -m fl_bench.traces``: summarise a device or availability trace, or write a synthetic one.

    python -m fl_bench.traces summarise client_behave_trace --format fedscale
    python -m fl_bench.traces summarise client_device_capacity --format fedscale_capacity
    python -m fl_bench.traces generate windows.csv --format csv --clients 100 --online 0.3 --session 3600
    python -m fl_bench.traces generate capacity.pkl --format fedscale_capacity --clients 100

An availability summary gives the clients, their windows, the fraction of client-time online overall
and by hour of day (bins of ``--hour`` trace-time units, folded over days of 24 bins); a capacity
summary gives quantiles of the devices' computation latency and bandwidth. ``generate`` writes windows
of an on/off process per client (exponential sessions of mean ``--session`` and gaps sized so that a
client is online ``--online`` of the time), or log-normal device capacities, in the formats
:mod:`fl_bench.traces.formats` reads.
"""

from __future__ import annotations

import argparse
import os
import pickle
from pathlib import Path

import numpy as np
import pandas as pd

from fl_bench.errors import ConfigError, FLBenchError
from fl_bench.traces.formats import AVAILABILITY_FORMATS, Windows, read_fedscale_capacity, read_windows, trace_entries

FORMATS = (*AVAILABILITY_FORMATS, "fedscale_capacity")


def online_time_before(windows: Windows, x: np.ndarray) -> np.ndarray:
    """Client-time online in [0, x) for each x: sum over windows of clip(x - start, 0, end - start)."""
    starts, ends = np.sort(windows.starts), np.sort(windows.ends)
    started = np.searchsorted(starts, x)  # windows with start < x
    ended = np.searchsorted(ends, x)
    from_starts = started * x - np.r_[0.0, np.cumsum(starts)][started]
    from_ends = ended * x - np.r_[0.0, np.cumsum(ends)][ended]
    return from_starts - from_ends


def availability_summary(windows: Windows, num_clients: int, hour: float) -> tuple[dict, pd.DataFrame]:
    """Totals and the online fraction by hour of day (module docstring)."""
    span = float(windows.ends.max()) if len(windows.ends) else 0.0
    bins = max(1, int(np.ceil(span / hour)))
    edges = np.arange(bins + 1) * hour
    online = np.diff(online_time_before(windows, edges))
    by_hour = pd.DataFrame({"hour": np.arange(bins) % 24, "online": online})
    table = by_hour.groupby("hour")["online"].agg(["sum", "count"])
    table["online_fraction"] = table["sum"] / (table["count"] * hour * num_clients)
    totals = {
        "clients": num_clients,
        "windows": len(windows.starts),
        "clients_ever_online": int(len(np.unique(windows.clients))),
        "span": span,
        "online_fraction": float(online.sum() / (bins * hour * num_clients)),
        "mean_window": float(np.mean(windows.ends - windows.starts)) if len(windows.starts) else 0.0,
    }
    return totals, table[["online_fraction"]]


def capacity_summary(computation: np.ndarray, communication: np.ndarray) -> pd.DataFrame:
    """Quantiles of the devices' computation (ms per sample) and communication (kbps)."""
    quantiles = [0.0, 0.1, 0.5, 0.9, 1.0]
    return pd.DataFrame({"computation_ms_per_sample": np.quantile(computation, quantiles),
                         "communication_kbps": np.quantile(communication, quantiles)},
                        index=pd.Index(["min", "p10", "median", "p90", "max"], name="quantile"))


# the options each format reads (the others would be ignored: refused)
SUMMARY_OPTIONS = {"fedscale_capacity": ()}
GENERATE_OPTIONS = {"fedscale_capacity": ("computation", "computation_sigma", "communication", "communication_sigma")}
AVAILABILITY_OPTIONS = {"summarise": ("hour", "repeat_until"), "generate": ("online", "session", "span")}


def check_options(args: argparse.Namespace) -> None:
    """Refuse in one line an option the chosen format does not read (or a count of clients below 1), and fill in
    the defaults."""
    defaults = {"hour": 3600.0, "online": 0.3, "session": 3600.0, "span": 7 * 86400.0, "computation": 100.0,
                "computation_sigma": 0.5, "communication": 2000.0, "communication_sigma": 1.0}
    table = SUMMARY_OPTIONS if args.command == "summarise" else GENERATE_OPTIONS
    used = table.get(args.format, AVAILABILITY_OPTIONS[args.command])
    if args.command == "summarise" and args.format == "csv":
        used = ("hour",)  # csv windows are played as written
    for name in (*AVAILABILITY_OPTIONS[args.command], *GENERATE_OPTIONS["fedscale_capacity"]):
        value = getattr(args, name, None)
        if value is not None and name not in used:
            raise ConfigError(f"--{name.replace('_', '-')} {value} is not allowed with --format {args.format}: it reads "
                              f"{', '.join('--' + u.replace('_', '-') for u in used) or 'no option of this kind'}")
        if value is None and name in defaults and hasattr(args, name):
            setattr(args, name, defaults[name])
    if args.command == "generate" and args.clients < 1:
        raise ConfigError(f"--clients {args.clients} is not allowed: must be >= 1")


def summarise(args: argparse.Namespace) -> str:
    if not args.hour > 0:
        raise ConfigError(f"--hour {args.hour} is not allowed: it must be > 0 (trace-time units in an hour)")
    path = Path(args.path).expanduser()
    clients = trace_entries(args.format, path, "trace")
    if clients == 0:
        raise ConfigError(f"trace={path} holds no client")
    if args.format == "fedscale_capacity":
        computation, communication = read_fedscale_capacity(str(path), clients, "trace")
        return f"{path} ({args.format}): {clients} devices\n{capacity_summary(computation, communication).to_string()}"
    windows = read_windows(args.format, str(path), clients, "trace", repeat_until=args.repeat_until)
    totals, by_hour = availability_summary(windows, clients, args.hour)
    head = " | ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}" for key, value in totals.items())
    return f"{path} ({args.format}): {head}\nonline fraction by hour of day (bins of {args.hour:g}):\n{by_hour.to_string()}"


def on_off_windows(clients: int, online: float, session: float, span: float, rng: np.random.Generator) -> Windows:
    """Each client alternates exponential online sessions (mean ``session``) and offline gaps (mean
    ``session * (1 - online) / online``), starting online with probability ``online``, over [0, span)."""
    gap = session * (1 - online) / online
    rows = []
    for client in range(clients):
        t, up = 0.0, rng.random() < online
        while t < span:
            length = rng.exponential(session if up else gap)
            if up:
                rows.append((client, t, min(t + length, span)))
            t, up = t + length, not up
    c, s, e = (np.array(column) for column in zip(*rows)) if rows else ([], [], [])
    return Windows(np.asarray(c, dtype=np.int64), np.asarray(s, dtype=float), np.asarray(e, dtype=float))


def generate(args: argparse.Namespace) -> str:
    rng = np.random.default_rng(args.seed)
    out = Path(args.path).expanduser()
    if not out.parent.is_dir():  # a misspelt directory would otherwise be made silently
        raise ConfigError(f"{out}: its directory {out.parent} does not exist: create it first, or give a path in an "
                          f"existing directory")
    if args.format == "fedscale_capacity":
        if not (args.computation > 0 and args.communication > 0 and args.computation_sigma >= 0
                and args.communication_sigma >= 0):
            raise ConfigError(f"--computation {args.computation}, --communication {args.communication} (and their sigmas "
                              f"{args.computation_sigma}, {args.communication_sigma}) are not allowed: medians must be > 0 "
                              f"and sigmas >= 0")
        computation = args.computation * np.exp(args.computation_sigma * rng.standard_normal(args.clients))
        communication = args.communication * np.exp(args.communication_sigma * rng.standard_normal(args.clients))
        trace = {i + 1: {"computation": float(c), "communication": float(b)}
                 for i, (c, b) in enumerate(zip(computation, communication))}
        out.write_bytes(pickle.dumps(trace))
        return f"wrote {out}: {args.clients} devices"
    if not 0 < args.online <= 1 or args.session <= 0 or args.span <= 0:
        raise ConfigError(f"--online {args.online}, --session {args.session}, --span {args.span} are not allowed: need "
                          f"0 < online <= 1, session > 0 and span > 0")
    windows = on_off_windows(args.clients, args.online, args.session, args.span, rng)
    if args.format == "csv":
        pd.DataFrame({"client": windows.clients, "start": windows.starts, "end": windows.ends}).to_csv(out, index=False)
    elif args.format == "fedscale":
        first = np.searchsorted(windows.clients, np.arange(args.clients + 1))
        trace = {i + 1: {"duration": args.span, "active": windows.starts[first[i]:first[i + 1]].tolist(),
                         "inactive": windows.ends[first[i]:first[i + 1]].tolist(), "finish_time": args.span,
                         "model": "synthetic"} for i in range(args.clients)}
        out.write_bytes(pickle.dumps(trace))
    else:
        raise ConfigError(f"--format {args.format} is not allowed for generate: choose csv, fedscale or fedscale_capacity")
    return f"wrote {out}: {args.clients} clients, {len(windows.starts)} windows"


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the documented command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.traces", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("summarise", help="clients, online fraction by hour, speed quantiles")
    show.add_argument("path")
    show.add_argument("--format", choices=FORMATS, default="csv")
    show.add_argument("--hour", type=float, default=None, help="trace-time units in an hour (default 3600: seconds)")
    show.add_argument("--repeat-until", type=float, default=None, help="repeat a periodic trace until this trace time")
    make = commands.add_parser("generate", help="write a synthetic trace with given statistics")
    make.add_argument("path")
    make.add_argument("--format", choices=("csv", "fedscale", "fedscale_capacity"), default="csv")
    make.add_argument("--clients", type=int, default=100)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--online", type=float, help="fraction of the time a client is online (default 0.3)")
    make.add_argument("--session", type=float, help="mean online session, trace time (default 3600)")
    make.add_argument("--span", type=float, help="trace length (default a week of seconds)")
    make.add_argument("--computation", type=float, help="median ms per sample (default 100)")
    make.add_argument("--computation-sigma", type=float, help="log-normal spread of computation (default 0.5)")
    make.add_argument("--communication", type=float, help="median kbps (default 2000)")
    make.add_argument("--communication-sigma", type=float, help="log-normal spread of communication (default 1)")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run it; errors are one line (``FL_BENCH_TRACEBACK`` keeps the traceback)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_options(args)
        print(summarise(args) if args.command == "summarise" else generate(args))
    except FLBenchError as error:
        if os.environ.get("FL_BENCH_TRACEBACK"):
            raise
        from fl_bench.runs.cli import exit_with_error

        exit_with_error(error)


if __name__ == "__main__":
    main()
