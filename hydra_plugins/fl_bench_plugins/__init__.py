"""Hydra search path plugin: every fl_bench plugin package's own ``conf/`` (its YAML options, as package
data inside the package) on the config search path of every command, after fl_bench's ``conf/``, so that an
installed plugin's options (``delay=lognormal_tail``, its ``hparams_search`` spaces) need no
``hydra.searchpath`` (fl_bench.schema.plugin_conf_dirs)."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class FLBenchPluginsSearchPath(SearchPathPlugin):
    """Appends ``file://<package>/conf`` of each plugin module named by the ``fl_bench.plugins`` entry points and
    ``FL_BENCH_PLUGINS``."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from fl_bench.schema import plugin_conf_dirs

        for conf in plugin_conf_dirs():
            search_path.append(provider=f"fl_bench plugin {conf.parent.name}", path=f"file://{conf}")
