"""FADAS (Wang et al., ICML 2024): AMSGrad on the buffered mean at the delay-adaptive rate, by hand."""

import pytest
import torch

from fl_bench.algorithms.server_optimizers import AMSGradServerOptimizerConfig, MomentumServerOptimizerConfig, SGDServerOptimizerConfig
from fl_bench.algorithms.buffered import FedBuff, FedBuffConfig
from fl_bench.algorithms.fadas import FADAS, FADASConfig
from fl_bench.contracts import Upload


def fadas(lr=0.5, betas=(0.5, 0.75), eps=0.25, bias_correction=False, **kw):
    opt = AMSGradServerOptimizerConfig(lr=lr, betas=list(betas), eps=eps, bias_correction=bias_correction)
    return FADAS(FADASConfig(buffer_size=2, server_optimizer=opt, **kw), torch.zeros(2, dtype=torch.float64), num_clients=4)


def run(server, buffers):
    """Each buffer's uploads ((staleness, Delta), ...) added, then a step; the params after each step, in one list."""
    after = []
    for buffer in buffers:
        for client, (staleness, vector) in enumerate(buffer):
            server.add(Upload(client, 0, staleness, 1, torch.tensor(vector, dtype=torch.float64)))
        server.step()
        after.extend(server.params.tolist())
    return after


# Three steps, M = 2, eta = 0.5, betas (0.5, 0.75), eps 0.25, tau_c = 1; x <- x - eta_t m / (sqrt(vhat) + eps).
BUFFERS = [
    # Delta_1 = [2, 2]; m = [1, 1]; v = 0.25 [4, 4] = [1, 1] = vhat; tau_max = 0: eta; x = -0.5 [1, 1] / 1.25 = [-0.4, -0.4]
    [(0, [2.0, 0.0]), (0, [2.0, 4.0])],
    # Delta_2 = 0; m = [0.5, 0.5]; v = [0.75, 0.75], vhat stays [1, 1]; tau_max = 3 > tau_c: eta_2 as the rule
    # says; x -= eta_2 [0.5, 0.5] / 1.25 = eta_2 [0.4, 0.4]
    [(1, [0.0, 0.0]), (3, [0.0, 0.0])],
    # Delta_3 = [2, 0]; m = [0.25, 0.25] + [1, 0] = [1.25, 0.25]; v = [0.5625 + 1, 0.5625]; vhat = [1.5625, 1]
    # (its second value the max kept from step 1, not v's 0.5625); tau_max = 1 = tau_c: eta;
    # x -= 0.5 [1.25 / (1.25 + 0.25), 0.25 / (1 + 0.25)] = [5/12, 0.1]
    [(1, [4.0, 0.0]), (0, [0.0, 0.0])],
]


@pytest.mark.parametrize("knobs, eta_2", [
    ({}, 1 / 3),  # delay_rule=min: min(eta, 1 / tau_max) = min(0.5, 1/3)
    ({"delay_rule": "divide"}, 0.5 / 3),  # eta / tau_max (FADAS's code)
    ({"tau_c": None}, 0.5),  # no delay adaptation
    ({"tau_c": 3}, 0.5),  # tau_max = 3 <= tau_c
])
def test_three_amsgrad_steps_at_the_delay_adaptive_rate_equal_the_hand_computed_ones(knobs, eta_2):
    x1 = -0.4
    x2 = x1 - eta_2 * 0.4
    expected = [x1, x1, x2, x2, x2 - 5 / 12, x2 - 0.1]
    assert run(fadas(**knobs), BUFFERS) == pytest.approx(expected, rel=1e-12, abs=0)


def test_bias_correction_steps_as_torchs_amsgrad_and_the_code_does():
    # FADAS's code (fedams) steps as torch's Adam with amsgrad=True: an independent reference.
    server = fadas(bias_correction=True, tau_c=None)
    reference = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    adam = torch.optim.Adam([reference], lr=0.5, betas=(0.5, 0.75), eps=0.25, amsgrad=True)
    steps = run(server, BUFFERS)
    for buffer, after in zip(BUFFERS, (steps[:2], steps[2:4], steps[4:])):
        reference.grad = torch.tensor([vector for _, vector in buffer], dtype=torch.float64).mean(0)  # Delta_t
        adam.step()
        assert after == pytest.approx(reference.tolist(), rel=1e-12, abs=0)
    assert run(fadas(tau_c=None), BUFFERS)[4:] != pytest.approx(reference.tolist())  # the paper's steps differ


def test_the_server_optimizers_state_is_server_state_bytes():
    def after_a_step(server):
        server.add(Upload(0, 0, 0, 1, torch.ones(3)))
        server.step()
        return server.server_state_nbytes()

    def fedbuff(opt):
        return FedBuff(FedBuffConfig(buffer_size=1, server_optimizer=opt), torch.zeros(3), num_clients=1)

    assert after_a_step(fedbuff(SGDServerOptimizerConfig())) == 0
    assert after_a_step(fedbuff(MomentumServerOptimizerConfig())) == 3 * 4  # m
    amsgrad = FADASConfig(buffer_size=1, server_optimizer=AMSGradServerOptimizerConfig())
    assert after_a_step(FADAS(amsgrad, torch.zeros(3), num_clients=1)) == 3 * 3 * 4  # m, v, vhat
