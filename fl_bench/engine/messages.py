"""What crosses the network on a client trip (the role of FLSim's ``channels/message.py``).

A trip downloads a :class:`Broadcast` (the global model plus any server state the algorithm holds
fixed during local training) and, if it finishes in time, uploads an :class:`Upload`. The engine
keeps a Broadcast per model version that pending trips still need (lazy training), so whatever a
client trains from lives here, and the bytes each side sends are counted from these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def tensor_bytes(tensors) -> int:
    """Total bytes of ``tensors`` (elements times element size): what they cost on the network."""
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Broadcast:
    """The server -> client message of one model version."""

    version: int
    params: torch.Tensor  # the flat global model w
    # Extra server state sent with the model and held fixed while the client trains, by name
    # (e.g. FedGBO's optimizer statistics s_t). Empty for FedAvg / FedBuff.
    state: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes one download carries: the model and the extra state."""
        return tensor_bytes([self.params, *self.state.values()])

    def clone(self) -> "Broadcast":
        """A snapshot that stays put while the server moves on."""
        return Broadcast(self.version, self.params.clone(), {k: v.clone() for k, v in self.state.items()})


@dataclass
class Upload:
    """The client -> server message of one finished trip."""

    client: int
    version: int  # the model version the client downloaded
    staleness: int  # server steps between that download and the step that consumes this upload
    num_examples: int
    vector: torch.Tensor  # Delta = y_0 - y_Q, or the final model y_Q (``ServerAlgorithm.upload``)
    # Extra tensors the algorithm asked for (e.g. Mimelite's full-batch gradient at x_t).
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    steps: int = 0  # local steps it trained (fewer than its full work under a work deadline); 0: not known
