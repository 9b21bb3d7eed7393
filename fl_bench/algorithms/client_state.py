"""Per-client server state (FedLaAvg's latest gradients g_i, FedStaleWeight's staleness averages,
HFL's last updates), in compact stores whose memory the run summary states."""

from __future__ import annotations

import torch


class ClientState:
    """Base of the stores; ``nbytes`` is what the store holds now."""

    nbytes: int


class ClientTable(ClientState):
    """One row of ``width`` values per client in one [N, width] tensor, zero until written: O(1)
    access, N x width memory from the start (e.g. FedLaAvg's N x P gradient store)."""

    def __init__(self, num_clients: int, width: int, dtype=torch.float32, device=None):
        self.data = torch.zeros(num_clients, width, dtype=dtype, device=device)

    def __getitem__(self, client: int) -> torch.Tensor:
        return self.data[client]

    def __setitem__(self, client: int, value) -> None:
        self.data[client] = value

    @property
    def nbytes(self) -> int:
        """Bytes of the whole [N, width] table, allocated up front."""
        return self.data.numel() * self.data.element_size()


class ClientDict(ClientState):
    """Rows only for clients seen so far: memory grows with participation, not with N."""

    def __init__(self, default=None):
        self.rows: dict[int, torch.Tensor] = {}
        self.default = default  # returned for a client never written

    def __contains__(self, client: int) -> bool:
        return client in self.rows

    def get(self, client: int):
        """The client's row, or ``default`` for a client never written."""
        return self.rows.get(client, self.default)

    def __setitem__(self, client: int, value: torch.Tensor) -> None:
        self.rows[client] = value

    @property
    def nbytes(self) -> int:
        """Bytes of the rows written so far (a row that is not a tensor counts 8)."""
        return sum(v.numel() * v.element_size() if torch.is_tensor(v) else 8 for v in self.rows.values())
