"""FADAS (Wang, Wang, Lu & Chen, "FADAS: Towards Federated Adaptive Asynchronous Optimization", ICML 2024):
buffered asynchronous aggregation whose server steps with AMSGrad, at a rate that shrinks when the buffer
holds a long-delayed update.

The server of Alg. 1, in the paper's symbols (Delta_i = x_{i,K} - x, the client's move; fl_bench uploads
Delta = y_0 - y_Q, its negative, so the model moves by minus the same step). Once M updates are buffered:

    Delta_t = (1/M) sum_{i in M_t} Delta_i                       (the buffered mean)
    m_t     = beta1 m_{t-1} + (1 - beta1) Delta_t
    v_t     = beta2 v_{t-1} + (1 - beta2) Delta_t^2
    vhat_t  = max(vhat_{t-1}, v_t)                               (AMSGrad)
    eta_t   = eta                    if tau_max^t <= tau_c       (delay-adaptive rate,
            = min(eta, 1/tau_max^t)  otherwise                    FADAS with delay adaptation)
    x_{t+1} = x_t + eta_t m_t / (sqrt(vhat_t) + eps)

with m_0 = v_0 = vhat_0 = 0 and tau_max^t the largest delay among the M buffered updates (server steps
between a client's download and the step that uses its update).

What was read, and the choices left open (the equation numbers of the paper's PDF were not available
here, so none are quoted). The steps above are Alg. 1 as a public transcription of the paper writes it
(junaidaliop.github.io/zij/math/fadas) and as the authors' code steps (github.com/yujiaw98/FADAS:
``update.py``, optimizer ``fedams``; ``g_delay_adaptive.py``; ``options.py``). Where the two differ, the
paper's form is the default and the code's a knob:

- The delay-adaptive rate: min(eta, 1/tau_max^t) as transcribed from the paper (``delay_rule=min``); the
  code multiplies eta by 1/tau_max^t (``delay_rule=divide``: eta / tau_max^t). At the small server rates
  AMSGrad runs with (the code's README uses eta = 1e-3), min(eta, 1/tau) is eta unless tau > 1/eta, so the
  two differ in kind. ``tau_c=null`` is FADAS without delay adaptation (the code's ``asyncfl_forward.py``).
- Bias correction: none in the paper's steps; the code divides by 1 - beta1^t and sqrt(1 - beta2^t) as
  torch's Adam does (``algorithm.server_optimizer.bias_correction=true``).
- vhat_0 = 0 (the code's default ``max_init``), beta1 = 0.9, beta2 = 0.99, eps = 1e-8 (the code's
  defaults), M = 10 (FedBuff's default here; the code's default is 5).

Delta_t is FedBuff's aggregation with uniform weights and s(tau) = 1 (this class is FedBuff with its own
step: its YAML chooses algorithm/staleness=constant), so FedBuff's weighting and staleness components apply to it as generalisations the paper does not have.
"""

from __future__ import annotations

from typing import Optional

from fl_bench.algorithms.base import AsyncConfig
from fl_bench.algorithms.buffered import FedBuff, FedBuffAggregation
from fl_bench.contracts import Upload
from fl_bench.errors import ConfigError
from fl_bench.schema import choice, require, schema


class FADAS(FedBuff):
    """FADAS's server (module docstring): FedBuff's buffered mean as the pseudo-gradient of an AMSGrad
    step (``algorithm/server_optimizer=amsgrad``, conf/algorithm/fadas.yaml's) at the delay-adaptive rate
    eta_t."""

    def __init__(self, cfg, params, num_clients: int, client_sizes=None):
        super().__init__(cfg, params, num_clients, client_sizes)
        self._max_staleness = 0  # tau_max^t of the uploads buffered so far

    def add(self, upload: Upload) -> None:
        super().add(upload)
        self._max_staleness = max(self._max_staleness, upload.staleness)

    def step_lr(self) -> float:
        """eta_t: eta, or less when the buffer's largest delay tau_max^t exceeds tau_c."""
        eta, tau_c, tau_max = self.cfg.server_optimizer.lr, self.cfg.tau_c, self._max_staleness
        if tau_c is None or tau_max <= tau_c:
            return eta
        return min(eta, 1.0 / tau_max) if self.cfg.delay_rule == "min" else eta / tau_max

    def _step(self) -> None:
        super()._step()  # steps at step_lr()
        self._max_staleness = 0

    def dp_check(self, mechanism: str) -> None:
        raise ConfigError(f"dp={mechanism} is not allowed with algorithm={self.cfg.name}: its delay-adaptive rate "
                          f"reads each upload's delay, and DP gives the server one aggregate without them")


DELAY_RULES = ("min", "divide")


@schema("algorithm", "fadas", FADAS)
class FADASConfig(FedBuffAggregation, AsyncConfig):
    """FADAS (Wang et al., ICML 2024, Alg. 1): every M = ``buffer_size`` uploads, a server-optimizer step
    with their mean as the pseudo-gradient, at eta_t = min(eta, 1/tau_max) when the buffer's largest delay
    tau_max exceeds ``tau_c`` (``delay_rule=divide``: eta / tau_max, FADAS's code; ``tau_c=null``: eta
    always). The paper's optimizer is AMSGrad, which conf/algorithm/fadas.yaml chooses; like FedBuff's, the
    bare schema's is plain SGD, so that any option composes over it (another one is FedBuff at FADAS's rate)."""

    buffer_size: int = 10  # M
    reduction: str = "sum"  # (1/M) sum: with uniform weights and s = 1, the mean of Alg. 1
    tau_c: Optional[int] = 1  # the delay threshold (the code's default); null: no delay adaptation
    delay_rule: str = "min"

    def __post_init__(self) -> None:
        super().__post_init__()
        a = "algorithm."
        require(self.tau_c is None or self.tau_c >= 0, a + "tau_c", self.tau_c, "must be an integer >= 0 or null")
        choice(a + "delay_rule", self.delay_rule, DELAY_RULES)
        require(self.tau_c is not None or self.delay_rule == "min", a + "delay_rule", self.delay_rule,
                "is read only with a delay threshold: set algorithm.tau_c, or leave delay_rule at min")
