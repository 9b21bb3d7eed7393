"""Which floating-point kernels a run computes with: ``native`` (the fastest this machine has) or
``portable`` (the same bytes on any x86-64 CPU).

PyTorch, MKL, oneDNN and OpenBLAS each pick their CPU kernels by what the CPU offers (AVX-512,
AVX2, or neither), and they split GEMMs and reductions over the intra-op threads. Every choice
rounds differently; a trip's update differs in its last bits, and thousands of trips later the
metrics differ visibly (the default workload: validation accuracy 0.23979 with AVX-512 kernels,
0.24012 with AVX2 ones, after 2,000 trips). ``numerics=portable`` pins every such choice:

- ``ATEN_CPU_CAPABILITY=default``: ATen's kernels as compiled for baseline x86-64, not its
  AVX2 / AVX-512 variants;
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility, one code path on any x86-64 CPU;
- ``OPENBLAS_CORETYPE=Prescott``: numpy's OpenBLAS with its generic kernels (data generation);
- one intra-op thread, since how a GEMM or a reduction is split changes its rounding;
- oneDNN and NNPACK off: convolutions and recurrent layers through ATen and MKL, whose oneDNN
  kernels are compiled at run time for the CPU at hand.

The environment variables are read when the libraries start, so they must be set before torch
and numpy are imported: ``python -m fl_bench numerics=portable`` sets them first thing
(:func:`prepare_process`), and a process that started without them is refused with one line.
Measured costs and what was checked are in ``results/numerics.md``. Not covered: other CPU
architectures (ARM builds of torch carry other kernels), other torch / MKL versions, GPUs.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from fl_bench.errors import ConfigError

MODES = ("native", "portable")

# Read by the libraries when they load: set before torch and numpy are imported.
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OPENBLAS_CORETYPE": "Prescott"}

_PORTABLE_OVERRIDE = re.compile(r"^\+{0,2}numerics=.*\bportable\b")


def prepare_process(argv: Sequence[str]) -> None:
    """Set the portable environment when the command line asks for ``numerics=portable`` (a sweep
    over both modes included): called by ``python -m fl_bench`` before torch or numpy is imported."""
    if any(_PORTABLE_OVERRIDE.match(arg) for arg in argv):
        os.environ.update(PORTABLE_ENV)


def require_portable_process() -> None:
    """Refuse (one line) a process whose libraries started without the portable environment."""
    problem = process_problem()
    if problem:
        raise ConfigError(problem)


def process_problem() -> str | None:
    """Why this process cannot compute portably (None when it can)."""
    import torch

    wrong = [f"{key}={os.environ.get(key)}" for key, value in PORTABLE_ENV.items() if os.environ.get(key) != value]
    capability = torch.backends.cpu.get_cpu_capability()
    if capability != "DEFAULT":
        wrong.append(f"torch's CPU kernels are {capability}")
    if not wrong:
        return None
    return (f"numerics=portable needs {' '.join(f'{k}={v}' for k, v in PORTABLE_ENV.items())} set before torch "
            f"starts, and this process has {', '.join(wrong)}: give numerics=portable on the command line of "
            "python -m fl_bench (it sets them), or export them before starting Python")


@contextmanager
def kernels(mode: str, threads: int | None) -> Iterator[None]:
    """Compute with ``mode``'s kernels and ``threads`` intra-op threads (null: torch's default)
    inside the block; torch's previous settings are restored after it, for whatever runs next in
    the same process. (Whether the process can compute portably at all is
    :func:`require_portable_process`'s to check.)"""
    import torch

    before = torch.get_num_threads()
    if mode == "portable":
        threads = 1
    try:
        if threads:
            torch.set_num_threads(threads)
        if mode != "portable":
            yield
            return
        onednn, torch.backends.mkldnn.enabled = torch.backends.mkldnn.enabled, False
        try:
            with torch.backends.nnpack.flags(enabled=False):
                yield
        finally:
            torch.backends.mkldnn.enabled = onednn
    finally:
        torch.set_num_threads(before)


def describe() -> dict[str, str]:
    """What computed a run, for its summary: the library versions and the CPU kernels used."""
    import torch

    return {"torch_version": torch.__version__, "cpu_architecture": platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}
