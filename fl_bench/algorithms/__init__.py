"""Server algorithms: how client uploads become server steps, one module per family.

``base``: the base class of the contract ``fl_bench.contracts.Server`` (``ServerAlgorithm``), the knobs
every algorithm shares and those of each step policy (``AsyncConfig``, ``SyncConfig``);
``server_optimizers``: the server step of FedBuff, FADAS and the FedAvg family, one registered option each
(sgd, momentum, adam, rmsprop, amsgrad; a plugin adds its own); ``weightings``: how an upload counts in a step,
its weighting by data (uniform, examples) and its staleness function (polynomial, constant), a plugin's too;
``buffered``: FedBuff and FedAsync;
``synchronous``: FedAvg, FedAvgM, FedProx, FedMAX, AdaptiveFedOpt (the pooled-data reference,
``algorithm=centralized``, is no server algorithm: its config lives with its run); ``fedlaavg``; ``hfl``;
``fedstaleweight``; ``ca2fl`` (a cache of every client's latest update calibrates each buffered step);
``fadas`` (FedBuff's buffer, an AMSGrad step at a delay-adaptive rate); ``fedgbo`` (FedGBO, MFL,
Mimelite) with ``global_optimizer`` (Table II's statistics); ``client_state``: per-client server state.
Each config sits beside its class (``@schema``); a new algorithm, in or out of this package, is one class,
one config and one YAML file (docs/extending/plugins.md).
"""

from fl_bench.algorithms.base import ServerAlgorithm

__all__ = ["ServerAlgorithm"]
