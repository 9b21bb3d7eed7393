"""A reproduction's paper record (``<stem>_paper.yaml``, beside its tables' evidence): its schema, and reading
it checked, alone and against the files beside it.

The reproduction writes the record with its tables' evidence (fl_bench.analysis.scoreboard.write_paper_record):
its sweep file's name, the paper's name, the file's tables, each table's fidelity and the paper's headlines, as
registered when the evidence was made; the scoreboard reads it instead of the sweep file. :class:`PaperRecord`
is its schema, built of the sweep file's own (a headline is sweep_file.Headline, a fidelity sweep_file.Fidelity),
and :func:`read_record` gives the file as one typed object (OmegaConf.to_object of the schema) once the file fits
it: every key of the schema, with the type it has there, and no other. Then what the types cannot say: a level
of FIDELITY, table names that are file names, each once, and a headline's rows, each 'TABLE: ARM' of the record's
tables, at least one and none twice. :func:`check_records` checks the records of one directory together: one
record per sweep file (a copy under another name would count every verdict twice), each table in one record,
every table a record names made here or registered by its sweep file, and every evidence file in a record;
:func:`check_rows` checks that each headline's row names an arm its table has. Every refusal is one ConfigError
naming the file, the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fl_bench.analysis.sweep_file import (FIDELITY, TABLE_NAME, Fidelity, Headline, SweepFile, choose, describe_type,
                                          StrictLoader, unwrap_optional, what_it_is)
from fl_bench.errors import ConfigError

RECORD = "_paper.yaml"  # <stem>_paper.yaml: the record of the sweep file <stem>.yaml
EVIDENCE = "_evidence.csv"  # <table>_evidence.csv: a table's evidence
FIX = "reproduce its sweep file again (python -m fl_bench.analysis.reproduce) or remove the file"


@dataclass
class PaperRecord:
    """``<stem>_paper.yaml`` (module docstring)."""

    paper: str = MISSING  # the paper's name on the scoreboard
    tables: list[str] = MISSING  # the sweep file's tables, in order (some may not be reproduced yet)
    headlines: list[Headline] = MISSING
    fidelity: dict[str, Fidelity] = field(default_factory=dict)  # by table (a record from before issue 68 has none)
    sweep_file: Optional[str] = None  # the sweep file's name, <stem>.yaml (a record from before issue 58 has none)


# What a key holds, in words, where the schema's type says too little (a list of strings: of rows)
ROWS = "a list of rows, each 'TABLE: ARM' (a table of the record, one of its arms)"
WORDS = {("rows", list[str]): ROWS, ("rows", str): "a row, 'TABLE: ARM'",
         ("readings", dict[str, list[str]]): "a mapping of readings (a name each) to their rows, each 'TABLE: ARM'",
         ("readings", list[str]): ROWS, ("readings", str): "a row, 'TABLE: ARM'", ("tables", str): "a table's name",
         ("fidelity", dict[str, Fidelity]): "a mapping of the record's tables to their fidelity (level, note)"}


def read_record(path: Path) -> PaperRecord:
    """The paper record at ``path``, typed and checked alone (module docstring); ConfigError in one line."""
    try:
        raw = yaml.load(path.read_text(), StrictLoader)  # (a key given twice refused, dates left as text)
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        why = "not a text file" if isinstance(error, UnicodeDecodeError) else "not valid YAML"
        problem = getattr(error, "problem", None)
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path} is not a paper record ({why}){f': {problem}{where}' if problem else ''}: {FIX}") from None
    except OSError as error:
        raise ConfigError(f"{path} cannot be read ({error.strerror}): {FIX}") from None
    hints = typing.get_type_hints(PaperRecord)
    given = raw if isinstance(raw, dict) else {}  # (an empty file, a list: every key it must have is missing)
    wrong = [f.name for f in fields(PaperRecord)
             if (not _fits(given[f.name], hints[f.name]) if f.name in given else f.default == MISSING)]
    if wrong:
        raise ConfigError(f"{path} is not a paper record (missing or mistyped: {', '.join(wrong)}; it has paper: text, "
                          f"tables: a list, headlines: a list, fidelity: a mapping of tables, sweep_file: its sweep "
                          f"file's name): {FIX}")
    misfit = _misfit(raw, PaperRecord, "", "")
    if misfit is not None:
        raise ConfigError(f"{path}: {misfit}")
    try:
        record = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PaperRecord), raw))
    except OmegaConfBaseException as error:  # (what fits the schema above merges into it)
        raise ConfigError(f"{path} is not a paper record ({str(error).splitlines()[0]}): {FIX}") from None
    _check_names(record, path)
    return record


def _fits(value: Any, tp: Any) -> bool:
    """Whether ``value`` has the shape of the schema's ``tp`` at its top (a list, a mapping, a string)."""
    if value is None:
        return typing.get_origin(tp) is typing.Union
    tp = unwrap_optional(tp)
    origin = typing.get_origin(tp)
    return isinstance(value, origin if origin in (list, dict) else dict if is_dataclass(tp) else tp)


def _misfit(value: Any, tp: Any, key: str, name: str) -> str | None:
    """Where ``value`` first does not fit the schema's ``tp`` at ``key`` (``name``: the field it is of): a key
    missing or not the schema's, a value of another type; None where all of it fits."""
    if value is None and typing.get_origin(tp) is typing.Union:
        return None
    tp = unwrap_optional(tp)
    origin = typing.get_origin(tp)
    wrong = f"{key}={value!r} is not allowed: it must be {WORDS.get((name, tp)) or describe_type(tp)}"
    if is_dataclass(tp):
        if not isinstance(value, dict):
            return wrong
        hints = typing.get_type_hints(tp)
        for given in value:
            if given not in hints:
                close = difflib.get_close_matches(str(given), list(hints), n=1, cutoff=0.6)
                return (f"{key}{'.' if key else ''}{given} is not a key of {what_it_is(tp) if key else 'a paper record'}: "
                        f"{f'did you mean {close[0]}? ' if close else ''}(its keys: {', '.join(hints)})")
        for f in fields(tp):
            where = f"{key}{'.' if key else ''}{f.name}"
            if f.name not in value:
                if f.default == MISSING:
                    return f"{where} is missing: give {WORDS.get((f.name, hints[f.name])) or describe_type(hints[f.name])}"
                continue
            found = _misfit(value[f.name], hints[f.name], where, f.name)
            if found is not None:
                return found
        return None
    if origin in (list, dict):
        if not isinstance(value, origin):
            return wrong
        items = enumerate(value) if origin is list else value.items()
        for index, item in items:
            if origin is dict and not isinstance(index, str):
                return f"{key}.{index}={item!r} is not allowed: it must be under a name (a string key), not {index!r}"
            found = _misfit(item, typing.get_args(tp)[-1], f"{key}[{index}]" if origin is list else f"{key}.{index}", name)
            if found is not None:
                return found
        return None
    return wrong if tp is str and not isinstance(value, str) else None


def _known(path: Path, name: str, key: str, options: list[str]) -> None:
    """``name`` is one of ``options``, else one line with the closest."""
    if name not in options:
        close = difflib.get_close_matches(name, options, n=1)
        raise ConfigError(f"{path}: {key}={name!r} is not defined: {f'did you mean {close[0]}? ' if close else ''}"
                          f"(choose one of {', '.join(options)})")


def _check_names(record: PaperRecord, path: Path) -> None:
    """Table names are file names, each once; fidelity at a level of FIDELITY; each headline's rows (and each
    reading's) 'TABLE: ARM', at least one, none twice (that each names a table of the record is checked once the
    record's tables are known to exist: :func:`check_records`, whose line then names the misspelt table)."""
    for i, table in enumerate(record.tables):
        if not TABLE_NAME.fullmatch(table):  # (its evidence is <out>/<table>_evidence.csv)
            raise ConfigError(f"{path}: tables[{i}]={table!r} is not allowed: a table's name is a file name: letters, "
                              "digits, _, - and ., not starting with .")
        if table in record.tables[:i]:
            raise ConfigError(f"{path}: tables[{i}]={table!r} is not allowed: it is tables[{record.tables.index(table)}] "
                              "too: each table once (a table named twice would count its verdicts twice)")
    for table, fidelity in record.fidelity.items():
        choose(path, f"fidelity.{table}.level", fidelity.level, tuple(FIDELITY))
    for key, rows in _rows(record).items():
        if not rows:
            raise ConfigError(f"{path}: {key}=[] is not allowed: a headline (and each of its readings) names the rows "
                              "that test it, each 'TABLE: ARM'")
        for j, row in enumerate(rows):
            table, colon, arm = row.partition(": ")
            if not colon or not table or not arm.strip():
                raise ConfigError(f"{path}: {key}[{j}]={row!r} is not allowed: write 'TABLE: ARM' (a table of the "
                                  "record, one of its arms)")
            if row in rows[:j]:
                raise ConfigError(f"{path}: {key}[{j}]={row!r} is not allowed: it is {key}[{rows.index(row)}] too: "
                                  "each row once (a row named twice would count twice)")


def _rows(record: PaperRecord) -> dict[str, list[str]]:
    """Each list of rows of the record's headlines, by its key: 'headlines[0].rows', 'headlines[0].readings.NAME'."""
    return {key: rows for i, headline in enumerate(record.headlines)
            for key, rows in {f"headlines[{i}].rows": headline.rows,
                              **{f"headlines[{i}].readings.{name}": rows for name, rows in headline.readings.items()}}.items()}


def check_records(out: Path, records: dict[Path, PaperRecord], sweeps: dict[str, tuple[Path, SweepFile]]) -> None:
    """The records under ``out`` together (by path), with the sweep files read (by stem: the record
    <stem>_paper.yaml is the sweep file <stem>.yaml's): one record per sweep file, under its name; each table in
    one record; each table a record names made here (its evidence file) or registered by the record's sweep file
    (a reproduction records all its file's tables, and may have made some of them only); every evidence file
    under ``out`` a table of a record."""
    owner: dict[str, tuple[Path, int]] = {}
    for path, record in records.items():
        stem = path.name[:-len(RECORD)]
        if record.sweep_file is not None and Path(record.sweep_file).stem != stem:
            own = out / f"{Path(record.sweep_file).stem}{RECORD}"
            raise ConfigError(f"{path}: sweep_file={record.sweep_file!r} is not allowed: the record of "
                              f"{record.sweep_file} is {own.name}, " + (
                                  f"which is there: one record per sweep file (a copy counts each verdict again): "
                                  f"remove {path.name}" if own in records else f"as its reproduction writes it: rename "
                                  f"{path.name} to {own.name}"))
        for i, table in enumerate(record.tables):
            if table in owner:
                other, j = owner[table]
                raise ConfigError(f"{path}: tables[{i}]={table!r} is not allowed: it is {other.name}'s tables[{j}] "
                                  f"too: each table in one record (two count each of its verdicts twice): remove the one "
                                  "of the two that is a copy")
            owner[table] = path, i
            if (out / f"{table}{EVIDENCE}").is_file():
                continue
            spec_path, spec = sweeps.get(stem, (None, None))
            if spec is None:
                raise ConfigError(f"{path}: tables[{i}]={table!r} is not allowed: there is no {table}{EVIDENCE} "
                                  f"beside the record, and no sweep file read (--sweeps) is {stem}.yaml, to register "
                                  f"it: name a table made here, or give as --sweeps the directory of {stem}.yaml")
            if table not in spec.tables:
                close = difflib.get_close_matches(table, list(spec.tables), n=1)
                raise ConfigError(f"{path}: tables[{i}]={table!r} is not allowed: there is no {table}{EVIDENCE} beside "
                                  f"the record, and {spec_path} registers no such table: "
                                  f"{f'did you mean {close[0]}? ' if close else ''}(its tables: {', '.join(spec.tables)})")
        for table in record.fidelity:
            _known(path, table, "fidelity", record.tables)
        for key, rows in _rows(record).items():
            for j, row in enumerate(rows):
                _known(path, row.partition(": ")[0], f"{key}[{j}] table", record.tables)
    for evidence in sorted(out.glob(f"*{EVIDENCE}")):
        table = evidence.name[:-len(EVIDENCE)]
        if table not in owner:
            spec_path = next((p for p, spec in sweeps.values() if table in spec.tables), None)
            record = (f"{spec_path} registers it: its record is {spec_path.stem}{RECORD}" if spec_path is not None
                      else f"a reproduction writes <stem>{RECORD} with its tables' evidence")
            raise ConfigError(f"{evidence} has no paper record: no *{RECORD} beside it names the table {table} "
                              f"({record}): reproduce its sweep file again (python -m fl_bench.analysis.reproduce), "
                              "or remove the file")


def check_rows(records: dict[Path, PaperRecord], sweeps: dict[str, tuple[Path, SweepFile]],
               arms: dict[str, list[str]]) -> None:
    """Each headline's row (and each reading's) names an arm of its table: in its evidence (``arms``: the arms
    of each table made, in the order of its evidence file), or registered by the record's sweep file (an arm not
    run yet)."""
    for path, record in records.items():
        _, spec = sweeps.get(path.name[:-len(RECORD)], (None, None))
        for key, rows in _rows(record).items():
            for j, row in enumerate(rows):
                table, _, arm = row.partition(": ")
                made = arms.get(table, [])
                registered = list(spec.tables[table].arms) if spec is not None and table in spec.tables else []
                if arm not in made and arm not in registered:
                    options = list(dict.fromkeys([*made, *registered]))
                    close = difflib.get_close_matches(arm, options, n=1)
                    more = f", and {len(options) - 8} more" if len(options) > 8 else ""
                    raise ConfigError(f"{path}: {key}[{j}]={row!r} is not allowed: {table} has no arm {arm!r}, in its "
                                      f"evidence or its sweep file: {f'did you mean {close[0]!r}? ' if close else ''}"
                                      f"(its arms: {', '.join(options[:8])}{more})")
