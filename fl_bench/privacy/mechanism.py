"""The trusted aggregator's mechanism (FedBuff Alg. 1, lines marked DP, "in TEE"): one server step's
uploads in, one noised mean out, a postprocessor of the uploads in the manner of pfl-research's
privacy mechanisms. Each Delta is clipped to norm L and weighted, the sum is divided by the fixed
number of uploads per step, and Gaussian noise is added: drawn fresh each round (DP-SGD), or from a
binary tree over the server steps (DP-FTRL, :class:`TreeAggregator`, Kairouz et al. 2021, App. B.1).
"""

from __future__ import annotations

import torch

from fl_bench.contracts import Upload


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
    own weight of that upload (``Server.private_weight``: FedBuff's staleness s(tau)), so
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
