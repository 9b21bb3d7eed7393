"""One scoreboard for every paper: what holds, generated from the tables' evidence.

    python -m fl_bench.analysis.scoreboard            # results/evidence.csv and results/README.md
    python -m fl_bench.analysis.scoreboard --out /tmp/r --sweeps sweeps

Each reproduced table leaves ``<table>_evidence.csv`` beside its page (:func:`write_table_evidence`,
called by fl_bench.analysis.reproduce): one row per arm with its median and effect, their 95%
intervals, the paper's effect, the verdict and the guards. This module gathers the rows that carry a
verdict, for every table of every sweep file, into ``evidence.csv`` and a page per paper
(``README.md``). A "differs" row names its cause where its sweep file gives one (an arm's ``cause``:
the arm of the same table that changes one thing, and what it changes), with that arm's verdict, so
the reader sees whether changing that one thing moves the verdict (it explains the row where that arm
reproduces the paper); else it says "unexplained", with what was tried (the cause, or an arm's
``tried``: arms that each changed one thing, with their verdicts). A
table without an evidence file (never reproduced since evidence files exist) is listed as such.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import yaml

from fl_bench.analysis.guards import shown_interval, shown_paper
from fl_bench.analysis.sweep_file import load_sweep_file
from fl_bench.errors import ConfigError
from fl_bench.runs.atomic import replace_text

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"
TEXT = ("arm", "vs", "paper_effect", "verdict", "guard", "cause", "paper", "table")  # empty cells stay ""
NUMBERS = ("median", "median_low", "median_high", "effect", "effect_low", "effect_high")
VERDICTS = ("reproduces", "differs", "inconclusive", "same side", "underpowered", "not reached", "paper split",
            "tuning failed")
COLUMNS = ["paper", "table", "arm", "vs", "measure", "median", "median_low", "median_high", "effect", "effect_low",
           "effect_high", "censored", "paper_effect", "claim", "band_low", "band_high", "verdict", "guard", "seeds",
           "cause"]
# written by the reproduction since a later issue than the file's other columns: an older evidence file
# reads as the side claims its verdicts were
LATER_COLUMNS = {"claim": "side", "band_low": float("nan"), "band_high": float("nan")}
# censored: ">" where the effect is a lower bound (some of the arm's seeds never reached the target and
# count as the budget: guards.evidence's effect_bound), as the page prints it; "" for a measured effect


def write_table_evidence(found: pd.DataFrame, table: str, paper: str, arms: dict[str, dict], path: Path) -> None:
    """A table's :func:`fl_bench.analysis.guards.evidence` with its table, paper and each arm's cause,
    written to ``path`` (``<table>_evidence.csv``)."""
    frame = found.rename(columns={"method": "arm", "paper": "paper_effect"}).assign(paper=paper, table=table)
    frame["cause"] = [_cause(arms.get(arm, {})) for arm in frame["arm"]]
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, frame.to_csv(index=False))


def _cause(arm: dict) -> str:
    """An arm's cause as its evidence file keeps it: 'CHANGES (arm ARM)', or 'tried: ...; ...'."""
    if arm.get("cause"):
        return f"{arm['cause']['changes']} (arm {arm['cause']['arm']})"
    tried = arm.get("tried") or []
    return "tried: " + "; ".join(f"{t['changes']} (arm {t['arm']})" for t in tried) if tried else ""


def reproductions(directory: Path = SWEEPS) -> list[Path]:
    """The reproductions' sweep files in ``directory`` (those with a ``protocol``; not W&B sweeps)."""
    return [path for path in sorted(directory.glob("*.yaml")) if path.is_file() and _is_reproduction(path)]


def _is_reproduction(path: Path) -> bool:
    """Whether ``path`` has a ``protocol``; a file that is not a mapping of keys (binary, broken YAML,
    empty) counts too, so that :func:`load_sweep_file` refuses it by name rather than it being skipped."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (UnicodeDecodeError, yaml.YAMLError):
        return True
    except OSError as error:
        raise ConfigError(f"{path} cannot be read ({error.strerror}): give a readable sweep file") from None
    return not isinstance(raw, dict) or "protocol" in raw


def gather(out: Path, sweep_files: list[Path]) -> tuple[pd.DataFrame, list[tuple[str, str, bool]], list[str], list[str]]:
    """Every verdict row of every table of ``sweep_files`` found under ``out``, every (paper, table,
    whether it has an evidence file there), every arm, verdict or not, that the unstable guard names
    ('table: arm'), and every arm tuned to its special case ('table: arm (what it equals)'), which has
    no verdict of its own."""
    frames, tables = [], []
    for spec_path in dict.fromkeys(path.resolve() for path in sweep_files):
        spec = load_sweep_file(spec_path)
        paper = spec.get("paper", spec_path.stem)
        for table in spec["tables"]:
            path = out / f"{table}_evidence.csv"
            tables.append((paper, table, path.is_file()))
            if not path.is_file():
                continue
            frames.append(_read_evidence(path))
    every = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    rows = every[every["verdict"] != ""].reset_index(drop=True)
    rows["cause"] = [_cause_verdict(row, every) for _, row in rows.iterrows()]
    unstable = [f"{row['table']}: {row['arm']}" for _, row in every.iterrows() if "unstable: " in row["guard"]]
    degenerate = [f"{row['table']}: {row['arm']} ({row['guard'].split('degenerate: ', 1)[1].split('; ')[0]})"
                  for _, row in every.iterrows() if "degenerate: " in row["guard"]]
    return rows[COLUMNS], tables, unstable, degenerate


def _read_evidence(path: Path) -> pd.DataFrame:
    """A table's evidence file; ConfigError in one line when it is not one (empty, binary, other columns)."""
    fix = "reproduce its table again (python -m fl_bench.analysis.reproduce) or remove the file"
    try:
        frame = pd.read_csv(path, dtype={**{column: str for column in TEXT}, **{column: float for column in NUMBERS}})
    except ValueError as error:  # pandas' empty-file and parser errors, undecodable bytes, text for a number
        why = str(error).strip().split("\n")[0]
        raise ConfigError(f"{path} is not a table's evidence file ({why}): {fix}") from None
    except OSError as error:
        raise ConfigError(f"{path} cannot be read ({error.strerror}): {fix}") from None
    frame = frame.assign(**{column: value for column, value in LATER_COLUMNS.items() if column not in frame.columns})
    missing = [column for column in [*COLUMNS, "effect_bound"] if column not in frame.columns and column != "censored"]
    if missing:
        raise ConfigError(f"{path} is not a table's evidence file (missing columns: {', '.join(missing)}): {fix}")
    frame[list(TEXT)] = frame[list(TEXT)].fillna("")
    frame["censored"] = [">" if str(bound) == "True" else "" for bound in frame["effect_bound"]]
    return frame


def _cause_verdict(row: pd.Series, rows: pd.DataFrame) -> str:
    """A "differs" row's cause with the verdict of the arm that tests it (``rows``: every arm of every
    table, verdict or not); "unexplained" without one."""
    if row["verdict"] != "differs":
        return row["cause"]
    if not row["cause"]:
        return "unexplained"

    def tested(cause: str) -> str:  # the arm's verdict; an arm without one, its effect against its vs
        arm = cause.rsplit("(arm ", 1)[1].rstrip(")")
        other = rows[(rows["table"] == row["table"]) & (rows["arm"] == arm)]
        if not len(other):
            return f"{cause}: no verdict"
        other = other.iloc[0]
        if other["verdict"]:
            return f"{cause}: {other['verdict']}"
        return f"{cause}: {_effect(other)} against {other['vs']}" if other["vs"] else f"{cause}: no verdict"

    if row["cause"].startswith("tried: "):
        return "unexplained; tried " + "; ".join(tested(c) for c in row["cause"][len("tried: "):].split("; "))
    cause = tested(row["cause"])  # a cause explains the row where its own arm reproduces the paper
    return cause if cause.endswith(": reproduces") else f"unexplained; tried {cause}"


def _effect(row: pd.Series) -> str:
    """An effect [95% interval] as its page prints it, its censored bound (">") kept."""
    kind = "ratio" if row["measure"] in ("trips", "rounds") else "difference"
    return shown_interval(row["effect"], row["effect_low"], row["effect_high"], kind, row["censored"] == ">")


def counts(rows: pd.DataFrame) -> str:
    """'N verdicts: a reproduces, b differs, c inconclusive (x%)' for ``rows`` (with the underpowered,
    not-reached, paper-split and tuning-failed rows where there are any)."""
    found = (rows["verdict"].str.replace(r"^underpowered at \d+ seeds$", "underpowered", regex=True)
             .str.replace(r"^same side, .*$", "same side", regex=True).value_counts())
    parts = [f"{found.get(v, 0)} {v}" for v in VERDICTS if found.get(v, 0) or v in VERDICTS[:3]]
    share = found.get("inconclusive", 0) / len(rows) if len(rows) else 0.0
    return f"{len(rows)} verdicts: {', '.join(parts)} ({share:.0%} inconclusive)"


def markdown(rows: pd.DataFrame, tables: list[tuple[str, str, bool]], unstable: list[str] = (),
             degenerate: list[str] = ()) -> str:
    """The scoreboard page: counts overall and the arms whose tuned setting collapsed, then per paper a
    row per claim."""
    lines = ["# What holds: every paper's claims under this suite's protocol", "",
             "Generated by `python -m fl_bench.analysis.scoreboard` from the tables' evidence files "
             "(`<table>_evidence.csv`, written by `fl_bench.analysis.reproduce`); one row per verdict, the same rows as "
             "`evidence.csv`. Effect: the arm against `vs` (a ratio of client trips or rounds, lower is better; or a "
             "difference in accuracy points, higher is better), median over the report seeds with its 95% bootstrap "
             "interval; '>' marks a lower bound (seeds that never reached the target count as the budget; "
             "`evidence.csv`'s `censored` column); the verdict rule is each table's protocol (on its page).", "", f"All papers: {counts(rows)}.", "",
             f"Guard, unstable (a tuned setting that collapsed on some report seeds), on {len(unstable)} "
             f"arm{'' if len(unstable) == 1 else 's'}{': ' + '; '.join(unstable) if unstable else ''}.", "",
             f"Degenerate (a tuned setting equal to its special case: that method run again, not counted), on "
             f"{len(degenerate)} arm{'' if len(degenerate) == 1 else 's'}{': ' + '; '.join(degenerate) if degenerate else ''}.",
             ""]
    for paper in dict.fromkeys(p for p, _, _ in tables):
        mine = rows[rows["paper"] == paper]
        lines += [f"## {paper}", ""]
        quiet = [t for p, t, found in tables if p == paper and found and t not in set(mine["table"])]
        if quiet:
            lines += [f"No verdict (no paper number to test; the page ranks or measures): "
                      f"{', '.join(f'[{t}]({t}.md)' for t in quiet)}.", ""]
        if len(mine):
            lines += [f"{counts(mine)}.", ""]
            shown = pd.DataFrame({
                "table": [f"[{t}]({t}.md)" for t in mine["table"]], "arm": mine["arm"], "vs": mine["vs"],
                "effect [95% CI]": mine.apply(_effect, axis=1), "paper": mine.apply(shown_paper, axis=1, paper="paper_effect"),
                "verdict": mine["verdict"], "seeds": mine["seeds"], "guard": mine["guard"], "cause": mine["cause"]})
            lines += [shown.to_markdown(index=False), ""]
        gone = [t for p, t, found in tables if p == paper and not found]
        if gone:
            lines += [f"No evidence file (not reproduced since evidence files were introduced): "
                      f"{', '.join(f'[{t}]({t}.md)' for t in gone)}.", ""]
    return "\n".join(lines)


def write(out: Path, sweep_files: list[Path] | None = None) -> pd.DataFrame:
    """``out``/evidence.csv and ``out``/README.md from the evidence files under ``out`` of the tables of
    ``sweep_files`` (default: :func:`reproductions`)."""
    rows, tables, unstable, degenerate = gather(out, reproductions() if sweep_files is None else sweep_files)
    if not any(found for _, _, found in tables):  # a misspelt --out would otherwise give an empty board
        raise ConfigError(f"{out} holds no evidence file (<table>_evidence.csv) of any table of the sweep files: "
                          "give as --out the directory the tables were reproduced into")
    table, page = rows.to_csv(index=False), markdown(rows, tables, unstable, degenerate)  # both whole before either is written
    try:
        replace_text(out / "evidence.csv", table)
        replace_text(out / "README.md", page)
    except OSError as error:  # e.g. a read-only directory; error.filename may be a temporary file, or None
        raise ConfigError(f"{out}: cannot write the scoreboard there ({error.strerror or error}): "
                          "give a directory you can write to") from None
    return rows


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the README's command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.analysis.scoreboard", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="where the tables' evidence files are")
    parser.add_argument("--sweeps", type=Path, default=SWEEPS, help="the sweep files whose tables to gather")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if not args.sweeps.is_dir():
            raise ConfigError(f"--sweeps {args.sweeps} is not a directory: give the directory of the sweep files")
        if not args.out.is_dir():
            raise ConfigError(f"--out {args.out} is not a directory: give the directory the tables were reproduced "
                              "into (where their <table>_evidence.csv are)")
        sweep_files = reproductions(args.sweeps)
        if not sweep_files:
            raise ConfigError(f"--sweeps {args.sweeps} holds no reproduction's sweep file (a .yaml file with a "
                              "protocol): give the directory of the sweep files, e.g. sweeps")
        rows = write(args.out, sweep_files)
    except ConfigError as error:
        print(f"fl_bench.analysis.scoreboard: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"{args.out / 'README.md'}: {counts(rows)}")


if __name__ == "__main__":
    main()
