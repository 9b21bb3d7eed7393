"""Where a run trains and how: the device, batched client trips, CUDA graphs.

``auto`` (the default for all three) picks from the workload, deterministically: no timing probe,
so one config trains on the same hardware every time on one machine. The rules follow what
``benchmarks/throughput.py`` measured (results/benchmarks.md):

- device: a GPU only pays off once a trip has real arithmetic. Logistic regression (2.4 kFLOP per
  training example) trains 2-4x faster batched on a 2-core CPU than batched on an H100, which is
  launch-bound; FEMNIST's CNN (19 MFLOP) 9-24x faster on the H100 than on the CPU. CUDA is chosen from
  ``CUDA_MIN_FLOPS`` per example (forward + backward, fl_bench.clients.costs) up.
- batched trips: always on CUDA (one launch sequence per step for the whole batch); on a CPU only
  for models of Linear layers (a baddbmm chain: 1.7-4x the sequential loop), since batched
  convolutions and unrolled RNNs are 2-7x slower there than one trip at a time.
- CUDA graphs: whenever trips are batched on CUDA (fl_bench.clients.batched.StepGraph).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fl_bench.errors import ConfigError
from fl_bench.models import _UnrollableRNN

CUDA_MIN_FLOPS = 1e6  # per training example: below, a run is launch-bound on a GPU


def resolve_device(name: str) -> torch.device:
    """An explicit device, checked; ``auto``: CUDA where torch sees a GPU (see :func:`place`)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} is not available: torch sees no CUDA GPU on this machine; use device=auto or cpu")
        index = torch.device(name).index
        if index is not None and index >= torch.cuda.device_count():
            raise ConfigError(f"device={name} is not available: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return torch.device(name)


@dataclass(frozen=True)
class Placement:
    """Where and how a run trains (:func:`place`): the device, whether client trips are batched
    and whether they step through CUDA graphs, and why ``auto`` chose so."""

    device: torch.device
    batched: bool  # vmap_clients
    graphs: bool  # cuda_graphs
    why: str  # the auto choices' reasons, for the run's first line

    def describe(self) -> str:
        """One line for the run's start: device, batching and graphs, with the auto choices' reasons."""
        how = "batched client trips" if self.batched else "one client trip at a time"
        graphs = ", CUDA graphs" if self.graphs else ""
        return f"training on {self.device} with {how}{graphs}" + (f" ({self.why})" if self.why else "")


def dense_only(model: nn.Module) -> bool:
    """Every layer with parameters is a Linear (logistic regression, MLPs)."""
    return all(isinstance(m, nn.Linear) for m in model.modules() if next(m.parameters(recurse=False), None) is not None)


def place(device: str, vmap_clients: bool | None, cuda_graphs: bool | None, model: nn.Module,
          example_flops: float) -> Placement:
    """Resolve the run's ``device``, ``vmap_clients`` and ``cuda_graphs`` (None: auto) for ``model``,
    whose training example costs ``example_flops`` (forward + backward)."""
    why = []
    chosen = resolve_device(device)
    if device == "auto" and chosen.type == "cuda" and example_flops < CUDA_MIN_FLOPS:
        chosen = torch.device("cpu")
        why.append(f"auto: {example_flops / 1e3:.1f} kFLOP per example is launch-bound on a GPU, "
                   f"below the {CUDA_MIN_FLOPS / 1e6:g} MFLOP where CUDA pays off")
    elif device == "auto" and chosen.type == "cuda":
        why.append(f"auto: {example_flops / 1e6:.1f} MFLOP per example")
    batched = vmap_clients
    if batched is None:
        rnn = any(isinstance(m, _UnrollableRNN) for m in model.modules())
        batched = not rnn and (chosen.type == "cuda" or dense_only(model))
        if chosen.type == "cpu":
            why.append("batched: a model of Linear layers" if batched else
                       "sequential: batched convolutions and RNNs are slower than one trip at a time on a CPU")
    graphs = cuda_graphs
    if graphs is None:
        graphs = batched and chosen.type == "cuda"
    elif graphs and not (batched and chosen.type == "cuda"):
        raise ConfigError(f"cuda_graphs=true needs batched trips on a CUDA device (device={chosen}, "
                          f"vmap_clients={batched}); use cuda_graphs=null (auto) or false")
    return Placement(chosen, batched, graphs, "; ".join(why))
