"""An extension package written as a researcher would, outside fl_bench: one component of every
kind, each with its config beside it. Importing the package registers them (``@schema``); its YAML
options live in ``../conf``, which a run puts on ``hydra.searchpath``:

    FL_BENCH_PLUGINS=my_fl_extensions python -m fl_bench hydra.searchpath=[file://tests/example_plugin/conf] \
        dataset=blobs partition=label_shards model=tanh_mlp algorithm=trimmed_fedavg \
        delay=lognormal speed=by_size availability=alternating selection=fastest
"""

from my_fl_extensions import components  # noqa: F401  (importing it registers the components)
