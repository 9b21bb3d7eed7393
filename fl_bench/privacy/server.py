"""DP as a wrapper around any server (the role of Flower's ``DifferentialPrivacyServerSideFixedClipping``):
:class:`PrivateServer` takes a server step's uploads in the trusted aggregator and hands the server it
wraps one clipped, weighted, noised mean (``fl_bench.privacy.mechanism``), so that the algorithm never
sees a single client's update (SecAgg semantics). The event loop steps it as it steps any server and
knows nothing of DP. :func:`private_server` builds it for a run from ``dp=<option>`` (the configs are
here), its sigma calibrated for ``dp.target_epsilon``, and refuses in one line a run whose steps DP
cannot bound.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from omegaconf import MISSING

from fl_bench.contracts import Broadcast, Server, Trainer, Upload
from fl_bench.errors import ConfigError
from fl_bench.privacy.accounting import calibrate, participation_sensitivity, spent
from fl_bench.privacy.mechanism import PrivateAggregation
from fl_bench.schema import require, schema

logger = logging.getLogger(__name__)


class PrivateServer(Server):
    """``algorithm`` behind the trusted aggregator: the uploads ``add`` takes are held until ``step``,
    which aggregates them privately (``aggregation``, weighted by the algorithm's ``private_weight``)
    and steps the algorithm on that one upload. The model (the algorithm's tensor, stepped in place),
    its version and what the clients download and upload are the algorithm's. No upload has a share
    of its own in a step (``step_weights`` stays None): the algorithm sees only the aggregate."""

    def __init__(self, algorithm: Server, aggregation: PrivateAggregation, num_clients: int, delta: float,
                 target_epsilon: float | None):
        self.algorithm = algorithm
        self.aggregation = aggregation
        self.params, self.version = algorithm.params, algorithm.version
        self.upload, self.upload_keys = algorithm.upload, algorithm.upload_keys
        self.num_clients, self.delta, self.target_epsilon = num_clients, delta, target_epsilon  # for the accounting
        self._uploads: list[Upload] = []  # the coming step's, in the aggregator only

    def broadcast(self) -> Broadcast:
        return self.algorithm.broadcast()

    def upload_nbytes(self) -> int:
        return self.algorithm.upload_nbytes()

    def add(self, upload: Upload) -> None:
        self._uploads.append(upload)

    def step(self) -> None:
        """The algorithm's step on the private aggregate of the added uploads."""
        algorithm = self.algorithm
        aggregate = self.aggregation.aggregate(self._uploads, algorithm.version, algorithm.private_weight)
        self._uploads = []
        algorithm.add(aggregate)
        algorithm.step()
        self.version = algorithm.version

    def dp_check(self, mechanism: str) -> None:
        raise ConfigError(f"dp={mechanism} is not allowed around a private server: its steps are private already")

    def server_state_nbytes(self) -> int:
        return self.algorithm.server_state_nbytes()

    def client_state_nbytes(self) -> int:
        return self.algorithm.client_state_nbytes()

    def privacy_summary(self) -> dict[str, Any]:
        """The summary's privacy keys: (epsilon, delta) spent so far (``accounting.spent``)."""
        return spent(self.aggregation, self.delta, self.target_epsilon, self.num_clients)


def dp_plan(cfg: Any, num_clients: int) -> dict[str, Any]:
    """Uploads per server step (K: the buffer, or the cohort) and the budget of steps the accountant
    is calibrated for (max_rounds, else max_trips / K), for the run's Config ``cfg``."""
    algorithm = cfg.algorithm
    per_step = getattr(algorithm, "buffer_size", None) or getattr(algorithm, "cohort", None) or cfg.concurrency
    steps = cfg.max_rounds if cfg.max_rounds is not None else -(-cfg.max_trips // per_step)
    return dict(per_step=per_step, steps=steps, num_clients=num_clients,
                restart_every=getattr(cfg.dp, "restart_every", None))


def private_server(cfg: Any, algorithm: Server, trainer: Trainer, num_clients: int, device: torch.device) -> Server:
    """The server the run's Config ``cfg`` steps: ``algorithm`` itself under dp=none, else the trusted
    aggregator around it, its sigma calibrated for dp.target_epsilon. Refused in one line where what
    reaches the server is not bounded: anything the trainer uploads beside the algorithm's Upload, an
    algorithm without a private form, cohorts DP-SGD's sampling does not describe, or a budget that a
    cap on each client's uploads could not spend."""
    dp = cfg.dp
    if dp.name == "none":
        return algorithm
    if trainer.extra_upload_bytes:  # it would bypass the mechanism (a LightningModule's federated buffers)
        raise ConfigError(f"task.buffers=federated is not allowed with dp={dp.name}: the clients' buffers "
                          f"(running statistics of their data) would reach the server without the privacy "
                          f"mechanism; use task.buffers=local or reset")
    algorithm.dp_check(dp.name)
    if dp.name == "dpsgd" and not algorithm.step_policy.synchronous:
        raise ConfigError(f"dp=dpsgd is not allowed with algorithm={cfg.algorithm.name}: its privacy is amplified by "
                          f"sampling synchronous cohorts; use dp=ftrl for asynchronous aggregation")
    if dp.name == "dpsgd" and (cfg.selection.name, cfg.availability.name) != ("uniform", "always"):
        # its accounting amplifies by sampling: each cohort a uniform draw from all N clients
        raise ConfigError(f"dp=dpsgd is not allowed with selection={cfg.selection.name}, availability="
                          f"{cfg.availability.name}: its epsilon assumes cohorts drawn uniformly from every client; "
                          f"use selection=uniform availability=always")
    plan = dp_plan(cfg, num_clients)
    cap = getattr(dp, "max_participations", None)
    uploads = plan["steps"] * plan["per_step"]
    if cap is not None and uploads > cap * num_clients:  # the budget could not be spent: refuse, not waste it
        budget = f"max_rounds={cfg.max_rounds}" if cfg.max_rounds is not None else f"max_trips={cfg.max_trips}"
        raise ConfigError(f"dp.max_participations={cap} lets {num_clients} clients upload {cap * num_clients} times, and "
                          f"this run's budget is {uploads} uploads ({budget}): raise dp.max_participations to "
                          f"{-(-uploads // num_clients)} (sigma grows with it) or lower {budget.split('=')[0]}")
    sigma = dp.noise_multiplier
    if dp.target_epsilon is not None:
        sensitivity = None
        if dp.name == "ftrl":
            sensitivity = participation_sensitivity(cap, plan["steps"], plan["restart_every"])
        sigma = calibrate(dp.name, dp.target_epsilon, plan["steps"], dp.delta, num_clients, plan["per_step"], sensitivity)
        logger.info("dp: noise multiplier %.4f for epsilon %.3g at delta %.3g over %d steps%s", sigma,
                    dp.target_epsilon, dp.delta, plan["steps"],
                    f", each client in at most {cap} of them" if dp.name == "ftrl" else "")
    aggregation = PrivateAggregation(dp, algorithm.params.numel(), plan["per_step"], sigma, cfg.seed, device)
    return PrivateServer(algorithm, aggregation, num_clients, dp.delta, dp.target_epsilon)


@dataclass
class DPConfig:
    """Differential privacy in the trusted aggregator (:func:`private_server`): ``dp=<option>``."""

    name: str = MISSING


@schema("dp", "none")
class NoDPConfig(DPConfig):
    """dp=none: no clipping, no noise; the server sees every upload."""


@dataclass
class PrivateDPConfig(DPConfig):
    """User-level DP in the trusted aggregator (FedBuff Alg. 1, lines marked DP, "in TEE"): every
    upload's Delta is clipped to norm ``clip`` (L) before the server sees it, a step's clipped uploads
    are weighted (``Server.private_weight``, at most 1) and summed over K, and Gaussian noise calibrated
    to L / (uploads per step) is added; the server algorithm only ever sees that noised mean. ``noise_multiplier`` sigma, or ``target_epsilon``:
    sigma is calibrated by the accountant (dp-accounting) for the run's budget of steps."""

    clip: float = 1.0
    noise_multiplier: Optional[float] = 1.0
    target_epsilon: Optional[float] = None  # set: sigma is calibrated for it (noise_multiplier ignored)
    delta: float = 1e-7  # FedBuff Fig. 4

    def __post_init__(self) -> None:
        d = "dp."
        require(math.isfinite(self.clip) and self.clip > 0, d + "clip", self.clip, "must be > 0")
        require(self.noise_multiplier is None or self.noise_multiplier >= 0, d + "noise_multiplier",
                 self.noise_multiplier, "must be >= 0 or null")
        require(self.target_epsilon is None or (math.isfinite(self.target_epsilon) and self.target_epsilon > 0),
                d + "target_epsilon", self.target_epsilon, "must be > 0 and finite, or null (dp.noise_multiplier sets the "
                "noise)")
        require(self.target_epsilon is not None or self.noise_multiplier is not None, d + "noise_multiplier",
                 self.noise_multiplier, "set it or dp.target_epsilon")
        require(0 < self.delta < 1, d + "delta", self.delta, "must be in (0, 1)")


@schema("dp", "ftrl")
class FTRLConfig(PrivateDPConfig):
    """DP-FTRL (Kairouz et al. 2021) as FedBuff Alg. 1 lines 14-15: the noise of each step's mean comes
    from a binary tree over server steps (std sigma L / K per node), so the noise in the model after t
    steps is that of the noisy prefix sum (log t nodes), not of t independent draws. ``restart_every``:
    a fresh tree every that many steps (null: one tree for the run).

    ``max_participations`` k: the aggregator lets each client's uploads enter at most k steps of the
    run (later ones add nothing and are counted), and ``target_epsilon`` calibrates sigma for that bound
    (sensitivity k sqrt(depth): ``accounting.participation_sensitivity``). 1 is FedBuff's setting (Fig. 4:
    600k trips, one pass over the clients). null: no cap, only with a fixed ``noise_multiplier``. The
    run's ``dp_epsilon`` is always that of the participation that happened (``accounting.tree_sensitivity``)."""

    restart_every: Optional[int] = None
    max_participations: Optional[int] = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.restart_every is None or self.restart_every >= 1, "dp.restart_every", self.restart_every, "must be >= 1 or null")
        require(self.max_participations is None or self.max_participations >= 1, "dp.max_participations",
                self.max_participations, "must be >= 1 or null")
        require(self.max_participations is not None or self.target_epsilon is None, "dp.max_participations",
                self.max_participations, "must be set with dp.target_epsilon: sigma is calibrated for a bound on "
                "each client's uploads")


@schema("dp", "dpsgd")
class DPSGDConfig(PrivateDPConfig):
    """DP-SGD for synchronous rounds (McMahan et al. 2018): noise of std sigma L / cohort on each round's
    mean, privacy amplified by sampling the fixed-size cohort uniformly without replacement from the N
    clients (accounted as such, with dp-accounting's replace-one neighbouring relation)."""

