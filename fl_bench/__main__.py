import gc
import sys

from fl_bench.numerics import prepare_process

prepare_process(sys.argv[1:])  # before torch and numpy load: they read their kernel settings once

from fl_bench.runs.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
    # Skip the interpreter's last full collection over the ~400k objects torch and Lightning leave
    # (42 s measured on an overloaded 2-core VM): nothing of the run is left to finalize.
    gc.freeze()
