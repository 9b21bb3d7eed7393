"""The package's dependencies point one way: no module imports, directly or through others, a module
that imports it back, counting lazy imports inside functions and typing-only ones. The floors stay
where they are: the contracts at the bottom, an engine that knows nothing of DP and asks no role
whether it has a hook, one name per concept, no module past 700 lines, and the analysis a pipeline whose
stages read only the ones before them."""

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "fl_bench"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its body (a name imported from a
    module counts as that module; a package's own submodules do not count as cycles with it)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def test_no_import_cycles():
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(path): imports_of(path, modules) for path in paths}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        raise AssertionError(f"import cycle: {' -> '.join(error.args[1])}") from None


# The layers, lowest first: a module imports only from its own package and lower layers (a command's
# ``__main__`` module may import anything: it is the top of its package). fl_bench.commands imports only sys.
LAYERS = [("contracts", "errors", "commands"), ("schema", "numerics"), ("data", "traces"), ("models",), ("engine",), ("clients",),
          ("algorithms", "privacy"), ("runs",), ("analysis",)]
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


def test_dependencies_point_down_the_layers():
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    upward = []
    for path in paths:
        source = module_name(path)
        if source in ("fl_bench", "fl_bench.__main__") or source.endswith(".__main__"):
            continue
        for target in imports_of(path, modules):
            mine, theirs = source.split(".")[1], target.split(".")[1]
            if mine != theirs and RANK[theirs] >= RANK[mine]:
                upward.append(f"{source} -> {target}")
    assert not upward, "imports that point up (or across) the layers: " + ", ".join(upward)


def test_no_algorithm_names_a_run_even_as_a_string_target():
    """The server algorithms are below the runs: none imports one, nor names one as a config's ``_target_``
    (the pooled-data reference's config lives with its run, fl_bench.runs.pooled)."""
    named = [str(path.relative_to(PACKAGE)) for path in sorted((PACKAGE / "algorithms").rglob("*.py"))
             if "fl_bench.runs" in path.read_text()]
    assert not named, f"algorithms that name fl_bench.runs: {named}"


def test_every_package_says_what_belongs_in_it():
    for init in PACKAGE.rglob("__init__.py"):
        text = init.read_text()
        assert text.lstrip().startswith('"""') and len(text.split('"""')[1]) > 80, f"{init} has no docstring"


def _graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(path): imports_of(path, modules) for path in paths}


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start``'s modules import, directly or through others (a package: every module in it)."""
    todo = [name for name in graph if name == start or name.startswith(start + ".")]
    seen = set()
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_the_contracts_are_the_floor():
    """Messages and roles are declared where everything may import them and they import nothing back."""
    assert _graph()["fl_bench.contracts"] == set()


def test_the_engine_knows_nothing_of_dp_nor_of_the_algorithms_and_clients():
    """The loop drives the contracts: DP is a server that wraps another (fl_bench.privacy), which in turn
    is written against the contracts, not against the engine."""
    graph = _graph()
    above = [m for m in _reachable(graph, "fl_bench.engine") if m.split(".")[1] in ("privacy", "algorithms", "clients")]
    assert not above, f"the engine reaches {above}"
    engine = [m for m in _reachable(graph, "fl_bench.privacy") if m.startswith("fl_bench.engine")]
    assert not engine, f"fl_bench.privacy reaches {engine}"


def test_the_engine_asks_no_role_whether_it_has_a_hook():
    """Every hook of a server, trainer or step policy is declared with a default (fl_bench.contracts), so
    the engine calls it: no hasattr/getattr on a role, and no branch on DP (no ``privacy`` attribute)."""
    roles = ("server", "trainer", "policy", "privacy")
    probes = []
    for path in sorted((PACKAGE / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
                    and any(role in ast.unparse(node.args[0]) for role in roles)):
                probes.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.Attribute) and node.attr == "privacy":
                probes.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not probes, "the engine probes its roles: " + "; ".join(probes)


def test_no_name_is_both_a_protocol_and_a_class():
    """A structural type (typing.Protocol) and a class of the same name read as one concept and are two."""
    protocols, classes = {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                is_protocol = any(ast.unparse(base) in ("Protocol", "typing.Protocol") for base in node.bases)
                (protocols if is_protocol else classes).setdefault(node.name, []).append(module_name(path))
    both = {name: (protocols[name], classes[name]) for name in protocols.keys() & classes.keys()}
    assert not both, f"both a Protocol and a class: {both}"


def test_no_module_is_longer_than_700_lines():
    long = [f"{path.relative_to(PACKAGE.parent)} ({n})" for path in sorted(PACKAGE.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > 700]
    assert not long, "modules over 700 lines (split them by role): " + ", ".join(long)


# The analysis as a one-way pipeline, lowest floor first: what the driver says while it runs and a page's
# generated blocks; the measures, what is read of the runs and the search spaces; the guards a verdict must pass;
# the verdict rules; the protocol's rules; the sweep file (its whole schema, checked), the power rule and the verdicts'
# forest plots; the tuning; the pages; the pages that borrow from the report's; the held-out check's
# comparison; the driver.
# (The pages' sections, by page kind, share the sweep file's floor: they read only the measures.)
ANALYSIS_FLOORS = [("progress", "blocks"),
                   ("measures", "run_frames", "seed_ledger", "launch", "wandb_report", "example1", "search_spaces"),
                   ("guards",), ("verdict",), ("protocol",),
                   ("sweep_file", "power", "forest", "sections"), ("tuning", "paper_record"), ("report",), ("fairness", "scoreboard"), ("held_out",), ("reproduce",)]


def test_the_analysis_is_a_one_way_pipeline():
    """Each analysis module imports (lazy imports included) only modules of the floors below its own: a stage
    reads the ones before it, never a later one, and no module of a floor reads another of the same floor."""
    floor = {f"fl_bench.analysis.{name}": rank for rank, names in enumerate(ANALYSIS_FLOORS) for name in names}
    graph = _graph()
    analysis = [name for name in graph if name.startswith("fl_bench.analysis.")]
    unplaced = [name for name in analysis if name not in floor]
    assert not unplaced, f"analysis modules on no floor of ANALYSIS_FLOORS: {unplaced}"
    upward = [f"{source} -> {target}" for source in analysis for target in graph[source]
              if target in floor and floor[target] >= floor[source]]
    assert not upward, "analysis imports that point up (or across) its floors: " + ", ".join(upward)
