"""The report-seed ledger, ``<runs_dir>/report_seeds.json``: the seeds every table and every arm of a
reproduction reports on, recorded before the first report run starts (issue 52).

Seeds are set before the report runs, never added after looking. The ledger keeps, per table and per
arm (an arm's directory is shared by the tables that run it, so a renamed table still meets its arms'
entries), the seeds, the day they were recorded, the protocol's amendments then and the sweep file's
SHA-256; and a digest of all that, so an edit by hand is seen. A reproduction asking for other seeds
than those recorded goes on only under an amendment added since, dated no earlier than the recording;
amendments already recorded cannot be rewritten, and report runs with no ledger entry (a deleted
ledger) are refused. Every table's page prints what the ledger recorded for it (:meth:`SeedLedger.note`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fl_bench.runs.atomic import replace_text

LEDGER = "report_seeds.json"
FORMAT = 2


def seed_text(seeds: list[int]) -> str:
    """Seeds as a reader scans them: 1-30, or the list where they are not a run of integers."""
    runs = len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1))
    return f"{seeds[0]}-{seeds[-1]}" if runs else ", ".join(map(str, seeds))


def _digest(tables: dict, arms: dict) -> str:
    return hashlib.sha256(json.dumps({"tables": tables, "arms": arms}, sort_keys=True).encode()).hexdigest()


def _is_entry(entry: Any, table: bool) -> bool:
    """Whether ``entry`` has the shape the ledger writes."""
    return (isinstance(entry, dict) and isinstance(entry.get("seeds"), list)
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in entry["seeds"])
            and isinstance(entry.get("recorded"), str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["recorded"]) is not None
            and isinstance(entry.get("amended"), list) and all(isinstance(a, str) for a in entry["amended"])
            and (not table or isinstance(entry.get("sweep_sha256"), str)))


@dataclass
class SeedLedger:
    """A runs directory's ledger (empty where none was written yet)."""

    path: Path
    tables: dict[str, dict] = field(default_factory=dict)
    arms: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def read(cls, runs_dir: Path) -> "SeedLedger":
        """The ledger in ``runs_dir``; ValueError in one line where it is not one this module wrote, or
        was edited since."""
        path = Path(runs_dir) / LEDGER
        if not path.exists():
            return cls(path)
        damaged = ValueError(f"{path} is not a ledger of report seeds (what {Path(__file__).stem}.py writes: the "
                             f"seeds each table and arm reports on, recorded before the report runs): restore it, or "
                             f"use another runs_dir")
        try:
            ledger = json.loads(path.read_bytes())
        except (OSError, UnicodeDecodeError, ValueError):
            raise damaged from None
        if isinstance(ledger, dict) and ledger and all(isinstance(e, dict) and {"seeds", "amendments"} <= set(e)
                                                       for e in ledger.values()):
            raise ValueError(f"{path} was written by an older fl_bench (seeds per table only, no digest), and the runs "
                             f"beside it list no files in their summaries, so none of them counts as finished: use "
                             f"another runs_dir, or remove {path.parent} to run the reproduction again there")
        if not (isinstance(ledger, dict) and ledger.get("format") == FORMAT
                and isinstance(ledger.get("tables"), dict) and isinstance(ledger.get("arms"), dict)
                and all(_is_entry(e, True) for e in ledger["tables"].values())
                and all(_is_entry(e, False) for e in ledger["arms"].values())):
            raise damaged
        if ledger.get("sha256") != _digest(ledger["tables"], ledger["arms"]):
            raise ValueError(f"{path} was edited after it was recorded (its digest no longer matches): report seeds "
                             f"are recorded before the report runs, not changed after; restore it, or use another runs_dir")
        return cls(path, ledger["tables"], ledger["arms"])

    def check(self, tables: dict[str, list[int]], arms: dict[str, list[int]], amended: tuple[str, ...],
              labels: dict[str, str], started: set[str]) -> None:
        """ValueError unless the seeds wanted now (``tables``, ``arms`` by key, named by ``labels``) are
        those recorded, or an amendment added since the recording, dated no earlier, says why; ``started``:
        the keys of the arms whose report runs already exist (each must have an entry)."""
        for key in sorted(started - set(self.arms)):
            raise ValueError(f"arm {labels[key]!r} already has report runs ({self.path.parent / key}), but {self.path} "
                             f"records no seeds for it (the ledger was removed, or the runs are older than it): report "
                             f"seeds are recorded before the report runs; restore the ledger, or use another runs_dir")
        for kind, wanted, entries in (("table", tables, self.tables), ("arm", arms, self.arms)):
            for name, seeds in wanted.items():
                before = entries.get(name)
                if before is None:
                    continue
                shown = name if kind == "table" else repr(labels[name])
                if list(amended[:len(before["amended"])]) != before["amended"]:
                    raise ValueError(f"protocol.amended was rewritten after the report runs of {kind} {shown} began "
                                     f"(recorded {before['recorded']} in {self.path}): amendments are added, never "
                                     f"edited or removed")
                added = amended[len(before["amended"]):]
                for change in added:
                    if change[:10] < before["recorded"]:
                        raise ValueError(f"protocol.amended entry {change[:40]!r} is dated before the report runs it "
                                         f"changes began ({before['recorded']}, {self.path}): date an amendment the "
                                         f"day it is written")
                if before["seeds"] != seeds and not added:
                    raise ValueError(f"{kind} {shown}: its report runs used seeds {seed_text(before['seeds'])} "
                                     f"({self.path}); this protocol asks for {seed_text(seeds)}: report seeds are set "
                                     f"before the report runs, not added after looking; add a protocol.amended entry "
                                     f"that says why, or use another runs_dir")

    def record(self, tables: dict[str, list[int]], arms: dict[str, list[int]], amended: tuple[str, ...],
               sweep_file: Path) -> None:
        """Write the seeds wanted now (after :meth:`check`), before the first report run. An entry whose seeds
        are unchanged keeps its recording (its day, the amendments then, the sweep file's digest then): an
        amendment added later, that changes no seed, does not make the seeds look recorded later than they were."""
        today = datetime.date.today().isoformat()
        sweep = hashlib.sha256(Path(sweep_file).read_bytes()).hexdigest()
        for entries, wanted, extra in ((self.tables, tables, {"sweep_sha256": sweep}), (self.arms, arms, {})):
            for name, seeds in wanted.items():
                before = entries.get(name)
                if before is None or before["seeds"] != seeds:
                    entries[name] = {"seeds": list(seeds), "recorded": today, "amended": list(amended), **extra}
        ledger = {"format": FORMAT, "tables": self.tables, "arms": self.arms, "sha256": _digest(self.tables, self.arms)}
        replace_text(self.path, json.dumps(ledger, indent=1) + "\n")

    def note(self, table: str, sweep_file: Path, amended: tuple[str, ...] = ()) -> str:
        """The paragraph under a table's page: its seeds as recorded before its report runs, and the
        amendments (of the protocol's ``amended`` now) added since."""
        entry = self.tables.get(table)
        if entry is None:
            return ""
        changed = hashlib.sha256(Path(sweep_file).read_bytes()).hexdigest() != entry["sweep_sha256"]
        amendments, since = len(entry["amended"]), len(amended) - len(entry["amended"])
        later = (f"; the sweep file has been edited since, {since} amendment{'' if since == 1 else 's'} added"
                 if changed and since > 0 else "; the sweep file has been edited since" if changed else "")
        return (f"Report seeds {seed_text(entry['seeds'])}, recorded in {self.path} on {entry['recorded']} before the "
                f"first report run (sweep file SHA-256 {entry['sweep_sha256'][:12]}, {amendments} amendment"
                f"{'' if amendments == 1 else 's'}{later}).")
