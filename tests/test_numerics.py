"""numerics=portable: the same bytes whatever kernels the CPU would offer, and one-line refusals of
what it cannot promise."""

import json
import os

import pandas as pd
import pytest
import torch

from fl_bench import numerics
from fl_bench.errors import ConfigError
from fl_bench.runs.experiment import run_experiment
from tests.conftest import compose_run_config
from tests.runs.test_cli import fl_bench
from tests.runs.test_determinism import GOLDEN

pytestmark = pytest.mark.numerics  # CI reruns these under other CPU kernels (.ci/run)

# What another machine would change: ATen's and OpenBLAS's kernels chosen for AVX2, MKL limited to
# AVX2 (on an Intel CPU MKL otherwise picks AVX-512 code), and more threads.
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
                "OMP_NUM_THREADS": "2"}


@pytest.mark.slow
@pytest.mark.golden
def test_a_portable_run_on_an_emulated_avx2_machine_gives_the_golden_bytes(tmp_path):
    # The first 2,000 trips of tests/runs/golden/fedbuff_*.csv (a shorter run is a prefix of a longer one).
    run_dir = tmp_path / "run"
    result = fl_bench("progress=false", "numerics=portable", "max_trips=2000", "eval_every=500", "vmap_clients=false",
                      f"hydra.run.dir={run_dir}", cwd=tmp_path, env=AVX2_MACHINE)
    assert result.returncode == 0, result.stderr
    golden = pd.read_csv(GOLDEN / "fedbuff_metrics.csv")
    golden = golden[golden.trips <= 2000]
    pd.testing.assert_frame_equal(pd.read_csv(run_dir / "metrics.csv")[golden.columns], golden, check_exact=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["numerics"] == "portable" and summary["cpu_capability"] == "DEFAULT"  # not the avx2 asked for


def test_the_command_line_sets_the_portable_environment_before_torch_loads(monkeypatch):
    monkeypatch.setattr(os, "environ", {})
    numerics.prepare_process(["algorithm=fedbuff", "numerics=native"])
    assert os.environ == {}
    numerics.prepare_process(["numerics=portable"])
    assert os.environ == numerics.PORTABLE_ENV
    os.environ.clear()
    numerics.prepare_process(["numerics=native,portable"])  # a sweep over both: its portable runs need them
    assert os.environ == numerics.PORTABLE_ENV


def test_a_process_that_started_without_the_portable_environment_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(ConfigError, match=r"numerics=portable needs .* and this process has .*MKL_CBWR=None"):
        run_experiment(compose_run_config("numerics=portable", "max_trips=100"), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.parametrize("override, message", [
    ("threads=4", "threads=4 is not allowed: numerics=portable computes with one intra-op thread"),
    ("accelerator=cuda", "accelerator='cuda' is not allowed: numerics=portable runs on the CPU"),
    ("precision=bf16-mixed", "precision='bf16-mixed' is not allowed: numerics=portable computes in 32-true"),
])
def test_what_portable_numerics_cannot_promise_is_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        compose_run_config("numerics=portable", override)
    with pytest.raises(ConfigError, match="numerics='fast' is not allowed: choose one of native, portable"):
        compose_run_config("numerics=fast")


def test_portable_kernels_are_set_inside_the_run_and_restored_after_it(monkeypatch):
    torch.set_num_threads(2)  # (tests compute with one thread, tests/conftest.py: a count that is not portable's 1)
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    with numerics.kernels("portable", None):
        assert torch.get_num_threads() == 1 and not torch.backends.mkldnn.enabled
        assert not torch._C._get_nnpack_enabled()
    assert torch.get_num_threads() == threads and torch.backends.mkldnn.enabled == onednn
    assert torch._C._get_nnpack_enabled()
