"""Client local training: FedProx's proximal gradient, LR-norm, determinism, Delta = y_0 - y_Q, one
local update rule for the sequential and vmap paths."""

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.task import ClassificationTask
from fl_bench.clients.trainer import ClientTrainer, minibatch_plan
from fl_bench.contracts import Broadcast
from fl_bench.data.federated import FederatedData
from fl_bench.errors import ConfigError
from fl_bench.models import CharRNN, CharRNNConfig


def one_client_data(n=40, dim=3, classes=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, dim, generator=g), torch.randint(0, classes, (n,), generator=g)
    return FederatedData("toy", x, y, np.array([0, n]), x[:4], y[:4], classes)


def broadcasts(rows, **state):
    """One Broadcast per start row (plus per-row server state tensors, by name)."""
    return [Broadcast(0, row, {k: v[i] for k, v in state.items()}) for i, row in enumerate(rows)]


def trainer_for(data, local):
    torch.manual_seed(0)
    model = torch.nn.Linear(data.x.shape[1], data.num_classes)
    return ClientTrainer(ClassificationTask(model, data.num_classes), data, local)


def manual_steps(data, w0, b0, lrs_batches, mu=0.0):
    """Reference SGD written out directly: y <- y - lr * (grad F(y; batch) + mu (y - y_0))."""
    w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    for lr, idx in lrs_batches:
        loss = F.cross_entropy(data.x[idx] @ w.T + b, data.y[idx])
        gw, gb = torch.autograd.grad(loss, (w, b))
        with torch.no_grad():
            w -= lr * (gw + mu * (w - w0))
            b -= lr * (gb + mu * (b - b0))
    return torch.cat([(w0 - w).reshape(-1), (b0 - b).reshape(-1)])


def test_fedprox_proximal_gradient_two_full_batch_steps():
    data = one_client_data()
    full = torch.arange(40)
    trainer = trainer_for(data, LocalTraining(lr=0.5, batch_size=40, steps=2, prox_mu=0.7))
    start = trainer.flat.clone()
    w0, b0 = trainer.params[0].detach().clone(), trainer.params[1].detach().clone()
    delta = trainer.train(broadcasts(start[None]), [0], [123])[0]
    expected = manual_steps(data, w0, b0, [(0.5, full), (0.5, full)], mu=0.7)
    assert torch.allclose(delta, expected, atol=1e-6)
    # and the proximal term really matters: without it the update differs
    assert not torch.allclose(delta, manual_steps(data, w0, b0, [(0.5, full), (0.5, full)], mu=0.0), atol=1e-4)


def test_lr_norm_scales_the_short_last_batch():
    # 40 examples, B = 32: one epoch is a batch of 32 at lr and one of 8 at lr * 8/32 (FedBuff Sec. 5)
    data = one_client_data()
    trainer = trainer_for(data, LocalTraining(lr=0.2, batch_size=32, lr_norm=True))
    start = trainer.flat.clone()
    w0, b0 = trainer.params[0].detach().clone(), trainer.params[1].detach().clone()
    delta = trainer.train(broadcasts(start[None]), [0], [5])[0]
    plan = minibatch_plan(np.array([40]), [5], trainer.local)
    first, last = plan.rows[0, 0], plan.rows[0, 1, :8]
    expected = manual_steps(data, w0, b0, [(0.2, first), (0.2 * 8 / 32, last)])
    assert torch.allclose(delta, expected, atol=1e-6)
    plain = trainer_for(data, LocalTraining(lr=0.2, batch_size=32, lr_norm=False)).train(broadcasts(start[None]), [0], [5])[0]
    assert torch.allclose(plain, manual_steps(data, w0, b0, [(0.2, first), (0.2, last)]), atol=1e-6)


def test_training_is_seeded_and_leaves_start_untouched():
    data = one_client_data()
    trainer = trainer_for(data, LocalTraining(lr=0.1, batch_size=8, epochs=2))
    start = trainer.flat.clone()
    a = trainer.train(broadcasts(start.expand(2, -1)), [0, 0], [1, 2])
    b = trainer.train(broadcasts(start.expand(2, -1)), [0, 0], [1, 2])
    assert torch.equal(a, b) and not torch.equal(a[0], a[1])
    assert torch.equal(start, trainer_for(data, LocalTraining(lr=0.1, batch_size=8)).flat)


def many_clients_data(sizes=(5, 37, 64, 1, 20), dim=6, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x, y = torch.randn(n, dim, generator=g), torch.randint(0, classes, (n,), generator=g)
    return FederatedData("toy", x, y, np.concatenate([[0], np.cumsum(sizes)]), x[:4], y[:4], classes)


def test_vmap_batched_training_gives_the_sequential_deltas():
    """Clients of different sizes (1 to 64 examples: 1 to 2 local steps, short last batches) with
    LR-norm, FedProx, L2 and two epochs: the vmap path must match the sequential loop."""
    data = many_clients_data()
    for local in [
        LocalTraining(lr=0.3, batch_size=32, lr_norm=True),
        LocalTraining(lr=0.2, batch_size=8, epochs=2, prox_mu=0.5),
        LocalTraining(lr=0.1, batch_size=16, steps=3),
    ]:
        trainers = []
        for vmap in (False, True):  # each trainer owns its model's flat parameter vector
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
            # chunk=4: the six trips go through two vmap passes
            trainers.append(ClientTrainer(ClassificationTask(model, 4, weight_decay=0.01), data, local, vmap=vmap, chunk=4))
        clients, seeds = [0, 1, 2, 3, 4, 2], [10, 11, 12, 13, 14, 99]
        # every trip starts from its own model version
        start = trainers[0].flat + 0.1 * torch.randn(len(clients), trainers[0].flat.numel(), generator=torch.Generator().manual_seed(1))
        expected = trainers[0].train(broadcasts(start), clients, seeds)
        got = trainers[1].train(broadcasts(start), clients, seeds)
        assert (expected.norm(dim=1) > 0).all() and not torch.allclose(expected[2], expected[5])  # seeds matter
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_a_trip_cut_to_k_steps_uploads_the_first_k_steps_of_its_plan():
    """Partial work (fl_bench.engine.behaviour's work deadline): a trip limited to k steps gives the Delta
    of its full plan's first k steps, on the sequential and the batched path alike."""
    data = many_clients_data(sizes=(40, 64, 20))
    full = LocalTraining(lr=0.2, batch_size=8)  # one epoch: 5, 8 and 3 steps
    clients, seeds, limits = [0, 1, 2], [3, 4, 5], [2, 8, 1]
    got = {}
    for vmap in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
        trainer = ClientTrainer(ClassificationTask(model, 4), data, full, vmap=vmap)
        start = broadcasts(trainer.flat.expand(3, -1).clone())
        got[vmap] = trainer.train(start, clients, seeds, steps=limits)
        whole = trainer.train(start, clients, seeds)
    torch.testing.assert_close(got[True], got[False], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[False][1], whole[1])  # 8 of its 8 steps: the whole trip
    assert not torch.allclose(got[False][0], whole[0])
    for i, k in enumerate(limits):  # a fixed Q = k steps walks the same first batches of epoch 0
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
        trainer = ClientTrainer(ClassificationTask(model, 4), data, LocalTraining(lr=0.2, batch_size=8, steps=k))
        expected = trainer.train(broadcasts(trainer.flat[None].clone()), [clients[i]], [seeds[i]])
        torch.testing.assert_close(got[False][i], expected[0])


class Preconditioned(LocalUpdate):
    """A client optimizer reading fixed server state: y <- y - lr * (g + mu (y - y_0)) / s, with s
    a per-coordinate preconditioner from the broadcast (the shape of FedGBO's y <- y - U(eta, g, s))."""

    state_keys = ("s",)

    def step(self, params, grads, anchors, lr, state):
        if self.prox_mu:
            torch._foreach_add_(grads, torch._foreach_sub(params, anchors), alpha=self.prox_mu)
        self.descend(params, torch._foreach_div(grads, state["s"]), lr)


def test_one_update_rule_written_once_runs_on_both_paths():
    """A custom rule plugged into ClientTrainer is batched by the vmap path as written: same Deltas
    as the sequential loop (LR-norm, FedProx, short last batches), different from plain SGD, and
    each trip reads its own Broadcast's state, which training leaves untouched."""
    data = many_clients_data()
    local = LocalTraining(lr=0.2, batch_size=16, epochs=2, lr_norm=True, prox_mu=0.3)
    clients, seeds = [0, 1, 2, 3, 4, 2], [10, 11, 12, 13, 14, 99]
    g = torch.Generator().manual_seed(2)
    trainers = {}
    for vmap in (False, True):
        for rule in (None, Preconditioned(local.prox_mu)):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
            trainers[vmap, rule is None] = ClientTrainer(ClassificationTask(model, 4), data, local, vmap=vmap, chunk=4, update=rule)
    size = trainers[False, True].flat.numel()
    start = trainers[False, True].flat + 0.1 * torch.randn(len(clients), size, generator=g)
    s = 0.5 + torch.rand(len(clients), size, generator=g)  # each trip's version has its own statistics
    starts = broadcasts(start, s=s)
    kept = [(b.params.clone(), b.state["s"].clone()) for b in starts]
    sequential = trainers[False, False].train(starts, clients, seeds)
    torch.testing.assert_close(trainers[True, False].train(starts, clients, seeds), sequential, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(b.params, p) and torch.equal(b.state["s"], v) for b, (p, v) in zip(starts, kept))
    sgd = trainers[False, True].train(starts, clients, seeds)
    torch.testing.assert_close(trainers[True, True].train(starts, clients, seeds), sgd, rtol=1e-5, atol=1e-6)
    assert (sequential - sgd).norm(dim=1).min() > 1e-3  # the preconditioner matters on every trip
    # s = 1 everywhere makes the rule plain SGD again (to float tolerance: a division by one)
    ones = trainers[False, False].train(broadcasts(start, s=torch.ones_like(s)), clients, seeds)
    torch.testing.assert_close(ones, sgd, rtol=1e-5, atol=1e-7)


def test_the_rule_on_a_batch_of_trips_is_the_rule_on_each_trip():
    """LocalUpdate.step on [b, *shape] tensors with a [b] lr equals it on each trip with a float lr;
    SGD ignores broadcast state it is handed."""
    g = torch.Generator().manual_seed(3)
    shapes = [(4, 3), (3,), ()]
    params, grads, anchors = ([torch.randn(2, *shape, generator=g) for shape in shapes] for _ in range(3))
    lr = torch.tensor([0.3, 0.05])
    rule = LocalUpdate(prox_mu=0.4)
    batched = [p.clone() for p in params]
    rule.step(batched, [x.clone() for x in grads], anchors, lr, {"s": [torch.zeros_like(p) for p in params]})
    for i in range(2):
        alone = [p[i].clone() for p in params]
        rule.step(alone, [x[i].clone() for x in grads], [a[i] for a in anchors], float(lr[i]), {})
        for b, a, p, x, a0 in zip(batched, alone, params, grads, anchors):
            torch.testing.assert_close(b[i], a)
            torch.testing.assert_close(a, p[i] - lr[i] * (x[i] + 0.4 * (p[i] - a0[i])))


def test_minibatch_plan_epochs_are_permutations_and_trips_are_independent():
    local = LocalTraining(lr=0.1, batch_size=4, epochs=2)
    sizes = np.array([10, 3, 1])
    plan = minibatch_plan(sizes, [7, 8, 9], local)
    assert list(plan.steps) == [6, 2, 2]  # 2 epochs of ceil(n / 4) batches
    counts = plan.mask.sum(-1)
    assert counts[0].tolist() == [4, 4, 2, 4, 4, 2] and counts[1].tolist() == [3, 3, 0, 0, 0, 0]
    for epoch in range(2):  # each epoch visits every example once, in a fresh order
        seen = plan.rows[0, 3 * epoch : 3 * epoch + 3][plan.mask[0, 3 * epoch : 3 * epoch + 3]]
        assert sorted(seen.tolist()) == list(range(10))
    assert not torch.equal(plan.rows[0, 0:3], plan.rows[0, 3:6])
    # a trip's minibatches depend on its seed only, not on the other trips of its batch
    alone = minibatch_plan(sizes[:1], [7], local)
    assert torch.equal(alone.rows[0], plan.rows[0]) and torch.equal(alone.mask[0], plan.mask[0])
    assert not torch.equal(minibatch_plan(sizes[:1], [70], local).rows[0], plan.rows[0])
    # fixed Q steps cycle through as many epochs as they need
    q = minibatch_plan(np.array([3]), [1], LocalTraining(lr=0.1, batch_size=2, steps=5))
    assert q.mask[0].sum(-1).tolist() == [2, 1, 2, 1, 2]
    assert sorted(q.rows[0, 2:4][q.mask[0, 2:4]].tolist()) == [0, 1, 2]


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_vmap_trains_recurrent_models_like_the_sequential_loop(cell):
    """torch.func.vmap cannot batch the fused RNN kernels; the batched path runs them unrolled."""
    g = torch.Generator().manual_seed(0)
    sizes, length, classes = (3, 9, 5), 6, 7
    x = torch.randint(0, classes, (sum(sizes), length), generator=g)
    y = torch.randint(0, classes, (sum(sizes),), generator=g)
    data = FederatedData("chars", x, y, np.concatenate([[0], np.cumsum(sizes)]), x[:2], y[:2], classes)
    local = LocalTraining(lr=0.5, batch_size=4, epochs=2, lr_norm=True)
    trainers = []
    for vmap in (False, True):
        torch.manual_seed(0)
        model = CharRNN(CharRNNConfig(cell=cell, embed_dim=4, hidden=8), (length,), classes)
        trainers.append(ClientTrainer(ClassificationTask(model, classes), data, local, vmap=vmap))
    start = broadcasts(trainers[0].flat.clone().expand(3, -1))
    expected = trainers[0].train(start, [0, 1, 2], [1, 2, 3])
    assert (expected.norm(dim=1) > 0).all()
    torch.testing.assert_close(trainers[1].train(start, [0, 1, 2], [1, 2, 3]), expected, rtol=1e-4, atol=1e-6)


def test_vmap_rejects_a_model_it_cannot_batch_in_one_line():
    """BatchNorm updates shared running statistics in place: vmap cannot batch it, and the error
    says so at start-up instead of failing mid-run."""
    data = one_client_data()
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    with pytest.raises(ConfigError, match=r"^vmap_clients=true cannot batch model Sequential: .*use vmap_clients=false$"):
        ClientTrainer(ClassificationTask(model, 2), data, LocalTraining(lr=0.1, batch_size=8), vmap=True)


@pytest.mark.parametrize("algorithm", ["fedbuff", "fedasync", "fedavg", "fedavgm", "fedprox"])
def test_lr_norm_is_a_client_setting_of_every_algorithm(compose_config, algorithm):
    # 3 examples, B = 2, one epoch: a step at lr on 2 examples, then one at lr * 1/2 on the last one
    # (FedBuff Sec. 5), with the algorithm's own proximal term (FedProx mu, FedAsync rho)
    cfg = compose_config(f"algorithm={algorithm}", "algorithm.lr_norm=true", "algorithm.batch_size=2",
                         "algorithm.client_lr=0.4").algorithm
    data = one_client_data(n=3)
    trainer = trainer_for(data, LocalTraining.from_config(cfg))
    start = trainer.flat.clone()
    w0, b0 = trainer.params[0].detach().clone(), trainer.params[1].detach().clone()
    delta = trainer.train(broadcasts(start[None]), [0], [7])[0]
    plan = minibatch_plan(np.array([3]), [7], trainer.local)
    first, last = plan.rows[0, 0], plan.rows[0, 1, :1]
    assert sorted([*first.tolist(), *last.tolist()]) == [0, 1, 2]
    expected = manual_steps(data, w0, b0, [(0.4, first), (0.4 * 1 / 2, last)], mu=cfg.prox_mu)
    assert torch.allclose(delta, expected, atol=1e-6)
    without = compose_config(f"algorithm={algorithm}", "algorithm.lr_norm=false", "algorithm.batch_size=2",
                             "algorithm.client_lr=0.4").algorithm
    assert not LocalTraining.from_config(without).lr_norm
    assert LocalTraining.from_config(cfg).step_lr(1) == pytest.approx(0.2)


