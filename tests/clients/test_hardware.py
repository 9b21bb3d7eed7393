"""device / vmap_clients / cuda_graphs = auto (fl_bench.clients.hardware): the choices and their refusals."""

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
    mlp = place("auto", None, None, MLP, 10e3)
    assert (mlp.device.type, mlp.batched, mlp.graphs) == ("cpu", True, False)
    assert place("cpu", None, None, CNN, 20e6).batched is False
    rnn = CharRNN(CharRNNConfig(cell="gru", embed_dim=4, hidden=8), (10,), 5)
    assert place("cpu", None, None, rnn, 1e6).batched is False
    assert place("cpu", True, None, CNN, 20e6).batched is True  # an explicit choice wins
    assert "training on cpu with batched client trips" in mlp.describe()


def test_auto_device_keeps_small_models_off_a_gpu(monkeypatch):
    """With a GPU present, a model below CUDA_MIN_FLOPS per example stays on the CPU (a GPU is
    launch-bound there), a larger one goes to CUDA batched with CUDA graphs; an explicit
    device=cuda is kept whatever the model."""
    monkeypatch.setattr(hardware, "resolve_device", lambda name: torch.device("cuda" if name == "auto" else name))
    small = place("auto", None, None, MLP, CUDA_MIN_FLOPS / 10)
    assert (small.device.type, small.batched, small.graphs) == ("cpu", True, False)
    assert "launch-bound" in small.why
    large = place("auto", None, None, CNN, CUDA_MIN_FLOPS * 20)
    assert (large.device.type, large.batched, large.graphs) == ("cuda", True, True)
    assert place("cuda", None, None, MLP, 1.0).device.type == "cuda"
    assert place("auto", False, None, CNN, CUDA_MIN_FLOPS * 20).graphs is False  # graphs need batched trips


def test_cuda_graphs_true_without_cuda_is_one_line():
    with pytest.raises(ConfigError, match=r"^cuda_graphs=true needs batched trips on a CUDA device \(device=cpu"):
        place("cpu", True, True, MLP, 1.0)
