"""Every documented reproduction runs: each arm of each sweep file in sweeps/ runs at the file's smoke
point (one seed, in this process) and appears in its table, so that no arm kind (a centralized S-SGD
arm, a behaviour, a trace) can break a reproduction unseen."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl_bench.analysis.reproduce import Reproduction
from fl_bench.analysis.sweep_file import load_sweep_file
from tests.conftest import compose_run_config

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def _shakespeare_users(data_root: Path) -> None:
    """LEAF's Shakespeare JSON of 160 speaking roles (enough for the smoke workload's 5% sample to
    hold its 7 concurrent clients), prepared as a run of dataset=shakespeare_smoke reads it."""
    from fl_bench.data.leaf import LeafData, write_leaf_json
    from fl_bench.data.sources import prepare

    text = "To be, or not to be: that is the question. Whether 'tis nobler in the mind to suffer. " * 4
    users = {f"ROLE{u}": 200 for u in range(160)}
    data = {u: {"x": [text[(i + k) % 80:][:80] for i in range(n)], "y": [text[(i + k) % 80 + 80] for i in range(n)]}
            for k, (u, n) in enumerate(users.items())}
    write_leaf_json(LeafData(list(users), list(users.values()), data),
                    data_root / "raw" / "shakespeare" / "all_data" / "all_data_0.json")
    prepare(compose_run_config("dataset=shakespeare_smoke", f"data_root={data_root}", "dataset.origin=leaf_json").dataset,
            log=lambda _: None)


@pytest.mark.slow
@pytest.mark.parametrize("spec", sorted(SWEEPS.glob("*_smoke.yaml")), ids=lambda path: path.stem)
def test_every_arm_of_every_sweep_file_runs_at_its_smoke_point_and_is_reported(spec, tmp_path):
    overrides = [f"data_root={tmp_path / 'data'}"]
    if spec.stem == "fedgbo_shakespeare_smoke":  # its plays cannot be downloaded here: LEAF's JSON instead
        _shakespeare_users(tmp_path / "data")
        overrides.append("dataset.origin=leaf_json")
    out = tmp_path / "out"
    Reproduction(spec, smoke=True, runs_dir=tmp_path / "runs", jobs=1, overrides=overrides, every_arm=True,
                 in_process=True).run([], out)
    for name, table in load_sweep_file(spec)["tables"].items():
        page = (out / f"{name}.md").read_text()
        assert table["title"] in page and "Protocol (registered" in page
        missing = [label for label in table["arms"] if f"| {label} " not in page]
        assert not missing, f"{name}: no row for {missing}"
