"""The batched local step's kernels: a forward pass over a batch of client trips, each with its own
parameters stacked on a leading dimension (``p[name]`` is ``[b, *shape]``, ``x`` is ``[b, B, ...]``),
and the fixed-shape step that a CUDA graph captures.

- :func:`batched_forward`: for a chain of ``Linear`` / ``ReLU`` / ``Flatten`` layers (logistic
  regression, the MLP) one ``baddbmm`` per layer, about 1.7x faster per step than ``vmap`` on a
  2-core CPU (no per-call vmap / functional_call dispatch); for any other model ``torch.func.vmap``
  of ``functional_call``. :class:`LinearChain` also writes such a chain's gradients out, without
  autograd.
- :class:`StepGraph`: one batched local step on buffers whose addresses never change (the trips'
  parameters, anchors and server state, the step's example rows, weights and lrs), run eagerly or,
  on CUDA, captured once into a CUDA graph and replayed for every step: one launch per step instead
  of hundreds, and no host sync inside a batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from fl_bench.models import unrolled_rnns

logger = logging.getLogger(__name__)

Forward = Callable[[dict[str, torch.Tensor], torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]
_CHAIN_LAYERS = (nn.Linear, nn.ReLU, nn.Flatten, nn.Identity)


def linear_chain(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The layers of ``model`` if it is an ``nn.Sequential`` of Linear / ReLU / Flatten(1, -1) /
    Identity layers only (hooks included: none may be attached), else None."""
    if type(model) is not nn.Sequential:
        return None
    layers = list(model.named_children())
    for _, layer in layers:
        if not isinstance(layer, _CHAIN_LAYERS) or layer._forward_hooks or layer._forward_pre_hooks:
            return None
        if isinstance(layer, nn.Flatten) and (layer.start_dim, layer.end_dim) != (1, -1):
            return None
    return layers


class LinearChain:
    """A chain of Linear / ReLU / Flatten layers over stacked per-trip parameters, with its
    gradients written out: no autograd graph, which is most of a small model's step on a CPU
    (the default MLP's batched step: about 240 us of backward engine for 40 us of matmuls)."""

    def __init__(self, layers: list[tuple[str, nn.Module]]):
        self.layers = layers

    def forward(self, p: dict[str, torch.Tensor], x: torch.Tensor, keep: list | None = None) -> torch.Tensor:
        """Logits [b, B, C] of x [b, B, ...]; ``keep`` collects each Linear's (name, layer, input,
        whether a ReLU made that input)."""
        relu = False
        for name, layer in self.layers:
            if isinstance(layer, nn.Linear):  # x W^T + b for every trip at once
                if keep is not None:
                    keep.append((name, layer, x, relu))
                weight, bias = p[f"{name}.weight"].transpose(1, 2), p.get(f"{name}.bias")
                x = torch.bmm(x, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), x, weight)
                relu = False
            elif isinstance(layer, nn.ReLU):
                x, relu = torch.relu(x), True
            elif isinstance(layer, nn.Flatten):
                x = x.flatten(2)
        return x

    @torch.no_grad()
    def gradients(self, p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor,
                  weight_decay: float = 0.0) -> dict[str, torch.Tensor]:
        """The gradient of sum_ij w_ij CE(z_ij, y_ij) + (weight_decay / 2) ||p||^2 for every parameter
        (ClassificationTask.objective): dz = w (softmax(z) - onehot(y)), then per Linear dW = dz^T h,
        db = sum dz, dh = dz W, and ReLU passes dh where its output is positive."""
        keep: list = []
        logits = self.forward(p, x, keep)
        dz = torch.softmax(logits, dim=-1)
        dz.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(dz[..., :1], -1.0))
        dz.mul_(weights.unsqueeze(-1))
        grads = {}
        for i in range(len(keep) - 1, -1, -1):
            name, layer, h, relu = keep[i]
            grads[f"{name}.weight"] = torch.bmm(dz.transpose(1, 2), h)
            if layer.bias is not None:
                grads[f"{name}.bias"] = dz.sum(1)
            if i:  # the gradient w.r.t. this layer's input (the previous Linear's output, maybe through a ReLU)
                dz = torch.bmm(dz, p[f"{name}.weight"])
                if relu:
                    dz.mul_(h > 0)
        if weight_decay:
            for name, g in grads.items():
                g.add_(p[name], alpha=weight_decay)
        return grads


def batched_forward(model: nn.Module, with_features: bool, features: Callable[[], torch.Tensor]) -> Forward:
    """``forward(p, x) -> (logits [b, B, C], features or None)`` over stacked per-trip parameters.
    ``with_features``: also return the penultimate activations that ``features()`` reads after a
    forward (FedMAX: kept by a hook on the model's last Linear, so the vmap path serves it)."""
    layers = None if with_features else linear_chain(model)
    if layers is not None:
        chain = LinearChain(layers)
        return lambda p, x: (chain.forward(p, x), None)
    from torch.func import functional_call, vmap

    def forward(p, x):
        logits = functional_call(model, p, (x,))
        return (logits, features()) if with_features else logits

    forward_batched = vmap(forward, randomness="different")
    return forward_batched if with_features else (lambda p, x: (forward_batched(p, x), None))


class StepGraph:
    """One batched local step of ``size`` trips on fixed buffers, for :class:`fl_bench.clients.trainer.ClientTrainer`.

    Every trip steps at every step: one that has finished (or pads the batch to ``size``) gets lr 0
    and weight 0, which leaves its parameters exactly where they are with the update rules allowed
    here (no state that moves by itself: see ``ClientTrainer``). Fill ``params`` / ``anchors`` /
    ``state`` (``[size, P]``), then per step ``rows`` (``[size, B]`` example indices into the data),
    ``weights`` (``[size, B]``: 1/n on a trip's n real examples) and ``lr`` (``[size]``), and call
    :meth:`step`. On CUDA the first :meth:`step` captures the step into a graph (after a warm-up
    at lr 0 on a side stream) and every later one replays it; if capture fails the step runs eagerly.
    """

    def __init__(self, trainer, size: int, batch_size: int, capture: bool):
        device, numel = trainer.device, trainer.flat.numel()
        self.trainer, self.size, self.capture = trainer, size, capture
        update = trainer.update
        self.buffers = torch.zeros(2 + len(update.state_keys), size, numel, device=device)
        self.params, self.anchors = self.buffers[0], self.buffers[1]
        self.state = dict(zip(update.state_keys, self.buffers[2:]))
        self.rows = torch.zeros(size, batch_size, dtype=torch.long, device=device)
        self.weights = torch.zeros(size, batch_size, device=device)
        self.lr = torch.zeros(size, device=device)
        self._param_views = trainer.views(self.params)
        self._anchor_views = trainer.views(self.anchors)
        self._state_views = {key: trainer.views(v) for key, v in self.state.items()}
        self._graph: torch.cuda.CUDAGraph | None = None

    def step(self) -> None:
        """One batched local step on the buffers' current contents: replays the CUDA graph (captured on
        the first call), or runs eagerly without capture or when capture failed."""
        if not self.capture:
            return self._eager()
        if self._graph is None:
            self._graph = self._captured()
            if self._graph is None:
                self.capture = False
                return self._eager()
        self._graph.replay()

    def _eager(self) -> None:
        trainer = self.trainer
        task, data = trainer.task, trainer.data
        idx = self.rows.view(-1)
        x = task.inputs(data.x[idx], True)  # no random augmentation here (ClientTrainer checks)
        x = x.view(self.size, -1, *x.shape[1:])
        with unrolled_rnns(task.model):
            grads = trainer.batched_gradients(self._param_views, x, data.y[self.rows], self.weights)
        with torch.no_grad():
            trainer.update.step(self._param_views, grads, self._anchor_views, self.lr, self._state_views)

    def _captured(self) -> torch.cuda.CUDAGraph | None:
        lr = self.lr.clone()
        self.lr.zero_()  # the warm-up steps leave the parameters where they are
        try:
            side = torch.cuda.Stream(self.params.device)
            side.wait_stream(torch.cuda.current_stream(self.params.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._eager()
            torch.cuda.current_stream(self.params.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._eager()
        except RuntimeError as err:  # an op that cannot be captured: correct results, eagerly
            logger.warning("CUDA graph capture of the batched step failed (%s): stepping eagerly",
                           str(err).splitlines()[0])
            graph = None
        self.lr.copy_(lr)
        return graph
