"""FedLaAvg (Yan et al. 2020): Alg. 1's math on a hand-computed case, Example 1 on the engine against
the closed forms of Thm. 1-2, the per-round lr decay, and centralized training on the pooled data."""

import numpy as np
import pytest
import torch

from fl_bench.algorithms.fedlaavg import FedLaAvg, FedLaAvgConfig
from fl_bench.analysis.example1 import fedavg_limit, fedavg_trajectory, fedlaavg_trajectory, simulate
from fl_bench.contracts import Upload
from fl_bench.errors import ConfigError
from fl_bench.runs.experiment import build_experiment, run_experiment
from tests.conftest import compose_run_config


def upload(client, version, vector):
    return Upload(client, version, 0, 1, torch.tensor(vector))


def test_fedlaavg_steps_with_the_average_latest_gradient_eq_4():
    cfg = FedLaAvgConfig(client_lr=0.5, lr_decay=0.8)
    server = FedLaAvg(cfg, torch.tensor([1.0, 1.0]), 3, client_sizes=np.array([1, 1, 2]))  # p = 1/4, 1/4, 1/2
    # round 0 (eta_0 = 0.5): clients 0 and 2; gradient = Delta / eta_0
    server.add(upload(0, 0, [0.5, 0.0]))  # g_0 = (1, 0)
    server.add(upload(2, 0, [0.0, 1.0]))  # g_2 = (0, 2)
    server.step()
    # gbar = 1/4 (1, 0) + 1/2 (0, 2) = (0.25, 1); w = (1, 1) - 0.5 gbar
    assert torch.allclose(server.average, torch.tensor([0.25, 1.0]))
    assert torch.allclose(server.params, torch.tensor([0.875, 0.5]))
    # round 1 (eta_1 = 0.4): client 0 again; it uploads g_0^1 - g_0^0 = (0, 1) - (1, 0)
    server.add(upload(0, 1, [0.0, 0.4]))
    server.step()
    # gbar = (0.25, 1) + 1/4 (-1, 1) = (0, 1.25); w = (0.875, 0.5) - 0.4 gbar
    assert torch.allclose(server.average, torch.tensor([0.0, 1.25]))
    assert torch.allclose(server.params, torch.tensor([0.875, 0.0]))
    assert torch.allclose(server.latest.data, torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 2.0]]))
    assert server.client_state_nbytes() == 3 * 2 * 4  # the N x P table


def test_the_mean_step_reading_divides_each_gradient_by_the_trip_s_local_steps():
    # batch 2: client 0 (n = 1) takes 1 step an epoch, client 1 (n = 5) takes 3; E = 2 epochs
    sizes = np.array([1, 5])
    read = {g: FedLaAvg(FedLaAvgConfig(client_lr=0.5, batch_size=2, local_epochs=2, gradient=g), torch.zeros(2), 2,
                        client_sizes=sizes) for g in ("accumulated", "mean_step")}
    for server in read.values():
        server.add(upload(0, 0, [0.5, 0.0]))
        server.add(upload(1, 0, [0.0, 3.0]))
    assert torch.allclose(read["accumulated"].latest.data, torch.tensor([[1.0, 0.0], [0.0, 6.0]]))
    assert torch.allclose(read["mean_step"].latest.data, torch.tensor([[0.5, 0.0], [0.0, 1.0]]))  # / Q = 2, 6
    # partial work: a trip that ran 1 of client 1's 6 steps divides by the 1 it ran
    partial = FedLaAvg(FedLaAvgConfig(client_lr=0.5, batch_size=2, local_epochs=2, gradient="mean_step"),
                       torch.zeros(2), 2, client_sizes=sizes)
    partial.add(Upload(1, 0, 0, 1, torch.tensor([0.0, 3.0]), steps=1))
    assert torch.allclose(partial.latest.data, torch.tensor([[0.0, 0.0], [0.0, 6.0]]))
    with pytest.raises(ConfigError, match="algorithm.gradient='mean' is not allowed: choose one of accumulated, mean_step"):
        FedLaAvgConfig(gradient="mean")


def test_with_every_client_fresh_fedlaavg_is_fedavg_with_weights_p():
    cfg = FedLaAvgConfig(client_lr=0.1)
    sizes = np.array([3, 1])
    server = FedLaAvg(cfg, torch.zeros(2), 2, client_sizes=sizes)
    deltas = [torch.tensor([0.3, -0.1]), torch.tensor([-0.2, 0.5])]
    for client, delta in enumerate(deltas):
        server.add(Upload(client, 0, 0, int(sizes[client]), delta))
    server.step()
    assert torch.allclose(server.params, -(0.75 * deltas[0] + 0.25 * deltas[1]))


ROUNDS = 200


def test_example_1_on_the_engine_follows_the_closed_forms_of_theorems_1_and_2():
    mu1, mu2, eta, period = 0.0, 1.0, 0.1, 5  # conf/experiment/fedlaavg_example1.yaml
    fedavg, fedlaavg = simulate("fedavg", ROUNDS), simulate("fedlaavg", ROUNDS)
    assert np.abs(fedavg - fedavg_trajectory(mu1, mu2, eta, period, 0.0, ROUNDS)).max() < 1e-6
    assert np.abs(fedlaavg - fedlaavg_trajectory(mu1, mu2, eta, period, 0.0, ROUNDS)).max() < 1e-6
    # FedAvg ends each period at Thm. 1's biased point (0.63, not 0.5) and oscillates
    ends = fedavg[2 * period - 1 :: 2 * period]
    assert abs(ends[-1] - fedavg_limit(mu1, mu2, eta, period)) < 1e-6 and fedavg_limit(mu1, mu2, eta, period) > 0.62
    assert fedavg[-2 * period :].max() - fedavg[-2 * period :].min() > 0.25
    # FedLaAvg converges to the optimum (mu1 + mu2) / 2 (Thm. 2)
    assert abs(fedlaavg[-1] - 0.5) < 1e-6 and np.ptp(fedlaavg[-2 * period :]) < 1e-6


def test_the_client_lr_decays_per_round_on_both_training_paths():
    runs = {}
    for vmap in ("false", "true"):
        cfg = compose_run_config("experiment=fedlaavg_example1", "algorithm.lr_decay=0.5", "max_trips=3",
                                 "model.init=1.0", f"vmap_clients={vmap}")
        models = []
        exp = build_experiment(cfg, lambda p: models.append(exp.server.params.item()) and False)
        exp.simulator.run()
        runs[vmap] = models
    # Client 0 (mu_1 = 0) alone: its gradient at x is x, the other's latest is still 0, so
    # x_{t+1} = x_t - eta_t x_t / 2 with eta_t = 0.1 * 0.5^t; the upload Delta = eta_t x_t / eta_t = x_t.
    expected = [1.0]
    for t in range(3):
        expected.append(expected[-1] * (1 - 0.1 * 0.5**t / 2))
    assert runs["false"] == pytest.approx(expected, abs=1e-7)
    assert runs["true"] == pytest.approx(expected, abs=1e-7)


@pytest.mark.slow
def test_centralized_trains_one_model_on_the_pooled_data(tmp_path):
    summary = run_experiment(compose_run_config(
        "algorithm=centralized", "dataset=digits", "partition=one_class", "partition.num_clients=100",
        "max_trips=50", "eval_every=25"), tmp_path)
    assert summary["client_trips"] == summary["server_steps"] == 50  # one pooled trip per round
    assert summary["best_val_accuracy"] > 0.5  # 50 x 5 SGD steps of batch 5 on all digits, from 0.1
