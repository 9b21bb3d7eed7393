"""One description of an adaptive optimizer as FedGBO's Table II writes it: the local step U, the
server's tracking step T and its inverse step I, for SGDm, RMSProp and Adam (Mills et al., Table
II; eps = 1e-3, Adam's beta2 = 0.99, Sec. 5). FedGBO, MFL, Mimelite and MimeXlite differ only in
where the statistics s move (fl_bench.algorithms.fedgbo), so they all step through this class.

Statistics s by optimizer: SGDm {m}, RMSProp {v}, Adam {m, v}. s_0 is m = 0, v = 1, as FedGBO's
code initialises them (JedMills/FedGBO optimizers.py: v = ones, so a first RMSProp step is not
eta g / eps). No bias correction anywhere, as in the paper's table and code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fl_bench.clients.local_update import LocalUpdate

# Table VI: operations per parameter per local step with fixed (FedGBO, Mimelite) or moving (MFL)
# statistics; plain SGD is 2 (+, x -eta) and FedProx 5 (App. B, eq. 22).
OPS_FIXED = {"sgdm": 5, "rmsprop": 5, "adam": 8}
OPS_MOVING = {"sgdm": 8, "rmsprop": 5, "adam": 11}


@dataclass(frozen=True)
class GlobalOptimizer:
    """``beta``: SGDm's and RMSProp's beta, Adam's beta1; ``beta2``: Adam's second-moment decay."""

    name: str
    beta: float
    beta2: float = 0.99
    eps: float = 1e-3

    @classmethod
    def from_config(cls, cfg) -> "GlobalOptimizer":
        """From an algorithm config's ``optimizer``, ``beta``, ``beta2`` and ``eps``
        (``GlobalStatisticsConfig``)."""
        return cls(cfg.optimizer, cfg.beta, cfg.beta2, cfg.eps)

    @property
    def keys(self) -> tuple[str, ...]:
        """The statistics s, by name: SGDm (m,), RMSProp (v,), Adam (m, v)."""
        return {"sgdm": ("m",), "rmsprop": ("v",), "adam": ("m", "v")}[self.name]

    @property
    def momentum(self) -> float | None:
        """The decay of the first moment m (None: no m)."""
        return None if self.name == "rmsprop" else self.beta

    @property
    def second_moment(self) -> float | None:
        """The decay of the second moment v (None: no v)."""
        return {"sgdm": None, "rmsprop": self.beta, "adam": self.beta2}[self.name]

    def initial_state(self, params: torch.Tensor) -> dict[str, torch.Tensor]:
        """s_0, shaped like ``params``: m = 0, v = 1 (as FedGBO's code initialises them)."""
        init = {"m": torch.zeros_like, "v": torch.ones_like}
        return {key: init[key](params) for key in self.keys}

    # ------------------------------------------------------------------ server: T and I (flat tensors)
    def track(self, gradient: torch.Tensor, state: dict[str, torch.Tensor]) -> None:
        """T: m <- b1 m + (1 - b1) g; v <- b2 v + (1 - b2) g^2 (in place). RMSProp tracks squares:
        the paper's table prints g~ in its T, its code squares it."""
        if self.momentum is not None:
            state["m"].mul_(self.momentum).add_(gradient, alpha=1 - self.momentum)
        if self.second_moment is not None:
            state["v"].mul_(self.second_moment).addcmul_(gradient, gradient, value=1 - self.second_moment)

    def inverse(self, mean_delta: torch.Tensor, state: dict[str, torch.Tensor], lr: float, steps: int) -> torch.Tensor:
        """I: the mean gradient g~ of K local U steps with s fixed that moved the model by
        ``mean_delta`` = x_t - x_{t+1}: SGDm (1/(1-b)) (D/(eta K) - b m); RMSProp D (sqrt(v) + eps)
        / (eta K); Adam (1/(1-b1)) (D (sqrt(v) + eps) / (eta K) - b1 m)."""
        gradient = mean_delta / (lr * steps)
        if self.second_moment is not None:
            gradient.mul_(state["v"].sqrt().add_(self.eps))
        if self.momentum is not None:
            gradient.sub_(state["m"], alpha=self.momentum).div_(1 - self.momentum)
        return gradient

    # ------------------------------------------------------------------ client: U (lists of tensors)
    def direction(self, grads: list[torch.Tensor], state: dict[str, list[torch.Tensor]]) -> list[torch.Tensor]:
        """U / eta with s held fixed: (b1 m + (1 - b1) g) / (sqrt(v) + eps), the m part for SGDm
        and Adam, the division for RMSProp and Adam."""
        direction = grads
        if self.momentum is not None:
            direction = torch._foreach_mul(grads, 1 - self.momentum)
            torch._foreach_add_(direction, state["m"], alpha=self.momentum)
        return self._precondition(direction, state)

    def _precondition(self, direction: list[torch.Tensor], state: dict[str, list[torch.Tensor]]) -> list[torch.Tensor]:
        """direction / (sqrt(v) + eps) where the optimizer has v (RMSProp, Adam), else direction."""
        if self.second_moment is None:
            return direction
        denominator = torch._foreach_sqrt(state["v"])
        torch._foreach_add_(denominator, self.eps)
        return torch._foreach_div(direction, denominator)

    def advance(self, grads: list[torch.Tensor], state: dict[str, list[torch.Tensor]]) -> list[torch.Tensor]:
        """MFL's local step: move s with this gradient first (T on the client), then return the step
        direction m / (sqrt(v) + eps) (SGDm: m; RMSProp: g / (sqrt(v) + eps)), as FedGBO's code's
        MFL optimizers do."""
        if self.momentum is not None:
            torch._foreach_mul_(state["m"], self.momentum)
            torch._foreach_add_(state["m"], grads, alpha=1 - self.momentum)
        if self.second_moment is not None:
            torch._foreach_mul_(state["v"], self.second_moment)
            torch._foreach_addcmul_(state["v"], grads, grads, value=1 - self.second_moment)
        return self._precondition(state["m"] if self.momentum is not None else grads, state)


class FixedStatistics(LocalUpdate):
    """FedGBO's (and Mimelite's) client step y <- y - U(eta, g, s_t), s_t as downloaded (Alg. 1)."""

    def __init__(self, optimizer: GlobalOptimizer, prox_mu: float = 0.0, start_gradient: str | None = None):
        super().__init__(prox_mu)
        self.optimizer = optimizer
        self.state_keys = optimizer.keys
        self.start_gradient = start_gradient
        self.ops_per_param = OPS_FIXED[optimizer.name]

    def step(self, params, grads, anchors, lr, state) -> None:
        """y <- y - eta U(g + mu (y - y_0), s), with s as downloaded and never written."""
        self.add_proximal(params, grads, anchors)
        self.descend(params, self.optimizer.direction(grads, state), lr)


class MovingStatistics(LocalUpdate):
    """MFL's client step: the downloaded s moves with every local step and is uploaded with the model."""

    def __init__(self, optimizer: GlobalOptimizer, prox_mu: float = 0.0):
        super().__init__(prox_mu)
        self.optimizer = optimizer
        self.state_keys = self.moving_keys = optimizer.keys
        self.ops_per_param = OPS_MOVING[optimizer.name]

    def step(self, params, grads, anchors, lr, state) -> None:
        """Move ``state`` (s) with g + mu (y - y_0) (T on the client), then y <- y - eta times the
        optimizer's :meth:`GlobalOptimizer.advance` direction."""
        self.add_proximal(params, grads, anchors)
        self.descend(params, self.optimizer.advance(grads, state), lr)
