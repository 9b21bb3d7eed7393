"""The batched step's kernels (fl_bench.clients.batched): the bmm chain forward and the fixed-buffer step
that CUDA graphs capture give the sequential loop's Deltas; bf16 autocast is an option."""

import pytest
import torch

from fl_bench.clients.batched import LinearChain, batched_forward, linear_chain
from fl_bench.clients.local_update import LocalTraining
from fl_bench.clients.task import ClassificationTask
from fl_bench.clients.trainer import ClientTrainer
from fl_bench.contracts import Broadcast
from fl_bench.data.transforms import ImageTransform
from tests.clients.test_client import Preconditioned, many_clients_data

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]  # the CUDA case runs where a GPU is
CLIENTS, SEEDS = [0, 1, 2, 3, 4, 2], [10, 11, 12, 13, 14, 99]


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))


def trainer(data, local, device="cpu", *, rule=None, model=mlp, **kwargs):
    torch.manual_seed(0)
    task = ClassificationTask(model(), 4, weight_decay=0.01).to(device)
    trainer = ClientTrainer(task, data, local, update=rule, **kwargs)
    return trainer


def starts(trainer, versions=(0, 3, 1, 0, 7, 2), **state):
    g = torch.Generator().manual_seed(1)
    rows = trainer.flat.cpu() + 0.1 * torch.randn(len(versions), trainer.flat.numel(), generator=g)
    return [Broadcast(v, rows[i].to(trainer.device), {k: s[i].to(trainer.device) for k, s in state.items()})
            for i, v in enumerate(versions)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("local", [
    LocalTraining(lr=0.3, batch_size=32, lr_norm=True),  # short last batches scale the lr
    LocalTraining(lr=0.2, batch_size=8, epochs=2, prox_mu=0.5),  # 1 to 16 steps: trips finish apart
    LocalTraining(lr=0.1, batch_size=16, steps=3, decay=0.9),  # per-trip lrs by model version
])
def test_fixed_buffer_steps_give_the_sequential_deltas(device, local):
    """Six trips of 1 to 64 examples, in passes of 4 and 2 (graph sizes 4 and 2), and of 6 (size 8,
    two padding rows): every trip's Delta equals the sequential CPU loop's to 1e-4 (fp32), on CPU
    and, where there is one, on CUDA, where the step is a captured graph."""
    data = many_clients_data()
    expected = trainer(data, local).train(starts(trainer(data, local)), CLIENTS, SEEDS)
    for chunk in (4, 256):
        fixed = trainer(data.to(device), local, device, vmap=True, chunk=chunk, graphs=True)
        assert fixed.static_steps() and fixed.chain is not None  # the MLP's gradients written out
        got = fixed.train(starts(fixed), CLIENTS, SEEDS)
        assert sorted(fixed._step_graphs) == ([2, 4] if chunk == 4 else [8])
        assert fixed._step_graphs[max(fixed._step_graphs)].capture == (device == "cuda")
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert (expected.norm(dim=1) > 0).all() and not torch.allclose(expected[2], expected[5])  # seeds matter


def test_fixed_buffer_steps_read_each_trips_server_state():
    """A rule reading broadcast state (FedGBO's shape, y <- y - U(eta, g, s)) on the fixed buffers:
    the sequential Deltas, which differ from plain SGD's."""
    data, local = many_clients_data(), LocalTraining(lr=0.2, batch_size=16, epochs=2, lr_norm=True, prox_mu=0.3)
    sequential = trainer(data, local, rule=Preconditioned(local.prox_mu))
    s = 0.5 + torch.rand(len(CLIENTS), sequential.flat.numel(), generator=torch.Generator().manual_seed(2))
    expected = sequential.train(starts(sequential, s=s), CLIENTS, SEEDS)
    fixed = trainer(data, local, rule=Preconditioned(local.prox_mu), vmap=True, graphs=True)
    torch.testing.assert_close(fixed.train(starts(fixed, s=s), CLIENTS, SEEDS), expected, rtol=1e-4, atol=1e-5)
    plain = trainer(data, local).train(starts(sequential, s=s), CLIENTS, SEEDS)
    assert (expected - plain).norm(dim=1).min() > 1e-3


def test_fixed_buffers_only_where_a_step_is_a_pure_function_of_them():
    """Random augmentation (a host generator) or state that moves by itself (MFL) keep the
    prefix-shrinking batched path."""
    data, local = many_clients_data(), LocalTraining(lr=0.1, batch_size=8)
    assert not trainer(data, local, vmap=True, graphs=False).static_steps()
    flips = trainer(data, local, vmap=True, graphs=True)
    flips.task.transform = ImageTransform((0.5,), (0.5,), random_flip=True)
    assert not flips.static_steps()

    class Moving(Preconditioned):
        moving_keys = ("s",)

    assert not trainer(data, local, rule=Moving(), vmap=True, graphs=True).static_steps()


def test_the_bmm_chain_is_the_vmap_forward():
    """Logistic regression and the MLP run as a baddbmm chain: the same logits and gradients as
    vmap of functional_call; other layers, or a hook (FedMAX), keep vmap."""
    torch.manual_seed(0)
    for model in (mlp(), torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 4))):
        assert linear_chain(model) is not None
        names = [n for n, _ in model.named_parameters()]
        stacked = {n: p.detach() + 0.1 * torch.randn(5, *p.shape) for n, p in model.named_parameters()}
        x = torch.randn(5, 7, 2, 3)
        grads = []
        for forward in (batched_forward(model, False, lambda: None), batched_forward(model, True, lambda: torch.zeros(()))):
            leaves = {n: p.clone().requires_grad_() for n, p in stacked.items()}
            out = forward(leaves, x)
            logits = out[0]
            grads.append((logits, torch.autograd.grad(logits.square().sum(), [leaves[n] for n in names])))
        torch.testing.assert_close(grads[0][0], grads[1][0])
        for a, b in zip(grads[0][1], grads[1][1]):
            torch.testing.assert_close(a, b)
    assert linear_chain(torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))) is None
    hooked = mlp()
    hooked[3].register_forward_pre_hook(lambda module, inputs: None)
    assert linear_chain(hooked) is None


@pytest.mark.parametrize("vmap", [False, True])
def test_bf16_autocast_changes_the_deltas_a_little(vmap):
    """precision="bf16-mixed" runs forward and loss in bfloat16 (parameters stay fp32): Deltas within a
    few percent of fp32's, and not equal to them."""
    data, local = many_clients_data(), LocalTraining(lr=0.2, batch_size=8, epochs=2)
    fp32 = trainer(data, local, vmap=vmap)
    expected = fp32.train(starts(fp32), CLIENTS, SEEDS)
    bf16 = trainer(data, local, vmap=vmap, precision="bf16-mixed")
    got = bf16.train(starts(bf16), CLIENTS, SEEDS)
    assert got.dtype == torch.float32 and not torch.equal(got, expected)
    assert ((got - expected).norm(dim=1) / expected.norm(dim=1)).max() < 0.05


def test_the_chains_written_out_gradients_are_autograds():
    """LinearChain.gradients equals autograd of ClassificationTask.objective (weighted cross-entropy
    plus L2) for logistic regression, the MLP and an MLP with two hidden layers, with masked rows
    (weight 0) as a short last batch has."""
    torch.manual_seed(0)
    deep = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5),
                               torch.nn.ReLU(), torch.nn.Linear(5, 4))
    for model in (mlp(), torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 4)), deep):
        task = ClassificationTask(model, 4, weight_decay=0.03)
        names = [n for n, _ in model.named_parameters()]
        stacked = {n: p.detach() + 0.3 * torch.randn(5, *p.shape) for n, p in model.named_parameters()}
        x, y = torch.randn(5, 7, 2, 3), torch.randint(0, 4, (5, 7))
        weights = torch.rand(5, 7)
        weights[:, 5:] = 0
        got = LinearChain(linear_chain(model)).gradients(stacked, x, y, weights, task.weight_decay)
        leaves = [stacked[n].clone().requires_grad_() for n in names]
        logits, _ = batched_forward(model, False, lambda: None)(dict(zip(names, leaves)), x)
        expected = torch.autograd.grad(task.objective(logits, y, leaves, weights), leaves)
        assert sorted(got) == sorted(names)
        for name, e in zip(names, expected):
            torch.testing.assert_close(got[name], e, rtol=1e-5, atol=1e-6)
