"""Where a run trains and how: Lightning Fabric's accelerator, devices, processes and precision,
plus fl_bench's own choices of batched client trips and CUDA graphs.

Fabric resolves the names Lightning users know (``accelerator``, ``devices``, ``num_nodes``,
``strategy``, ``precision``), launches the processes of a multi-process run and gives their
collectives (fl_bench.clients.distributed). ``auto`` (the default for the accelerator, batching and
graphs) picks from the workload, deterministically: no timing probe, so one config trains on the
same hardware every time on one machine. The rules follow what ``benchmarks/throughput.py``
measured (results/benchmarks.md):

- accelerator: a GPU only pays off once a trip has real arithmetic. Logistic regression (2.4 kFLOP
  per training example) trains 2-4x faster batched on a 2-core CPU than batched on an H100, which
  is launch-bound; FEMNIST's CNN (19 MFLOP) 9-24x faster on the H100 than on the CPU. CUDA is
  chosen from ``CUDA_MIN_FLOPS`` per example (forward + backward, fl_bench.clients.costs) up.
- batched trips: always on CUDA (one launch sequence per step for the whole batch); on a CPU only
  for models of Linear layers (a baddbmm chain: 1.7-4x the sequential loop), since batched
  convolutions and unrolled RNNs are 2-7x slower there than one trip at a time.
- CUDA graphs: whenever trips are batched on CUDA (fl_bench.clients.batched.StepGraph).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fl_bench.errors import ConfigError
from fl_bench.models import UnrollableRNN

CUDA_MIN_FLOPS = 1e6  # per training example: below, a run is launch-bound on a GPU
ACCELERATORS = ("auto", "cpu", "cuda", "gpu")
STRATEGIES = ("auto", "ddp")  # every process trains its own clients: nothing shards or replicates one model
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")
AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


@dataclass(frozen=True)
class Placement:
    """Where and how a run trains (:func:`place`): the Lightning ``fabric`` (this process's device,
    precision, rank and the run's processes; None for one process on the CPU with the built-in task,
    for which it would only name the device), whether client trips are batched and whether they step
    through CUDA graphs, and why ``auto`` chose so."""

    fabric: Any  # lightning.fabric.Fabric (imported where a run needs it), or None
    batched: bool  # vmap_clients
    graphs: bool  # cuda_graphs
    precision: str  # 32-true | bf16-mixed | 16-mixed
    why: str  # the auto choices' reasons, for the run's first line

    @property
    def device(self) -> torch.device:
        """This process's device."""
        return self.fabric.device if self.fabric is not None else torch.device("cpu")

    @property
    def processes(self) -> int:
        """Processes of the run (devices x num_nodes)."""
        return self.fabric.world_size if self.fabric is not None else 1

    def launch(self) -> None:
        """Start a multi-process run's other processes (they build the same objects from here on)."""
        if self.fabric is not None:
            self.fabric.launch()

    def describe(self) -> str:
        """One line for the run's start: device, processes, precision, batching and graphs, with the
        auto choices' reasons."""
        how = "batched client trips" if self.batched else "one client trip at a time"
        graphs = ", CUDA graphs" if self.graphs else ""
        processes = f" x {self.processes} processes" if self.processes > 1 else ""
        precision = "" if self.precision == "32-true" else f", {self.precision} precision"
        threads = torch.get_num_threads()  # the run's setting (threads=...), applied before this line
        if self.device.type == "cpu":
            precision += f", {threads} intra-op thread{'s' if threads > 1 else ''}"
        return (f"training on {self.device}{processes} with {how}{graphs}{precision}"
                + (f" ({self.why})" if self.why else ""))


def dense_only(model: nn.Module) -> bool:
    """Every layer with parameters is a Linear (logistic regression, MLPs)."""
    return all(isinstance(m, nn.Linear) for m in model.modules() if next(m.parameters(recurse=False), None) is not None)


def resolve_accelerator(accelerator: str, devices: Any, example_flops: float) -> tuple[str, str]:
    """``accelerator`` as Fabric takes it (cpu | cuda) and why auto chose so: ``auto`` is CUDA where
    torch sees a GPU and a training example costs at least ``CUDA_MIN_FLOPS``; an explicit GPU that
    is not there fails in one line."""
    if accelerator == "auto":
        if not torch.cuda.is_available():
            return "cpu", ""
        if example_flops < CUDA_MIN_FLOPS:
            return "cpu", (f"auto: {example_flops / 1e3:.1f} kFLOP per example is launch-bound on a GPU, "
                           f"below the {CUDA_MIN_FLOPS / 1e6:g} MFLOP where CUDA pays off")
        return "cuda", f"auto: {example_flops / 1e6:.1f} MFLOP per example"
    if accelerator in ("cuda", "gpu"):
        if not torch.cuda.is_available():
            raise ConfigError(f"accelerator={accelerator} is not available: torch sees no CUDA GPU on this machine; "
                              f"use accelerator=auto or cpu")
        count = torch.cuda.device_count()
        wanted = devices if isinstance(devices, (list, tuple)) else range(int(devices))
        if max(wanted) >= count:
            raise ConfigError(f"devices={devices} is not available: this machine has {count} CUDA GPU(s)")
        return "cuda", ""
    return accelerator, ""


def check_cpu_devices(accelerator: str, devices: Any) -> None:
    """On a CPU ``devices`` counts processes: a list of GPU indices has nothing to select."""
    if isinstance(devices, (list, tuple)):
        raise ConfigError(f"devices={list(devices)} lists GPU indices, but the run trains on the CPU "
                          f"(accelerator={accelerator}): give a number of processes, e.g. devices={len(devices)}, "
                          f"or accelerator=cuda")


def process_count(devices: Any, num_nodes: int) -> int:
    """Processes of a run: ``devices`` (a count, or a list of GPU indices) per node, times ``num_nodes``."""
    return (len(devices) if isinstance(devices, (list, tuple)) else int(devices)) * num_nodes


def place(accelerator: str, devices: Any, num_nodes: int, strategy: str, precision: str, vmap_clients: bool | None,
          cuda_graphs: bool | None, model: nn.Module, example_flops: float, loggers: list[Any] = (),
          lightning_task: bool = False) -> Placement:
    """Build the run's Fabric from Lightning's ``accelerator``, ``devices``, ``num_nodes``, ``strategy``
    and ``precision`` (``accelerator=auto`` resolved by the measured rule above), and resolve
    ``vmap_clients`` and ``cuda_graphs`` (None: auto) for ``model``, whose training example costs
    ``example_flops`` (forward + backward); ``loggers``: Fabric's (where a LightningModule's ``self.log``
    goes). Fabric is built where the run uses it: a GPU, several processes, or a LightningModule task
    (``lightning_task``: Fabric sets it up, routes its ``self.log`` and runs its precision); one process on
    the CPU with the built-in task, which does its own autocast, only needs the CPU named, and not the
    2 s of importing Lightning. The processes are not launched yet (:meth:`Placement.launch`)."""
    chosen, why = resolve_accelerator(accelerator, devices, example_flops)
    if chosen == "cpu":
        check_cpu_devices(accelerator, devices)
    if chosen == "cpu" and precision == "16-mixed":  # Fabric would fall back to bf16 with a warning
        raise ConfigError(f"precision=16-mixed is not allowed on the CPU (accelerator={accelerator}): float16 autocast "
                          f"needs a GPU; use bf16-mixed or 32-true")
    why = [why] if why else []
    processes = process_count(devices, num_nodes)
    fabric = None
    if chosen != "cpu" or processes > 1 or strategy == "ddp" or lightning_task:
        fabric = _fabric(accelerator, chosen, devices, num_nodes, strategy, precision, loggers, processes)
    device = fabric.device if fabric is not None else torch.device("cpu")
    batched = vmap_clients
    if batched is None:
        rnn = any(isinstance(m, UnrollableRNN) for m in model.modules())
        batched = not rnn and (device.type == "cuda" or dense_only(model))
        if device.type == "cpu":
            why.append("batched: a model of Linear layers" if batched else
                       "sequential: batched convolutions and RNNs are slower than one trip at a time on a CPU")
    graphs = cuda_graphs
    if graphs is None:
        graphs = batched and device.type == "cuda"
    elif graphs and not (batched and device.type == "cuda"):
        raise ConfigError(f"cuda_graphs=true needs batched trips on a CUDA device (accelerator={chosen}, "
                          f"vmap_clients={batched}); use cuda_graphs=null (auto) or false")
    return Placement(fabric, batched, graphs, precision, "; ".join(why))


def _fabric(accelerator: str, chosen: str, devices: Any, num_nodes: int, strategy: str, precision: str,
            loggers: list[Any], processes: int) -> Any:
    """Lightning's Fabric for the resolved accelerator (``chosen``); ConfigError in one line for what it
    refuses."""
    from lightning.fabric import Fabric  # Lightning costs seconds to import: only where a run uses it

    if processes > 1 or strategy == "ddp":
        from fl_bench.clients.distributed import client_parallel_strategy

        strategy = client_parallel_strategy()
    try:
        return Fabric(accelerator=chosen, devices=devices, num_nodes=num_nodes, strategy=strategy, precision=precision,
                      loggers=list(loggers))
    except (ValueError, RuntimeError, TypeError) as error:  # Lightning's MisconfigurationException is a ValueError
        raise ConfigError(f"accelerator={accelerator} devices={devices} num_nodes={num_nodes} strategy={strategy} "
                          f"precision={precision}: {str(error).splitlines()[0]}") from None
