"""Server algorithms: how client uploads become server steps, one module per family.

``buffered``: FedBuff and FedAsync (asynchronous); ``synchronous``: FedAvg, FedAvgM, FedProx.
A new algorithm is one :class:`~fl_bench.algorithms.base.ServerAlgorithm` subclass plus one YAML
file under ``conf/algorithm/`` whose ``_target_`` names it (see the README).
"""

from fl_bench.algorithms.base import ServerAlgorithm, staleness_scale

__all__ = ["ServerAlgorithm", "staleness_scale"]
