"""compile=true: the built-in task's training forward through torch.compile (inductor) on the
sequential path gives eager's run to float rounding, and what it cannot act on is refused."""

import pandas as pd
import pytest
import torch

from fl_bench.errors import ConfigError
from fl_bench.runs.experiment import build_experiment, run_experiment
from tests.conftest import compose_run_config

RUN = ("dataset=digits", "model=mlp", "max_trips=40", "eval_every=20", "concurrency=10", "accelerator=cpu",
       "vmap_clients=false", "algorithm.buffer_size=5")


@pytest.mark.slow
def test_a_compiled_run_is_the_eager_run_to_float_rounding(tmp_path):
    summaries = {}
    for compiled in ("false", "true"):
        summaries[compiled] = run_experiment(compose_run_config(*RUN, f"compile={compiled}"), tmp_path / compiled)
    eager, compiled = (torch.load(tmp_path / name / "model.pt") for name in ("false", "true"))
    for key in eager:
        torch.testing.assert_close(compiled[key], eager[key], rtol=1e-4, atol=1e-5)
    assert summaries["true"]["compile"] is True and summaries["true"]["config_digest"] != summaries["false"]["config_digest"]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "true" / "trips.csv"), pd.read_csv(tmp_path / "false" / "trips.csv"),
                                  check_exact=False, rtol=1e-4)


@pytest.mark.parametrize("overrides, message", [
    (("vmap_clients=true",), "compile=true is not allowed with batched trips"),
    (("numerics=portable", "threads=1"), "compile=True is not allowed: numerics=portable computes with torch's baseline"),
])
def test_what_compile_cannot_act_on_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_experiment(compose_run_config(*RUN, "compile=true", *overrides), on_eval=lambda progress: False)
