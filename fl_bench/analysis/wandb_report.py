"""A report table published as a Weights & Biases Report, beside the runs it came from.

Built with wandb-workspaces' Reports API (``wandb_workspaces.reports.v2``): the table's markdown
(paper's numbers beside ours, machine, seeds, budget), a run set filtered to exactly the table's
runs (their W&B group, one per experiment, and their run ids), line plots of validation accuracy
against client trips and against simulated time, grouped by method, and a histogram of the trips'
staleness from each run's ``trips_table``. ``--dry-run`` writes the Report's specification (its
JSON model) instead of saving it, so it can be read and tested offline.

Runs are labelled at ``wandb.init`` by :func:`fl_bench.runs.run_log.run_labels`: group = the experiment preset
(``experiment_name``), tags = ``algorithm:...``, ``dataset:...``, ``seed:...``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from fl_bench.errors import ConfigError
from fl_bench.runs.run_log import has_wandb_credentials

REPORT_METRICS = ("val_accuracy",)  # one line plot per metric and x axis
X_AXES = (("trips", "client trips"), ("sim_time", "simulated time"))


def run_filter(runs: pd.DataFrame) -> str:
    """The run set's filter: the table's W&B groups and exactly its run ids."""
    missing = runs.loc[runs["wandb_run_id"].isna(), "source"].tolist() if "wandb_run_id" in runs else runs["source"].tolist()
    if missing:
        raise ConfigError(f"--publish needs runs logged to W&B (logger=wandb); these were not: {', '.join(map(str, missing[:3]))}"
                          + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    groups = sorted(runs["wandb_group"].dropna().unique().tolist()) if "wandb_group" in runs else []
    ids = sorted(runs["wandb_run_id"].tolist())
    group = f"Metric('Group') in {groups!r} and " if groups else ""
    return f"{group}Metric('ID') in {ids!r}"


def build_report(target: str, name: str, markdown: str, runs: pd.DataFrame, by: list[str], offline: bool = False):
    """The Report for the table ``name`` (its .md text ``markdown``) over ``runs`` (the report's run
    frame: ``method``, ``wandb_run_id``, ``wandb_group``) in W&B project ``target`` = ENTITY/PROJECT.
    ``offline``: the run set names no project (the report's own), so that its specification needs no
    lookup of the project's id on the server."""
    import wandb_workspaces.reports.v2 as wr

    entity, project = _split(target)
    where = {} if offline else {"entity": entity, "project": project}
    runset = wr.Runset(**where, name=name, filters=run_filter(runs),
                       groupby=[f"config.{key}" for key in by])
    panels = [
        wr.LinePlot(title=f"{metric} vs {label}", x=x, y=[metric], title_x=label, title_y=metric)
        for metric in REPORT_METRICS for x, label in X_AXES
    ]
    # the query CustomChart.from_table builds, with W&B's histogram preset over the logged per-trip table
    panels.append(wr.CustomChart(
        query={"summaryTable": {"tableKey": "trips_table"}}, chart_name="wandb/histogram/v0",
        chart_fields={"value": "staleness"}, chart_strings={"title": "staleness of the trips"},
    ))
    # the .md file's local plots do not travel: the panels below draw them from the runs
    text = "\n".join(line for line in markdown.splitlines() if not line.startswith("!["))
    return wr.Report(project=project, entity=entity, title=name, width="fluid",
                     description=f"fl_bench report table {name}: the table, its runs and their curves",
                     blocks=[wr.MarkdownBlock(text=text), wr.PanelGrid(runsets=[runset], panels=panels)])


def specification(report) -> dict[str, Any]:
    """The Report's JSON model, as the API would save it."""
    return json.loads(report._to_model().model_dump_json(by_alias=True))


def publish(target: str, name: str, md_path: Path, runs: pd.DataFrame, by: list[str], dry_run: bool) -> str:
    """Save the Report (or, with ``dry_run``, write its specification next to the .md file); returns
    the Report's URL, or the specification's path. The URL is added to the .md file."""
    report = build_report(target, name, md_path.read_text(), runs, by, offline=dry_run)
    if dry_run:
        path = md_path.with_name(f"{md_path.stem}_wandb_report.json")
        path.write_text(json.dumps(specification(report), indent=2) + "\n")
        return str(path)
    if not has_wandb_credentials():
        raise ConfigError("--publish needs a W&B API key (WANDB_API_KEY or `wandb login`) and network access; "
                          "--dry-run writes the Report's specification offline")
    try:
        report.save()
    except Exception as error:  # network, permissions: one line, not the client's traceback
        raise ConfigError(f"--publish {target}: W&B refused or could not be reached: "
                          f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    with md_path.open("a") as md:
        md.write(f"\nW&B Report: {report.url}\n")
    return report.url


def _split(target: str) -> tuple[str, str]:
    entity, _, project = target.partition("/")
    if not entity or not project or "/" in project:
        raise ConfigError(f"--publish {target!r}: give ENTITY/PROJECT, e.g. my-team/fl_bench")
    return entity, project
