"""A new method under a paper's protocol, as docs/extending/your-method.md does it:
a plugin package outside the repository, its own search space on hydra.searchpath, a study added to a
copy of a paper's sweep file with its nested special case, and an arm that states its claim against
the paper's FedAvg before the runs; reproduce checks the protocol, runs the arms and gives the verdict."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fl_bench.analysis.reproduce import Reproduction
from fl_bench.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _my_protocol(tmp_path: Path) -> Path:
    """sweeps/fedgbo_smoke.yaml's protocol and FedAvg study with the plugin's TrimmedFedAvg as one more study
    and a table of its own."""
    spec = yaml.safe_load((REPO / "sweeps" / "fedgbo_smoke.yaml").read_text())
    spec["studies"] = {"fedavg": spec["studies"]["fedavg"]}  # the paper's method the new one is compared with
    spec["studies"]["trimmed"] = {"space": "trimmed_fedavg_smoke",
                                  "overrides": ["algorithm=trimmed_fedavg", "algorithm.cohort=10"],
                                  "special_case": {"study": "fedavg", "set": {"algorithm.trim_fraction": 0.0}}}
    spec["tables"] = {"trimmed_vs_fedavg": {
        "title": "TrimmedFedAvg against FedAvg under FedGBO Table IV's protocol", "reference": "fedavg",
        "measure": "costs", "notes": "Trimmed against FedAvg: {effect:trimmed}, {verdict:trimmed}.",
        "fidelity": spec["tables"]["fedgbo_table4_smoke"]["fidelity"],  # the paper's workload's stand-in
        "arms": {"fedavg": {"study": "fedavg"},
                 "trimmed": {"study": "trimmed", "vs": "fedavg", "paper": {"difference": [">0"]}}}}}  # the claim
    spec.pop("headlines", None)  # (they name the paper's tables, left out of this copy)
    # the paper's workload (conf/experiment/fedgbo_table4_smoke.yaml) less the weighting it sets for every method
    # there: the trimmed mean has none (its config has no such key)
    spec["workload"] = ["dataset=mnist1d", "partition=fedgbo_table4_smoke", "model=mlp", "delay=constant",
                        "algorithm.local_steps=10", "concurrency=10", "max_rounds=300", "max_trips=3000", "eval_every=100",
                        "target_accuracy=0.6", "vmap_clients=true", "threads=1"]
    spec["runs_dir"], spec["tuned_dir"] = str(tmp_path / "runs"), str(tmp_path / "tuned")
    path = tmp_path / "my_fedgbo.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.slow
def test_a_plugin_method_runs_under_a_paper_s_protocol_and_gets_its_verdict(tmp_path, monkeypatch, shared_data_root):
    plugin = tmp_path / "my_plugin"  # outside the repository, as a user's package is
    shutil.copytree(REPO / "tests" / "example_plugin", plugin)
    monkeypatch.syspath_prepend(str(plugin))
    monkeypatch.setenv("FL_BENCH_PLUGINS", "my_fl_extensions")
    searchpath = f"hydra.searchpath=[file://{plugin / 'conf'}]"
    spec = _my_protocol(tmp_path)

    reproduction = Reproduction(spec, smoke=True, runs_dir=tmp_path / "runs", jobs=1, in_process=True, every_arm=True,
                                overrides=[searchpath, f"data_root={shared_data_root}", "max_rounds=5"])
    assert reproduction.spaces[-1] == plugin / "conf" / "hparams_search"  # where its own space is found
    reproduction.run([], tmp_path / "out")

    evidence = pd.read_csv(tmp_path / "out" / "trimmed_vs_fedavg_evidence.csv").set_index("arm")
    assert evidence.loc["trimmed", "vs"] == "fedavg" and evidence.loc["trimmed", "verdict"] in (
        "reproduces", "differs", "inconclusive")
    page = (tmp_path / "out" / "trimmed_vs_fedavg.md").read_text()
    assert "Trimmed against FedAvg: " in page and "{effect:trimmed}" not in page
    # a smoke point's one seed is below the protocol's minimum: on the scoreboard apart, not counted
    verdict = evidence.loc["trimmed", "verdict"]
    assert f"trimmed_vs_fedavg: trimmed ({verdict}, 1 seed)." in (tmp_path / "out" / "README.md").read_text()

    # its space is checked like the paper's: a special case outside it stops before any run
    broken = spec.read_text().replace("algorithm.trim_fraction: 0.0", "algorithm.trim_fraction: 0.05")
    spec.write_text(broken)
    with pytest.raises(ConfigError, match="study trimmed: its special case's algorithm.trim_fraction=0.05 lies outside "
                                         "its space trimmed_fedavg_smoke"):
        Reproduction(spec, smoke=True, runs_dir=tmp_path / "runs", jobs=1, overrides=[searchpath])
