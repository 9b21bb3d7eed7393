"""FedGBO (Mills et al.) and its baselines: Table II's U / T / I by hand, the servers' steps on
scripted uploads, both training paths with every upload extra, FLOPs against closed forms, and the
bytes each algorithm sends (Table I)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fl_bench.algorithms.fedgbo import MFL, FedGBO, FedGBOConfig, MFLConfig, Mimelite, MimeliteConfig
from fl_bench.algorithms.weightings import UniformWeightingConfig
from fl_bench.algorithms.global_optimizer import FixedStatistics, GlobalOptimizer, MovingStatistics
from fl_bench.clients.costs import example_flops, trip_flops
from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.task import ClassificationTask, max_entropy_gap
from fl_bench.clients.trainer import ClientTrainer, minibatch_plan
from fl_bench.contracts import Broadcast, Upload
from fl_bench.errors import ConfigError
from tests.clients.test_client import many_clients_data

OPTIMIZERS = [GlobalOptimizer("sgdm", 0.9), GlobalOptimizer("rmsprop", 0.9), GlobalOptimizer("adam", 0.9, 0.99)]


def random_state(opt, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"m": torch.randn(size, generator=g), "v": torch.rand(size, generator=g) + 0.1}


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: o.name)
def test_inverse_recovers_the_mean_gradient_of_k_fixed_statistics_steps(opt):
    """K local U steps with s fixed from a known gradient sequence, then I of the model change: the
    mean of those gradients (Table II; FedGBO Sec. 3)."""
    # float64 and a seeded y0: y0 - y is a difference of nearby numbers, and float32 left it 1e-5 off
    # on some global-RNG draws (CI failed it once).
    state = {k: v.double() for k, v in random_state(opt, 5).items() if k in opt.keys}
    grads = [torch.randn(5, generator=torch.Generator().manual_seed(k), dtype=torch.float64) for k in range(4)]
    y0 = torch.randn(5, generator=torch.Generator().manual_seed(99), dtype=torch.float64)
    y = [y0.clone()]
    rule, lr = FixedStatistics(opt), 0.05
    for g in grads:
        rule.step(y, [g.clone()], None, lr, {k: [v] for k, v in state.items()})
    recovered = opt.inverse(y0 - y[0], state, lr, len(grads))
    torch.testing.assert_close(recovered, torch.stack(grads).mean(0), rtol=1e-10, atol=1e-10)


def test_sgdm_u_step_by_hand():
    """SGDm's U: eta (beta m + (1 - beta) g); RMSProp's: eta g / (sqrt(v) + eps); Adam's both."""
    m, v, g, lr = torch.tensor([1.0, -2.0]), torch.tensor([4.0, 0.25]), torch.tensor([0.5, 1.0]), 0.1
    for opt, expected in [
        (GlobalOptimizer("sgdm", 0.9), 0.1 * (0.9 * m + 0.1 * g)),
        (GlobalOptimizer("rmsprop", 0.9, eps=1e-3), 0.1 * g / (v.sqrt() + 1e-3)),
        (GlobalOptimizer("adam", 0.9, 0.99, 1e-3), 0.1 * (0.9 * m + 0.1 * g) / (v.sqrt() + 1e-3)),
    ]:
        y = [torch.zeros(2)]
        FixedStatistics(opt).step(y, [g.clone()], None, lr, {"m": [m], "v": [v]})
        torch.testing.assert_close(-y[0], expected)


def test_tracking_step_rmsprop_tracks_squares_and_adam_both_moments():
    g = torch.tensor([2.0, -3.0])
    state = {"v": torch.ones(2)}
    GlobalOptimizer("rmsprop", 0.9).track(g, state)
    torch.testing.assert_close(state["v"], 0.9 * torch.ones(2) + 0.1 * g**2)  # g~^2, not g~ (SPEC's note)
    state = {"m": torch.zeros(2), "v": torch.ones(2)}
    GlobalOptimizer("adam", 0.5, 0.99).track(g, state)
    torch.testing.assert_close(state["m"], 0.5 * g)
    torch.testing.assert_close(state["v"], 0.99 + 0.01 * g**2)


def test_initial_statistics_are_m_zero_v_one():
    state = GlobalOptimizer("adam", 0.9).initial_state(torch.zeros(3))
    assert torch.equal(state["m"], torch.zeros(3)) and torch.equal(state["v"], torch.ones(3))


def upload(client, delta, **extras):
    return Upload(client, 0, 0, 1, torch.tensor(delta), {k: torch.tensor(v) for k, v in extras.items()})


def test_fedgbo_server_step_by_hand():
    """Two uploads, K = 2, eta = 0.5, SGDm beta = 0.5 from m = 0: x_{t+1} = x_t - mean Delta;
    g~ = (mean Delta / (eta K) - beta m) / (1 - beta); m <- beta m + (1 - beta) g~."""
    cfg = FedGBOConfig(optimizer="sgdm", beta=0.5, local_steps=2, client_lr=0.5)
    server = FedGBO(cfg, torch.tensor([1.0, 1.0]), 2)
    server.add(upload(0, [0.2, 0.0]))
    server.add(upload(1, [0.4, 0.2]))
    server.step()
    torch.testing.assert_close(server.params, torch.tensor([0.7, 0.9]))
    g = torch.tensor([0.3, 0.1]) / (0.5 * 2) / 0.5
    torch.testing.assert_close(server.broadcast().state["m"], 0.5 * g)
    assert server.upload_keys == () and server.broadcast().nbytes == 2 * 2 * 4  # download x, s; upload x


def test_fedgbo_inverts_with_the_mean_local_steps_the_uploads_ran():
    """Partial work (behaviour.work_deadline): uploads of K = 2 and 1 steps (uniform weights) invert with
    K = 1.5, not the configured 2: g~ = (mean Delta / (eta 1.5) - beta m) / (1 - beta)."""
    cfg = FedGBOConfig(optimizer="sgdm", beta=0.5, local_steps=2, client_lr=0.5)
    server = FedGBO(cfg, torch.tensor([1.0, 1.0]), 2)
    server.add(Upload(0, 0, 0, 1, torch.tensor([0.2, 0.0]), steps=2))
    server.add(Upload(1, 0, 0, 1, torch.tensor([0.4, 0.2]), steps=1))
    server.step()
    torch.testing.assert_close(server.params, torch.tensor([0.7, 0.9]))
    g = torch.tensor([0.3, 0.1]) / (0.5 * 1.5) / 0.5
    torch.testing.assert_close(server.broadcast().state["m"], 0.5 * g)


def test_mfl_server_averages_the_uploaded_statistics():
    cfg = MFLConfig(optimizer="adam", beta=0.9)
    server = MFL(cfg, torch.zeros(2), 2)
    assert server.upload_keys == ("m", "v") and server.upload_nbytes() == 3 * 2 * 4  # x, m, v
    server.add(upload(0, [1.0, 0.0], m=[1.0, 2.0], v=[3.0, 5.0]))
    server.add(upload(1, [0.0, 1.0], m=[3.0, 0.0], v=[1.0, 1.0]))
    server.step()
    torch.testing.assert_close(server.params, torch.tensor([-0.5, -0.5]))
    torch.testing.assert_close(server.state["m"], torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(server.state["v"], torch.tensor([2.0, 3.0]))


def test_mimelite_tracks_the_mean_uploaded_gradient_and_uploads_twice_the_model():
    server = Mimelite(MimeliteConfig(optimizer="sgdm", beta=0.9), torch.zeros(2), 2)
    assert server.upload_keys == ("gradient",) and server.upload_nbytes() == 2 * 2 * 4  # x, grad f (Table I)
    server.add(upload(0, [1.0, 1.0], gradient=[2.0, 0.0]))
    server.add(upload(1, [1.0, 1.0], gradient=[0.0, 4.0]))
    server.step()
    torch.testing.assert_close(server.state["m"], 0.1 * torch.tensor([1.0, 2.0]))  # T(mean grad, m = 0)


def test_the_family_refuses_what_its_math_cannot_take():
    with pytest.raises(ConfigError, match="algorithm.local_steps"):
        FedGBOConfig(local_steps=None)
    with pytest.raises(ConfigError, match="algorithm.optimizer"):
        FedGBOConfig(optimizer="adagrad")
    with pytest.raises(ConfigError, match="algorithm.lr_norm"):
        MFLConfig(lr_norm=True)
    with pytest.raises(ConfigError, match="algorithm.start_gradient"):
        MimeliteConfig(start_gradient="half")


# ----------------------------------------------------------------------------- the trainer
def two_trainers(data, local, update, entropy_weight=0.0):
    trainers = []
    for vmap in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
        trainer = ClientTrainer(ClassificationTask(model, 4, entropy_weight=entropy_weight), data, local, vmap=vmap, chunk=4)
        trainer.update = update
        trainers.append(trainer)
    return trainers


def starts_with_state(trainer, keys, count):
    g = torch.Generator().manual_seed(1)
    p = trainer.flat.numel()
    return [Broadcast(0, trainer.flat + 0.1 * torch.randn(p, generator=g),
                      {k: torch.rand(p, generator=g) + (0.5 if k == "v" else -0.5) for k in keys}) for _ in range(count)]


@pytest.mark.parametrize("update", [
    FixedStatistics(GlobalOptimizer("adam", 0.9)),
    MovingStatistics(GlobalOptimizer("adam", 0.9)),
    MovingStatistics(GlobalOptimizer("sgdm", 0.9)),
    FixedStatistics(GlobalOptimizer("sgdm", 0.9), start_gradient="full"),
    FixedStatistics(GlobalOptimizer("rmsprop", 0.9), start_gradient="minibatch"),
], ids=["fedgbo-adam", "mfl-adam", "mfl-sgdm", "mimelite", "mimexlite"])
def test_both_training_paths_give_the_same_uploads_with_every_extra(update):
    data = many_clients_data()
    local = LocalTraining(lr=0.1, batch_size=16, steps=3)
    seq, vec = two_trainers(data, local, update)
    clients, seeds = [0, 1, 2, 3, 4, 2], [10, 11, 12, 13, 14, 99]
    starts = starts_with_state(seq, update.state_keys, len(clients))
    before = [{k: v.clone() for k, v in s.state.items()} for s in starts]
    expected, got = seq.train(starts, clients, seeds), vec.train(starts, clients, seeds)
    assert expected.shape[1] == seq.flat.numel() * (1 + len(update.upload_keys))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(s.state[k], b[k]) for s, b in zip(starts, before) for k in b)  # downloads untouched
    p = seq.flat.numel()
    if update.moving_keys:  # the uploaded state moved away from the download
        assert not torch.allclose(expected[0, p : 2 * p], starts[0].state[update.moving_keys[0]])


def test_mimelite_uploads_the_full_batch_gradient_at_the_download():
    data = many_clients_data()
    update = FixedStatistics(GlobalOptimizer("sgdm", 0.9), start_gradient="full")
    seq, _ = two_trainers(data, LocalTraining(lr=0.1, batch_size=4, steps=2), update)
    start = starts_with_state(seq, ("m",), 1)
    out = seq.train(start, [4], [7])
    p = seq.flat.numel()
    seq.load(start[0].params)
    x, y = data.client(4)
    grads = torch.autograd.grad(F.cross_entropy(seq.task.model(x), y), seq.params)
    torch.testing.assert_close(out[0, p:], torch.cat([g.reshape(-1) for g in grads]))


def test_mimexlite_uploads_the_first_minibatch_gradient_at_the_download():
    data = many_clients_data()
    update = FixedStatistics(GlobalOptimizer("sgdm", 0.9), start_gradient="minibatch")
    local = LocalTraining(lr=0.1, batch_size=4, steps=2)
    seq, _ = two_trainers(data, local, update)
    start = starts_with_state(seq, ("m",), 1)
    out = seq.train(start, [4], [7])
    plan = minibatch_plan(data.sizes[[4]], [7], local)
    first = plan.rows[0, 0][plan.mask[0, 0]]
    seq.load(start[0].params)
    x, y = data.client(4)
    grads = torch.autograd.grad(F.cross_entropy(seq.task.model(x[first]), y[first]), seq.params)
    torch.testing.assert_close(out[0, seq.flat.numel():], torch.cat([g.reshape(-1) for g in grads]))


def test_fedmax_penalty_is_fedgbo_codes_kl_and_both_paths_agree():
    a = torch.randn(5, 7)
    reference = F.kl_div(F.log_softmax(a, dim=1), F.softmax(torch.zeros_like(a), dim=1), reduction="batchmean")
    torch.testing.assert_close(max_entropy_gap(a).mean(), reference)
    assert max_entropy_gap(torch.ones(1, 7)).abs().item() < 1e-6  # equal activations: maximum entropy
    data = many_clients_data()
    local = LocalTraining(lr=0.1, batch_size=16, steps=3)
    seq, vec = two_trainers(data, local, LocalUpdate(), entropy_weight=0.5)
    plain, _ = two_trainers(data, local, LocalUpdate())
    starts = starts_with_state(seq, (), 3)
    expected = seq.train(starts, [0, 1, 2], [1, 2, 3])
    torch.testing.assert_close(vec.train(starts, [0, 1, 2], [1, 2, 3]), expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(expected, plain.train(starts, [0, 1, 2], [1, 2, 3]))  # the term changes the updates


# ----------------------------------------------------------------------------- costs
def test_flops_of_logreg_and_cnn_fedgbo_match_the_closed_forms(compose_config):
    from fl_bench.data import FederatedData
    from fl_bench.models import build_model

    # logreg d -> C: forward 2dC per example, backward (weight gradient only: the input needs none) 2dC
    data = many_clients_data()
    task = ClassificationTask(torch.nn.Linear(6, 4), 4)
    assert example_flops(task, data, batch_size=8) == 4 * 6 * 4
    # cnn_fedgbo on 28x28x1, 62 classes (FEMNIST): conv 3x3x32 (26x26), pool, conv 3x3x64 (11x11), pool, FC 1600-512-62
    cfg = compose_config("dataset=digits", "model=cnn_fedgbo")
    x, y = torch.randn(8, 1, 28, 28), torch.zeros(8, dtype=torch.long)
    femnist_like = FederatedData("femnist_like", x, y, np.array([0, 8]), x[:2], y[:2], 62)
    model = build_model(cfg.model, (1, 28, 28), 62, None)
    conv1, conv2, fc1, fc2 = 2 * 32 * 9 * 26 * 26, 2 * 64 * 32 * 9 * 11 * 11, 2 * 1600 * 512, 2 * 512 * 62
    forward = conv1 + conv2 + fc1 + fc2
    backward = conv1 + 2 * conv2 + 2 * fc1 + 2 * fc2  # the first conv needs no input gradient
    assert example_flops(ClassificationTask(model, 62), femnist_like, batch_size=4) == forward + backward


def test_trip_flops_follow_eq_22_and_count_the_planned_examples():
    sizes = np.array([1, 5, 17, 40])
    local = LocalTraining(lr=0.1, batch_size=8, steps=3)
    plan = minibatch_plan(sizes, [1, 2, 3, 4], local)
    np.testing.assert_array_equal(local.examples_per_trip(sizes), plan.mask.sum((1, 2)).numpy())
    sgd = trip_flops(sizes, local, FixedStatistics(GlobalOptimizer("adam", 0.9)), per_example=100.0, num_params=10)
    np.testing.assert_allclose(sgd, local.examples_per_trip(sizes) * 100.0 + 3 * 8 * 10)  # C_fixed(Adam) = 8
    mime = trip_flops(sizes, local, FixedStatistics(GlobalOptimizer("sgdm", 0.9), start_gradient="full"), 100.0, 10)
    np.testing.assert_allclose(mime, local.examples_per_trip(sizes) * 100.0 + 3 * 5 * 10 + sizes * 100.0)  # + n (fwd + bwd)
    mfl = trip_flops(sizes, local, MovingStatistics(GlobalOptimizer("adam", 0.9)), 100.0, 10)
    np.testing.assert_allclose(mfl, local.examples_per_trip(sizes) * 100.0 + 3 * 11 * 10)  # C_moving(Adam) = 11


# ----------------------------------------------------------------------------- end to end
RUN = ("max_trips=300", "eval_every=100", "concurrency=10", "algorithm.local_steps=5", "algorithm.client_lr=0.1",
       "algorithm.batch_size=16")


def test_fedgbo_with_beta_zero_is_fedavg_exactly(run_config, tmp_path):
    """SGDm with beta = 0: U = eta g, T sets m = g~ that nobody reads: FedAvg with server lr 1."""
    _, gbo, gbo_trips = run_config(*RUN, "algorithm=fedgbo", "algorithm.beta=0.0", name="fedgbo")
    _, avg, avg_trips = run_config(*RUN, "algorithm=fedavg", "algorithm/weighting=uniform", "algorithm.server_optimizer.lr=1.0",
                                   name="fedavg")
    assert gbo.val_accuracy.tolist() == avg.val_accuracy.tolist() and gbo.val_loss.tolist() == avg.val_loss.tolist()
    a, b = torch.load(tmp_path / "fedgbo" / "model.pt"), torch.load(tmp_path / "fedavg" / "model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the same bytes up; down, FedGBO also sends m (Table I)
    assert (gbo_trips.bytes_up == avg_trips.bytes_up).all() and (gbo_trips.bytes_down == 2 * avg_trips.bytes_down).all()


@pytest.mark.slow
def test_costs_per_trip_and_cumulative_follow_table_i_and_eq_22(run_config):
    summaries = {}
    for algorithm in ("fedavg", "fedgbo", "mimelite", "mfl"):
        summary, metrics, trips = run_config(*RUN, f"algorithm={algorithm}", "algorithm.optimizer=adam"
                                             if algorithm != "fedavg" else "algorithm/weighting=uniform", name=algorithm)
        used = trips[trips.used == 1]
        assert metrics.bytes_up.iloc[-1] == used.bytes_up.sum() == summary["bytes_up"]
        assert metrics.flops.iloc[-1] == pytest.approx(used.flops.sum()) and metrics.flops.is_monotonic_increasing
        summaries[algorithm] = summary, used
    model_bytes = summaries["fedavg"][1].bytes_up.iloc[0]
    assert {a: int(used.bytes_up.iloc[0] / model_bytes) for a, (_, used) in summaries.items()} == {
        "fedavg": 1, "fedgbo": 1, "mimelite": 2, "mfl": 3}  # x; x; x, grad f; x, m, v
    assert {a: int(used.bytes_down.iloc[0] / model_bytes) for a, (_, used) in summaries.items()} == {
        "fedavg": 1, "fedgbo": 3, "mimelite": 3, "mfl": 3}
    fb = summaries["fedavg"][0]["flops_per_example"]
    gbo, mime = summaries["fedgbo"][1], summaries["mimelite"][1]
    np.testing.assert_allclose(mime.flops.to_numpy() - gbo.flops.to_numpy(), mime.num_examples.to_numpy() * fb)  # + n (fwd + bwd)


@pytest.mark.parametrize("overrides", [
    ("algorithm=mimexlite", "algorithm.optimizer=rmsprop"),
    ("algorithm=adaptive_fedopt", "algorithm/server_optimizer=rmsprop"),
    ("algorithm=fedmax", "vmap_clients=true"),
], ids=lambda o: "-".join(o))
def test_the_other_baselines_run_end_to_end(run_config, overrides):
    summary, metrics, _ = run_config(*RUN, *overrides)
    assert summary["status"] == "completed" and summary["server_steps"] == 30
    assert metrics.val_accuracy.iloc[-1] > metrics.val_accuracy.iloc[0]  # it learns


def test_server_rmsprop_step_by_hand():
    """AFO-RMSProp: v <- beta v + (1 - beta) Dbar^2, w <- w - lr Dbar / (sqrt(v) + eps) (torch.optim.RMSprop)."""
    from fl_bench.algorithms.server_optimizers import RMSPropServerOptimizerConfig
    from fl_bench.algorithms.synchronous import AdaptiveFedOpt, AdaptiveFedOptConfig

    cfg = AdaptiveFedOptConfig(server_optimizer=RMSPropServerOptimizerConfig(lr=0.1, beta=0.9, eps=1e-3), weighting=UniformWeightingConfig())
    server = AdaptiveFedOpt(cfg, torch.zeros(2), 2)
    server.add(upload(0, [1.0, 0.0]))
    server.add(upload(1, [3.0, 2.0]))
    server.step()
    mean = torch.tensor([2.0, 1.0])
    torch.testing.assert_close(server.params, -0.1 * mean / ((0.1 * mean**2).sqrt() + 1e-3))


def test_fedmax_on_a_model_without_a_hidden_layer_is_one_line(compose_config):
    from fl_bench.runs.experiment import build_experiment

    cfg = compose_config("algorithm=fedmax", "model=logreg")
    with pytest.raises(ConfigError, match="algorithm.entropy_weight=0.1 .FedMAX. needs a model with a hidden layer"):
        build_experiment(cfg, lambda p: False)
