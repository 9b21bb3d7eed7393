"""A reproduction's sweep file (``sweeps/*_smoke.yaml``): its schema, and reading it whole before any run.

:func:`load_sweep_file` gives the file as one typed object, :class:`SweepFile` (a tree of dataclasses that
OmegaConf merges the file into), which every stage of the reproduction reads by attribute: a field the file
leaves out holds its schema default (``protocol.power.cap: 30``, an arm's ``vs: None``), and values are
converted to their schema types (``report_seeds: [1, "2"]`` gives ``[1, 2]``). Nothing after loading reads
the file by key; the mappings left in it are data (an arm's ``paper`` numbers by what they measure, a special
case's ``set`` of config values).

Every check happens here, once, and every refusal is one ConfigError naming the file, the key (with the
closest valid key), the value and what is allowed: a misspelt key, a value of the wrong type or a missing
field; names that are strings and texts that are no YAML boolean (an unquoted ``yes`` is true, which
OmegaConf would make 'True'); names that refer to each other (an arm's study, a table's reference arm, an
arm's ``vs`` and ``special_case``, a study's ``setting_of``), and an arm compared with itself whose paper
values or claim nothing would read; table names that are file names, and an arm's ``paper`` values in the
shape its table's measure reads; and the protocol's rules (seeds, dates, budgets, disjoint seeds, each seed
listed once, search spaces), :class:`fl_bench.analysis.protocol.Protocol`'s.

The file's paths (``runs_dir``, ``tuned_dir``), where relative, are read from the file's repository, never from
the working directory: the nearest directory above the file that holds ``pyproject.toml`` or ``.git`` (a copy
of fl_bench: ``sweeps/x.yaml``'s ``results/tuned/x`` is that repository's ``results/tuned/x``), or the file's
own directory where none does (:func:`repository_of`). So a reproduction started from anywhere finds the
settings and runs the file's repository keeps; loaded, they are paths relative to the working directory where
they lie under it (what a reproduction started from the repository's root always read and wrote), else
absolute (:func:`resolved`). The overrides the runs take (``data_root=...``) are the runs' own, read where
the runs start, as on the command line."""

from __future__ import annotations

import copy
import difflib
import functools
import math
import os
import re
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from fl_bench.analysis.verdict import CLAIMS, PLACEHOLDER_KINDS, TYPED_INTERVAL, default_tolerance, paper_effect
from fl_bench.analysis.measures import MEASURES, find
from fl_bench.errors import ConfigError
from fl_bench.analysis.protocol import Protocol, spaces_of

# A table's fidelity levels, closest to the paper first (the scoreboard's order), each with what it means
FIDELITY = {"paper": "the paper's data set, model and scale",
            "paper data": "the paper's data set, with a stated difference: scale, model or budget",
            "stand-in": "another workload standing for the paper's"}
TABLE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")  # its page is <out>/<name>.md: a file name, no path

# An arm's ``paper`` values: the keys fl_bench.analysis.verdict.paper_effect (the verdict) and
# fl_bench.analysis.report (the page's paper columns) read in a table of ratios (measure trips or rounds)
# and in one of accuracies (every other measure), with what each holds; any other key would be ignored.
_RATIOS = "numbers > 0, or '>x' (x > 0) for a lower bound ('>1': larger, without a number)"
PAPER_KEYS = {
    "ratio": {"trips": f"a list of the paper's ratios of trips (rounds) to the compared arm, one per dataset: {_RATIOS}",
              "time": f"a list of the paper's ratios of simulated time to the compared arm, one per dataset: {_RATIOS}"},
    "difference": {"accuracy": "a number: the paper's accuracy in % (0 to 100)",
                   "difference": "a list of the paper's differences in accuracy points to the compared arm, one per "
                                 "dataset: numbers, or '>x' / '<x' for a bound ('>0': larger, without a number)"},
}
COMPARED_ONLY = ("trips", "time", "difference")  # read only against the compared arm (accuracy: also as others' base)


@dataclass
class SpecialCase:
    """A nested study's special case: the study it reduces to and the values that reduce it."""

    study: str = MISSING
    set: dict[str, Any] = field(default_factory=dict)


@dataclass
class Study:
    """``studies.<name>``: the overrides of a tuned (``space``) or fixed setting."""

    overrides: list[str] = MISSING
    space: Optional[str] = None
    paper: Optional[dict[str, list[Any]]] = None
    special_case: Optional[SpecialCase] = None
    setting_of: Optional[str] = None


@dataclass
class Cause:
    """An arm's ``cause``: the arm of the same table that changes one thing (``changes``) to test why
    this arm's verdict differs from the paper (the scoreboard shows that arm's verdict beside it)."""

    arm: str = MISSING
    changes: str = MISSING


@dataclass
class ArmSpec:
    """``tables.<table>.arms.<label>``: a row of a table."""

    study: str = MISSING
    overrides: list[str] = field(default_factory=list)
    smoke: list[str] = field(default_factory=list)  # added at the smoke point (a budget its first step needs)
    paper: Optional[dict[str, Any]] = None
    vs: Optional[str] = None
    special_case: Optional[str] = None
    cause: Optional[Cause] = None
    tried: list[Cause] = field(default_factory=list)  # arms that each changed one thing and did not explain it
    # What the paper's number claims (fl_bench.analysis.verdict.CLAIMS): side (an order), size (the number),
    # closeness (within the paper's gap); size and closeness are judged against the default tolerance,
    # or a tighter ``tolerance`` (a factor for ratios, points for differences) with its reason
    claim: str = "side"
    tolerance: Optional[float] = None
    tolerance_why: Optional[str] = None


@dataclass
class Fidelity:
    """``tables.<name>.fidelity``: how close the table's workload is to the paper's (a level of FIDELITY),
    printed above its verdicts; the scoreboard answers a headline from its closest rows first."""

    level: str = MISSING
    note: str = ""  # what differs from the paper's workload, or what it stands for: required below level paper


@dataclass
class Table:
    """``tables.<name>``: a results page."""

    title: str = MISSING
    reference: str = MISSING
    arms: dict[str, ArmSpec] = MISSING
    notes: str = ""  # findings; measured numbers only as placeholders {effect:ARM}, {median:ARM}, {verdict:ARM}, {seeds:ARM}
    measure: str = "trips"
    at: Optional[list[int]] = None  # measure=fairness: the aggregation counts (server steps) at which accuracy is read
    fidelity: Optional[Fidelity] = None  # required where an arm tests a paper number (a table of no paper has none)


@dataclass
class Headline:
    """``headlines[i]``: a sentence of the paper (its abstract's, or its main table's text) that the
    scoreboard answers in one line, computed from the verdicts of the rows that test it."""

    quote: str = MISSING  # the paper's own words
    where: str = MISSING  # where the paper says it: "abstract", "Sec. 5, after Table 1"
    rows: list[str] = MISSING  # "TABLE: ARM", each an arm of this file's tables that tests a paper number
    # other readings of the paper, each the rows that test the same sentence under it (answered beside it)
    readings: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class SweepFile:
    """A reproduction's sweep file (module docstring)."""

    workload: list[str] = MISSING
    protocol: Protocol = MISSING
    paper: Optional[str] = None  # the paper's name on the scoreboard (default: the file's name)
    runs_dir: str = MISSING
    tuned_dir: str = MISSING
    studies: dict[str, Study] = MISSING
    tables: dict[str, Table] = MISSING
    smoke: list[str] = field(default_factory=list)
    readings: list[str] = field(default_factory=list)
    headlines: list[Headline] = field(default_factory=list)  # the paper's claims the scoreboard answers


WANDB_SWEEP_KEYS = {"program", "method", "parameters"}


def load_sweep_file(path: Path, spaces: tuple[Path, ...] | None = None) -> SweepFile:
    """The sweep file at ``path``, typed (:class:`SweepFile`) and checked whole (module docstring), its
    protocol's rules included (:meth:`fl_bench.analysis.protocol.Protocol.check`, with search spaces from
    ``spaces``, default conf/hparams_search and the installed plugins'); ConfigError in one line naming the
    file, the key and what is allowed. A file read before and unchanged since (the same modification time
    and size) is not checked again: checking takes a quarter of a second, and the scoreboard reads every
    paper's file after each table."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: give a sweep file, e.g. sweeps/fedbuff_smoke.yaml")
    stat = path.stat()
    spec = copy.deepcopy(_checked(path, stat.st_mtime_ns, stat.st_size, tuple(spaces or spaces_of())))
    spec.runs_dir, spec.tuned_dir = (str(resolved(given, path)) for given in (spec.runs_dir, spec.tuned_dir))
    return spec


REPOSITORY_MARKERS = ("pyproject.toml", ".git")  # what marks a repository's root (fl_bench's, or a user's)


def repository_of(path: Path) -> Path:
    """The directory a sweep file's relative paths are read from: the nearest directory above the file ``path``
    (or a directory ``path``, from itself) that holds pyproject.toml or .git, else the file's own directory."""
    path = Path(os.path.normpath(Path(path).absolute()))
    start = path if path.is_dir() else path.parent
    return next((directory for directory in (start, *start.parents)
                 if any((directory / marker).exists() for marker in REPOSITORY_MARKERS)), start)


def resolved(given: str | Path, sweep_file: Path) -> Path:
    """A path of the sweep file ``sweep_file`` (``given`` as written there) read from its repository
    (:func:`repository_of`), never from the working directory: a relative one relative to the working directory
    where it lies under it (``results/tuned/x`` from the repository's root), else absolute; an absolute one as
    written."""
    if Path(given).is_absolute():
        return Path(given)
    found = Path(os.path.normpath(repository_of(sweep_file) / given))
    cwd = Path.cwd()
    return found.relative_to(cwd) if found.is_relative_to(cwd) else found


@functools.lru_cache(maxsize=64)
def _checked(path: Path, mtime_ns: int, size: int, spaces: tuple[Path, ...]) -> SweepFile:
    """:func:`load_sweep_file` of one version of the file (an error is raised, not cached)."""
    try:
        raw = yaml.load(path.read_text(), StrictLoader)
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file: give a sweep file (YAML)") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path} is not valid YAML: {problem}{where}") from None
    if raw is None:
        raise ConfigError(f"{path} is empty: give a sweep file (sweeps/fedbuff_smoke.yaml shows the fields)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} holds a {type(raw).__name__}, not a mapping of keys: give a sweep file "
                          "(sweeps/fedbuff_smoke.yaml shows the fields)")
    if WANDB_SWEEP_KEYS <= set(raw):
        raise ConfigError(f"{path} is a W&B sweep (program, method, parameters): run it with `wandb sweep {path}`; "
                          "python -m fl_bench.analysis.reproduce takes a reproduction's sweep file")
    _check_amendments_quoted(raw, path)
    found = _misshapen(raw, SweepFile, "")  # (before OmegaConf, which turns a name true into 'True' and names no key)
    if found is not None:
        key, value, allowed = found
        raise ConfigError(f"{path}: {key}={value!r} is not allowed: {allowed}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(SweepFile), raw)
        typed = OmegaConf.to_container(merged, throw_on_missing=True)
    except OmegaConfBaseException as error:
        raise ConfigError(f"{path}: {_explain(error, raw)}") from None
    _check_items(typed, SweepFile, "", path)
    spec = OmegaConf.to_object(merged)
    _check_names(spec, path)
    _check_overrides(spec, path)
    spec.protocol.check(spec.studies, spaces, path)
    return spec


def _check_overrides(spec: SweepFile, path: Path) -> None:
    """Every command-line override the file gives parses as one (Hydra's parser), before any run."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    given = [("workload", spec.workload), ("smoke", spec.smoke),
             *((f"studies.{name}.overrides", study.overrides) for name, study in spec.studies.items()),
             *((f"tables.{table}.arms.{label}.{key}", overrides) for table, t in spec.tables.items()
               for label, arm in t.arms.items() for key, overrides in (("overrides", arm.overrides), ("smoke", arm.smoke)))]
    parser = OverridesParser.create()
    for key, overrides in given:
        for i, override in enumerate(overrides):
            try:
                parser.parse_overrides([override])
            except OverrideParseException as error:
                problem = str(error).strip().splitlines()[0]
                raise ConfigError(f"{path}: {key}[{i}]={override!r} is not allowed: it must be a command-line override "
                                  f"KEY=VALUE ({problem})") from None


class StrictLoader(yaml.SafeLoader):
    """YAML without its dates: ``registered: 2026-11-25`` stays the text it was written as, so that a date
    that is none (2026-13-45) is this module's one line naming its key, not the YAML reader's error. A key
    given twice in one mapping is refused: YAML's reader keeps the last silently, and an edit written above
    an existing key would be lost."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, typing.Hashable):
                continue  # SafeLoader's own error names it
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"found the key {key!r} twice in one mapping",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _check_amendments_quoted(raw: dict, path: Path) -> None:
    """An amendment written ``- 2026-11-27: more seeds`` is YAML's mapping {date: text}, not the text."""
    protocol = raw.get("protocol")
    amended = protocol.get("amended") if isinstance(protocol, dict) else None
    for i, entry in enumerate(amended if isinstance(amended, list) else []):
        if isinstance(entry, dict):
            text = "; ".join(f"{key}: {value}" for key, value in entry.items())
            _refuse(path, f"protocol.amended[{i}]", entry, f"quote the entry as a string, - '{text}' (unquoted, "
                    "'DATE: text' is a YAML mapping)")


def _explain(error: OmegaConfBaseException, raw: dict) -> str:
    """One line for OmegaConf's error: the key, the value and what the schema allows there."""
    if not (error.full_key or error.key):  # (a list where a mapping belongs, or the reverse: OmegaConf names no key)
        found = _misshapen(raw, SweepFile, "")
        if found is not None:
            key, value, allowed = found
            return f"{key}={value!r} is not allowed: {allowed}"
    key = str(error.full_key or error.key)
    if isinstance(error, ConfigKeyError) and is_dataclass(error.object_type):
        allowed = [f.name for f in fields(error.object_type)]
        close = _closest_key(str(error.key), allowed)
        hint = f"did you mean {close}? " if close else ""
        return f"{key} is not a key of {what_it_is(error.object_type)}: {hint}(its keys: {', '.join(allowed)})"
    expected = describe_type(_field_type(key))
    if "Missing mandatory value" in str(error):
        return f"{key} is missing: give {expected}"
    return f"{key}={_value_at(raw, key)!r} is not allowed: it must be {expected}"


# What a field holds, in words, where the schema's type says too little (a headline's rows are 'TABLE: ARM'
# strings): (class, field) -> (the field's text, its items' text)
_ROWS = "a list of 'TABLE: ARM' strings (an arm of one of this file's tables each)"
FIELD_TEXT = {("Headline", "rows"): (_ROWS, "a 'TABLE: ARM' string"),
              ("Headline", "readings"): ("a mapping of readings (each a name) to lists of 'TABLE: ARM' strings", _ROWS)}
# YAML (1.1, as PyYAML reads it) turns these unquoted words into booleans: a name or a text written so
# would become 'True' or 'False'
_BOOLEAN = "YAML reads an unquoted true, false, yes, no, on or off as a boolean"


def _closest_key(key: str, keys: list[str]) -> str | None:
    """The key of ``keys`` that ``key`` most likely misspells: of those alike (difflib's), the one sharing the
    longest beginning with it, then the most alike (``tolerance_reason`` is ``tolerance_why``, not ``tolerance``)."""
    close = difflib.get_close_matches(key, keys, n=len(keys), cutoff=0.6)
    shared = lambda option: len(os.path.commonprefix([key, option]))  # noqa: E731
    return max(close, key=lambda option: (shared(option), -close.index(option)), default=None)


def _misshapen(value: Any, tp: Any, key: str, text: str | None = None, item_text: str | None = None
               ) -> tuple[str, Any, str] | None:
    """The first place where ``value`` (the file as YAML read it) is not the mapping or list the schema's ``tp``
    asks for, a mapping's key is not a name (a string), or a string of the schema is a YAML boolean: (key,
    value, what is allowed), None where every shape fits. ``text`` and ``item_text``: what the value and its
    items hold, in words, where the type says too little (FIELD_TEXT)."""
    plain = unwrap_optional(tp)
    origin, args = typing.get_origin(plain), typing.get_args(plain)
    allowed = f"it must be {text or describe_type(tp)}"
    if value is None:
        return None
    if is_dataclass(plain) or origin is dict:
        if not isinstance(value, dict):
            return key or "the file", value, allowed
        hints = typing.get_type_hints(plain) if is_dataclass(plain) else {}
        for name, item in value.items():
            if not isinstance(name, str):
                return (f"{key or 'the file'} name", name,
                        f"a name is a string ({_BOOLEAN}, and an unquoted number as a number: quote it)")
            where = f"{key}.{name}" if key else name
            if is_dataclass(plain):
                texts = FIELD_TEXT.get((plain.__name__, name), (None, None))
                found = _misshapen(item, hints.get(name, Any), where, *texts)
            else:
                found = _misshapen(item, args[1], where, item_text)
            if found is not None:
                return found
    elif origin is list:
        if not isinstance(value, list):
            return key, value, allowed
        for i, item in enumerate(value):
            found = _misshapen(item, args[0], f"{key}[{i}]", item_text)
            if found is not None:
                return found
    elif plain is str and isinstance(value, bool):
        return key, value, f"{allowed} ({_BOOLEAN}: quote it)"
    return None


def what_it_is(cls: type) -> str:
    return {"SweepFile": "a sweep file", "Protocol": "protocol", "Tuner": "protocol.tuner", "Study": "a study",
            "PrunerConfig": "protocol.tuner.pruner", "Confirm": "protocol.tuner.confirm", "Power": "protocol.power",
            "SpecialCase": "a special_case", "Cause": "an arm's cause", "ArmSpec": "an arm", "Table": "a table",
            "Fidelity": "a table's fidelity", "Headline": "a headline"}.get(cls.__name__, cls.__name__)


def _path(key: str) -> list[str | int]:
    return [int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", key)]


def _value_at(raw: Any, key: str) -> Any:
    for part in _path(key):
        try:
            raw = raw[part]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _check_items(value: Any, tp: Any, key: str, path: Path) -> None:
    """Items of lists and mappings of the schema's scalar types hold such scalars (OmegaConf lets a list
    or a mapping through there: ``report_seeds: [[1], 2]``)."""
    tp = unwrap_optional(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if value is None:
        return
    if is_dataclass(tp):
        for f in fields(tp):
            if f.name in value:
                _check_items(value[f.name], typing.get_type_hints(tp)[f.name], f"{key}{'.' if key else ''}{f.name}", path)
    elif origin is list:
        for i, item in enumerate(value):
            _check_items(item, args[0], f"{key}[{i}]", path)
    elif origin is dict:
        for name, item in value.items():
            _check_items(item, args[1], f"{key}.{name}", path)
    elif tp in (int, str, float) and (isinstance(value, (list, dict, bool)) if tp is not str else not isinstance(value, str)):
        raise ConfigError(f"{path}: {key}={value!r} is not allowed: it must be {describe_type(tp)}")


def _field_type(key: str) -> Any:
    """The schema's type at ``key`` (dotted, with [i] for list items)."""
    tp: Any = SweepFile
    for part in _path(key):
        tp = unwrap_optional(tp)
        if is_dataclass(tp):
            tp = typing.get_type_hints(tp).get(part, Any)
        elif typing.get_origin(tp) in (dict, list):
            tp = typing.get_args(tp)[-1]
        else:
            return Any
    return tp


def unwrap_optional(tp: Any) -> Any:
    """X for Optional[X]."""
    if typing.get_origin(tp) is typing.Union:
        return next(arg for arg in typing.get_args(tp) if arg is not type(None))
    return tp


def describe_type(tp: Any) -> str:
    """A type in words: 'a list of integers', 'a mapping of names to studies', ..."""
    optional = typing.get_origin(tp) is typing.Union
    tp = unwrap_optional(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        text = f"a list of {_plural(args[0])}"
    elif origin is dict:
        text = f"a mapping of names to {_plural(args[1])}"
    elif is_dataclass(tp):
        text = f"{what_it_is(tp)} (a mapping with keys {', '.join(f.name for f in fields(tp))})"
    else:
        text = {int: "an integer", str: "a string", float: "a number", bool: "true or false"}.get(tp, "a value")
    return f"{text} or null" if optional else text


def _plural(tp: Any) -> str:
    tp = unwrap_optional(tp)
    if is_dataclass(tp):
        return {"ArmSpec": "arms", "Study": "studies", "Table": "tables", "Headline": "headlines"}.get(tp.__name__, tp.__name__)
    return {int: "integers", str: "strings", float: "numbers"}.get(tp, "values")


def _refuse(path: Path, key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{path}: {key}={value!r} is not allowed: {allowed}")


def choose(path: Path, key: str, value: Any, options: tuple[str, ...]) -> None:
    """``value`` is one of ``options``, else one line with the closest."""
    if value not in options:
        close = difflib.get_close_matches(str(value), options, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        _refuse(path, key, value, f"choose one of {', '.join(options)}{hint}")


def _check_names(spec: SweepFile, path: Path) -> None:
    """Names that refer to each other name something the file has (another arm, for an arm's cause and
    what it tried); table names are file names; arms' paper values are what their table reads."""
    studies = spec.studies

    def known(name: str, what: str, options: Any) -> None:
        if name not in options:
            close = difflib.get_close_matches(str(name), list(options), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(f"{path}: {what}={name!r} is not defined: {hint}(choose one of {', '.join(options)})")

    for name, study in studies.items():
        if study.setting_of is not None:
            known(study.setting_of, f"studies.{name}.setting_of", studies)
    for table_name, table in spec.tables.items():
        if not TABLE_NAME.fullmatch(table_name):  # (a path would write its page outside --out)
            _refuse(path, "table name", table_name, "a table's name is its page's file name under --out: letters, "
                    "digits, _, - and ., not starting with .")
        where = f"tables.{table_name}"
        arms = table.arms
        if not arms:
            raise ConfigError(f"{path}: {where}.arms is empty: a table needs at least its reference arm")
        known(table.reference, f"{where}.reference", arms)
        find(table.measure)  # a plugin's measure registers itself when its module is imported
        choose(path, f"{where}.measure", table.measure, tuple(MEASURES))
        for label, arm in arms.items():
            known(arm.study, f"{where}.arms.{label}.study", studies)
            for key, other in (("vs", arm.vs), ("special_case", arm.special_case)):
                if other is not None:
                    known(other, f"{where}.arms.{label}.{key}", arms)
            others = [("cause.arm", arm.cause.arm)] if arm.cause is not None else []
            others += [(f"tried[{i}].arm", tried.arm) for i, tried in enumerate(arm.tried)]
            for key, other in others:
                known(other, f"{where}.arms.{label}.{key}", arms)
                if other == label:
                    _refuse(path, f"{where}.arms.{label}.{key}", other, "it names the arm itself: name the other arm "
                            "of the table that changes one thing")
            _check_paper(arm, table.measure, f"{where}.arms.{label}", path)
            _check_compared_with_itself(label, table, f"{where}.arms.{label}", path)
            _check_claim(arm, arms.get(arm.vs or table.reference), table.measure, f"{where}.arms.{label}", path)
        _check_fidelity(table, where, path)
        _check_notes(table.notes, arms, f"{path}: {where}.notes", known, len(spec.headlines))
    _check_headlines(spec, path, known)


def _check_fidelity(table: Table, where: str, path: Path) -> None:
    """A table that tests a paper number says how close its workload is to the paper's: a level of FIDELITY,
    with a note below level paper (what differs, or what the workload stands for)."""
    fidelity, arms, measure = table.fidelity, table.arms, table.measure
    levels = ", ".join(f"{level!r} ({meaning})" for level, meaning in FIDELITY.items())
    if fidelity is None:
        if any(paper_effect(arm, arms.get(arm.vs or table.reference), measure) for arm in arms.values()):
            raise ConfigError(f"{path}: {where}.fidelity is missing: a table that tests paper numbers says how close its "
                              f"workload is to the paper's, fidelity: {{level: LEVEL, note: TEXT}} with LEVEL one of {levels}")
        return
    choose(path, f"{where}.fidelity.level", fidelity.level, tuple(FIDELITY))
    if fidelity.level != "paper" and not fidelity.note.strip():
        _refuse(path, f"{where}.fidelity.note", fidelity.note, f"level {fidelity.level!r} needs its note: "
                "what differs from the paper's workload, or what the workload stands for")


def _check_headlines(spec: SweepFile, path: Path, known: Any) -> None:
    """Each headline's rows name an arm of one of this file's tables ('TABLE: ARM') that tests a paper
    number, and none twice; a headline without a row would be answered by nothing."""
    for i, headline in enumerate(spec.headlines):
        where = f"headlines[{i}].rows"
        if not headline.rows or not headline.quote.strip():
            _refuse(path, where if not headline.rows else f"headlines[{i}].quote",
                    headline.rows if not headline.rows else headline.quote,
                    "a headline quotes the paper and names the rows that test it ('TABLE: ARM')")
        rows = [(f"{where}[{j}]", row) for j, row in enumerate(headline.rows)]
        rows += [(f"headlines[{i}].readings.{name}[{j}]", row) for name, listed in headline.readings.items()
                 for j, row in enumerate(listed)]
        for key, row in rows:
            table, colon, label = row.partition(": ")
            if not colon:
                _refuse(path, key, row, "write 'TABLE: ARM' (a table of this file, one of its arms)")
            known(table, f"{key} table", spec.tables)
            found = spec.tables[table]
            known(label, f"{key} arm", found.arms)
            arm = found.arms[label]
            if not paper_effect(arm, found.arms.get(arm.vs or found.reference), found.measure):
                _refuse(path, key, row, "that arm tests no paper number (no paper: in it), so it has no "
                        "verdict to answer the headline with: name an arm that has one")
        for key, listed in [(where, headline.rows), *((f"headlines[{i}].readings.{name}", listed)
                                                      for name, listed in headline.readings.items())]:
            if len(set(listed)) < len(listed):
                _refuse(path, key, listed, "each row once: a row named twice would count twice")


def _check_paper(arm: ArmSpec, measure: str, where: str, path: Path) -> None:
    """The arm's ``paper`` gives only keys its table's measure reads (PAPER_KEYS), each in its shape."""
    keys = PAPER_KEYS[MEASURES[measure].kind]
    paper = arm.paper or {}
    for key, value in paper.items():
        if key not in keys:
            close = difflib.get_close_matches(str(key), list(keys), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(f"{path}: {where}.paper.{key} is not a key of an arm's paper in a measure={measure} "
                              f"table: {hint}(its keys: {', '.join(keys)})")
        if not _paper_value_ok(key, value):
            _refuse(path, f"{where}.paper.{key}", value, f"it must be {keys[key]}")
    if {"accuracy", "difference"} <= set(paper):
        _refuse(path, f"{where}.paper", paper, "give accuracy or difference, not both (with accuracy the verdict reads "
                "the difference of accuracies, and difference would be ignored)")


def _check_compared_with_itself(label: str, table: Table, where: str, path: Path) -> None:
    """An arm compared with itself (its ``vs`` names it, or it is the table's reference and names no other) is
    compared with none: a base for others (hfl_smoke's per-dataset HFL arms). Its paper values read only in a
    comparison (COMPARED_ONLY) and its claim would never be judged, and its paper.accuracy is read only as the
    base of the arms compared with it: each of them refused where nothing reads it."""
    arm = table.arms[label]
    if (arm.vs or table.reference) != label:
        return
    if arm.vs is not None:
        key, value, what = f"{where}.vs", arm.vs, "it names the arm itself, which compares it with none"
        fix = "name another arm of the table"
    else:
        key, value, what = f"{where}.paper", arm.paper, "the table's reference arm is compared with none"
        fix = "give it vs: ANOTHER ARM"
    paper = arm.paper or {}
    compared = [name for name in COMPARED_ONLY if name in paper]
    if compared:
        _refuse(path, key, value, f"{what} and leaves its paper.{compared[0]} unread: {fix}")
    if arm.claim != "side" or arm.tolerance is not None:
        given = f"claim: {arm.claim}" + (f", tolerance: {arm.tolerance:g}" if arm.tolerance is not None else "")
        _refuse(path, key, value, f"{what}, so its {given} is never judged: {fix}")
    based = [other for name, other in table.arms.items() if name != label and (other.vs or table.reference) == label
             and (other.paper or {}).get("accuracy") is not None]
    if "accuracy" in paper and not based:
        _refuse(path, key, value, f"{what}, and no arm of the table with a paper.accuracy is compared with it, so its "
                f"paper.accuracy is read by nothing: {fix}, or compare an arm with it (vs: {label!r})")


def _check_claim(arm: ArmSpec, vs: ArmSpec | None, measure: str, where: str, path: Path) -> None:
    """The arm's ``claim`` is a kind of CLAIMS, a size or closeness claim has the paper's numbers (against
    ``vs``, the compared arm) to size, and a ``tolerance`` only tightens the default rule's
    (fl_bench.analysis.verdict), with its reason."""
    claim = arm.claim
    choose(path, f"{where}.claim", claim, CLAIMS)
    kind = MEASURES[measure].kind
    values = paper_effect(arm, vs, measure)
    if claim != "side" and (not values or all(str(v)[:1] in "<>" for v in values)):
        _refuse(path, f"{where}.claim", claim, "a size or closeness claim needs the paper's numbers in its paper "
                "(not only bounds such as '>0'): use claim: side")
    tolerance = arm.tolerance
    if tolerance is None:
        if arm.tolerance_why is not None:
            _refuse(path, f"{where}.tolerance_why", arm.tolerance_why, "it gives the reason for a tighter tolerance, and "
                    "the arm sets none: set tolerance too, or remove tolerance_why")
        return
    if claim == "side":
        _refuse(path, f"{where}.tolerance", tolerance, "a side claim has no tolerance: set claim: size or closeness")
    widest = default_tolerance(values, kind)
    if not (1 if kind == "ratio" else 0) < tolerance <= widest:
        _refuse(path, f"{where}.tolerance", tolerance, f"a table may only tighten the default rule: "
                f"{'a factor in (1, ' if kind == 'ratio' else 'points in (0, '}{widest:g}]")
    if not (arm.tolerance_why or "").strip():
        _refuse(path, f"{where}.tolerance_why", arm.tolerance_why, "a tighter tolerance needs its reason (a sentence)")


def _paper_value_ok(key: str, value: Any) -> bool:
    """``value`` has the shape PAPER_KEYS says for ``key``."""
    if key == "accuracy":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 100
    if not isinstance(value, list) or not value:
        return False
    if key == "difference":
        return all(_paper_number(v, "<>") is not None for v in value)
    return all((number := _paper_number(v, ">")) is not None and number > 0 for v in value)


def _paper_number(value: Any, bounds: str) -> float | None:
    """A paper entry's number: a number, or its text after one of ``bounds`` ('>4.8'); None for anything else."""
    if isinstance(value, str):
        try:
            value = float(value[1:] if value.startswith(tuple(bounds)) else value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _check_notes(notes: str, arms: dict[str, Any], where: str, known: Any, headlines: int = 0) -> None:
    """Findings quote measured numbers only through placeholders of this table's arms: a typed interval
    would go stale the first time the table is rerun on other seeds."""
    typed = TYPED_INTERVAL.search(notes)
    if typed:
        raise ConfigError(f"{where} types the interval {typed.group(0)!r}: quote measured numbers as "
                          f"placeholders ({', '.join('{' + k + ':ARM}' for k in PLACEHOLDER_KINDS)}), filled from the "
                          "table's evidence when its page is written")
    for brace in re.finditer(r"\{([^{}]*)\}", notes):
        kind, _, arm = brace.group(1).partition(":")
        if kind not in PLACEHOLDER_KINDS or not arm:
            raise ConfigError(f"{where}: {brace.group(0)!r} is not a placeholder: write {{KIND:ARM}} with KIND one of "
                              f"{', '.join(PLACEHOLDER_KINDS)}")
        if kind == "headline":
            if not (arm.isdigit() and 1 <= int(arm) <= headlines):
                raise ConfigError(f"{where}: {brace.group(0)!r} names no headline of the file: write {{headline:N}} with "
                                  f"N from 1 to {headlines} (the file's headlines, in order)")
            continue
        known(arm, f"{where.split(': ', 1)[1]} placeholder {brace.group(0)}", arms)
