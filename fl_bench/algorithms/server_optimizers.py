"""Server optimizers: the server step of FedBuff, FADAS and the FedAvg family, a torch.optim optimizer stepping
the global model with the aggregate Dbar as its pseudo-gradient (:class:`ServerOptimizerStep`).

Each option is a function that builds the optimizer from its config, with the config dataclass below it,
registered as every component is (``@schema("server_optimizer", name, function)``: fl_bench.schema); its
YAML in ``conf/algorithm/server_optimizer/<name>.yaml`` is chosen with ``algorithm/server_optimizer=<name>``
and its knobs set with ``algorithm.server_optimizer.<key>=...``. A plugin adds one the same way, with the
YAML in its package's ``conf/algorithm/server_optimizer/`` (docs/extending/plugins.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from omegaconf import MISSING

from fl_bench.schema import build, import_path, require, schema


class ServerOptimizerStep:
    """A server optimizer stepping ``params`` in place with a pseudo-gradient, built from ``cfg.server_optimizer``
    (a :class:`ServerOptimizerConfig`, through its ``_target_``)."""

    def __init__(self, cfg, params: torch.Tensor):
        self._param = torch.nn.Parameter(params, requires_grad=False)  # shares storage with params
        self._param.grad = torch.zeros_like(params)
        self._opt = build(cfg.server_optimizer, [self._param])

    @property
    def grad(self) -> torch.Tensor:
        """The pseudo-gradient buffer, shaped like ``params``: write Dbar into it, then :meth:`step`."""
        return self._param.grad

    # A pickled Parameter drops its .grad (checkpoints pickle the server): carry it alongside.
    def __getstate__(self) -> dict:
        return {**vars(self), "_grad": self._param.grad}

    def __setstate__(self, state: dict) -> None:
        grad = state.pop("_grad")
        vars(self).update(state)
        self._param.grad = grad

    def step(self, lr: float | None = None) -> None:
        """One optimizer step of ``params`` in place with the pseudo-gradient in :attr:`grad`; the
        optimizer's state (momentum, moments) carries over to the next step. ``lr``: this step's rate
        in place of the one it had (FADAS's delay-adaptive eta_t); it stays until another is given."""
        if lr is not None:
            self._opt.param_groups[0]["lr"] = lr
        self._opt.step()

    @property
    def state_nbytes(self) -> int:
        """Bytes of the optimizer's state between steps (momentum, moments; none for plain SGD)."""
        return sum(v.numel() * v.element_size() for state in self._opt.state.values() for v in state.values()
                   if torch.is_tensor(v) and v.dim() > 0)  # not the scalar step counters


def sgd(cfg: "ServerOptimizerConfig", params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """w <- w - lr Dbar."""
    return torch.optim.SGD(params, lr=cfg.lr, momentum=0.0)


@dataclass
class ServerOptimizerConfig:
    """The base schema of the server optimizers. Left as it is (an algorithm YAML that chooses no option) it is
    plain SGD; typed as this base in an algorithm's config, so that any option composes over it (OmegaConf merges
    only subclasses of the node's type)."""

    name: str = MISSING
    # The function (or class) that builds the torch.optim optimizer from this config and the parameters
    _target_: str = import_path(sgd)
    lr: float = 1.0  # eta_g

    def __post_init__(self) -> None:
        o = "algorithm.server_optimizer."
        option = "sgd" if type(self) is ServerOptimizerConfig else type(self).name  # the bare schema default is plain SGD
        require(self.name == option, o + "name", self.name, "is set by the option: choose it with algorithm/server_optimizer=<name>")
        require(math.isfinite(self.lr) and self.lr > 0, o + "lr", self.lr, "must be > 0")


@schema("server_optimizer", "sgd", sgd)
class SGDServerOptimizerConfig(ServerOptimizerConfig):
    """Plain SGD: w <- w - lr * Dbar (FedAvg, FedBuff with beta = 0)."""


def momentum(cfg: "MomentumServerOptimizerConfig", params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """torch's SGD with momentum."""
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


@schema("server_optimizer", "momentum", momentum)
class MomentumServerOptimizerConfig(ServerOptimizerConfig):
    """SGD with momentum, torch's convention: m <- beta m + Dbar, w <- w - lr m (FedAvgM; FedBuff
    Alg. 1 line 12); nesterov: w <- w - lr (Dbar + beta m)."""

    momentum: float = 0.9  # beta
    nesterov: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "algorithm.server_optimizer."
        require(0 <= self.momentum < 1, o + "momentum", self.momentum, "must be in [0, 1)")
        require(not self.nesterov or self.momentum > 0, o + "nesterov", self.nesterov, "Nesterov needs momentum > 0")


def adam(cfg: "AdamServerOptimizerConfig", params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """torch's Adam."""
    return torch.optim.Adam(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)


@schema("server_optimizer", "adam", adam)
class AdamServerOptimizerConfig(ServerOptimizerConfig):
    """Adam (Kingma & Ba 2015) on the pseudo-gradient: FedAdam of Reddi et al. 2021 (FedGBO's
    adaptive baselines use eps = 1e-3)."""

    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])  # beta1, beta2
    eps: float = 1e-8

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "algorithm.server_optimizer."
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), o + "betas", self.betas, "need [beta1, beta2], each in [0, 1)")
        require(math.isfinite(self.eps) and self.eps > 0, o + "eps", self.eps, "must be > 0")


def rmsprop(cfg: "RMSPropServerOptimizerConfig", params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """torch's RMSprop, its alpha our beta."""
    return torch.optim.RMSprop(params, lr=cfg.lr, alpha=cfg.beta, eps=cfg.eps)


@schema("server_optimizer", "rmsprop", rmsprop)
class RMSPropServerOptimizerConfig(ServerOptimizerConfig):
    """RMSProp on the pseudo-gradient (torch.optim.RMSprop, alpha = beta): v <- beta v + (1 - beta)
    Dbar^2, w <- w - lr Dbar / (sqrt(v) + eps) (FedGBO's AFO with RMSProp, eps = 1e-3)."""

    beta: float = 0.9
    eps: float = 1e-3

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "algorithm.server_optimizer."
        require(0 <= self.beta < 1, o + "beta", self.beta, "must be in [0, 1)")
        require(math.isfinite(self.eps) and self.eps > 0, o + "eps", self.eps, "must be > 0")


class AMSGrad(torch.optim.Optimizer):
    """AMSGrad (Reddi, Kale & Kumar 2018) as FADAS's Alg. 1 (Wang et al., ICML 2024; fl_bench.algorithms.fadas)
    steps the server: m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2, vhat <- max(vhat, v), w <- w - lr m /
    (sqrt(vhat) + eps), with m, v, vhat starting at 0 and no bias correction. ``bias_correction``: lr / (1 -
    b1^t) and sqrt(vhat / (1 - b2^t)) in place of lr and sqrt(vhat), as FADAS's code steps (yujiaw98/FADAS
    update.py, ``fedams``), which is torch's Adam with ``amsgrad=True``."""

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float, bias_correction: bool):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "bias_correction": bias_correction})

    @torch.no_grad()
    def step(self, closure=None) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                state = self.state[param]
                if not state:
                    state.update(step=0, m=torch.zeros_like(param), v=torch.zeros_like(param), vhat=torch.zeros_like(param))
                state["step"] += 1
                grad = param.grad
                state["m"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["v"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                torch.maximum(state["vhat"], state["v"], out=state["vhat"])
                lr, denominator = group["lr"], state["vhat"].sqrt()
                if group["bias_correction"]:
                    lr /= 1 - beta1 ** state["step"]
                    denominator.div_(math.sqrt(1 - beta2 ** state["step"]))
                param.addcdiv_(state["m"], denominator.add_(group["eps"]), value=-lr)


def amsgrad(cfg: "AMSGradServerOptimizerConfig", params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """:class:`AMSGrad`."""
    return AMSGrad(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, bias_correction=cfg.bias_correction)


@schema("server_optimizer", "amsgrad", amsgrad)
class AMSGradServerOptimizerConfig(AdamServerOptimizerConfig):
    """AMSGrad on the pseudo-gradient (:class:`AMSGrad`), Adam's knobs and checks: FADAS's server step
    (Alg. 1), without bias correction as the paper writes it; ``bias_correction=true`` as its code steps."""

    bias_correction: bool = False


def schema_server_optimizer() -> ServerOptimizerConfig:
    """An algorithm config's default server optimizer: the base schema (plain SGD), over which its YAML's
    choice composes."""
    return ServerOptimizerConfig(name="sgd")
