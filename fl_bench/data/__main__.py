"""``python -m fl_bench.data prepare <dataset> [overrides]``: download and cache a real dataset.

``<dataset>`` is a ``conf/dataset`` option; overrides are Hydra overrides (``data_root=/big/disk``,
``dataset.fraction=0.05``), composed exactly as a run composes them, so a run with the same
overrides finds the cache this writes.
"""

from __future__ import annotations

import argparse
import os

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fl_bench.data.sources import RealDatasetConfig
from fl_bench.errors import ConfigError, FLBenchError
from fl_bench.runs.cli import CONFIG_DIR, exit_with_error
from fl_bench.runs.config import register_configs


def main(argv: list[str] | None = None) -> None:
    """``python -m fl_bench.data prepare``: compose the config as a run would, then download and
    cache the dataset; errors are one line (``FL_BENCH_TRACEBACK`` keeps the traceback)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.data", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="download (where the network allows), split and cache a dataset")
    prep.add_argument("dataset", help="a conf/dataset option, e.g. sent140, cifar10, femnist")
    prep.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data_root=/data dataset.fraction=0.05")
    args = parser.parse_args(argv)
    try:
        from fl_bench.data.sources import prepare

        register_configs()  # a plugin dataset's schema; a plugin that cannot be imported is one line
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = OmegaConf.to_object(compose("config", overrides=[f"dataset={args.dataset}", *args.overrides]))
        if not isinstance(cfg.dataset, RealDatasetConfig):
            raise ConfigError(f"dataset={args.dataset!r} is generated at run time: nothing to prepare")
        prepare(cfg.dataset)
    except (FLBenchError, HydraException, OmegaConfBaseException) as error:
        if os.environ.get("FL_BENCH_TRACEBACK"):
            raise
        exit_with_error(error)


if __name__ == "__main__":
    main()
