"""A report table as a W&B Report (fl_bench.analysis.wandb_report): its specification, checked offline on
runs logged with logger=wandb in offline mode."""

import io
import json
from pathlib import Path

import pytest

from fl_bench.analysis.report import main as report_main
from fl_bench.analysis.launch import run_in_process
from tests.helpers.arms import as_arms


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """FedBuff Table 1's smoke workload, tiny: fedbuff and fedavgm on seeds 0 and 1, logged to W&B offline."""
    root = tmp_path_factory.mktemp("wandb_runs")
    log = io.StringIO()  # (the command in this process: fl_bench.analysis.launch.run_in_process)
    code = run_in_process(["-m", "experiment=fedbuff_smoke", "algorithm=fedbuff,fedavgm", "seed=0,1", "max_trips=300",
                           "concurrency=20", "dataset.num_samples=3000", "eval_every=100", "partition.num_clients=200",
                           "logger=wandb", f"hydra.sweep.dir={root}"], log)
    assert code == 0, log.getvalue()
    return {path.parent.name: json.loads(path.read_text()) for path in root.rglob("summary.json")}, root


def selected(filters: list[dict], run: dict) -> bool:
    """Whether a W&B run (id, group) passes a run set's filterV2 items (all joined by AND here)."""
    fields = {("run", "name"): run["wandb_run_id"], ("run", "group"): run["wandb_group"]}
    for item in filters:
        assert item.get("connector", "AND") == "AND" and item["op"] == "IN"
        if fields[item["key"]["section"], item["key"]["name"]] not in item["value"]:
            return False
    return True


@pytest.mark.slow
def test_the_dry_run_specification_of_the_table_1_smoke_table(smoke_runs, tmp_path, capsys):
    """The Report's specification holds the table's name as title, the markdown table with every
    method's row, a run set whose filter selects exactly the table's runs (not the same group's run
    left out of the table, nor another group's), runs grouped by method, and one line plot per
    metric with client trips on x (and one with simulated time), plus the staleness histogram."""
    summaries, root = smoke_runs
    assert len(summaries) == 4 and {s["wandb_group"] for s in summaries.values()} == {"fedbuff_smoke"}
    left_out = next(name for name, s in summaries.items() if s["algorithm"] == "fedavgm" and s["seed"] == 1)
    table_runs = [root / name for name in summaries if name != left_out]
    report_main([*map(str, table_runs), "--name", "fedbuff_table1_smoke", "--out", str(tmp_path),
                 "--publish", "my-team/fl_bench", "--dry-run"])
    assert "W&B Report specification written to" in capsys.readouterr().out
    spec = json.loads((tmp_path / "fedbuff_table1_smoke_wandb_report.json").read_text())
    assert spec["displayName"] == "fedbuff_table1_smoke"
    assert spec["project"] == {"name": "fl_bench", "entityName": "my-team", "id": None}
    blocks = spec["spec"]["blocks"]
    text = next(b["content"] for b in blocks if b["type"] == "markdown-block")
    assert text.startswith("# fedbuff_table1_smoke") and "![" not in text
    table, evidence = text.split("## Evidence")  # the table, then its evidence (fl_bench.analysis.verdict)
    for section in (table, evidence):
        rows = [line for line in section.splitlines() if line.startswith("| fed")]
        assert sorted(row.split("|")[1].strip() for row in rows) == ["fedavgm", "fedbuff"]
    assert text == "\n".join(l for l in (tmp_path / "fedbuff_table1_smoke.md").read_text().splitlines() if not l.startswith("!["))
    grid = next(b for b in blocks if b["type"] == "panel-grid")["metadata"]
    (runset,) = grid["runSets"]
    filters = runset["filters"]["filters"]
    others = [*summaries.values(), {"wandb_run_id": "other1", "wandb_group": "default"}]
    chosen = {s["wandb_run_id"] for s in others if selected(filters, s)}
    assert chosen == {summaries[p.name]["wandb_run_id"] for p in table_runs} and len(chosen) == 3
    assert [g["name"] for g in runset["grouping"]] == ["algorithm.value.name"]
    panels = grid["panelBankSectionConfig"]["panels"]
    lines = [(p["config"]["xAxis"], p["config"]["metrics"]) for p in panels if p["viewType"] == "Run History Line Plot"]
    assert lines == [("trips", ["val_accuracy"]), ("sim_time", ["val_accuracy"])]
    histogram = [p for p in panels if p["viewType"] == "Vega2"]
    assert len(histogram) == 1 and "staleness" in json.dumps(histogram[0])


@pytest.mark.slow
def test_publish_without_credentials_or_wandb_runs_stops_in_one_line(smoke_runs, tmp_path, monkeypatch, capsys):
    summaries, root = smoke_runs
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    some_run = str(next(root.rglob("summary.json")).parent)
    with pytest.raises(SystemExit):
        report_main([some_run, "--name", "t", "--out", str(tmp_path), "--publish", "my-team/fl_bench"])
    assert capsys.readouterr().err.strip().splitlines() == [
        "fl_bench.analysis.report: error: --publish needs a W&B API key (WANDB_API_KEY or `wandb login`) and network access; "
        "--dry-run writes the Report's specification offline"]
    csv_run = Path(tmp_path / "csv_run")
    log = io.StringIO()
    assert run_in_process(["max_trips=50", "eval_every=50", "progress=false", f"hydra.run.dir={csv_run}"], log) == 0, log.getvalue()
    with pytest.raises(SystemExit):
        report_main([str(csv_run), "--name", "t", "--out", str(tmp_path), "--publish", "my-team/fl_bench", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fl_bench.analysis.report: error: --publish needs runs logged to W&B (logger=wandb)")
    with pytest.raises(SystemExit):
        report_main([some_run, "--name", "t", "--out", str(tmp_path), "--publish", "no-project", "--dry-run"])
    assert "give ENTITY/PROJECT" in capsys.readouterr().err


def test_a_censored_effect_keeps_its_bound_in_the_report():
    """issue 54: the Report's table is the page's, so an effect that is a lower bound keeps its '>' there."""
    import pandas as pd

    from fl_bench.analysis.verdict import evidence, evidence_markdown
    from fl_bench.analysis.wandb_report import build_report, specification

    runs = pd.DataFrame([{"method": m, "seed": s, "trips_to_target": t, "max_trips": 1000, "eval_every": 10,
                          "best_val_accuracy": 0.5} for m, values in
                         {"base": [100, 101, 99], "slow": [900, float("nan"), float("nan")]}.items()
                         for s, t in enumerate(values)])
    arms = {"slow": {"vs": "base", "paper": {"trips": [2.0]}, "claim": "size"}}
    found = evidence(runs, "base", as_arms(arms), "trips")
    page = "# toy\n\n" + evidence_markdown(runs, "base", as_arms(arms), "trips", found)
    frame = pd.DataFrame({"method": ["base", "slow"], "source": ["r1", "r2"], "wandb_run_id": ["a", "b"],
                          "wandb_group": ["g", "g"]})
    spec = specification(build_report("me/fl_bench", "toy", page, frame, ["algorithm.name"], offline=True))
    text = next(b["content"] for b in spec["spec"]["blocks"] if b["type"] == "markdown-block")
    effect = found.set_index("method").loc["slow"]
    assert f"| >{effect['effect']:.2f}× [{effect['effect_low']:.2f}, {effect['effect_high']:.2f}] |" in text
    assert "same side, more than" in text  # the bound, not a point, is compared with the band
