"""The package's dependencies point one way: no module imports, directly or through others, a module
that imports it back, counting lazy imports inside functions and typing-only ones."""

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
# ``__main__`` module may import anything: it is the top of its package).
LAYERS = [("errors",), ("schema", "numerics"), ("data", "traces"), ("models",), ("engine",), ("clients",), ("algorithms", "privacy"),
          ("runs",), ("analysis",)]
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


def test_every_package_says_what_belongs_in_it():
    for init in PACKAGE.rglob("__init__.py"):
        text = init.read_text()
        assert text.lstrip().startswith('"""') and len(text.split('"""')[1]) > 80, f"{init} has no docstring"
