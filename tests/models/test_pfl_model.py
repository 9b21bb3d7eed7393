"""model=cnn_pfl: pfl-research's CIFAR-10 benchmark CNN (benchmarks/pfl_baseline.py's workload)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fl_bench.clients.local_update import LocalTraining
from fl_bench.clients.task import ClassificationTask
from fl_bench.clients.trainer import ClientTrainer
from fl_bench.contracts import Broadcast
from fl_bench.data import build_dataset
from fl_bench.data.cache import save_prepared
from fl_bench.data.federated import Examples
from fl_bench.data.sources import cache_dir
from fl_bench.models import PflCNN, PflCNNConfig, build_model, count_parameters

YAML = Path(__file__).resolve().parents[2] / "conf" / "model" / "cnn_pfl.yaml"


def closed_form(c: int, h: int, w: int, classes: int, c1: int = 32, c2: int = 64, hidden: int = 128) -> int:
    """conv3x3 c->c1, conv3x3 c1->c2 (no padding: each takes 2 off a side), maxpool 2, FC hidden, FC classes."""
    flat = c2 * ((h - 4) // 2) * ((w - 4) // 2)
    return (c * c1 * 9 + c1) + (c1 * c2 * 9 + c2) + (flat * hidden + hidden) + (hidden * classes + classes)


def test_parameter_count_on_cifar10_by_hand():
    # 3*32*9+32 = 896; 32*64*9+64 = 18,496; 14*14*64 = 12,544 -> 12,544*128+128 = 1,605,760; 128*10+10 = 1,290
    assert closed_form(3, 32, 32, 10) == 896 + 18_496 + 1_605_760 + 1_290 == 1_626_442
    model = build_model(PflCNNConfig(), (3, 32, 32), 10)
    assert count_parameters(model) == 1_626_442


@pytest.mark.parametrize("shape, classes", [((3, 32, 32), 10), ((1, 28, 28), 62), ((3, 33, 31), 7)])
def test_parameter_count_closed_form_and_output_shape(shape, classes):
    model = build_model(PflCNNConfig(), shape, classes)
    assert count_parameters(model) == closed_form(*shape, classes)
    out = model(torch.randn(5, *shape))
    assert out.shape == (5, classes)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_yaml_states_the_count_and_composes_to_the_defaults(compose_config):
    counts = re.findall(r"([\d,]+) parameters on 3x32x32, 10 classes", YAML.read_text())
    assert [int(n.replace(",", "")) for n in counts] == [1_626_442]
    cfg = compose_config("model=cnn_pfl").model
    assert isinstance(cfg, PflCNNConfig) and cfg == PflCNNConfig()


def test_layers_mirror_pfl_simple_cnn():
    model = PflCNN(PflCNNConfig(), (3, 32, 32), 10)
    kinds = [type(m) for m in [*model.features, *model.classifier]]
    assert kinds == [nn.Conv2d, nn.ReLU, nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.Dropout, nn.Flatten,
                     nn.Linear, nn.ReLU, nn.Dropout, nn.Linear]
    assert [m.p for m in model.modules() if isinstance(m, nn.Dropout)] == [0.25, 0.5]
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert all(m.kernel_size == (3, 3) and m.padding == (0, 0) and m.stride == (1, 1) for m in convs)


def test_glorot_uniform_weights():
    torch.manual_seed(0)
    glorot = PflCNN(PflCNNConfig(), (3, 32, 32), 10)
    torch.manual_seed(0)
    default = PflCNN(PflCNNConfig(glorot_init=False), (3, 32, 32), 10)
    fc = glorot.classifier[0].weight  # 12,544 -> 128: Glorot bound sqrt(6 / (fan_in + fan_out))
    bound = math.sqrt(6 / (12_544 + 128))
    assert fc.abs().max() <= bound and fc.abs().max() > 0.99 * bound
    # PyTorch's default (kaiming_uniform with a = sqrt(5)) has bound 1 / sqrt(fan_in), smaller here
    assert default.classifier[0].weight.abs().max() <= 1 / math.sqrt(12_544)
    assert torch.equal(glorot.classifier[0].bias, default.classifier[0].bias)  # biases keep PyTorch's init


@pytest.mark.parametrize("bad", [dict(channels=[32]), dict(hidden=0), dict(conv_dropout=1.0), dict(hidden_dropout=-0.1)])
def test_config_validation(bad):
    with pytest.raises(Exception, match="model\\."):
        PflCNNConfig(**bad)


# ----------------------------------------------------------------------------- through fl_bench
def write_cifar_stand_in(root: Path, train: int = 100, test: int = 20) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (train + test, 3, 32, 32), dtype=np.uint8)
    y = rng.integers(0, 10, train + test)
    from fl_bench.data.sources import RealDatasetConfig

    directory = cache_dir(RealDatasetConfig(name="cifar10", source="cifar10", root=str(root)))
    save_prepared(directory, Examples(x[:train], y[:train]), Examples(x[train:], y[train:]), {"source": "cifar10"})


# 10 clients of 10 images: one local step of batch 10 per trip; two rounds of 5.
RUN = ["dataset=cifar10", "partition=iid", "partition.num_clients=10", "model=cnn_pfl", "algorithm=fedavg",
       "algorithm.batch_size=10", "algorithm.client_lr=0.1", "concurrency=5", "max_trips=10", "eval_every=10"]


@pytest.mark.parametrize("vmap", ["false", "true"])
def test_short_fedavg_run(tmp_path, run_config, vmap):
    write_cifar_stand_in(tmp_path / "data")
    summary, metrics, trips = run_config(*RUN, f"data_root={tmp_path / 'data'}", f"vmap_clients={vmap}")
    assert summary["status"] == "completed" and summary["dataset"] == "cifar10"
    assert summary["trips_trained"] == 10 and summary["server_steps"] == 2
    assert summary["vmap_clients"] is (vmap == "true")
    assert np.isfinite(summary["final_val_loss"])
    assert len(trips) == 10


def test_batched_trips_match_sequential_without_dropout(tmp_path, compose_config):
    write_cifar_stand_in(tmp_path / "data")
    cfg = compose_config(*RUN, f"data_root={tmp_path / 'data'}", "model.conv_dropout=0", "model.hidden_dropout=0")
    data = build_dataset(cfg.dataset, cfg.partition)
    torch.manual_seed(0)
    task = ClassificationTask(build_model(cfg.model, data.input_shape, data.num_classes), data.num_classes,
                              transform=data.transform)
    clients, seeds = [0, 3, 7], [11, 12, 13]
    # 3 steps per trip (4, 4, 2 examples: a short last batch). A small lr: at 0.1 on random images
    # a ReLU unit flipping on float rounding can move one trip by ~5e-4 of its update.
    local = LocalTraining(lr=0.01, batch_size=4)
    sequential = ClientTrainer(task, data, local, vmap=False)
    start = [Broadcast(0, sequential.flat.clone())] * len(clients)
    deltas = sequential.train(start, clients, seeds).clone()
    batched = ClientTrainer(task, data, local, vmap=True).train(start, clients, seeds)
    assert deltas.abs().max() > 0
    torch.testing.assert_close(batched, deltas, rtol=1e-4, atol=1e-5)
