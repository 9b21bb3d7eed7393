"""Server algorithm math on tiny cases computed by hand."""

import contextlib
import dataclasses

import numpy as np
import pytest
import torch
from hydra.utils import get_object

from fl_bench.algorithms.server_optimizers import AdamServerOptimizerConfig, MomentumServerOptimizerConfig, SGDServerOptimizerConfig
from fl_bench.algorithms.buffered import FedAsync, FedAsyncConfig, FedBuff, FedBuffConfig
from fl_bench.algorithms.client_state import ClientDict, ClientTable
from fl_bench.algorithms.synchronous import FedAvgM, FedAvgMConfig
from fl_bench.algorithms.weightings import (ConstantStaleness, ExampleWeightingConfig, PolynomialStaleness,
                                            PolynomialStalenessConfig)
from fl_bench.contracts import Upload
from fl_bench.errors import ConfigError
from fl_bench.schema import SCHEMAS, build


def fedbuff(w0, lr=1.0, examples=False, alpha=0.5, **kw):
    """FedBuff at K = 2 with uniform (or ``examples``) weights and s(tau) = (1 + tau)^-alpha, as its YAML's."""
    cfg = FedBuffConfig(**{"buffer_size": 2, "server_optimizer": SGDServerOptimizerConfig(lr=lr), **kw,
                           "staleness": PolynomialStalenessConfig(exponent=alpha),
                           **({"weighting": ExampleWeightingConfig()} if examples else {})})
    return FedBuff(cfg, torch.tensor(w0), num_clients=4)


def upload(vector, num_examples=1, staleness=0, client=0, steps=0):
    return Upload(client, 0, staleness, num_examples, torch.tensor(vector), steps=steps)


def test_staleness_functions():
    polynomial = lambda a: PolynomialStaleness(PolynomialStalenessConfig(exponent=a))  # noqa: E731
    assert polynomial(0.5).scale(0) == 1.0
    assert polynomial(0.5).scale(3) == pytest.approx(0.5)  # 1 / sqrt(4)
    assert polynomial(10).scale(1) == pytest.approx(2.0**-10)
    assert polynomial(0).constant and not polynomial(0.5).constant
    assert ConstantStaleness(None).scale(7) == 1.0 and ConstantStaleness(None).constant


def test_fedbuff_k2_weighted_sum():
    # Dbar = (1/K) sum s(tau_i) D_i = (1/2)(1*[1,0] + (1/2)*[0,2]) = [0.5, 0.5]; w = [1,2] - 0.5*Dbar
    server = fedbuff([1.0, 2.0], reduction="sum", lr=0.5, alpha=0.5)
    server.add(upload([1.0, 0.0], 7, 0))
    server.add(upload([0.0, 2.0], 9, 3))
    server.step()
    assert torch.allclose(server.params, torch.tensor([0.75, 1.75]))
    assert server.version == 1


def test_fedbuff_k2_weighted_mean():
    # Dbar = (1*[1,0] + 0.5*[0,2]) / (1 + 0.5) = [2/3, 2/3]
    server = fedbuff([0.0, 0.0], reduction="mean", lr=1.0, alpha=0.5)
    server.add(upload([1.0, 0.0], 1, 0))
    server.add(upload([0.0, 2.0], 1, 3))
    server.step()
    assert torch.allclose(server.params, torch.tensor([-2 / 3, -2 / 3]))


def test_fedbuff_example_weights():
    # weights n_i = 1 and 3, no staleness scaling: Dbar = (1*[1,0] + 3*[0,2]) / 4 = [0.25, 1.5]
    server = fedbuff([0.0, 0.0], examples=True, reduction="mean", alpha=0.0)
    server.add(upload([1.0, 0.0], 1, 5))
    server.add(upload([0.0, 2.0], 3, 0))
    server.step()
    assert torch.allclose(server.params, torch.tensor([-0.25, -1.5]))


def test_fedbuff_example_weights_are_normalised_to_mean_one():
    # weighted sum (App. B.2) with w_i = n_i / mean(n): n = [1, 3], mean 2 -> w = [0.5, 1.5];
    # Dbar = (1/2)(0.5 * 1 * [2, 0] + 1.5 * (1/2) * [0, 4]) = [0.5, 1.5] (s(tau=3) = 1/2), i.e.
    # sum_i s_i n_i D_i / sum_i n_i, which does not grow with the buffer's example count
    server = fedbuff([0.0, 0.0], examples=True, reduction="sum", alpha=0.5)
    server.add(upload([2.0, 0.0], num_examples=1))
    server.add(upload([0.0, 4.0], num_examples=3, staleness=3))
    server.step()
    assert torch.allclose(server.params, torch.tensor([-0.5, -1.5]))
    # the same buffer with 100x the examples per client takes the same step
    big = fedbuff([0.0, 0.0], examples=True, reduction="sum", alpha=0.5)
    big.add(upload([2.0, 0.0], num_examples=100))
    big.add(upload([0.0, 4.0], num_examples=300, staleness=3))
    big.step()
    assert torch.allclose(big.params, server.params)


def test_fednova_normalises_each_update_by_its_local_steps():
    # FedAvg's weights (examples, mean, s = 1), n = [1, 3], tau = [1, 4]: p = [1/4, 3/4],
    # tau_eff = 1/4 + 3 = 3.25, Dbar = tau_eff (p_1 D_1 / 1 + p_2 D_2 / 4) = 3.25 ([0.25, 0] + [0, 0.375])
    server = fedbuff([0.0, 0.0], examples=True, reduction="mean", alpha=0.0,
                     step_normalisation="fednova")
    server.add(upload([1.0, 0.0], 1, steps=1))
    server.add(upload([0.0, 2.0], 3, steps=4))
    server.step()
    torch.testing.assert_close(server.params, torch.tensor([-0.8125, -1.21875]))
    assert server.step_weights == pytest.approx([3.25 / 4, 3.25 * 3 / 16])
    # FedBuff's sum with staleness, uniform weights, tau = [2, 2]: equal steps give the plain step
    plain, nova = (fedbuff([0.0, 0.0], reduction="sum", alpha=0.5, step_normalisation=n)
                   for n in ("none", "fednova"))
    for server in (plain, nova):
        server.add(upload([1.0, 0.0], staleness=0, steps=2))
        server.add(upload([0.0, 2.0], staleness=3, steps=2))
        server.step()
    torch.testing.assert_close(nova.params, plain.params)
    # tau = [1, 3], s = [1, 1/2]: tau_eff = 2, Dbar = (1/2) 2 ([1, 0] / 1 + (1/2) [0, 2] / 3) = [1, 1/3]
    server = fedbuff([0.0, 0.0], reduction="sum", alpha=0.5, step_normalisation="fednova")
    server.add(upload([1.0, 0.0], staleness=0, steps=1))
    server.add(upload([0.0, 2.0], staleness=3, steps=3))
    server.step()
    torch.testing.assert_close(server.params, torch.tensor([-1.0, -1 / 3]))


def test_fednova_is_refused_where_it_cannot_act():
    from fl_bench.algorithms.fedstaleweight import FedStaleWeightConfig

    assert "step_normalisation" not in {spec.name for spec in dataclasses.fields(FedStaleWeightConfig)}  # no such knob
    with pytest.raises(ConfigError, match="dp=ftrl is not allowed with algorithm.step_normalisation=fednova"):
        fedbuff([0.0], step_normalisation="fednova").dp_check("ftrl")
    server = fedbuff([0.0], step_normalisation="fednova")
    with pytest.raises(ConfigError, match="needs each upload's local steps"):
        server.add(upload([1.0], steps=0))


def test_fedbuff_buffer_resets_after_step():
    server = fedbuff([0.0], reduction="sum", alpha=0.0)
    for _ in range(2):
        server.add(upload([1.0], 1, 0))
    server.step()
    for _ in range(2):
        server.add(upload([3.0], 1, 0))
    server.step()
    assert server.params.item() == pytest.approx(-1.0 - 3.0)


def test_fedavgm_momentum_two_steps():
    # m1 = g1 = 1, w1 = 0 - 1*1 = -1 ; m2 = 0.9*1 + 1 = 1.9, w2 = -1 - 1.9 = -2.9
    cfg = FedAvgMConfig(server_optimizer=MomentumServerOptimizerConfig(lr=1.0, momentum=0.9, nesterov=False))
    server = build(cfg, torch.zeros(1), 1)
    assert isinstance(server, FedAvgM)
    server.add(upload([1.0], 10, 0))
    server.step()
    assert server.params.item() == pytest.approx(-1.0)
    server.add(upload([1.0], 10, 0))
    server.step()
    assert server.params.item() == pytest.approx(-2.9)


def test_fedavg_example_weighted_mean_over_cohort():
    cfg = FedAvgMConfig(server_optimizer=SGDServerOptimizerConfig(lr=1.0))  # no momentum is FedAvg
    server = build(cfg, torch.zeros(1), 2)
    server.add(upload([1.0], 1, 0))
    server.add(upload([4.0], 3, 0))
    server.step()
    assert server.params.item() == pytest.approx(-(1 * 1 + 3 * 4) / 4)


def test_fedasync_mixing():
    # a_t = a * (1 + tau)^-alpha = 0.5 * 4^-0.5 = 0.25 ; w = 0.75*[0,0] + 0.25*[1,2]
    cfg = FedAsyncConfig(mixing=0.5, staleness=PolynomialStalenessConfig(exponent=0.5))
    server = FedAsync(cfg, torch.zeros(2), num_clients=1)
    assert server.upload == "model"
    assert cfg.buffer_size == 1  # every upload is a server step
    server.add(upload([1.0, 2.0], 5, 3))
    server.step()
    assert torch.allclose(server.params, torch.tensor([0.25, 0.5]))


def test_fedavgm_nesterov_two_steps():
    # nesterov (torch): m1 = g = 1, w1 = 0 - 0.5*(g + 0.9*m1) = -0.95 ; m2 = 0.9 + 1 = 1.9,
    # w2 = -0.95 - 0.5*(1 + 0.9*1.9) = -0.95 - 1.355 = -2.305
    cfg = FedAvgMConfig(server_optimizer=MomentumServerOptimizerConfig(lr=0.5, momentum=0.9, nesterov=True))
    server = build(cfg, torch.zeros(1), 1)
    for expected in (-0.95, -2.305):
        server.add(upload([1.0], 10, 0))
        server.step()
        assert server.params.item() == pytest.approx(expected)


def test_fedbuff_server_adam_two_steps():
    # Adam with betas (0.5, 0.9), eps 1e-3, lr 0.1; pseudo-gradients g1 = [1, -2], g2 = [3, 1] (K=1).
    # step t: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2, mhat = m/(1-b1^t), vhat = v/(1-b2^t),
    # w -= lr mhat / (sqrt(vhat) + eps).
    # t=1: mhat = g1, vhat = g1^2: w1 = -0.1 * [1/1.001, -2/2.001]
    # t=2: m = 0.25 g1 + 0.5 g2 = [1.75, 0], mhat = m/0.75 = [7/3, 0];
    #      v = 0.09 g1^2 + 0.1 g2^2 = [0.99, 0.46], vhat = v/0.19 = [99/19, 46/19]
    cfg = FedBuffConfig(buffer_size=1,
                        server_optimizer=AdamServerOptimizerConfig(lr=0.1, betas=[0.5, 0.9], eps=1e-3))
    server = FedBuff(cfg, torch.zeros(2, dtype=torch.float64), num_clients=1)
    w1 = [-0.1 * 1 / 1.001, 0.1 * 2 / 2.001]
    w2 = [w1[0] - 0.1 * (7 / 3) / ((99 / 19) ** 0.5 + 1e-3), w1[1]]
    for g, expected in (([1.0, -2.0], w1), ([3.0, 1.0], w2)):
        server.add(Upload(0, 0, 0, 1, torch.tensor(g, dtype=torch.float64)))
        server.step()
        assert torch.allclose(server.params, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0)


@pytest.mark.parametrize("make", [
    lambda: SGDServerOptimizerConfig(lr=-1.0),
    lambda: SGDServerOptimizerConfig(lr=float("nan")),
    lambda: SGDServerOptimizerConfig(name="adam"),  # the option, not the label, chooses the optimizer
    lambda: MomentumServerOptimizerConfig(momentum=1.0),
    lambda: MomentumServerOptimizerConfig(momentum=0.0, nesterov=True),
    lambda: AdamServerOptimizerConfig(betas=[0.9]),
    lambda: AdamServerOptimizerConfig(betas=[0.9, 1.0]),
    lambda: AdamServerOptimizerConfig(eps=0.0),
    lambda: FedAsyncConfig(mixing=0.0),
    lambda: FedAsyncConfig(mixing=1.5),
])
def test_server_step_ranges_are_checked(make):
    with pytest.raises(ConfigError):
        make()


def test_broadcast_and_upload_sizes_are_the_model():
    server = fedbuff([0.0] * 5)
    assert server.broadcast().nbytes == server.upload_nbytes() == 5 * 4
    assert server.client_state_nbytes() == 0


def test_client_state_stores_report_their_memory():
    table = ClientTable(num_clients=10, width=3)
    table[4] = torch.tensor([1.0, 2.0, 3.0])
    assert table.nbytes == 10 * 3 * 4 and torch.equal(table[4], torch.tensor([1.0, 2.0, 3.0])) and table[0].abs().sum() == 0
    seen = ClientDict(default=0.0)
    assert seen.get(7) == 0.0 and seen.nbytes == 0
    seen[7] = torch.zeros(5)
    assert 7 in seen and seen.nbytes == 20


class _Recording:
    """An algorithm's config that records the keys its algorithm reads."""

    def __init__(self, cfg):
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "read", set())

    def __getattr__(self, key):
        self.read.add(key)
        return getattr(self._cfg, key)


def _server_knobs(cls) -> set[str]:
    """A config's keys less the client's and the step policy's (read for every algorithm by the trainer and the
    engine) and its identity: the knobs its server algorithm's code must read."""
    from fl_bench.algorithms.base import AlgorithmConfig, AsyncConfig, SyncConfig

    def keys(klass):
        return {spec.name for spec in dataclasses.fields(klass)}

    return keys(cls) - keys(AlgorithmConfig) - keys(AsyncConfig) - keys(SyncConfig)


def test_the_protocols_configs_add_only_the_step_policies_knobs():
    """What every algorithm inherits is the client's and its step policy's: a server knob is a mixin, which a
    config lists only where its code reads it."""
    from fl_bench.algorithms.base import AlgorithmConfig, AsyncConfig, SyncConfig
    from fl_bench.clients.local_update import ClientConfig
    from fl_bench.engine.protocol import BufferedAsync, Rounds

    def keys(cls):
        return {spec.name for spec in dataclasses.fields(cls)}

    assert keys(AlgorithmConfig) - keys(ClientConfig) == {"name", "_target_"}
    assert keys(AsyncConfig) - keys(AlgorithmConfig) == set(BufferedAsync.knobs)
    assert keys(SyncConfig) - keys(AlgorithmConfig) == set(Rounds.knobs)


BUILT_IN = [name for name, cls in SCHEMAS["algorithm"].items() if cls.__module__.startswith("fl_bench.") and name != "centralized"]


@pytest.mark.parametrize("name", BUILT_IN)
def test_each_built_in_algorithm_reads_every_server_knob_of_its_config(name):
    # Every code path that reads the config: building, the local rule, fresh and stale uploads, steps, DP's check
    cfg = SCHEMAS["algorithm"][name]()
    recording = _Recording(cfg)
    algorithm = get_object(cfg._target_)
    server = algorithm(recording, torch.zeros(3), num_clients=4, client_sizes=np.array([1, 2, 3, 4]))
    server.local_update()
    for step in range(3):
        for client in range(2):
            stale = step if client == 1 else 0  # up to 2: above FADAS's tau_c of 1
            server.add(Upload(client, server.version - stale, stale, client + 1, torch.full((3,), 0.1),
                              extras={key: torch.zeros(3) for key in server.upload_keys}, steps=2))
        server.step()
    with contextlib.suppress(ConfigError):
        server.dp_check("ftrl")
    unread = _server_knobs(type(cfg)) - recording.read - {"server_optimizer"}
    assert not unread, (name, unread)
    # the server optimizer is read where the server steps with one (ServerOptimizerStep builds it from the config)
    assert ("server_optimizer" in _server_knobs(type(cfg))) == ("server_optimizer" in recording.read), name


def test_a_diverged_run_names_the_step_size_each_algorithm_reads():
    """The key that sizes the server step, which a diverged run's line names beside client_lr: the server
    optimizer's lr where the algorithm has one, else its own knob."""
    import operator

    keys = {name: cls().step_size_key() for name, cls in SCHEMAS["algorithm"].items() if cls.__module__.startswith("fl_bench.")}
    assert keys["fedbuff"] == keys["fedavgm"] == keys["fadas"] == "server_optimizer.lr"
    assert (keys["fedasync"], keys["ca2fl"], keys["fedstaleweight"]) == ("mixing", "server_lr", "server_lr")
    assert keys["hfl"] is keys["fedgbo"] is keys["fedlaavg"] is keys["centralized"] is None
    for name, key in keys.items():
        assert key is None or operator.attrgetter(key)(SCHEMAS["algorithm"][name]()) > 0, name
