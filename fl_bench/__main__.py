import sys

from fl_bench.numerics import prepare_process

prepare_process(sys.argv[1:])  # before torch and numpy load: they read their kernel settings once

from fl_bench.runs.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
