"""One run across processes (``devices=N``, ``num_nodes``): every process runs the same deterministic
simulation and trains its share of each batch of client trips; the uploads are gathered so that
every process steps the same server model.

Lightning Fabric launches the processes (locally, or under ``srun`` / ``torchrun``, whose
environment it reads) and gives the collectives (gloo on CPU, NCCL on GPU). Its DDP strategy would
wrap the client model in ``DistributedDataParallel``, which averages gradients across processes:
here each process trains other clients, so :class:`ClientParallelStrategy` keeps DDP's launch and
process group and leaves the module unwrapped.

A trip's Delta depends only on its start model and seed (fl_bench.clients.trainer), so which
process trains it does not change it: on the sequential CPU path a run gives the same bytes with
1 process or N.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import torch

from fl_bench.clients.trainer import ClientTrainer
from fl_bench.contracts import Broadcast, Trainer
from fl_bench.errors import FLBenchError

logger = logging.getLogger(__name__)


def launched_rank() -> int:
    """This process's rank as its launcher's environment says, before Fabric is built (0 where none
    says): torchrun's RANK, Fabric's own launch (NODE_RANK, LOCAL_RANK), or SLURM's task id. Only
    whether it is 0 matters: rank 0 alone writes the run directory."""
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"])
    if "LOCAL_RANK" in env or "NODE_RANK" in env:
        return int(env.get("NODE_RANK", 0)) + int(env.get("LOCAL_RANK", 0))
    return int(env.get("SLURM_PROCID", 0))


LOST_PROCESS_GRACE_SECONDS = 60.0


def client_parallel_strategy() -> Any:
    """A Fabric strategy with DDP's launch and process group, whose modules stay unwrapped; when Fabric
    starts the processes itself, a process that dies leaves the others time to stop on their own."""
    from lightning.fabric.strategies import DDPStrategy
    from lightning.fabric.strategies.launchers import subprocess_script

    class PatientObserver(subprocess_script._ChildProcessObserver):
        """Lightning's watch over the processes it started kills them all, rank 0 included, within 5 s of
        one dying: rank 0 would die before it meets the lost process at its next collective and stops the
        run in one line with its logs written (PeerLost). This one waits for that, and kills only a run
        still alive after the grace period (a collective that hangs)."""

        def _run(self) -> bool:
            """One look at the processes (every 5 s); True once there is nothing more to watch."""
            codes = [proc.poll() for proc in self._child_processes]
            if all(code == 0 for code in codes):
                return True
            if not any(codes):  # still running
                return False
            time.sleep(LOST_PROCESS_GRACE_SECONDS)  # a daemon thread: it ends with rank 0, which stops on its own
            logger.error("a process of this run died and the others did not stop within %.0f s: killing them",
                         LOST_PROCESS_GRACE_SECONDS)
            self._terminate_all()
            return True

    class PatientLauncher(subprocess_script._SubprocessScriptLauncher):
        """Lightning's launch of ``python -m fl_bench`` per process, with :class:`PatientObserver`."""

        def launch(self, function: Any, *args: Any, **kwargs: Any) -> Any:
            self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
            if not self.cluster_environment.creates_processes_externally:
                self._call_children_scripts()
                PatientObserver(child_processes=self.procs, main_pid=os.getpid()).start()
            subprocess_script._set_num_threads_if_needed(num_processes=self.num_processes)
            return function(*args, **kwargs)

    class ClientParallelStrategy(DDPStrategy):
        """DDP's processes and collectives; no gradient averaging: each process trains its own clients."""

        def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
            """The module as it is (Fabric has moved it to this process's device)."""
            return module

        def _configure_launcher(self) -> None:
            super()._configure_launcher()
            if type(self._launcher) is subprocess_script._SubprocessScriptLauncher:
                self._launcher = PatientLauncher(self.cluster_environment, self.num_processes, self.num_nodes)

    return ClientParallelStrategy()


class PeerLost(FLBenchError):
    """Another process of the run stopped (killed, out of memory, its node lost)."""


class DistributedTrainer(Trainer):
    """A trainer whose ``train`` splits each batch of trips over the run's processes, trains this
    process's contiguous share with ``trainer`` and gathers every process's uploads into ``out``.
    Everything else is the wrapped trainer's: the contract's hooks by name, the rest (``load``,
    ``device``, ...) through attribute lookup."""

    def __init__(self, trainer: ClientTrainer, fabric: Any):
        self.trainer = trainer
        self.fabric = fabric

    def __getattr__(self, name: str) -> Any:
        return getattr(self.trainer, name)

    @property
    def vmap(self) -> bool:
        return self.trainer.vmap

    def broadcast_state(self) -> dict[str, torch.Tensor]:
        return self.trainer.broadcast_state()

    @property
    def extra_download_bytes(self) -> int:
        return self.trainer.extra_download_bytes

    @property
    def extra_upload_bytes(self) -> int:
        return self.trainer.extra_upload_bytes

    def after_server_step(self, seeds: list[int], clients: list[int], weights: list[float] | None) -> None:
        self.trainer.after_server_step(seeds, clients, weights)

    def state_dict(self) -> dict[str, Any]:
        return self.trainer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trainer.load_state_dict(state)

    def train(self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int],
              out: Sequence[torch.Tensor] | None = None, steps: Sequence[int] | None = None) -> Sequence[torch.Tensor]:
        """As the wrapped trainer's ``train``: trip i of ``clients[i]`` from ``starts[i]`` (``steps[i]``
        local steps, if given), its upload written into ``out[i]``. Process r trains trips
        [r * share, (r + 1) * share)."""
        b = len(clients)
        if out is None:
            out = torch.empty(b, self.trainer.upload_size, device=self.trainer.device)
        world, rank = self.fabric.world_size, self.fabric.global_rank
        share = -(-b // world)
        mine = slice(min(rank * share, b), min((rank + 1) * share, b))
        local = torch.zeros(share, self.trainer.upload_size, device=self.trainer.device)  # equal shapes to gather
        if mine.stop > mine.start:
            self.trainer.train(starts[mine], clients[mine], seeds[mine], local[: mine.stop - mine.start],
                               None if steps is None else steps[mine])
        gathered = self.gather(local).reshape(world * share, -1)
        for i in range(b):
            out[i].copy_(gathered[i])
        self.trainer.gathered_buffers(list(seeds), list(clients), self.gather)  # each process holds every trip's
        return out

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's ``tensor``, stacked in rank order; a lost process stops the run in one line."""
        try:
            return self.fabric.all_gather(tensor)
        except (RuntimeError, OSError) as error:  # gloo: connection closed; NCCL: the communicator aborted
            raise PeerLost(f"process {self.fabric.global_rank} of {self.fabric.world_size}: another process of this run "
                           f"stopped ({str(error).splitlines()[0][:120]}); run the same command again to go on from "
                           f"the last checkpoint") from None
