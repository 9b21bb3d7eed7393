"""Recurrent models: LSTM and GRU layers that ``torch.func.vmap`` can batch (:func:`unrolled_rnns`), and
``char_rnn`` (next-character prediction on Shakespeare) with its config."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from fl_bench.models.base import ModelConfig, exported, token_input
from fl_bench.schema import choice, require, schema


class UnrollableRNN:
    """An nn.LSTM / nn.GRU that can also run as explicit per-time-step cell math, a loop of
    linear ops that ``torch.func.vmap`` can batch (aten::lstm / aten::gru have no batching rule).
    The fused kernel stays the default; ``unrolled_rnns`` switches to the loop while fl_bench.clients.trainer
    trains a batch of clients with vmap. Same parameters, same gate equations (torch.nn docs)."""

    unrolled = False

    def forward(self, x, hx=None):
        if not self.unrolled:
            return super().forward(x, hx)
        if hx is not None or not self.batch_first or self.bidirectional or self.proj_size:
            raise NotImplementedError("unrolled RNN: batch_first, one direction, zero initial state only")
        for layer in range(self.num_layers):
            w_ih, w_hh, b_ih, b_hh = (getattr(self, f"{n}_l{layer}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            inputs = F.linear(x, w_ih, b_ih)  # [B, T, gates * H], all time steps at once
            h = inputs.new_zeros(x.shape[0], self.hidden_size)
            c = torch.zeros_like(h)
            outputs = []
            for t in range(x.shape[1]):
                h, c = self._cell(inputs[:, t], F.linear(h, w_hh, b_hh), h, c)
                outputs.append(h)
            x = torch.stack(outputs, dim=1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
        return x, None


class UnrollableLSTM(UnrollableRNN, nn.LSTM):
    """nn.LSTM that :func:`unrolled_rnns` can switch to explicit cell math (vmap-able)."""

    @staticmethod
    def _cell(gi, gh, h, c):
        i, f, g, o = (gi + gh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class UnrollableGRU(UnrollableRNN, nn.GRU):
    """nn.GRU that :func:`unrolled_rnns` can switch to explicit cell math (vmap-able)."""

    @staticmethod
    def _cell(gi, gh, h, c):
        (ir, iz, inew), (hr, hz, hnew) = gi.chunk(3, dim=-1), gh.chunk(3, dim=-1)
        r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        n = torch.tanh(inew + r * hnew)
        return (1 - z) * n + z * h, c


@contextmanager
def unrolled_rnns(model: nn.Module):
    """Run the model's RNNs as explicit cell loops (vmap-able) inside the block."""
    rnns = [m for m in model.modules() if isinstance(m, UnrollableRNN)]
    for m in rnns:
        m.unrolled = True
    try:
        yield
    finally:
        for m in rnns:
            m.unrolled = False


RNN_CELLS = ("gru", "lstm")


class CharRNN(nn.Module):
    """Next-character prediction (Shakespeare): embedding - stacked GRU/LSTM - linear over the
    alphabet, from the last time step. FedGBO Sec. 5: embedding 8, 2 x GRU 128; LEAF's
    shakespeare/stacked_lstm.py (HFL's model): embedding 8, 2 x LSTM 256. The input alphabet is
    the output alphabet, so the embedding has ``num_classes`` rows (as in LEAF)."""

    def __init__(
        self, cfg: CharRNNConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        token_input(cfg.name, input_shape)
        self.embedding = nn.Embedding(num_classes, cfg.embed_dim)
        rnn = UnrollableGRU if cfg.cell == "gru" else UnrollableLSTM
        self.rnn = rnn(cfg.embed_dim, cfg.hidden, num_layers=cfg.layers, batch_first=True)
        self.out = nn.Linear(cfg.hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embedding(x.long()))
        return self.out(h[:, -1])


@schema("model", "char_rnn", exported(CharRNN))
class CharRNNConfig(ModelConfig):
    """Next-character model (Shakespeare): embedding, stacked GRU/LSTM, linear over the vocabulary."""

    cell: str = "gru"  # gru (FedGBO) | lstm (LEAF / HFL)
    embed_dim: int = 8
    hidden: int = 128
    layers: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("model.cell", self.cell, RNN_CELLS)
        require(self.embed_dim >= 1, "model.embed_dim", self.embed_dim, "must be >= 1")
        require(self.hidden >= 1, "model.hidden", self.hidden, "must be >= 1")
        require(self.layers >= 1, "model.layers", self.layers, "must be >= 1")
