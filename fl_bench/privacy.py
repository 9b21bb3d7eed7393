"""User-level differential privacy in the trusted aggregator (FedBuff Alg. 1, lines marked DP, "in
TEE"; Sec. 2): the engine hands a server step's uploads to :class:`PrivateAggregation`, which clips
each Delta to norm L, averages them over the fixed number of uploads per step, adds Gaussian noise,
and passes on one noised mean: the server algorithm never sees a single client's update (SecAgg
semantics). DP-FTRL draws the noise from a binary tree over server steps (:class:`TreeAggregator`,
Kairouz et al. 2021, App. B.1); DP-SGD draws it fresh each round. (epsilon, delta) come from Google's
dp-accounting (RDP): single-epoch tree aggregation, or the Gaussian sampled without replacement.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import torch
from omegaconf import MISSING

from fl_bench.engine.messages import Upload
from fl_bench.errors import ConfigError
from fl_bench.schema import require, schema


def clip_scale(vector: torch.Tensor, bound: float) -> float:
    """The factor that brings ``vector`` to norm at most ``bound`` (Alg. 1 line 9): 1 for shorter ones."""
    norm = float(vector.norm())
    return bound / norm if norm > bound else 1.0


def clip_(vector: torch.Tensor, bound: float) -> torch.Tensor:
    """Scale ``vector`` in place to norm at most ``bound``; shorter ones are unchanged."""
    scale = clip_scale(vector, bound)
    return vector.mul_(scale) if scale < 1.0 else vector


class _Noise:
    """A torch generator on the model's device that survives pickling (checkpoints)."""

    def __init__(self, seed: int, device: torch.device):
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def draw(self, size: int, std: float) -> torch.Tensor:
        return torch.randn(size, generator=self.generator, device=self.device).mul_(std)

    def __getstate__(self) -> dict:
        return {"device": self.device, "state": self.generator.get_state()}

    def __setstate__(self, state: dict) -> None:
        self.device = state["device"]
        self.generator = torch.Generator(device=self.device)
        self.generator.set_state(state["state"])


class TreeAggregator:
    """Noisy prefix sums of a stream of vectors (DP-FTRL's InitializeTree / AddToTree / GetSum).

    Each node of the binary tree over steps holds the sum of its leaves plus its own N(0, node_std^2)
    noise; the prefix sum after t steps is the sum of the nodes of t's binary decomposition, so it
    carries the noise of popcount(t) nodes (at most log2 t + 1). Only the open nodes are kept: a
    stack of (level, noise), merged like a binary counter, and the exact running sum."""

    def __init__(self, size: int, node_std: float, noise: _Noise):
        self.size, self.node_std, self.noise = size, node_std, noise
        self.stack: list[tuple[int, torch.Tensor]] = []  # (level, noise of that node)
        self.total: torch.Tensor | None = None  # exact prefix sum
        self.steps = 0

    def add(self, value: torch.Tensor) -> None:
        """AddToTree: a new leaf; completed subtrees merge into one node with fresh noise."""
        self.total = value.clone() if self.total is None else self.total + value
        level = 0
        while self.stack and self.stack[-1][0] == level:
            self.stack.pop()
            level += 1
        self.stack.append((level, self.noise.draw(self.size, self.node_std)))
        self.steps += 1

    def noise_sum(self) -> torch.Tensor:
        """The noise in GetSum: that of the nodes covering steps 1..t."""
        out = torch.zeros(self.size, device=self.noise.device)
        for _, node_noise in self.stack:
            out.add_(node_noise)
        return out

    def get_sum(self) -> torch.Tensor:
        """GetSum: the noisy prefix sum of every value added so far."""
        return self.total + self.noise_sum()

    @property
    def nodes_used(self) -> int:
        """Nodes whose noise the current prefix sum carries (popcount of the steps added so far)."""
        return len(self.stack)


class PrivateAggregation:
    """The trusted aggregator: ``aggregate(uploads, version, weight)`` -> one Upload holding the
    step's noised weighted mean of clipped Deltas, (1/K) sum_i a_i Clip(Delta_i, L) + noise, K =
    ``per_step`` (the buffer size, or the cohort), a_i = ``weight(upload_i)`` <= 1 the algorithm's
    own weight of that upload (``ServerAlgorithm.private_weight``: FedBuff's staleness s(tau)), so
    one client moves the step by at most L / K whatever the others send. DP-SGD: noise
    N(0, (sigma L / K)^2) per step. DP-FTRL: the difference of consecutive noisy prefix sums of the tree (std sigma L / K per node), i.e. mean_t + (noise_t - noise_{t-1}):
    the model then holds the tree's noisy prefix sum (Alg. 1 lines 14-15, as TF Privacy's tree
    residual query); with ``restart_every`` a fresh tree every that many steps."""

    def __init__(self, cfg, size: int, per_step: int, noise_multiplier: float, seed: int, device: torch.device):
        self.mechanism, self.clip, self.per_step = cfg.name, cfg.clip, per_step
        self.noise_multiplier = noise_multiplier
        self.restart_every = getattr(cfg, "restart_every", None)
        self.std = noise_multiplier * cfg.clip / per_step  # of the mean (sensitivity L / K)
        self._noise = _Noise(seed, device)
        self.size = size
        self.tree: TreeAggregator | None = None
        self._previous_noise = torch.zeros(size, device=device)
        self.steps = 0
        self.tree_steps: list[int] = []  # steps per tree (accounting)

    def aggregate(self, uploads: list[Upload], version: int, weight=lambda upload: 1.0) -> Upload:
        """The private form of one server step of ``uploads``: each Delta clipped to L and weighted
        by ``weight(upload)`` (ValueError outside [0, 1]), summed, divided by ``per_step`` and noised.
        Returns the one Upload (client -1, model ``version``) that the server adds instead of them."""
        total = torch.zeros(self.size, device=self._noise.device)
        for upload in uploads:  # in the TEE: no one sees an unclipped Delta
            a = weight(upload)
            if not 0 <= a <= 1:
                raise ValueError(f"a private step's upload weight must be in [0, 1], got {a}")
            total.add_(upload.vector, alpha=clip_scale(upload.vector, self.clip) * a)
        mean = total.div_(self.per_step)
        if self.mechanism == "dpsgd":
            mean.add_(self._noise.draw(self.size, self.std))
        else:
            if self.tree is None or (self.restart_every and self.tree.steps == self.restart_every):
                self.tree = TreeAggregator(self.size, self.std, self._noise)
                self._previous_noise.zero_()  # the old tree's noise stays in the model
                self.tree_steps.append(0)
            self.tree.add(mean)
            noise = self.tree.noise_sum()
            mean.add_(noise).sub_(self._previous_noise)
            self._previous_noise = noise
            self.tree_steps[-1] += 1
        self.steps += 1
        return Upload(-1, version, 0, 1, mean)


# ----------------------------------------------------------------------------- accounting
REPLACE_ONE_SENSITIVITY = 2.0  # of a sum of updates clipped to L, in units of L (DP-SGD's adjacency)


def _event(mechanism: str, noise_multiplier: float, steps: int, restart_every: int | None, num_clients: int, per_step: int):
    import dp_accounting

    if mechanism == "ftrl":
        counts = [restart_every] * (steps // restart_every) + ([steps % restart_every] if steps % restart_every else []) \
            if restart_every else [steps]
        return dp_accounting.SingleEpochTreeAggregationDpEvent(noise_multiplier, [c for c in counts if c] or [1])
    # dp-accounting's Gaussian takes its noise relative to the l2-sensitivity under the accountant's
    # relation. Fixed-size cohorts are replace-one: swapping one client's clipped Delta (norm <= L) for
    # another's moves the sum by up to 2L, so noise sigma L is sigma / 2 sensitivities (Wang, Balle and
    # Kasiviswanathan 2019, Thm. 27). Tree aggregation's replace-special (a client's Delta replaced by
    # zeros) moves it by at most L.
    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier / REPLACE_ONE_SENSITIVITY)
    sampled = dp_accounting.SampledWithoutReplacementDpEvent(num_clients, per_step, gaussian)
    return dp_accounting.SelfComposedDpEvent(sampled, steps)


def _accountant(mechanism: str):
    from dp_accounting import NeighboringRelation, rdp

    # The adjacency each event is defined under in dp-accounting: fixed-size cohorts drawn without
    # replacement, replace-one (one client's data swapped); single-epoch tree aggregation, the
    # "replace special" relation of Kairouz et al. (one client's contribution replaced by zeros).
    relation = NeighboringRelation.REPLACE_ONE if mechanism == "dpsgd" else NeighboringRelation.REPLACE_SPECIAL
    return rdp.RdpAccountant(neighboring_relation=relation)


def epsilon(mechanism: str, noise_multiplier: float, steps: int, delta: float, restart_every: int | None = None,
            num_clients: int = 1, per_step: int = 1) -> float:
    """epsilon at ``delta`` after ``steps`` server steps (inf without noise)."""
    if noise_multiplier == 0:
        return math.inf
    if steps == 0:
        return 0.0
    accountant = _accountant(mechanism)
    accountant.compose(_event(mechanism, noise_multiplier, steps, restart_every, num_clients, per_step))
    return float(accountant.get_epsilon(delta))


@functools.lru_cache(maxsize=64)
def calibrate(mechanism: str, target_epsilon: float, steps: int, delta: float, restart_every: int | None = None,
              num_clients: int = 1, per_step: int = 1) -> float:
    """The smallest noise multiplier whose epsilon after ``steps`` is at most ``target_epsilon`` (a
    bisection over the accountant: dp_accounting.calibrate_dp_mechanism). Kept per arguments: the
    seeds of a multirun share it, and DP-SGD's accountant (sampling without replacement) takes seconds
    a calibration."""
    import dp_accounting

    try:
        return float(dp_accounting.calibrate_dp_mechanism(
            lambda: _accountant(mechanism),
            lambda sigma: _event(mechanism, sigma, steps, restart_every, num_clients, per_step),
            target_epsilon, delta, dp_accounting.mechanism_calibration.LowerEndpointAndGuess(1e-3, 1.0), tol=1e-4))
    except (ValueError, RuntimeError) as error:
        raise ConfigError(f"dp.target_epsilon={target_epsilon} is unreachable for {steps} steps at dp.delta={delta}: "
                          f"{str(error).splitlines()[0]}") from None


@dataclass
class DPConfig:
    """Differential privacy in the trusted aggregator (fl_bench.privacy): ``dp=<option>``."""

    name: str = MISSING


@schema("dp", "none")
class NoDPConfig(DPConfig):
    """dp=none: no clipping, no noise; the server sees every upload."""


@dataclass
class PrivateDPConfig(DPConfig):
    """User-level DP in the trusted aggregator (FedBuff Alg. 1, lines marked DP, "in TEE"): every
    upload's Delta is clipped to norm ``clip`` (L) before the server sees it, a step's clipped uploads
    are weighted (``ServerAlgorithm.private_weight``, at most 1) and summed over K, and Gaussian noise calibrated to L / (uploads per step) is added; the server
    algorithm only ever sees that noised mean. ``noise_multiplier`` sigma, or ``target_epsilon``:
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
        require(self.target_epsilon is None or self.target_epsilon > 0, d + "target_epsilon", self.target_epsilon, "must be > 0 or null")
        require(self.target_epsilon is not None or self.noise_multiplier is not None, d + "noise_multiplier",
                 self.noise_multiplier, "set it or dp.target_epsilon")
        require(0 < self.delta < 1, d + "delta", self.delta, "must be in (0, 1)")


@schema("dp", "ftrl")
class FTRLConfig(PrivateDPConfig):
    """DP-FTRL (Kairouz et al. 2021) as FedBuff Alg. 1 lines 14-15: the noise of each step's mean comes
    from a binary tree over server steps (std sigma L / K per node), so the noise in the model after t
    steps is that of the noisy prefix sum (log t nodes), not of t independent draws. ``restart_every``:
    a fresh tree every that many steps (null: one tree for the run)."""

    restart_every: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.restart_every is None or self.restart_every >= 1, "dp.restart_every", self.restart_every, "must be >= 1 or null")


@schema("dp", "dpsgd")
class DPSGDConfig(PrivateDPConfig):
    """DP-SGD for synchronous rounds (McMahan et al. 2018): noise of std sigma L / cohort on each round's
    mean, privacy amplified by sampling the fixed-size cohort uniformly without replacement from the N
    clients (accounted as such, with dp-accounting's replace-one neighbouring relation)."""

