"""A page's sections come from a registry keyed by the measure's page kind (fl_bench.analysis.sections), and a
new measure is one module: docs/extending/measures.md's worked example (the final model's worst class), run as
the page writes it, registers its measure and section, and its page shows both with its evidence."""

import re
import sys
import textwrap
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import yaml

from fl_bench.analysis.measures import MEASURES, Measure
from fl_bench.analysis.report import refresh_page, write_report
from fl_bench.analysis.sections import SECTIONS, Section, register, report_measures, section_of
from fl_bench.errors import ConfigError
from tests.helpers.arms import as_arms

REPO = Path(__file__).parents[2]
PAGE = REPO / "docs" / "extending" / "measures.md"


def example_module() -> str:
    """The worked example's module, as the page shows it."""
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
               if block.startswith("# my_fl_extensions/worst_class.py")]
    return code


def example_table() -> dict:
    """The page's sweep file table on the example measure."""
    (block,) = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    return yaml.safe_load(textwrap.dedent(block))["tables"]


@pytest.fixture
def registries():
    """The registries as they are, given back after the test (the example's measure is not left registered)."""
    with mock.patch.dict(MEASURES), mock.patch.dict(SECTIONS):
        yield
    assert "worst_class" not in MEASURES and "worst_class" not in SECTIONS


def toy_frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Runs, metrics and trips of two methods on four seeds, by hand: fedlaavg's worst class is about 20
    points above fedavg's, their accuracy on every class about the same."""
    rng = np.random.default_rng(0)
    runs, metrics, trips = [], [], []
    for run, (method, seed) in enumerate((m, s) for m in ("fedavg", "fedlaavg") for s in (1, 2, 3, 4)):
        worst = (0.30 if method == "fedavg" else 0.50) + 0.01 * seed
        runs.append({"run": run, "method": method, "algorithm": method, "seed": seed, "status": "completed",
                     "max_trips": 1000, "server_steps": 100, "best_val_accuracy": 0.71, "final_val_accuracy": 0.70,
                     "final_val_accuracy_by_class": [worst, 0.9, 0.8, float("nan")], "target_accuracy": 0.6,
                     "trips_to_target": 500.0, "wall_seconds": 1.0})
        for trip in (250, 500, 750, 1000):
            metrics.append({"run": run, "method": method, "seed": seed, "trips": trip, "server_step": trip // 10,
                            "sim_time": trip / 2, "val_accuracy": 0.7 * trip / 1000 + rng.normal(0, 0.01)})
        trips += [{"run": run, "method": method, "staleness": k % 3, "used": 1, "num_examples": 10 + k} for k in range(6)]
    return pd.DataFrame(runs), pd.DataFrame(metrics), pd.DataFrame(trips)


def test_every_measure_a_report_page_shows_has_the_section_of_its_page_kind():
    assert set(report_measures()) == {name for name, m in MEASURES.items() if m.page != "fairness"}
    for name in report_measures():
        assert section_of(name) is SECTIONS[MEASURES[name].page]
    with pytest.raises(ValueError, match="measure 'fairness': choose one of trips, rounds"):
        section_of("fairness")  # FedStaleWeight's page is fl_bench.analysis.fairness's own


def test_the_worked_example_registers_its_measure_and_its_page_shows_its_section_and_evidence(registries, tmp_path):
    namespace = {}
    exec(compile(example_module(), "my_fl_extensions/worst_class.py", "exec"), namespace)
    measure = MEASURES["worst_class"]
    assert measure.kind == "difference" and SECTIONS["worst_class"] is section_of("worst_class")
    assert "worst_class" in report_measures()
    runs, metrics, trips = frames = toy_frames()
    # what the verdict reads: the worst class of each seed, in points
    values, missed = measure.samples(runs[runs["method"] == "fedavg"])
    assert values == pytest.approx([31, 32, 33, 34]) and not missed

    arms = as_arms({"fedavg": {}, "fedlaavg": {"paper": {"difference": [">0"]}}})
    table = write_report(frames, "worst", tmp_path, "fedavg", arms, title="Worst class", measure="worst_class")
    assert table.set_index("method").loc["fedlaavg", "worst_class"] == pytest.approx(52.5)
    page = (tmp_path / "worst.md").read_text()
    assert "The final model's accuracy (%) on its worst class, mean ± std over seeds 1, 2, 3, 4" in page
    assert "<!-- table: generated from worst.csv (worst_class); do not edit -->" in page
    assert "| fedlaavg | " in page and "52.50 ± 1.12" in page and "32.50 ± 1.12" in page
    # its evidence: medians of the worst class, the difference against fedavg and the verdict on the paper's side
    assert "Median worst-class accuracy (%) over the seeds" in page and "difference of medians in points" in page
    (row,) = [line for line in page.splitlines() if line.startswith("| fedlaavg ") and "reproduces" in line]
    assert "52.50 [51.00, 54.00]" in row and "+20.00 [+18.00, +22.00]" in row and "| >0 " in row
    assert {"worst_curves.png", "worst_staleness.png", "worst_examples.png", "worst_forest.png"} <= {
        p.name for p in tmp_path.iterdir()}
    # the scoreboard renders the table block again from worst.csv, in the example's markdown
    assert refresh_page(tmp_path, "worst", page, draw=False) == page


def test_a_measure_named_in_a_sweep_file_is_found_in_its_plugin_module(registries, tmp_path, monkeypatch):
    """The worked example as a plugin module (FL_BENCH_PLUGINS): the sweep file's loader imports it on meeting
    ``measure: worst_class``, and the table on it loads; a name no module registers is refused."""
    from fl_bench.analysis.sweep_file import load_sweep_file

    (tmp_path / "worst_class_measure.py").write_text(example_module())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FL_BENCH_PLUGINS", "worst_class_measure")
    sweep = yaml.safe_load((REPO / "sweeps" / "fedlaavg_smoke.yaml").read_text())
    sweep["tables"].update(example_table())
    path = tmp_path / "my_fedlaavg.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    try:
        spec = load_sweep_file(path)
        assert spec.tables["fedlaavg_worst_class_smoke"].measure == "worst_class" and "worst_class" in MEASURES
        path.write_text(path.read_text().replace("measure: worst_class", "measure: worst_klass"))
        with pytest.raises(ConfigError, match="worst_klass.*did you mean worst_class"):
            load_sweep_file(path)
    finally:
        sys.modules.pop("worst_class_measure", None)  # (imported here, not left for other tests)


def test_register_refuses_a_name_or_a_page_kind_taken_and_a_page_kind_without_a_section(registries):
    section = Section(table=lambda *a: pd.DataFrame(), describe=lambda *a: "", markdown=lambda t: "")
    with pytest.raises(ValueError, match="'trips' is registered already"):
        register(Measure("trips", to_target=True, page="to_target", unit="x"))
    with pytest.raises(ValueError, match="page kind 'accuracy' has its section already"):
        register(Measure("tail", to_target=False, page="accuracy", unit="x"), section)
    with pytest.raises(ValueError, match="page kind 'tail' has no section"):
        register(Measure("tail", to_target=False, page="tail", unit="x"))
    # a measure of an existing page kind brings no section: the accuracy page shows it
    register(Measure("tail", to_target=False, page="accuracy", unit="tail accuracy (%)", reads=lambda runs: runs["x"]))
    assert section_of("tail") is SECTIONS["accuracy"]
