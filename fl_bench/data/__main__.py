"""``python -m fl_bench.data prepare <dataset> [overrides]``: download and cache a real dataset.

``<dataset>`` is a ``conf/dataset`` option; overrides are Hydra overrides (``data_root=/big/disk``,
``dataset.fraction=0.05``, ``data_mirror=...``, ``progress=false``), composed exactly as a run composes
them, so a run with the same overrides finds the cache this writes. A run prepares its missing data
itself; this command does it ahead (a login node with network, before a sweep on nodes without).
"""

from __future__ import annotations

import argparse
import os

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from fl_bench.data.downloads import download_settings
from fl_bench.data.sources import RealDatasetConfig
from fl_bench.errors import ConfigError, FLBenchError
from fl_bench.runs.cli import CONFIG_DIR, exit_with_error
from fl_bench.runs.config import Config, register_configs, to_config


def run_config(dataset: str, overrides: list[str]) -> Config:
    """The config of a run of ``dataset`` with these overrides; ConfigError for a dataset that is
    generated at run time (nothing to prepare)."""
    register_configs()  # a plugin dataset's schema; a plugin that cannot be imported is one line
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = to_config(compose("config", overrides=[f"dataset={dataset}", *overrides]))
    if not isinstance(cfg.dataset, RealDatasetConfig):
        raise ConfigError(f"dataset={dataset!r} is generated at run time: nothing to prepare")
    return cfg


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the documented command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.data", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="download (where the network allows), split and cache a dataset")
    prep.add_argument("dataset", help="a conf/dataset option, e.g. sent140, cifar10, femnist")
    prep.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data_root=/data dataset.fraction=0.05")
    return parser


def main(argv: list[str] | None = None) -> None:
    """``python -m fl_bench.data prepare``: compose the config as a run would, then download and
    cache the dataset; errors are one line (``FL_BENCH_TRACEBACK`` keeps the traceback)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from fl_bench.data.sources import prepare

        cfg = run_config(args.dataset, args.overrides)
        with download_settings(cfg.data_mirror, cfg.progress):
            prepare(cfg.dataset)
    except (FLBenchError, HydraException, OmegaConfBaseException) as error:
        if os.environ.get("FL_BENCH_TRACEBACK"):
            raise
        exit_with_error(error)


if __name__ == "__main__":
    main()
