"""The configuration reference (docs/reference/config.md's tables), generated from the code at build time.

Every config group registered with ``@schema`` (fl_bench.schema.SCHEMAS), every option of it, every key of
each option with its type and default (the dataclass), the values it may take (the ``choice()`` calls and the
messages of the ``require()`` calls of its ``__post_init__``, read from the source), the class docstring and
the comment written above or beside the field. The run's own keys are the root schema's
(fl_bench.runs.config.Config). The YAML options under ``conf/`` are listed with the schema they extend, what
they set and the first paragraph of their header comment; the presets (experiment, hparams_search, the
launchers) with that paragraph alone.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
import typing
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from cells import cell, code, prose, source_comment

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
# Presets: config groups that set other groups' keys (no schema of their own), listed with what they are for.
PRESET_GROUPS = ("experiment", "hparams_search", "hydra/launcher")
# Where a group's YAML options lie, when not conf/<group>/: the groups chosen inside an algorithm's option
# (algorithm/server_optimizer=..., algorithm/weighting=..., algorithm/staleness=..., algorithm/work_schedule=...)
CONF_DIRS = {path.name: f"algorithm/{path.name}" for path in sorted((CONF / "algorithm").iterdir()) if path.is_dir()}


def _import_registry():
    """fl_bench.runs.config (which registers every built-in option) from this repository, not an installed copy."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from fl_bench.runs import config

    return config


def built_in_groups() -> dict[str, dict[str, type]]:
    """The built-in options of every registered group (a plugin imported into this process is left out), in
    the order of the root schema's fields, the groups chosen inside an algorithm's option after it."""
    config = _import_registry()
    from fl_bench.schema import SCHEMAS

    order = [f.name for f in dataclasses.fields(config.Config) if f.name in SCHEMAS]
    order[order.index("algorithm") + 1:order.index("algorithm") + 1] = list(CONF_DIRS)
    order += [group for group in SCHEMAS if group not in order]
    return {group: {name: cls for name, cls in SCHEMAS[group].items() if cls.__module__.startswith("fl_bench.")}
            for group in order}


def _shown(group: str) -> str:
    """The group as the command line chooses it (``algorithm/server_optimizer=adam``)."""
    return CONF_DIRS.get(group, group)


def _prefix(group: str) -> str:
    """The group's keys as the command line sets them (``algorithm.server_optimizer.lr``)."""
    return _shown(group).replace("/", ".") + "."


def _keys(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field]]:
    """``cls``'s fields as dotted keys; a nested dataclass that is no group (wandb, pruning) adds its own keys."""
    found = []
    hints = _hints(cls)
    for field in dataclasses.fields(cls):
        found.append((prefix + field.name, field))
        nested = hints[field.name]
        if dataclasses.is_dataclass(nested) and _group_of(nested) is None:
            found += _keys(nested, f"{prefix}{field.name}.")
    return found


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _group_bases() -> dict[type, str]:
    """The base schema of each group: the root schema's field types, and those of the groups chosen inside an
    algorithm's option (the server optimizer, weighting, staleness function and work schedule)."""
    config = _import_registry()
    from fl_bench.algorithms.server_optimizers import ServerOptimizerConfig
    from fl_bench.algorithms.weightings import StalenessConfig, WeightingConfig
    from fl_bench.engine.work import WorkScheduleConfig

    bases = {hint: name for name, hint in _hints(config.Config).items() if dataclasses.is_dataclass(hint)}
    bases.update({ServerOptimizerConfig: "server_optimizer", WeightingConfig: "weighting", StalenessConfig: "staleness",
                  WorkScheduleConfig: "work_schedule"})
    return {base: group for base, group in bases.items() if group in built_in_groups()}


def _group_of(cls: type) -> str | None:
    return _group_bases().get(cls)


# ------------------------------------------------------------------------------------------ reading the source

@cache
def _class_node(cls: type) -> ast.ClassDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return None
    return next((n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)), None)


@cache
def _source_lines(cls: type) -> list[str]:
    return textwrap.dedent(inspect.getsource(cls)).splitlines()


def class_doc(cls: type) -> str:
    """The docstring written in the class, as Markdown (a dataclass without one has a generated signature:
    not shown)."""
    node = _class_node(cls)
    return prose(ast.get_docstring(node) or "") if node else ""


def field_comment(cls: type, name: str) -> str:
    """The comment on the lines right above field ``name`` and beside it, from the most derived class in
    ``cls``'s MRO that declares the field with a comment."""
    for klass in cls.__mro__:
        node = _class_node(klass) if "__annotations__" in vars(klass) and name in vars(klass)["__annotations__"] else None
        if node is None:
            continue
        lines = _source_lines(klass)
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and getattr(statement.target, "id", None) == name:
                comment = source_comment(lines, statement.lineno, statement.end_lineno)
                if comment:
                    return comment
    return ""


def checks(cls: type) -> dict[str, list[str]]:
    """What each field's value is checked against in ``__post_init__`` along the MRO: ``choice()``'s values
    (evaluated in the module and class that call it) and ``require()``'s messages, whose value argument is
    ``self.<field>``."""
    found: dict[str, list[str]] = {}
    for klass in reversed(cls.__mro__):
        node = _class_node(klass) if "__post_init__" in vars(klass) else None
        if node is None:
            continue
        init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__post_init__")
        namespace = vars(sys.modules[klass.__module__])
        for call in ast.walk(init):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and len(call.args) >= 3):
                continue
            value = call.args[1] if call.func.id == "choice" else call.args[2] if call.func.id == "require" else None
            if not (isinstance(value, ast.Attribute) and getattr(value.value, "id", None) == "self"):
                continue
            if call.func.id == "choice":
                allowed = eval(compile(ast.Expression(call.args[2]), klass.__module__, "eval"), dict(namespace), {"self": cls})
                text = "one of " + ", ".join(f"`{option}`" for option in allowed)
            elif len(call.args) >= 4:
                text = cell(_message(call.args[3]))
            else:
                continue
            if text not in found.setdefault(value.attr, []):
                found[value.attr].append(text)
    return found


def _message(node: ast.expr) -> str:
    """A require() message as written: a string, or an f-string with its expressions shown as ``{...}``."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}" for v in node.values)
    return ast.unparse(node)


# ------------------------------------------------------------------------------------------ rendering

def type_name(hint: Any) -> str:
    """A field's type as a YAML user reads it: ``int``, ``float or null``, ``list[list[int]]``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        named = [type_name(arg) for arg in args if arg is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(arg) for arg in args)}]"
    if hint is Any:
        return "any"
    return getattr(hint, "__name__", str(hint))


def type_cell(hint: Any) -> str:
    """A field's type in its table: a group's base schema links to that group (algorithm.server_optimizer)."""
    group = _group_of(hint) if isinstance(hint, type) else None
    return f"group [`{_shown(group)}`](#{group})" if group else cell(type_name(hint))


def default_text(field: dataclasses.Field, chosen: dict[str, str]) -> str:
    """The field's default: a group's is the option conf/config.yaml chooses (``chosen``), a nested config's its name."""
    if field.name in chosen:
        return code(chosen[field.name])
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return code(value.name) if hasattr(value, "name") else "(its keys below)"
    return "`''`" if value == "" else code(_yaml(value))


def _yaml(value: Any) -> str:
    """A value as it is written in YAML or on the command line (``null``, ``true``, ``[0.9, 0.99]``)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


# Comments for the keys every option has, where its schema gives none.
IMPLIED = {"name": "the option's name (set by choosing the option)", "_target_": "what fl_bench.schema.build calls with this config"}


def _table(cls: type, prefix: str, chosen: dict[str, str] | None = None) -> list[str]:
    """The table of ``cls``'s keys, each with its type, default, checks and comment (a nested config's keys
    with its own class's); ``chosen``: the groups' default options (the root schema's)."""
    lines = ["| key | type | default | allowed | what it is |", "|---|---|---|---|---|"]
    for key, field in _keys(cls):
        owner = cls
        for part in key.split(".")[:-1]:
            owner = _hints(owner)[part]
        allowed = "; ".join(checks(owner).get(field.name, []))
        comment = field_comment(owner, field.name) or IMPLIED.get(field.name, "")
        lines.append(f"| {code(prefix + key)} | {type_cell(_hints(owner)[field.name])} | {default_text(field, chosen or {})} "
                     f"| {allowed} | {cell(comment)} |")
    return lines


def _yaml_header(path: Path) -> str:
    """The first paragraph of a YAML file's leading comment (``# @package`` lines left out)."""
    paragraph = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("@package"):
            continue
        if not text or line.startswith("#  "):  # a blank line, or an indented command: the paragraph ended
            if paragraph:
                break
            continue
        paragraph.append(text)
    return " ".join(paragraph)


def _flatten(value: Any, prefix: str) -> list[str]:
    """A YAML mapping as the command line's ``key.sub=value`` words."""
    if isinstance(value, dict) and value:
        return [item for key, sub in value.items() for item in _flatten(sub, f"{prefix}{key}.")]
    return [f"{prefix.rstrip('.')}={_yaml(value)}"]


def _yaml_option(path: Path, group: str) -> tuple[str | None, list[str]]:
    """The schema a YAML option extends (``/schema/<group>@_here_: NAME``) and the keys it sets."""
    spec = yaml.safe_load(path.read_text()) or {}
    schema, sets = None, []
    for entry in spec.pop("defaults", []):
        if not isinstance(entry, dict):
            continue
        for key, value in entry.items():
            if key.startswith(f"/schema/{group}@"):
                schema = value
            elif key.startswith("override /"):
                sets.append(f"{key.removeprefix('override /').split('@')[0]}={value}")
    spec.pop("name", None)
    return schema, [*sets, *(_flatten(spec, "") if spec else [])]


def _options_table(group: str, options: dict[str, type]) -> list[str]:
    directory = CONF / _shown(group)
    lines = [f"YAML options (`{_shown(group)}=NAME`, in `conf/{_shown(group)}/`):", "",
             "| option | schema | sets | about |", "|---|---|---|---|"]
    for path in sorted(directory.glob("*.yaml")):
        schema, sets = _yaml_option(path, group)
        link = f"[{schema}](#{_anchor(group, schema)})" if schema in options else cell(str(schema))
        lines.append(f"| {code(path.stem)} | {link} | {'<br>'.join(code(s) for s in sets)} | {cell(_yaml_header(path))} |")
    return lines


def _anchor(group: str, option: str) -> str:
    return f"{group}-{option}".replace("_", "-")


def group_section(group: str, options: dict[str, type]) -> list[str]:
    base = next((b for b, g in _group_bases().items() if g == group), None)
    where = _shown(group)
    lines = [f"## `{where}` {{#{group}}}", ""]
    if base is not None and class_doc(base):
        lines += [class_doc(base), ""]
    lines += [*_options_table(group, options), ""]
    for name, cls in options.items():
        lines += [f"### `{where}`: schema `{name}` {{#{_anchor(group, name)}}}", "",
                  f"`{cls.__module__}.{cls.__qualname__}`", ""]
        if class_doc(cls):
            lines += [class_doc(cls), ""]
        lines += [*_table(cls, _prefix(group)), ""]
    return lines


def _chosen_options() -> dict[str, str]:
    """The option conf/config.yaml's defaults list chooses for each group (``dataset: synthetic``)."""
    entries = yaml.safe_load((CONF / "config.yaml").read_text())["defaults"]
    return {key: value for entry in entries if isinstance(entry, dict) for key, value in entry.items() if "/" not in key}


def presets_section() -> list[str]:
    lines = ["## Presets and launchers {#presets}", "",
             "These groups set other groups' keys (an experiment's workload, a search space, a sweep's launcher); "
             "each option's header comment says what for.", ""]
    for group in PRESET_GROUPS:
        lines += [f"### `{group}` {{#{group.replace('/', '-')}}}", "", "| option | about |", "|---|---|"]
        lines += [f"| {code(path.stem)} | {cell(_yaml_header(path))} |" for path in sorted((CONF / group).glob("*.yaml"))]
        lines.append("")
    return lines


def config_reference() -> str:
    """The generated part of docs/reference/config.md: the run's own keys, every group, the presets."""
    config = _import_registry()
    groups = built_in_groups()
    chosen = _flatten({k: v for k, v in yaml.safe_load((CONF / "config.yaml").read_text()).items() if k not in ("defaults", "hydra")}, "")
    lines = [
        "Groups: " + ", ".join(f"[`{_shown(g)}`](#{g})" for g in groups) + ", the [run's own keys](#run) and the "
        "[presets](#presets).", "",
        "## The run's own keys {#run}", "",
        f"`fl_bench.runs.config.Config`, composed by `conf/config.yaml`, whose values override these defaults: "
        f"{', '.join(code(s) for s in chosen)}.", "",
        class_doc(config.Config), "", *_table(config.Config, "", _chosen_options()), "",
    ]
    for group, options in groups.items():
        lines += group_section(group, options)
    lines += presets_section()
    return "\n".join(lines)
