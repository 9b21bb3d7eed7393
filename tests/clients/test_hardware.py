"""accelerator / vmap_clients / cuda_graphs = auto (fl_bench.clients.hardware): the choices, the
Fabric they build and their refusals."""

import pytest
import torch
from torch import nn

from fl_bench.clients import hardware
from fl_bench.clients.hardware import CUDA_MIN_FLOPS, dense_only, place
from fl_bench.errors import ConfigError
from fl_bench.models import CharRNN, CharRNNConfig

MLP = nn.Sequential(nn.Flatten(), nn.Linear(60, 64), nn.ReLU(), nn.Linear(64, 10))
CNN = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 26 * 26, 10))


def test_dense_only_means_every_parameterised_layer_is_linear():
    assert dense_only(MLP) and dense_only(nn.Linear(3, 2))
    assert not dense_only(CNN)
    assert not dense_only(nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 2)))


def test_auto_on_a_cpu_batches_linear_models_only():
    """No GPU here: device auto is the CPU; Linear models are batched (faster there), CNNs and RNNs
    train one trip at a time (batched is 2-7x slower on a CPU); no CUDA graphs."""
    mlp = cpu_place("auto", None, None, MLP, 10e3)
    assert (mlp.device.type, mlp.batched, mlp.graphs, mlp.processes) == ("cpu", True, False, 1)
    assert cpu_place("cpu", None, None, CNN, 20e6).batched is False
    rnn = CharRNN(CharRNNConfig(cell="gru", embed_dim=4, hidden=8), (10,), 5)
    assert cpu_place("cpu", None, None, rnn, 1e6).batched is False
    assert cpu_place("cpu", True, None, CNN, 20e6).batched is True  # an explicit choice wins
    assert "training on cpu with batched client trips" in mlp.describe()


def test_a_run_computes_with_one_thread_by_default_and_its_first_line_says_so(compose_config):
    """issue 53: torch's default (a thread per core) stalled beside another job (benchmarks/threads.py);
    the default is one intra-op thread, the run's first line names the count it computes with."""
    from fl_bench.numerics import kernels

    cfg = compose_config()
    assert cfg.threads == 1
    mlp = cpu_place("auto", None, None, MLP, 10e3)
    with kernels(cfg.numerics, cfg.threads):
        assert ", 1 intra-op thread" in mlp.describe()
    with kernels("native", 2):
        assert ", 2 intra-op threads" in mlp.describe()


def cpu_place(accelerator, vmap_clients, cuda_graphs, model, flops, **kwargs):
    return place(accelerator, 1, 1, "auto", "32-true", vmap_clients, cuda_graphs, model, flops, **kwargs)


def test_auto_accelerator_keeps_small_models_off_a_gpu(monkeypatch):
    """With a GPU present, a model below CUDA_MIN_FLOPS per example stays on the CPU (a GPU is
    launch-bound there), a larger one goes to CUDA; an explicit accelerator=cuda (or gpu) is kept
    whatever the model."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    small, why = hardware.resolve_accelerator("auto", 1, CUDA_MIN_FLOPS / 10)
    assert small == "cpu" and "launch-bound" in why
    assert hardware.resolve_accelerator("auto", 1, CUDA_MIN_FLOPS * 20)[0] == "cuda"
    assert hardware.resolve_accelerator("gpu", 1, 1.0)[0] == "cuda"
    assert hardware.resolve_accelerator("cuda", [0], 1.0)[0] == "cuda"
    with pytest.raises(ConfigError, match=r"^devices=\[3\] is not available: this machine has 1 CUDA GPU"):
        hardware.resolve_accelerator("cuda", [3], 1.0)


def test_without_a_gpu_an_explicit_one_fails_in_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hardware.resolve_accelerator("auto", 1, CUDA_MIN_FLOPS * 20) == ("cpu", "")
    with pytest.raises(ConfigError, match="^accelerator=cuda is not available: torch sees no CUDA GPU"):
        hardware.resolve_accelerator("cuda", 1, 1.0)


def test_fabric_carries_the_precision_and_refuses_what_the_cpu_cannot_do():
    """Lightning's precision names: bf16-mixed autocasts a LightningModule task on the CPU; 16-mixed
    (fp16) is refused there, in one line."""
    bf16 = place("cpu", 1, 1, "auto", "bf16-mixed", None, None, MLP, 1.0, lightning_task=True)
    with bf16.fabric.autocast():
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")
    assert "bf16-mixed precision" in bf16.describe()
    with pytest.raises(ConfigError, match=r"precision=16-mixed") as error:
        place("cpu", 1, 1, "auto", "16-mixed", None, None, MLP, 1.0)
    assert "\n" not in str(error.value)


def test_two_devices_make_a_client_parallel_strategy_that_leaves_modules_unwrapped():
    """devices=2 on the CPU: DDP's launch and process group (two processes), but a module set up
    under it stays the module (no DistributedDataParallel averaging gradients across clients)."""
    two = place("cpu", 2, 1, "auto", "32-true", False, None, MLP, 1.0)
    assert two.processes == 2 and "x 2 processes" in two.describe()
    assert type(two.fabric.strategy).__name__ == "ClientParallelStrategy"
    assert two.fabric.strategy.setup_module(MLP) is MLP


def test_fabric_is_built_where_a_run_uses_it():
    """One process on the CPU with the built-in task needs only the CPU named (no Lightning import);
    a LightningModule task or several processes get Fabric."""
    plain = cpu_place("cpu", None, None, MLP, 1.0)
    assert plain.fabric is None and plain.device == torch.device("cpu") and plain.processes == 1
    plain.launch()  # nothing to launch
    assert cpu_place("cpu", None, None, MLP, 1.0, lightning_task=True).fabric is not None
    assert place("cpu", 2, 1, "auto", "32-true", False, None, MLP, 1.0).fabric is not None


def test_cuda_graphs_true_without_cuda_is_one_line():
    with pytest.raises(ConfigError, match=r"^cuda_graphs=true needs batched trips on a CUDA device \(accelerator=cpu"):
        cpu_place("cpu", True, True, MLP, 1.0)
