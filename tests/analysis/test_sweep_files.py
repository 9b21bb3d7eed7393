"""Every documented reproduction runs: each arm of each sweep file in sweeps/ runs at the file's smoke
point (one seed, in this process; a few files' runs shorter still, SHORTER below) and appears in its table,
so that no arm kind (a centralized S-SGD arm, a behaviour, a trace) can break a reproduction unseen."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fl_bench.analysis import scoreboard
from fl_bench.analysis.verdict import PLACEHOLDER
from fl_bench.analysis.reproduce import Reproduction
from fl_bench.analysis.sweep_file import load_sweep_file
from tests.conftest import compose_run_config

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def _shakespeare_users(data_root: Path, options: list[str]) -> None:
    """LEAF's Shakespeare JSON of 8 speaking roles (the smoke workload trains 7 at once) with room for
    LEAF's sequential split (a gap of 79 windows before a role's test windows), prepared as a run of
    dataset=shakespeare_smoke with ``options`` reads it."""
    from fl_bench.data.leaf import LeafData, write_leaf_json
    from fl_bench.data.sources import prepare

    text = "To be, or not to be: that is the question. Whether 'tis nobler in the mind to suffer. " * 8
    users = {f"ROLE{u}": 450 for u in range(8)}
    data = {u: {"x": [text[(i + k) % 80:][:80] for i in range(n)], "y": [text[(i + k) % 80 + 80] for i in range(n)]}
            for k, (u, n) in enumerate(users.items())}
    write_leaf_json(LeafData(list(users), list(users.values()), data),
                    data_root / "raw" / "shakespeare" / "all_data" / "all_data_0.json")
    prepare(compose_run_config("dataset=shakespeare_smoke", *options).dataset, log=lambda _: None)


def _fashion_mnist_stand_in(data_root: Path) -> None:
    """A prepared Fashion-MNIST cache of 2,000 + 400 random 28x28 images, every label alike, in
    ``data_root`` (what a run of dataset=fmnist reads): the paper-scale files' arms at their smoke point
    without Debian's dataset-fashion-mnist (fl_bench.data's tests check that copy's files themselves)."""
    import numpy as np

    from fl_bench.data.cache import is_prepared, save_prepared
    from fl_bench.data.federated import Examples

    directory = data_root / "fmnist" / "default"
    if is_prepared(directory):
        return
    rng = np.random.default_rng(0)
    train, test = (Examples(rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8), np.arange(n) % 10) for n in (2000, 400))
    save_prepared(directory, train, test, {"source": "fmnist", "train_examples": 2000, "test_examples": 400, "num_classes": 10})


# The paper-scale files on the papers' own data (issue 68) are documented reproductions too.
SWEEP_FILES = sorted([*SWEEPS.glob("*_smoke.yaml"), *SWEEPS.glob("*_fmnist.yaml")])

# Shorter runs than the smoke points of the files whose arms' training was the largest part of their test's
# time (the rest is composing each arm's command and writing the pages): every arm still builds its data,
# model, algorithm and behaviour, trains, steps the server, is evaluated and reported (an arm's own smoke
# overrides come after these). HFL's 12 rounds stay: stragglers up to 10 rounds late merge within them.
SHORTER = {
    "devices_smoke": ["max_trips=150"],  # of 300, evaluated at the end (eval_every=150)
    "fedbuff_fig4_smoke": ["max_trips=200", "eval_every=100"],  # of 400 and 200
    "fedgbo_smoke": ["max_trips=50", "max_rounds=5"],  # of 200 and 20 (eval_every=50)
    "fedlaavg_smoke": ["max_trips=100"],  # of 300 (eval_every=50)
    "hfl_smoke": ["max_rounds=4"],  # of 12 (its S-SGD arms: 2); stragglers 1-3 rounds late still merge
    "partial_work_smoke": ["max_trips=150"],  # of 300 (eval_every=150)
}


@pytest.mark.slow
@pytest.mark.parametrize("spec", SWEEP_FILES, ids=lambda path: path.stem)
def test_every_arm_of_every_sweep_file_runs_at_its_smoke_point_and_is_reported(spec, tmp_path, shared_data_root,
                                                                                monkeypatch):
    # The scoreboard under --out is this file's paper's alone: a reproduction's scoreboard also reads every other
    # sweep file in sweeps/ (up to 5 s in each of these tests), as the reproductions run as commands here do
    # (tests/analysis/test_launchers.py, test_reproduce.py) and the scoreboard's tests check on the shipped evidence
    monkeypatch.setattr(scoreboard, "reproductions", lambda *directory: [])
    # Every arm is composed once, by its launch here: the driver's check, which composes each before any run so that
    # a misspelt override fails before hours of runs, would compose each again (test_reproduce.py pins the check)
    monkeypatch.setattr(Reproduction, "check_arms", lambda self, arms: None)
    overrides = [f"data_root={shared_data_root}"]
    if spec.stem.endswith("_fmnist"):
        _fashion_mnist_stand_in(shared_data_root)
    if spec.stem == "fedgbo_shakespeare_smoke":  # its plays cannot be downloaded here: a small LEAF JSON instead
        overrides += ["dataset.origin=leaf_json", "dataset.fraction=1.0"]
        _shakespeare_users(shared_data_root, overrides)
        overrides += ["max_rounds=1", "algorithm.local_steps=2"]  # its char GRU is the slowest model here
    overrides += SHORTER.get(spec.stem, [])
    out = tmp_path / "out"
    Reproduction(spec, smoke=True, runs_dir=tmp_path / "runs", jobs=1, overrides=overrides, every_arm=True,
                 in_process=True).run([], out)
    sweep = load_sweep_file(spec)
    for name, table in sweep.tables.items():
        page = (out / f"{name}.md").read_text()
        assert page.startswith(f"# {name}\n\n{table.title}") and "## Evidence" in page
        assert f"Protocol (registered {sweep.protocol.registered})" in page
        assert all(reading[:60] in page for reading in sweep.readings)  # every reading under every table
        assert not PLACEHOLDER.search(page) and (out / f"{name}_evidence.csv").is_file()  # findings filled from it
        missing = [label for label in table.arms if f"| {label} " not in page]
        assert not missing, f"{name}: no row for {missing}"
        plots = ["weight_share"] if table.measure == "fairness" else ["curves", "staleness", "examples"]
        assert all((out / f"{name}_{plot}.png").stat().st_size > 0 for plot in plots)
    assert f"## {sweep.paper}" in (out / "README.md").read_text()  # the scoreboard
    record = yaml.safe_load((out / f"{spec.stem}_paper.yaml").read_text())  # what it read of the paper
    assert record["tables"] == list(sweep.tables) and [h["quote"] for h in record["headlines"]] == [h.quote for h in sweep.headlines]


def test_the_sweep_file_is_one_typed_object_whose_schema_holds_every_default(tmp_path):
    """issue 70: loading gives one typed object that every stage reads by attribute; the schema is the one place
    for defaults: a power rule without ``cap`` and a confirmation without ``aggregate`` come back with the
    schema's (30, worst), a field whose default is null (the tuner's ``pruner``) is None, and the record of the
    search a tuned file keeps is the one every committed tuned file was made with (no study is retuned)."""
    from fl_bench.analysis.protocol import Confirm, Power, Protocol
    from fl_bench.analysis.sweep_file import SweepFile

    text = (SWEEPS / "fedgbo_smoke.yaml").read_text()
    assert "cap: 30}" in text and "confirm: {finalists: 4, seeds: [102, 103, 104]}" in text
    path = tmp_path / "fedgbo_smoke.yaml"
    path.write_text(text.replace(", cap: 30}", "}"))
    spec = load_sweep_file(path)
    assert isinstance(spec, SweepFile) and isinstance(spec.protocol, Protocol)
    assert spec.protocol.power == Power(pilot_seeds=[201, 202, 203, 204, 205], cap=30)
    assert spec.protocol.tuner.confirm == Confirm(finalists=4, seeds=[102, 103, 104], aggregate="worst")
    assert spec.protocol.tuner.pruner is None and spec.protocol.amended
    assert spec.tables["fedgbo_table4_smoke"].arms["fedavg"].vs is None  # an arm without vs
    assert "pruner" not in spec.protocol.tuner.kept() and "confirm" not in spec.protocol.tuner.kept()
    for sweep in sorted(SWEEPS.glob("*_smoke.yaml")):
        loaded = load_sweep_file(sweep)
        for kept in sorted(Path(loaded.tuned_dir).glob("*.yaml")) if loaded.protocol.tuner else []:
            assert yaml.safe_load(kept.read_text())["tuner"] == loaded.protocol.tuner.kept(), kept
