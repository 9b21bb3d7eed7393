"""HFL with AD-SGD (Stragglers Are Not Disaster, 2021): a synchronous kernel over the normal devices
and an asynchronous updater that merges stragglers' delayed updates, corrected to first order."""

from __future__ import annotations

import math
from typing import Optional

import torch

from fl_bench.algorithms.base import ServerAlgorithm, SyncConfig
from fl_bench.algorithms.client_state import ClientDict
from fl_bench.clients.local_update import LocalTraining
from fl_bench.contracts import Upload
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

    lambda (``lambda_schedule``, readings of eq. 8, lambda_t = lambda_0 exp(-(t - tau)), with t the
    round the merge closes and tau the straggler's delay):

    - ``printed``: eq. 8 as printed, which grows with tau and vanishes a few rounds after t passes it
      (a merge closing at t = 20 weighs at most lambda_0 e^-10);
    - ``decay_with_staleness``: the text's intent ("a slower straggler contributes less, and this
      contribution continuously decreases when communication round increasing"): lambda_0
      exp(-tau / tau_max) eta_t / eta_0;
    - ``delay``: the exponent read as the straggler's delay alone, lambda_0 exp(-tau) (t - tau read as
      the round it downloaded at, measured from there);
    - ``since_merge``: the exponent read as the rounds since that straggler's previous merge (round 0
      before its first), lambda_0 exp(-(t - t_i));
    - ``constant``: lambda_0, no decay (the weight the text's lambda_0 = 0.5 gives every merge).

    Each upload's share of its round's step (``step_weights``: (1 - sum p_i lambda_i) p_j / sum p for a
    normal device, p_i lambda_i for a straggler) is logged in trips.csv's ``weight``, so the weight the
    late merges received over a run is measured. The server keeps the last ``max_staleness`` + 1
    models (a ring; its memory is ``server_state_nbytes``); an older upload is an error.
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
        self._normal_weights: list[float] = []  # p_j of the round's normal devices, in add order
        self._order: list[int] = []  # per upload of the round: -1 a normal device, else its straggler index
        self.step_weights: list[float] = []  # the last step's share of each upload, in add order
        self.last_merge = ClientDict(default=0)  # round of each straggler's previous merge (since_merge)

    def lam(self, staleness: int, client: int | None = None) -> float:
        """lambda_t for a straggler ``staleness`` rounds late (``client``: which, for ``since_merge``), at
        the current round t, under the reading ``lambda_schedule`` (class docstring)."""
        t, cfg = self.version, self.cfg
        if cfg.lambda_schedule == "printed":
            return cfg.lambda_0 * math.exp(-(t - staleness))  # eq. 8
        if cfg.lambda_schedule == "delay":
            return cfg.lambda_0 * math.exp(-staleness)
        if cfg.lambda_schedule == "since_merge":
            return cfg.lambda_0 * math.exp(-(t - self.last_merge.get(client)))
        if cfg.lambda_schedule == "constant":
            return cfg.lambda_0
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
            self._normal_weights.append(weight)
            self._order.append(-1)
            return
        if self.cfg.kernel_only_until_tau_max and self.version <= self.cfg.max_staleness:
            self._order.append(-2)  # eq. 4's first case: t <= max tau_i, the kernel alone (dropped: weight 0)
            return
        delayed = upload.vector / self._local.lr_at(upload.version)  # g(w_{t-tau}): Delta over its lr
        corrected = corrected_gradient(delayed, self.params - start)
        model = start - self._local.lr_at(self.version) * corrected
        self._order.append(len(self._stragglers))
        self._stragglers.append((weight, self.lam(upload.staleness, upload.client), model))
        self.last_merge[upload.client] = self.version

    def _step(self) -> None:
        kernel = self._kernel / self._kernel_weight if self._kernel_weight else self.params.clone()
        shares = []  # each straggler's p_i lambda_i, its share of the step
        if self._stragglers:
            total = (sum(p for p, _, _ in self._stragglers) if self.cfg.straggler_weights == "arriving"
                     else float(self.client_sizes.sum()))
            merged = torch.zeros_like(self.params)
            for p, lam, model in self._stragglers:
                merged.add_(model, alpha=p / total * lam)
                shares.append(p / total * lam)
            kernel.mul_(1 - sum(shares)).add_(merged)
        self.params.copy_(kernel)
        kept = 1 - sum(shares)  # the kernel's share, split over the normal devices by p_j
        normal = [kept * p / self._kernel_weight for p in self._normal_weights] if self._kernel_weight else []
        normal_shares = iter(normal)
        self.step_weights = [next(normal_shares) if i == -1 else 0.0 if i == -2 else shares[i] for i in self._order]
        self._kernel.zero_()
        self._kernel_weight = 0.0
        self._stragglers, self._normal_weights, self._order = [], [], []
        # the ring of past models: w_{t+1} joins, the one max_staleness + 1 back leaves
        self.history[self.version + 1] = self.params.clone()
        self.history.pop(self.version + 1 - self.cfg.max_staleness - 1, None)

    def server_state_nbytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self.history.values())


LAMBDA_SCHEDULES = ("printed", "decay_with_staleness", "delay", "since_merge", "constant")
# The knobs that read how stragglers' late updates merge (eqs. 4, 8, 9)
LATE_MERGE_KEYS = ("lambda_0", "lambda_schedule", "straggler_weights", "kernel_only_until_tau_max")


@schema("algorithm", "hfl", HFL)
class HFLConfig(SyncConfig):
    """HFL with AD-SGD (eq. 9): all normal devices every round (selection=all_available, set by
    conf/algorithm/hfl.yaml), stragglers' uploads merged when they arrive (late_uploads=deliver),
    rounds of ``deadline`` (speed=stragglers' round_time), eta_t = client_lr / (1 + t)."""

    lambda_0: float = 0.5
    # eq. 8's reading (HFL's docstring): printed | decay_with_staleness (the text's intent) | delay
    # (lambda_0 exp(-tau)) | since_merge (lambda_0 exp(-(rounds since that straggler's last merge))) | constant
    lambda_schedule: str = "printed"
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
        require(self.lambda_0 > 0 or self.lambda_schedule == "printed", "algorithm.lambda_schedule",
                self.lambda_schedule, "reads lambda for late merges, and algorithm.lambda_0=0 merges nothing late: "
                "leave lambda_schedule at printed, or set lambda_0 > 0")
        choice("algorithm.straggler_weights", self.straggler_weights, ("arriving", "global"))
        require(self.max_staleness >= 1, "algorithm.max_staleness", self.max_staleness, "must be >= 1")

    def refuse_readings_without_stragglers(self, why: str) -> None:
        """Where no device is a straggler (``why``), nothing merges late, so a late-merge reading other
        than the defaults (lambda_0, eq. 8's schedule, eq. 9's p_i, eq. 4's split) would be ignored:
        refused in one line rather than run as if it mattered."""
        for key in LATE_MERGE_KEYS:
            value = getattr(self, key)
            require(value == getattr(HFLConfig, key), f"algorithm.{key}", value,
                    f"{why}, so nothing merges late and this reading changes nothing; leave it at "
                    f"{getattr(HFLConfig, key)!r}, or give the run stragglers")
