"""HFL with AD-SGD: the delayed-gradient correction (eq. 7) in O(P), lambda (eq. 8), the merge
(eq. 9) on a scripted round, and HFL without stragglers is FedAvg over every device; the final
model's accuracy on the normal devices' data and on the stragglers'."""

import math
import resource

import numpy as np
import pytest
import torch

from fl_bench.algorithms.hfl import HFL, HFLConfig, corrected_gradient
from fl_bench.contracts import Upload
from fl_bench.errors import ConfigError
from fl_bench.runs.experiment import build_experiment
from tests.conftest import compose_run_config


def test_the_correction_is_exact_with_the_true_hessian_and_the_outer_product_by_hand():
    A = torch.tensor([[2.0, 0.5], [0.5, 1.0]])  # F(w) = 1/2 w^T A w: g(w) = A w, H = A
    old, new = torch.tensor([1.0, -1.0]), torch.tensor([0.5, 0.2])
    exact = corrected_gradient(A @ old, new - old, hessian_times=lambda d: A @ d)
    assert torch.allclose(exact, A @ new)
    g, d = A @ old, new - old  # g = (1.5, -0.5), d = (-0.5, 1.2): g^T d = -1.35
    assert torch.allclose(corrected_gradient(g, d), torch.tensor([1.5 - 1.5 * 1.35, -0.5 + 0.5 * 1.35]))


def test_the_correction_never_builds_a_p_by_p_matrix():
    p = 1_000_000  # a P x P float32 matrix would be 4 TB
    g, d = torch.randn(p), torch.randn(p)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    out = corrected_gradient(g, d)
    assert out.shape == (p,) and torch.allclose(out, g + g * torch.dot(g, d))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # < 64 MiB more


def hfl(**knobs):
    cfg = HFLConfig(client_lr=0.1, **knobs)
    return HFL(cfg, torch.tensor([1.0, 2.0]), 3, client_sizes=np.array([1, 3, 2]))


def test_lambda_schedules_against_hand_values():
    server = hfl()
    server.version = 4
    assert server.lam(3) == pytest.approx(0.5 * math.exp(-1))  # eq. 8 as printed: lambda_0 exp(-(t - tau))
    assert server.lam(6) == pytest.approx(0.5 * math.exp(2))  # ... which grows with tau
    intent = hfl(lambda_schedule="decay_with_staleness", max_staleness=10)
    intent.version = 4  # lambda_0 exp(-tau / tau_max) eta_t / eta_0, eta_t = eta_0 / (1 + t)
    assert intent.lam(3) == pytest.approx(0.5 * math.exp(-0.3) / 5)
    assert intent.lam(6) < intent.lam(3)


@pytest.mark.parametrize("reading, lambdas", [
    ("printed", (0.5 * math.exp(-(2 - 2)), 0.5 * math.exp(-(3 - 2)))),  # exp(-(t - tau)): t - tau = 0, then 1
    ("delay", (0.5 * math.exp(-2), 0.5 * math.exp(-2))),  # exp(-tau): tau = 2 both times
    ("since_merge", (0.5 * math.exp(-(2 - 0)), 0.5 * math.exp(-(3 - 2)))),  # rounds since its last merge (0, then 2)
    ("constant", (0.5, 0.5)),
])
def test_each_reading_of_eq_8_weighs_a_straggler_by_hand_over_four_rounds(reading, lambdas):
    """Rounds t = 0..3: normal device 0 every round (device 1 too at t = 0); straggler 2 downloads w_0 and
    w_1 and is merged at t = 2 and t = 3, each time tau = 2 rounds late. Each upload's share of the step
    (trips.csv's weight): the straggler lambda_t (its p_i normalised over the round's one straggler),
    the normal device the kernel's 1 - lambda_t."""
    server = hfl(lambda_0=0.5, lambda_schedule=reading)
    delta, late = torch.tensor([0.1, 0.0]), torch.tensor([0.01, -0.02])
    server.add(Upload(0, 0, 0, 1, delta))
    server.add(Upload(1, 0, 0, 3, delta))
    server.step()
    assert server.step_weights == pytest.approx([1 / 4, 3 / 4])  # the kernel alone: p_j / sum p
    server.add(Upload(0, 1, 0, 1, delta))
    server.step()
    assert server.step_weights == [1.0]
    merged = []
    for t, downloaded in ((2, 0), (3, 1)):
        server.add(Upload(0, t, 0, 1, delta))
        server.add(Upload(2, downloaded, 2, 2, late))
        server.step()
        merged.append(server.step_weights[1])
        assert server.step_weights == pytest.approx([1 - merged[-1], merged[-1]])
    assert merged == pytest.approx(list(lambdas))


def test_a_reading_of_eq_8_without_late_merges_is_refused():
    with pytest.raises(ConfigError, match="algorithm.lambda_schedule='delay' is not allowed: reads lambda for late merges, "
                                          "and algorithm.lambda_0=0 merges nothing late"):
        HFLConfig(lambda_0=0.0, lambda_schedule="delay")
    HFLConfig(lambda_0=0.0)  # the late merges off, eq. 8 left as printed: allowed
    with pytest.raises(ConfigError, match="algorithm.lambda_schedule='exp' is not allowed: choose one of printed, "
                                          "decay_with_staleness, delay, since_merge, constant"):
        HFLConfig(lambda_schedule="exp")


def test_a_round_with_a_late_straggler_follows_eq_9_by_hand():
    server = hfl(lambda_0=0.5)
    w0 = server.params.clone()
    # round 0: normal devices 0 (n=1) and 1 (n=3); eta_0 = 0.1
    server.add(Upload(0, 0, 0, 1, torch.tensor([0.1, 0.0])))
    server.add(Upload(1, 0, 0, 3, torch.tensor([0.0, 0.2])))
    server.step()
    w1 = (1 * (w0 - torch.tensor([0.1, 0.0])) + 3 * (w0 - torch.tensor([0.0, 0.2]))) / 4
    assert torch.allclose(server.params, w1)
    # round 1 (eta_1 = 0.05): normal device 0, and straggler 2 (n=2) that downloaded w0 (tau = 1)
    server.add(Upload(0, 1, 0, 1, torch.tensor([0.05, 0.05])))
    server.add(Upload(2, 0, 1, 2, torch.tensor([0.01, -0.02])))
    server.step()
    kernel = w1 - torch.tensor([0.05, 0.05])
    g = torch.tensor([0.01, -0.02]) / 0.1  # its delayed gradient: Delta / eta_0
    g_tilde = g + g * torch.dot(g, w1 - w0)  # eq. 7 with R = g g^T
    lam = 0.5 * math.exp(-(1 - 1))  # eq. 8 at t = 1, tau = 1
    expected = (1 - lam) * kernel + lam * (w0 - 0.05 * g_tilde)  # eq. 9, the one straggler's p normalised
    assert torch.allclose(server.params, expected, atol=1e-6)
    assert server.server_state_nbytes() == 3 * 2 * 4  # w0, w1, w2 kept (max_staleness 10)


def test_the_global_p_i_reading_weighs_a_straggler_by_its_share_of_all_devices():
    server = hfl(lambda_0=0.5, straggler_weights="global")  # sizes 1, 3, 2: n = 6
    w0 = server.params.clone()
    server.add(Upload(0, 0, 0, 1, torch.tensor([0.1, 0.0])))
    server.step()
    w1 = server.params.clone()
    server.add(Upload(0, 1, 0, 1, torch.tensor([0.05, 0.05])))
    server.add(Upload(2, 0, 1, 2, torch.tensor([0.01, -0.02])))  # straggler 2: p = 2 / 6
    server.step()
    g = torch.tensor([0.01, -0.02]) / 0.1
    straggler = w0 - 0.05 * (g + g * torch.dot(g, w1 - w0))
    mass = 0.5 * 2 / 6  # lambda p_i: the kernel keeps 1 - lambda p_i
    assert torch.allclose(server.params, (1 - mass) * (w1 - torch.tensor([0.05, 0.05])) + mass * straggler, atol=1e-6)


def test_eq_4_read_literally_keeps_the_kernel_alone_until_tau_max():
    """Rounds t = 0..3 with tau_max = 2: a normal device moves w by -Delta every round and from t = 1
    a straggler one round late arrives; the literal split ignores it while t <= 2."""
    literal, merged = hfl(max_staleness=2, kernel_only_until_tau_max=True), hfl(max_staleness=2)
    delta = torch.tensor([0.1, 0.0])
    for t in range(4):
        for server in (literal, merged):
            if t >= 1:
                server.add(Upload(2, t - 1, 1, 2, torch.tensor([0.01, -0.02])))
            server.add(Upload(0, t, 0, 1, delta))
            server.step()
        if t <= 2:  # the kernel alone: w_0 - (t + 1) Delta
            assert torch.allclose(literal.params, torch.tensor([1.0, 2.0]) - (t + 1) * delta)
        if t >= 1:
            assert not torch.allclose(merged.params, torch.tensor([1.0, 2.0]) - (t + 1) * delta)
    assert not torch.allclose(literal.params, torch.tensor([1.0, 2.0]) - 4 * delta)  # t = 3 > tau_max: merged
    with pytest.raises(ConfigError, match="algorithm.straggler_weights='local' is not allowed: choose one of arriving, global"):
        HFLConfig(straggler_weights="local")


def test_an_upload_older_than_the_kept_models_is_a_clear_error():
    server = hfl(max_staleness=1)
    for _ in range(3):
        server.add(Upload(0, server.version, 0, 1, torch.zeros(2)))
        server.step()
    with pytest.raises(ConfigError, match="raise algorithm.max_staleness"):
        server.add(Upload(1, 0, 3, 1, torch.zeros(2)))


def test_without_stragglers_hfl_is_fedavg_over_every_device():
    common = ("dataset.num_clients=30", "max_trips=150", "eval_every=30", "delay=constant", "delay.value=0.5")
    models = {}
    for algorithm in ("hfl", "fedavg"):
        extra = ("speed=stragglers", "speed.fraction=0") if algorithm == "hfl" else (
            "selection=all_available", "algorithm.lr_schedule=inverse", "algorithm.deadline=1.0",
            "algorithm.server_optimizer.lr=1.0", "algorithm.local_epochs=5", "algorithm.batch_size=64",
            "algorithm.client_lr=0.1")
        cfg = compose_run_config(f"algorithm={algorithm}", *common, *extra)
        exp = build_experiment(cfg, lambda p: False)
        exp.simulator.run()
        models[algorithm] = exp.server.params
    assert torch.allclose(models["hfl"], models["fedavg"], atol=1e-6)


def test_group_accuracy_on_own_rows_and_by_label_mix_against_hand_values():
    from fl_bench.runs.fairness import accuracy_by_group

    members = {"normal": np.array([True, False, True, False]), "straggler": np.array([False, True, False, True]),
               "nobody": np.zeros(4, bool)}
    # Held out per client: client 0 rows 0-1, client 1 row 2, client 2 rows 3-4, client 3 row 5.
    own, basis = accuracy_by_group(np.array([1.0, 1, 0, 1, 0, 0]), np.zeros(6, np.int64), np.array([0, 2, 3, 5, 6]),
                                   np.zeros(8, np.int64), np.array([0, 2, 4, 5, 8]), members)
    assert basis == "own validation examples"
    assert own["normal"] == 0.75 and own["straggler"] == 0.0 and math.isnan(own["nobody"])  # 3 of 4, 0 of 2
    # Pooled: label 0 at 1/2, label 1 at 2/2, label 2 at 0/2 correct; label 3 has no validation rows.
    y_val, correct = np.array([0, 0, 1, 1, 2, 2]), np.array([1.0, 0, 1, 1, 0, 0])
    y = np.array([0, 0, 2, 2, 1, 1, 2, 2, 3])  # clients 0: {0, 0}, 1: {2, 2}, 2: {1}, 3: {1, 2, 2, 3}
    mix, basis = accuracy_by_group(correct, y_val, None, y, np.array([0, 2, 4, 5, 9]), members)
    assert basis == "label mix"
    assert mix["normal"] == pytest.approx((2 * 0.5 + 1 * 1.0) / 3)  # two 0s, one 1
    assert mix["straggler"] == pytest.approx((1 * 1.0 + 4 * 0.0) / 5)  # one 1, four 2s (the 3 has no rows)


def test_the_summary_gives_the_normal_and_straggler_accuracy_of_the_final_model(tmp_path):
    from fl_bench.data import build_dataset
    from fl_bench.runs.experiment import run_experiment
    from fl_bench.schema import build

    overrides = ("experiment=hfl_convex_smoke", "max_rounds=3", "dataset.num_clients=20", "eval_every=3")
    summary = run_experiment(compose_run_config(*overrides), tmp_path / "hfl")
    by_group = summary["final_val_accuracy_by_group"]
    assert summary["val_accuracy_by_group_basis"] == "own validation examples"
    assert set(by_group) == {"normal", "straggler"} and all(0 <= a <= 1 for a in by_group.values())
    cfg = compose_run_config(*overrides)  # the two groups' own rows make up the whole validation set
    data = build_dataset(cfg.dataset, cfg.partition)
    straggler = build(cfg.speed, cfg.delay, data).straggler
    rows = np.diff(data.val_offsets)
    whole = (rows[~straggler].sum() * by_group["normal"] + rows[straggler].sum() * by_group["straggler"]) / rows.sum()
    assert whole == pytest.approx(summary["final_val_accuracy"], abs=1e-6)
    without = run_experiment(compose_run_config(*overrides, "speed=none"), tmp_path / "none")
    assert "final_val_accuracy_by_group" not in without and "val_accuracy_by_group_basis" not in without


def test_a_run_reports_the_weight_its_stragglers_uploads_received(tmp_path):
    """summary.json's straggler_step_weight is the stragglers' trips' logged shares of their steps, summed
    (trips.csv's weight), and the late merges off (lambda_0 = 0) give them none."""
    import json

    import pandas as pd

    from fl_bench.runs.experiment import run_experiment

    weights = {}
    for lam in (0.5, 0.0):
        cfg = compose_run_config("experiment=hfl_shared_smoke", "max_rounds=12", f"algorithm.lambda_0={lam}",
                                 )
        run_experiment(cfg, tmp_path / str(lam))
        summary = json.loads((tmp_path / str(lam) / "summary.json").read_text())
        trips = pd.read_csv(tmp_path / str(lam) / "trips.csv")
        late = trips.loc[trips["staleness"] > 0, "weight"].fillna(0).sum()
        assert summary["straggler_step_weight"] == pytest.approx(late, abs=1e-9)
        weights[lam] = summary["straggler_step_weight"]
    assert weights[0.5] > 0 and weights[0.0] == 0
