"""A held-out check: a registered protocol rerun on report seeds it never used, each verdict set beside the
registered one.

    python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml --held-out-seeds 721-740 [--jobs 2]

The reproduction (fl_bench.analysis.reproduce) reruns every arm with its kept tuned setting (it never tunes
again: a study without a kept setting of this protocol is refused) on the given seeds, at most the
protocol's cap of report seeds, into a runs directory of its own (``<runs_dir>_held_out_<seeds>``), and
writes the tables' pages and evidence as a reproduction does into its own directory (default
``results/held_out/<sweep file>_<seeds>/``); then :func:`write_comparison` sets each verdict beside the
registered one (the evidence files under ``--registered``, default the sweep file's repository's
``results/``, checked before the runs) in ``held_out.md`` and ``held_out.csv``, and says which moved. A held-out verdict that moves reads as: the registered one rested on
its seeds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from fl_bench.analysis.scoreboard import effect_text, read_evidence
from fl_bench.runs.atomic import replace_text

SEEDS = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


def parse_seeds(text: str) -> list[int]:
    """'721-740' or '721,725,730-735': the seeds in the order given; ValueError in one line otherwise."""
    text = text.replace(" ", "")
    if not SEEDS.fullmatch(text):
        raise ValueError(f"--held-out-seeds {text!r}: give seeds as FIRST-LAST or a comma-separated list of seeds and "
                         "ranges, e.g. 721-740 or 721,725,730-735 (integers >= 0)")
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if last and int(last) < int(first):
            raise ValueError(f"--held-out-seeds {text!r}: the range {part} ends before it starts: write FIRST-LAST")
        seeds += range(int(first), int(last or first) + 1)
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"--held-out-seeds {text!r}: a seed is given twice: give each seed once")
    return seeds


def label(seeds: list[int]) -> str:
    """A directory name for ``seeds`` ('721-740' for a run of consecutive seeds, else the seeds joined by '_')."""
    consecutive = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
    return f"{seeds[0]}-{seeds[-1]}" if consecutive and len(seeds) > 1 else "_".join(map(str, seeds))


def check_registered(registered: Path, tables: list[str]) -> None:
    """ValueError in one line unless ``registered`` holds each table's registered evidence (checked before a
    held-out check's runs, not after them)."""
    for table in tables:
        path = registered / f"{table}_evidence.csv"
        if not path.is_file():
            raise ValueError(f"{path} does not exist: the held-out check compares with the registered evidence; give "
                             "--registered the directory the registered reproduction wrote (default: the sweep file's "
                             "repository's results)")


def compare(registered: Path, held_out: Path, tables: list[str]) -> pd.DataFrame:
    """Per arm with a verdict in either: its registered effect and verdict (``registered``/<table>_evidence.csv)
    beside the held-out ones (``held_out``/...), and whether the verdict moved. A table never registered there
    is refused (there is nothing to check against)."""
    check_registered(registered, tables)
    rows = []
    for table in tables:
        before = read_evidence(registered / f"{table}_evidence.csv").set_index("arm")
        after = read_evidence(held_out / f"{table}_evidence.csv").set_index("arm")
        for arm in after.index:
            old = before.loc[arm] if arm in before.index else None
            new = after.loc[arm]
            if not new["verdict"] and (old is None or not old["verdict"]):
                continue
            rows.append({"table": table, "arm": arm, "vs": new["vs"],
                         "registered": "" if old is None else effect_text(old), "registered verdict":
                         "not registered" if old is None else old["verdict"] or "no verdict",
                         "registered seeds": "" if old is None else int(old["seeds"]),
                         "held-out": effect_text(new), "held-out verdict": new["verdict"] or "no verdict",
                         "held-out seeds": int(new["seeds"]),
                         "moved": old is None or old["verdict"] != new["verdict"]})
    return pd.DataFrame(rows, columns=["table", "arm", "vs", "registered", "registered verdict", "registered seeds",
                                       "held-out", "held-out verdict", "held-out seeds", "moved"])


def write_comparison(registered: Path, held_out: Path, tables: list[str], sweep_file: Path, seeds: list[int]) -> str:
    """``held_out``/held_out.md and held_out.csv (:func:`compare`); returns the page's summary line."""
    found = compare(registered, held_out, tables)
    moved = found[found["moved"]]
    summary = (f"{len(moved)} of {len(found)} verdicts moved on held-out seeds "
               f"{label(seeds).replace('_', ', ')} ({len(seeds)} seeds)")
    shown = found.assign(moved=found["moved"].map({True: "**moved**", False: ""}))
    page = "\n\n".join([
        f"# Held-out check of {sweep_file.name}",
        f"The registered protocol of `{sweep_file}` rerun on report seeds it never used ({', '.join(map(str, seeds))}), "
        f"each arm with its kept tuned setting, at most the protocol's cap of report seeds; each verdict beside the "
        f"registered one ({registered}). {summary}: "
        + (", ".join(f"{row['table']}: {row['arm']} ({row['registered verdict']} -> {row['held-out verdict']})"
                     for _, row in moved.iterrows()) or "none") + ".",
        shown.to_markdown(index=False),
        "A verdict that moved rested on the registered seeds: read it with its interval on both sets of seeds. The "
        "tables' own pages (the evidence, guards and notes on these seeds) are beside this page."])
    replace_text(held_out / "held_out.csv", found.to_csv(index=False))
    replace_text(held_out / "held_out.md", page + "\n")
    return summary
