"""Compute accounting of client trips (FedGBO App. B, eq. 22): the FLOPs of one trip's local
training, N = steps x C |x| + examples x (fwd + bwd) (+ n (fwd + bwd) for Mimelite's full-batch
gradient), where (fwd + bwd) is counted on the real model and C is the update rule's operations per
parameter (Table VI). Bytes are counted by the engine from the messages (fl_bench.contracts).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from fl_bench.clients.local_update import LocalTraining, LocalUpdate
from fl_bench.clients.task import ClassificationTask
from fl_bench.data import FederatedData
from fl_bench.errors import ConfigError
from fl_bench.models import unrolled_rnns


def example_flops(task: ClassificationTask, data: FederatedData, batch_size: int) -> float:
    """FLOPs of one training example's forward and backward pass: ``FlopCounterMode`` over one real
    local step (loss and parameter gradients) on the first ``batch_size`` training examples, divided
    by their number. Matmuls and convolutions are counted (2 per multiply-add), elementwise ops are
    not (as Thop, which the paper used). RNNs run as their unrolled cell loop, so that their matmuls
    are seen on every device (cuDNN's fused RNN kernel has no FLOP formula).

    The step runs on a copy: the run's module must start as built, with its buffers (BatchNorm's
    running statistics) untouched and no state created in a forward on the CPU (a LightningModule
    may build a tensor on its first forward, on the device of that forward, and the run's device
    may be a GPU)."""
    task = copy.deepcopy(task)
    count = min(batch_size, len(data.y))
    params = [p for p in task.parameters() if p.requires_grad]
    counter = FlopCounterMode(display=False)
    with unrolled_rnns(task.model), counter:
        loss = task.loss(data.x[:count], data.y[:count])
        torch.autograd.grad(loss, params)
    if not torch.isfinite(loss.detach()).item():  # (else the first server step would be blamed on a learning rate)
        raise ConfigError(f"the training loss on the first {count} training examples is {loss.item()} for the initial "
                          f"model, before any training step, which no learning rate causes: check the task's loss "
                          f"(the model's output and the loss function on it, e.g. a log of 0) and the data's inputs")
    return counter.get_total_flops() / count


def trip_flops(sizes: np.ndarray, local: LocalTraining, update: LocalUpdate, per_example: float, num_params: int) -> np.ndarray:
    """FLOPs of one trip of a client with ``sizes[i]`` examples (float64, one per client)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    steps = local.num_steps(sizes)
    flops = local.examples_per_trip(sizes) * per_example + steps * update.ops_per_param * float(num_params)
    if update.start_gradient == "full":  # Mimelite: + n (fwd + bwd)
        flops = flops + sizes * per_example
    return flops.astype(np.float64)
