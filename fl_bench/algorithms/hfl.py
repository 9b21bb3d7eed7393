"""HFL with AD-SGD (Stragglers Are Not Disaster, 2021): a synchronous kernel over the normal devices
and an asynchronous updater that merges stragglers' delayed updates, corrected to first order."""

from __future__ import annotations

import math
from typing import Optional

import torch

from fl_bench.algorithms.base import ServerAlgorithm, SyncConfig
from fl_bench.clients.local_update import LocalTraining
from fl_bench.engine.messages import Upload
from fl_bench.engine.protocol import Rounds
from fl_bench.errors import ConfigError
from fl_bench.schema import choice, require, schema


def corrected_gradient(delayed: torch.Tensor, drift: torch.Tensor, hessian_times=None) -> torch.Tensor:
    """Eq. 7: g(w_t) ~ g(w_{t-tau}) + H (w_t - w_{t-tau}) with H approximated by the gradient outer
    product R = g g^T (Sec. 3.2), applied as g (g^T d): O(P), never P x P. ``hessian_times(d)``
    replaces R d by another Hessian-vector product (tests: the true Hessian makes it exact)."""
    product = hessian_times(drift) if hessian_times is not None else delayed * torch.dot(delayed, drift)
    return delayed + product


class HFL(ServerAlgorithm):
    """A round's uploads: normal devices' (staleness 0) and stragglers' that arrive tau >= 1 rounds
    after their download (the engine's late uploads, ``late_uploads=deliver``). With eta_t the
    round's lr (client_lr / (1 + t), ``lr_schedule=inverse``), w the current model and w_{t-tau}
    the kept past model a straggler downloaded:

    - synchronous kernel: w_hat = sum_{S1} p_i y_i / sum_{S1} p_i (the normal devices' models);
    - each straggler's delayed gradient g = Delta / eta_{t-tau} (its accumulated update over the lr
      it trained with) is corrected by eq. 7 to g~ at w, and its model becomes w_{t-tau} - eta_t g~;
    - eq. 9: w <- (1 - lambda) w_hat + lambda sum_{S2} p_i (w_{t-tau_i} - eta_t g~_i), the
      stragglers' p_i normalised over the round's stragglers (``straggler_weights=arriving``;
      unnormalised, a round with one straggler would pull w towards 0) or eq. 1's p_i = n_i / n
      over all devices (``global``). With stragglers of different tau each has its own lambda_i
      and w <- (1 - sum p_i lambda_i) w_hat + sum p_i lambda_i (...): eq. 9 when all share one tau
      and their p_i sum to 1. A round without stragglers is the kernel alone (eq. 4's first case;
      ``kernel_only_until_tau_max``: also every round t <= tau_max, eq. 4's split read literally).

    lambda (``lambda_schedule``): ``printed``, eq. 8 as printed, lambda_0 exp(-(t - tau)), which
    grows with tau and vanishes a few rounds after t passes it; ``decay_with_staleness``, the text's
    intent ("a slower straggler contributes less, and less as rounds go on"): lambda_0
    exp(-tau / tau_max) eta_t / eta_0. The server keeps the last ``max_staleness`` + 1 models
    (a ring; its memory is ``server_state_nbytes``); an older upload is an error.
    """

    step_policy = Rounds
    reads_client_rule = True

    def __init__(self, cfg, params: torch.Tensor, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self._local = LocalTraining.from_config(cfg)
        self.history: dict[int, torch.Tensor] = {0: params.clone()}  # version -> w_version
        self._kernel = torch.zeros_like(params)  # sum_{S1} p_i y_i
        self._kernel_weight = 0.0
        self._stragglers: list[tuple[float, float, torch.Tensor]] = []  # (p_i, lambda_i, corrected model)

    def lam(self, staleness: int) -> float:
        """lambda_t for a straggler ``staleness`` rounds late, at the current round t."""
        t, cfg = self.version, self.cfg
        if cfg.lambda_schedule == "printed":
            return cfg.lambda_0 * math.exp(-(t - staleness))  # eq. 8
        return cfg.lambda_0 * math.exp(-staleness / cfg.max_staleness) * self._local.lr_at(t) / self._local.lr_at(0)

    def add(self, upload: Upload) -> None:
        weight = float(self.client_sizes[upload.client])  # p_i up to the normalisation
        start = self.history.get(upload.version)
        if start is None:
            raise ConfigError(
                f"an upload {upload.staleness} rounds late is older than the {self.cfg.max_staleness} past models HFL "
                f"keeps: raise algorithm.max_staleness to at least the stragglers' tau_max")
        if upload.staleness == 0:  # a normal device: y_i = w - Delta_i
            self._kernel.add_(start - upload.vector, alpha=weight)
            self._kernel_weight += weight
            return
        if self.cfg.kernel_only_until_tau_max and self.version <= self.cfg.max_staleness:
            return  # eq. 4's first case: t <= max tau_i, the kernel alone
        delayed = upload.vector / self._local.lr_at(upload.version)  # g(w_{t-tau}): Delta over its lr
        corrected = corrected_gradient(delayed, self.params - start)
        model = start - self._local.lr_at(self.version) * corrected
        self._stragglers.append((weight, self.lam(upload.staleness), model))

    def _step(self) -> None:
        kernel = self._kernel / self._kernel_weight if self._kernel_weight else self.params.clone()
        if self._stragglers:
            total = (sum(p for p, _, _ in self._stragglers) if self.cfg.straggler_weights == "arriving"
                     else float(self.client_sizes.sum()))
            merged = torch.zeros_like(self.params)
            mass = 0.0  # sum_i p_i lambda_i
            for p, lam, model in self._stragglers:
                merged.add_(model, alpha=p / total * lam)
                mass += p / total * lam
            kernel.mul_(1 - mass).add_(merged)
        self.params.copy_(kernel)
        self._kernel.zero_()
        self._kernel_weight = 0.0
        self._stragglers = []
        # the ring of past models: w_{t+1} joins, the one max_staleness + 1 back leaves
        self.history[self.version + 1] = self.params.clone()
        self.history.pop(self.version + 1 - self.cfg.max_staleness - 1, None)

    def server_state_nbytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self.history.values())


LAMBDA_SCHEDULES = ("printed", "decay_with_staleness")


@schema("algorithm", "hfl", HFL)
class HFLConfig(SyncConfig):
    """HFL with AD-SGD (eq. 9): all normal devices every round (selection=all_available, set by
    conf/algorithm/hfl.yaml), stragglers' uploads merged when they arrive (late_uploads=deliver),
    rounds of ``deadline`` (speed=stragglers' round_time), eta_t = client_lr / (1 + t)."""

    lambda_0: float = 0.5
    lambda_schedule: str = "printed"  # eq. 8 as printed | decay_with_staleness (the text's intent)
    max_staleness: int = 10  # past models kept (tau_max): a ring of max_staleness + 1
    # eq. 9's p_i over stragglers: "arriving" normalises n_i over the round's arriving stragglers (they
    # jointly weigh lambda); "global" takes p_i = n_i / n over all N devices (eq. 1's p_i).
    straggler_weights: str = "arriving"
    # eq. 4's case split read literally: the kernel alone while t <= max tau_i (= max_staleness), so
    # stragglers arriving in those rounds are dropped; false merges every straggler from round 1 on.
    kernel_only_until_tau_max: bool = False
    deadline: Optional[float] = 1.0
    fixed_rounds: bool = True
    late_uploads: str = "deliver"
    lr_schedule: str = "inverse"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.lambda_0 <= 1, "algorithm.lambda_0", self.lambda_0, "must be in [0, 1]")
        choice("algorithm.lambda_schedule", self.lambda_schedule, LAMBDA_SCHEDULES)
        choice("algorithm.straggler_weights", self.straggler_weights, ("arriving", "global"))
        require(self.max_staleness >= 1, "algorithm.max_staleness", self.max_staleness, "must be >= 1")
