"""A page's generated blocks: parts of a table's page rendered from the table's own files, between markers.

A block is ``<!-- NAME: generated from SOURCE; do not edit -->``, its text, ``<!-- NAME: end -->``. The
reproduction writes each block into the page it makes; the scoreboard renders it again from the same files
into every page under its directory (fl_bench.analysis.report.refresh_page), so a page made by older code
shows what today's code makes of its data, and a test can check that every committed page does.
"""

from __future__ import annotations

import re


def marked(name: str, text: str, source: str) -> str:
    """``text`` as block ``name``, rendered from ``source`` (what the begin marker says it came from)."""
    return f"<!-- {name}: generated from {source}; do not edit -->\n\n{text.strip()}\n\n<!-- {name}: end -->"


def _span(page: str, name: str) -> re.Match | None:
    return re.search(rf"<!-- {re.escape(name)}: (?!end -->)(.*?) -->\n.*?<!-- {re.escape(name)}: end -->", page, re.S)


def source(page: str, name: str) -> str | None:
    """What block ``name`` of ``page`` says it was generated from ('generated from X' gives X), None without it."""
    found = _span(page, name)
    return None if found is None else found.group(1).removeprefix("generated from ").removesuffix("; do not edit")


def has(page: str, name: str) -> bool:
    return _span(page, name) is not None


def replaced(page: str, name: str, block: str) -> str:
    """``page`` with its block ``name`` replaced by ``block`` (a :func:`marked` text); ValueError without one."""
    found = _span(page, name)
    if found is None:
        raise ValueError(f"the page has no {name} block (<!-- {name}: ... --> ... <!-- {name}: end -->)")
    return page[:found.start()] + block + page[found.end():]
