"""User-level differential privacy in the trusted aggregator (FedBuff Alg. 1, lines marked DP, "in
TEE"; Sec. 2): the engine hands a server step's uploads to :class:`PrivateAggregation`, which clips
each Delta to norm L, averages them over the fixed number of uploads per step, adds Gaussian noise,
and passes on one noised mean: the server algorithm never sees a single client's update (SecAgg
semantics). DP-FTRL draws the noise from a binary tree over server steps (:class:`TreeAggregator`,
Kairouz et al. 2021, App. B.1); DP-SGD draws it fresh each round. (epsilon, delta) come from Google's
dp-accounting (RDP): for the tree, the Gaussian mechanism of the participation that happened (each
client's l2 sensitivity over the tree's nodes: :func:`tree_sensitivity`); for DP-SGD, the Gaussian
sampled without replacement.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
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
        self.max_participations = getattr(cfg, "max_participations", None)
        self.std = noise_multiplier * cfg.clip / per_step  # of the mean (sensitivity L / K)
        self._noise = _Noise(seed, device)
        self.size = size
        self.tree: TreeAggregator | None = None
        self._previous_noise = torch.zeros(size, device=device)
        self.steps = 0
        self.tree_steps: list[int] = []  # steps per tree (accounting)
        # Every upload that entered a step, as (client, tree, step within the tree): the accounting's record
        self.contributions: list[tuple[int, int, int]] = []
        self.participations: dict[int, int] = {}  # client -> uploads that entered a step
        self.discarded = 0  # uploads refused because their client had spent dp.max_participations

    def aggregate(self, uploads: list[Upload], version: int, weight=lambda upload: 1.0) -> Upload:
        """The private form of one server step of ``uploads``: each Delta clipped to L and weighted
        by ``weight(upload)`` (ValueError outside [0, 1]), summed, divided by ``per_step`` and noised.
        Returns the one Upload (client -1, model ``version``) that the server adds instead of them.
        DP-FTRL with ``max_participations`` k: an upload from a client that has already entered k steps
        adds nothing (counted in ``discarded``): the bound sigma was calibrated for."""
        if self.mechanism == "ftrl" and (self.tree is None or (self.restart_every and self.tree.steps == self.restart_every)):
            self.tree = TreeAggregator(self.size, self.std, self._noise)
            self._previous_noise.zero_()  # the old tree's noise stays in the model
            self.tree_steps.append(0)
        total = torch.zeros(self.size, device=self._noise.device)
        for upload in uploads:  # in the TEE: no one sees an unclipped Delta
            a = weight(upload)
            if not 0 <= a <= 1:
                raise ValueError(f"a private step's upload weight must be in [0, 1], got {a}")
            count = self.participations.get(upload.client, 0)
            if self.max_participations is not None and count >= self.max_participations:
                self.discarded += 1
                continue
            self.participations[upload.client] = count + 1
            if self.tree is not None:
                self.contributions.append((upload.client, len(self.tree_steps) - 1, self.tree.steps))
            total.add_(upload.vector, alpha=clip_scale(upload.vector, self.clip) * a)
        mean = total.div_(self.per_step)
        if self.mechanism == "dpsgd":
            mean.add_(self._noise.draw(self.size, self.std))
        else:
            self.tree.add(mean)
            noise = self.tree.noise_sum()
            mean.add_(noise).sub_(self._previous_noise)
            self._previous_noise = noise
            self.tree_steps[-1] += 1
        self.steps += 1
        return Upload(-1, version, 0, 1, mean)


# ----------------------------------------------------------------------------- accounting
REPLACE_ONE_SENSITIVITY = 2.0  # of a sum of updates clipped to L, in units of L (DP-SGD's adjacency)


def tree_depth(steps: int) -> int:
    """Levels of complete nodes a leaf of a ``steps``-leaf tree can lie in: ceil(log2(steps + 1)), the
    max_depth of dp-accounting's single-epoch tree aggregation."""
    return max(int(steps), 1).bit_length()


def tree_sensitivity(contributions, tree_steps: list[int]) -> float:
    """The largest change, in units of L/K, that zeroing one client's uploads makes to the released
    nodes of the trees: max over clients of sqrt(sum over complete nodes v of n_v^2), n_v the client's
    uploads under v (Kairouz et al. 2021, Sec. 4 and App. D: a node is the sum of its leaves plus its
    own noise; the matrix-mechanism sensitivity of a participation pattern, Denisov et al. 2022). One
    upload per client per tree gives sqrt(tree_depth); k uploads at most k sqrt(tree_depth).

    ``contributions``: (client, tree, step within the tree, from 0) per upload that entered a step;
    ``tree_steps``: the steps each tree took (a node is released only once its last leaf is in)."""
    record = np.asarray(contributions, dtype=np.int64).reshape(-1, 3)
    if not len(record):
        return 0.0
    client, tree, step = record.T
    length = np.asarray(tree_steps, dtype=np.int64)[tree]
    squares = np.zeros(int(client.max()) + 1)
    for level in range(tree_depth(int(length.max()))):
        node = step >> level
        complete = ((node + 1) << level) <= length
        keys, counts = np.unique(np.stack([client, tree, node])[:, complete], axis=1, return_counts=True)
        np.add.at(squares, keys[0], counts.astype(float) ** 2)
    return float(np.sqrt(squares.max()))


def participation_sensitivity(max_participations: int, steps: int, restart_every: int | None) -> float:
    """:func:`tree_sensitivity`'s bound when no client enters more than ``max_participations`` (k)
    steps of a run of ``steps`` server steps: k sqrt(tree_depth of the longest tree), whatever the
    pattern (several uploads in one step and uploads spread over restarted trees included: sum_v n_v^2
    <= (sum over levels) k^2)."""
    longest = min(steps, restart_every) if restart_every else steps
    return max_participations * math.sqrt(tree_depth(longest))


def _event(mechanism: str, noise_multiplier: float, steps: int, num_clients: int, per_step: int,
           sensitivity: float | None):
    import dp_accounting

    if mechanism == "ftrl":
        sensitivity = participation_sensitivity(1, steps, None) if sensitivity is None else sensitivity
        # Every released prefix sum is post-processing of the trees' noisy nodes (std sigma L/K each), one
        # Gaussian mechanism whose l2 sensitivity is ``sensitivity`` L/K (tree_sensitivity)
        return dp_accounting.GaussianDpEvent(noise_multiplier / sensitivity)
    # dp-accounting's Gaussian takes its noise relative to the l2-sensitivity under the accountant's
    # relation. Fixed-size cohorts are replace-one: swapping one client's clipped Delta (norm <= L) for
    # another's moves the sum by up to 2L, so noise sigma L is sigma / 2 sensitivities (Wang, Balle and
    # Kasiviswanathan 2019, Thm. 27); every round is a fresh uniform draw, so repeated participation is
    # in the composition.
    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier / REPLACE_ONE_SENSITIVITY)
    sampled = dp_accounting.SampledWithoutReplacementDpEvent(num_clients, per_step, gaussian)
    return dp_accounting.SelfComposedDpEvent(sampled, steps)


def _accountant(mechanism: str):
    from dp_accounting import NeighboringRelation, rdp

    # The adjacency each event is defined under in dp-accounting: fixed-size cohorts drawn without
    # replacement, replace-one (one client's data swapped); tree aggregation, the "replace special"
    # relation of Kairouz et al. (one client's contributions replaced by zeros, its schedule unchanged).
    relation = NeighboringRelation.REPLACE_ONE if mechanism == "dpsgd" else NeighboringRelation.REPLACE_SPECIAL
    return rdp.RdpAccountant(neighboring_relation=relation)


def epsilon(mechanism: str, noise_multiplier: float, steps: int, delta: float, num_clients: int = 1,
            per_step: int = 1, sensitivity: float | None = None) -> float:
    """epsilon at ``delta`` after ``steps`` server steps (inf without noise). DP-FTRL: of a tree release
    whose sensitivity is ``sensitivity`` L/K (:func:`tree_sensitivity`, :func:`participation_sensitivity`;
    None: one upload per client in one tree of ``steps`` leaves, dp-accounting's single-epoch tree)."""
    if noise_multiplier == 0:
        return math.inf
    if steps == 0 or sensitivity == 0:
        return 0.0
    accountant = _accountant(mechanism)
    accountant.compose(_event(mechanism, noise_multiplier, steps, num_clients, per_step, sensitivity))
    return float(accountant.get_epsilon(delta))


@functools.lru_cache(maxsize=64)
def calibrate(mechanism: str, target_epsilon: float, steps: int, delta: float, num_clients: int = 1,
              per_step: int = 1, sensitivity: float | None = None) -> float:
    """The smallest noise multiplier whose epsilon after ``steps`` is at most ``target_epsilon`` (a
    bisection over the accountant: dp_accounting.calibrate_dp_mechanism); DP-FTRL at the bound
    ``sensitivity`` (:func:`participation_sensitivity`; None: :func:`epsilon`'s). Kept per arguments:
    the seeds of a multirun share it, and DP-SGD's accountant (sampling without replacement) takes
    seconds a calibration."""
    import dp_accounting

    try:
        return float(dp_accounting.calibrate_dp_mechanism(
            lambda: _accountant(mechanism),
            lambda sigma: _event(mechanism, sigma, steps, num_clients, per_step, sensitivity),
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
    a fresh tree every that many steps (null: one tree for the run).

    ``max_participations`` k: the aggregator lets each client's uploads enter at most k steps of the
    run (later ones add nothing and are counted), and ``target_epsilon`` calibrates sigma for that bound
    (sensitivity k sqrt(depth): :func:`participation_sensitivity`). 1 is FedBuff's setting (Fig. 4:
    600k trips, one pass over the clients). null: no cap, only with a fixed ``noise_multiplier``. The
    run's ``dp_epsilon`` is always that of the participation that happened (:func:`tree_sensitivity`)."""

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

