"""The documentation site (mkdocs.yml, docs/): its generated configuration reference lists every key of every
config group, computed here from the schema registry; its output reference every file, column and
summary.json key the code writes; every paper on the scoreboard has a page that shows its reproduction and
results, and every module an API page; and (slow) ``mkdocs build --strict`` passes."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from fl_bench.schema import choice, require

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "docs" / "gen"))  # the site's generators (docs/gen/site.py runs them in a build)

import config_reference  # noqa: E402
import hooks  # noqa: E402
import output_reference  # noqa: E402
import pages  # noqa: E402

# A group chosen inside another group's option (``algorithm/server_optimizer=adam``) and the prefix of its keys;
# every other group is a field of the root schema.
NESTED = {group: f"algorithm.{group}." for group in ("server_optimizer", "weighting", "staleness", "work_schedule")}


@pytest.fixture(scope="module")
def reference() -> str:
    return config_reference.config_reference()


def _section(text: str, heading: str) -> str:
    """The part of ``text`` under the heading line that starts with ``heading``, up to the next heading of its
    level or above."""
    start = text.index(f"\n{heading}") + 1
    level = heading.split(" ")[0]
    following = re.search(rf"^#{{1,{len(level)}}} ", text[start + len(heading):], re.M)
    return text[start:start + len(heading) + following.start()] if following else text[start:]


def _keys(cls: type, prefix: str) -> set[str]:
    """Every key of a schema as the command line sets it; a nested config that is no group (``wandb``) adds its own."""
    keys = set()
    for field in dataclasses.fields(cls):
        keys.add(prefix + field.name)
        hint = typing.get_type_hints(cls)[field.name]
        if dataclasses.is_dataclass(hint) and not _is_group(hint):
            keys |= _keys(hint, f"{prefix}{field.name}.")
    return keys


def _is_group(hint: type) -> bool:
    """A config type whose values are a group's options (``algorithm.server_optimizer``), not keys of its own."""
    from fl_bench.schema import SCHEMAS

    return any(issubclass(option, hint) for options in SCHEMAS.values() for option in options.values())


def test_the_configuration_reference_lists_every_key_of_every_option_of_every_group(reference):
    from fl_bench.runs.config import Config
    from fl_bench.schema import SCHEMAS

    root_groups = {f.name for f in dataclasses.fields(Config) if f.name in SCHEMAS}
    assert set(SCHEMAS) - root_groups <= set(NESTED)  # a new nested group: say where its keys live (NESTED)
    checked = 0
    for group, options in SCHEMAS.items():
        shown = NESTED.get(group, f"{group}.").rstrip(".").replace(".", "/")
        for name, cls in options.items():
            if not cls.__module__.startswith("fl_bench."):
                continue  # a plugin's, registered by another test in this process
            table = _section(reference, f"### `{shown}`: schema `{name}`")
            for key in _keys(cls, NESTED.get(group, f"{group}.")):
                assert f"| `{key}` |" in table, f"{group}={name}: {key} is not in the configuration reference"
                checked += 1
        listed = _section(reference, f"## `{shown}`")
        for path in (REPO / "conf" / shown).glob("*.yaml"):
            assert f"| `{path.stem}` |" in listed, f"conf/{shown}/{path.name} is not in the configuration reference"
    run = _section(reference, "## The run's own keys")
    for key in _keys(Config, ""):
        assert f"| `{key}` |" in run, f"the run's key {key} is not in the configuration reference"
    assert {"wandb.mode", "pruning.objective"} <= _keys(Config, "") and checked > 500


def test_the_reference_shows_each_keys_allowed_values_default_and_comment(reference):
    from fl_bench.clients.hardware import ACCELERATORS

    def row(section: str, key: str) -> str:
        return next(line for line in section.splitlines() if line.startswith(f"| `{key}` |"))

    weighting = row(_section(reference, "### `algorithm`: schema `fedbuff`"), "algorithm.weighting")
    assert "algorithm/weighting" in weighting  # a component: the row links to its group, which lists each option
    assert all(f"`{option}`" in _section(reference, "## `algorithm/weighting`") for option in ("uniform", "examples"))
    accelerator = row(_section(reference, "## The run's own keys"), "accelerator")
    assert all(f"`{value}`" in accelerator for value in ACCELERATORS) and "| str | `auto` |" in accelerator
    # a group's default is the option conf/config.yaml chooses, linked to the group
    assert "| `algorithm` | group [`algorithm`](#algorithm) | `fedbuff` |" in reference
    lr = row(_section(reference, "### `algorithm/server_optimizer`: schema `momentum`"), "algorithm.server_optimizer.momentum")
    assert "| float | `0.9` |" in lr and "must be in \\[0, 1)" in lr and "beta" in lr


@dataclasses.dataclass
class _Example:
    """An example schema."""

    # what it is,
    # on two lines
    first: int = 1  # and beside it
    second: str = "a"
    third: typing.Optional[list[int]] = None

    def __post_init__(self) -> None:
        choice("x.second", self.second, ("a", "b"))
        require(self.first >= 1, "x.first", self.first, "must be >= 1")


def test_a_field_s_comment_type_and_checks_are_read_from_its_source():
    assert config_reference.field_comment(_Example, "first") == "what it is, on two lines and beside it"
    assert config_reference.field_comment(_Example, "second") == ""
    assert config_reference.checks(_Example) == {"second": ["one of `a`, `b`"], "first": ["must be &gt;= 1"]}
    assert config_reference.type_name(typing.get_type_hints(_Example)["third"]) == "list[int] or null"
    assert config_reference.class_doc(_Example) == "An example schema."


def test_the_output_reference_lists_every_file_and_column_the_code_names():
    from fl_bench.engine.trip_log import TripLog
    from fl_bench.runs.callbacks import TaskMetricsLog
    from fl_bench.runs.run_dir import RESULT_FILES, SUMMARY
    from fl_bench.runs.run_log import METRIC_COLUMNS

    sections = output_reference.sections()
    for section, names in [("run files", (*RESULT_FILES, SUMMARY)), ("metrics.csv", METRIC_COLUMNS),
                           ("trips.csv", (*TripLog.COLUMNS, *TripLog.BEHAVIOUR_COLUMNS)),
                           ("task_metrics.csv", TaskMetricsLog.COLUMNS)]:
        for name in names:
            assert f"| `{name}` |" in sections[section], f"{section}: {name}"
    page = (REPO / "docs" / "reference" / "outputs.md").read_text()
    assert all(f"<!-- generated: {name} -->" in page for name in sections)


def test_a_column_without_a_written_meaning_stops_the_build(monkeypatch):
    from fl_bench.runs import run_log

    monkeypatch.setattr(run_log, "METRIC_COLUMNS", (*run_log.METRIC_COLUMNS, "new_column"))
    with pytest.raises(RuntimeError, match="new_column"):
        output_reference.metric_columns()


@pytest.mark.slow  # two short runs, about 10 s
def test_every_key_of_a_runs_summary_is_in_the_output_reference(run_config):
    documented = output_reference.summary_keys()
    unreliable, _, _ = run_config("max_trips=60", "eval_every=30", "behaviour=unreliable", "dp=ftrl",
                                  "dp.noise_multiplier=1", "dp.max_participations=null", name="unreliable")
    stragglers, _, _ = run_config("experiment=hfl_convex_smoke", "max_rounds=2", "eval_every=20", name="stragglers")
    for summary in (unreliable, stragglers):
        assert set(summary) - set(documented) == set()
    assert {"dp_epsilon", "failed_trips", "final_val_accuracy_by_group", "files"} <= set(unreliable) | set(stragglers)


def test_every_paper_on_the_scoreboard_has_a_page_with_its_reproduction_and_results():
    shown = {name: path for path in (REPO / "docs").rglob("*.md") for name in pages.MARKER.findall(path.read_text())}
    assert pages.sections_needed() <= set(shown)
    scoreboard = (REPO / "results" / "README.md").read_text()
    for path, spec in pages._reproductions().items():
        page = shown[f"paper {spec['paper']}"].relative_to(REPO / "docs").as_posix()
        section = pages.generated(f"paper {spec['paper']}", page)
        assert f"python -m fl_bench.analysis.reproduce sweeps/{path.name}" in section
        first = re.search(rf"\n## {re.escape(spec['paper'])}\n\n(.+)\n", scoreboard).group(1)
        unlinked = lambda text: re.sub(r"\]\([^)]*\)", "]", text)  # noqa: E731 (links point into the site's results/)
        assert unlinked(first) in unlinked(section)  # the scoreboard's section, as it is


def test_every_module_has_an_api_page_listed_in_the_navigation():
    modules = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
               for p in (REPO / "fl_bench").rglob("*.py")}
    api = pages.api_pages()
    assert {m for text in api.values() for m in re.findall(r"^::: (\S+)$", text, re.M)} == modules
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    assert set(api) <= pages._nav_pages(nav)


def test_a_link_out_of_docs_points_to_the_sites_copy_and_any_other_is_left_to_the_strict_build():
    # written as GitHub resolves them from docs/papers/fedbuff.md; the site holds results/ and the README (index.md)
    assert hooks.site_link("../../results/README.md", "papers/fedbuff.md") == "../results/README.md"
    assert hooks.site_link("../../README.md", "papers/fedbuff.md") == "../index.md"
    assert hooks.site_link("../results/benchmarks.md", "benchmarks.md") == "results/benchmarks.md"
    assert hooks.site_link("../concepts/privacy.md", "papers/fedbuff.md") == "../concepts/privacy.md"
    assert hooks.site_link("../../fl_bench/schema.py", "papers/fedbuff.md") == "../../fl_bench/schema.py"  # not in the site
    assert hooks.site_link("https://example.org/x.md", "index.md") == "https://example.org/x.md"


@pytest.mark.slow  # the whole site, about 20 s
def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "algorithm.buffer_size" in (tmp_path / "reference" / "config" / "index.html").read_text()
    assert "What holds, paper by paper" in (tmp_path / "index.html").read_text()  # the README's headlines


def _site(root: Path, scoreboard_label: str, api_page: str) -> Path:
    """A built site in miniature: the home page's navigation, the scoreboard with a verdict table linking to
    a table's page (a verdict table too), and an API page."""
    nav = (f'<nav class="md-nav md-nav--primary"><a href="." class="md-nav__link">Home</a>'
           f'<a href="results/" class="md-nav__link"><span>{scoreboard_label}</span></a>'
           f'<a href="reference/api/" class="md-nav__link">API</a></nav>')
    table = "<table><thead><tr><th>arm</th><th>verdict</th></tr></thead><tbody><tr><td>a</td><td>reproduces</td></tr></tbody></table>"
    files = {"index.html": f"<html><body>{nav}<p>Home</p></body></html>",
             "results/index.html": f"<html><body>{nav}{table}<a href='../results/t1/#evidence'>t1</a></body></html>",
             "results/t1/index.html": f"<html><body>{nav}{table}</body></html>",
             "reference/api/index.html": f"<html><body>{nav}{api_page}</body></html>"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_site_check_passes_a_clean_site_and_reports_raw_roles_a_missing_scoreboard_and_unreachable_tables(tmp_path):
    sys.path.insert(0, str(REPO / "docs"))
    import check_site

    clean = _site(tmp_path / "clean", "Scoreboard", "<p>Call <a href='#x'><code>finish</code></a> first.</p>")
    assert check_site.problems(clean) == [] and check_site.main([str(clean)]) == 0
    broken = _site(tmp_path / "broken", "Papers", "<p>Call :meth:<code>finish</code> first.</p>")
    (broken / "results" / "t2" / "index.html").parent.mkdir()
    (broken / "results" / "t2" / "index.html").write_text("<table><tr><th>Verdict</th></tr></table>")
    found = check_site.problems(broken)
    assert len(found) == 3 and check_site.main([str(broken)]) == 1
    assert found[0].startswith("reference/api/index.html: 1 raw Sphinx roles (:meth:<code>")
    assert "no entry Scoreboard" in found[1] and found[2].startswith("results/t2/index.html: a page with verdict tables")
