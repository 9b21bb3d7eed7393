"""Command line: ``python -m fl_bench [overrides]`` (Hydra), with one-line errors.

Hydra is run with HYDRA_FULL_ERROR so that failures reach this module, which prints them as a
single ``fl_bench: error: ...`` line and exits 1. A user who sets HYDRA_FULL_ERROR=1 gets the full
traceback instead.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException
from rich.console import Console

from fl_bench.clients.distributed import launched_rank
from fl_bench.errors import ConfigError, FLBenchError
from fl_bench.runs.config import register_configs, to_config
from fl_bench.runs.help import asks_for_help, help_text, register_help_resolver
from fl_bench.runs.interrupt import stop_signals_handled
from fl_bench.runs.run_dir import RunDirectory
from fl_bench.schema import unknown_key

# Importing this module registers the configs for whoever composes them (tests, benchmarks, Hydra's
# launchers). A plugin module that cannot be imported must not end in a traceback here: main() and the
# other commands register again inside their error handling, which says so in one line.
with contextlib.suppress(ConfigError):
    register_configs()
register_help_resolver()  # --help's generated lists (conf/hydra/help/fl_bench.yaml)


def one_line(error: BaseException) -> str:
    """Turn Hydra / OmegaConf / fl_bench errors into one line naming the bad value."""
    # fl_bench.runs.config raises ConfigError from __post_init__; OmegaConf may wrap it.
    cause = error
    while cause.__cause__ is not None and not isinstance(cause, FLBenchError):
        cause = cause.__cause__
    if isinstance(cause, FLBenchError):
        return str(cause)
    node = getattr(cause, "parent_node", None)
    schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and is_dataclass(schema) and cause.full_key \
            and cause.key not in {f.name for f in fields(schema)}:  # key=value for a key its schema lacks
        return str(unknown_key(cause.full_key, node))  # the line a +key=value typo gets (check_keys)
    text = str(error)
    missing = re.search(r"Could not find '([\w/]+)/([^']+)'", text)
    options = re.search(r"Available options in '[\w/]+':\s*\n((?:\s+\S+\n?)+)", text)
    if missing:
        group, name = missing.groups()
        allowed = ", ".join(o.strip() for o in options.group(1).split()) if options else "see conf/" + group
        return f"unknown {group} {name!r}: choose one of {allowed}"
    chosen = re.search(r"Error merging override ([\w.]+)=(\S+)\W+Invalid type assigned: str is not a subclass of",
                       f"{text} {error.__cause__ or ''}")
    if chosen:  # algorithm.weighting=examples: a component is chosen as its group, not set as a value
        key, value = chosen.groups()
        return (f"{key}={value} is not allowed: {key} is a component, chosen as its group: "
                f"{key.replace('.', '/')}={value}")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("To append", "full_key", "object_type", "reference_type"))]
    if error.__cause__ is not None and str(error.__cause__).strip():
        lines.append(str(error.__cause__).strip().splitlines()[0])  # e.g. "Key 'x' not in 'FedBuffConfig'"
    return ": ".join(line.rstrip(".") for line in lines[:2])


# An absolute path: Hydra would read a relative one as a Python package next to this module.
CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "conf")


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")
def _main(dict_cfg: DictConfig) -> float | None:
    from fl_bench.runs.experiment import run_experiment  # heavy imports after argument checking

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    directory = RunDirectory(run_dir)
    try:
        try:
            _check_optional_groups()
            cfg = to_config(dict_cfg)  # the schemas' key and range checks
        except BaseException:
            directory.remove_if_fresh()  # bad input leaves no orphan run directory
            raise
        # Hydra's own .hydra/*.yaml (its writing is off in conf/config.yaml: see RunDirectory.save_configs)
        hydra_files = {"config.yaml": dict_cfg, "hydra.yaml": OmegaConf.create({"hydra": hydra_cfg}),
                       "overrides.yaml": hydra_cfg.overrides.task}
        with stop_signals_handled():
            summary = run_experiment(cfg, run_dir, hydra_files)
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM (SLURM before preemption): checkpoint and logs written, status interrupted.
        print(f"fl_bench: interrupted: checkpoint and logs written to {run_dir}; "
              "run the same command again to go on", file=sys.stderr)
        sys.exit(130)
    except FLBenchError as error:
        # In a sweep the job fails alone (a diverged trial must not end the study): Hydra records
        # the error in the job's result and the sweeper goes on.
        if os.environ.get("FL_BENCH_TRACEBACK") or hydra_cfg.mode == RunMode.MULTIRUN:
            raise
        # Exit from inside the job: Hydra would otherwise add its own "Error executing job" line.
        exit_with_error(error)
    if launched_rank() != 0:  # a multi-process run's other processes: rank 0 prints the result
        return None
    Console(stderr=False).print(result_line(summary), highlight=False, soft_wrap=True)  # (a pipe: no wrap at 80 columns)
    target = summary["trips_to_target"]
    return float(target) if target is not None else None


def result_line(summary: dict) -> str:
    """The run's result as the command prints it (rich markup). A run without a clock (``algorithm=centralized``:
    its summary's ``sim_time`` is null) prints no simulated time; a private one the epsilon it spent. A run
    that measured no accuracy (its ``accuracy_source`` null, or no evaluation gave one: a user's module that
    logs none) prints its validation loss, and its target as "no accuracy logged", not "not reached"."""
    target, sim_time = summary["trips_to_target"], summary.get("sim_time")
    best = summary.get("best_val_accuracy", 0.0)
    measured = summary.get("accuracy_source", "") is not None and best is not None and best == best
    return (f"[bold]{summary['algorithm']}[/] on {summary['dataset']}: "
            + (f"val acc {summary['final_val_accuracy']:.4f}" if measured else f"val loss {summary['final_val_loss']:.4f}")
            + f" | trips {summary['client_trips']} | "
            f"server steps {summary['server_steps']} | trips to {summary['target_accuracy']:.0%}: "
            f"{target if target is not None else 'not reached' if measured else 'no accuracy logged'} | "
            + (f"sim time {sim_time:.1f} | " if sim_time is not None else "")
            + (f"epsilon {summary['dp_epsilon']:.4g} at delta {summary['dp_delta']:.0e} | " if "dp_epsilon" in summary else "")
            + f"{summary['wall_seconds']:.1f}s\nrun dir: {summary['run_dir']}")


OPTIONAL_GROUPS = ("experiment", "hparams_search")


def _check_optional_groups() -> None:
    """Hydra silently skips an unknown option of an optional group (``experiment=nope`` would run the
    default config): make it the same one-line error as any other unknown option."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    for group in OPTIONAL_GROUPS:
        name = HydraConfig.get().runtime.choices.get(group)
        if name in (None, "null"):  # (listing a group's options costs a tenth of a second)
            continue
        options = loader.get_group_options(group)
        if name not in options:
            raise ConfigError(f"unknown {group} {name!r}: choose one of {', '.join(options)}")


def exit_with_error(error: BaseException) -> NoReturn:
    """Print ``error`` as one ``fl_bench: error: ...`` line on stderr and exit 1."""
    print(f"fl_bench: error: {one_line(error)}", file=sys.stderr)
    sys.exit(1)


@contextlib.contextmanager
def _errors_reach_us():
    """HYDRA_FULL_ERROR inside the block, so that Hydra lets errors through to :func:`main`; a user who
    set it asked for full tracebacks (FL_BENCH_TRACEBACK). Both restored after, so that a process that
    runs several commands (fl_bench.analysis.reproduce --in-process, the tests) sees each as its own."""
    before = {key: os.environ.get(key) for key in ("HYDRA_FULL_ERROR", "FL_BENCH_TRACEBACK")}
    if before["HYDRA_FULL_ERROR"]:
        os.environ["FL_BENCH_TRACEBACK"] = "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> None:
    """``python -m fl_bench``: the Hydra run, its errors printed as one line (exit 1); with
    ``HYDRA_FULL_ERROR`` set, the full traceback."""
    with _errors_reach_us():
        _run_command_line()


def _run_command_line() -> None:
    try:
        register_configs()  # FL_BENCH_PLUGINS' modules: one that cannot be imported is one line
        if asks_for_help(sys.argv[1:]):  # --help [overrides]: conf/hydra/help/fl_bench.yaml from one compose
            text = help_text(CONFIG_DIR, "config", [a for a in sys.argv[1:] if not asks_for_help([a])])
            if text is not None:
                with contextlib.suppress(BrokenPipeError):  # (--help | head)
                    print(text.rstrip(), flush=True)
                    return
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's advice for a closed pipe
                return
        _main()
    except (FLBenchError, HydraException, OmegaConfBaseException) as error:
        if os.environ.get("FL_BENCH_TRACEBACK"):
            raise
        exit_with_error(error)
    except OSError as error:  # Hydra could not create or write the run directory (hydra.run.dir)
        if os.environ.get("FL_BENCH_TRACEBACK"):
            raise
        where = f"{error.filename}: " if error.filename else ""
        exit_with_error(ConfigError(f"{where}{error.strerror or error} (for the run directory: set hydra.run.dir, "
                                    "or hydra.sweep.dir with --multirun, to a writable path)"))
