"""MkDocs hooks (mkdocs.yml): a hand-written page's links out of docs/ into the repository, which work on
GitHub (``../../results/README.md``, ``../../README.md``), point to the site's copies (results/, and the README
as the home page)."""

from __future__ import annotations

import posixpath
import re

LINK = re.compile(r"\]\(([^)\s#]+)")
# Repository files the site holds a copy of, and where: the README is the home page (docs/gen/pages.py).
COPIES = {"README.md": "index.md"}
COPIED_DIRECTORIES = ("results/",)


def site_link(target: str, page: str) -> str:
    """``target``, a link written in docs/``page``, as the site resolves it: a link that leaves docs/ for a
    file the site copies is made relative to the copy; any other is left for the build to check."""
    if re.match(r"[a-z]+:", target):
        return target
    in_repository = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page), target))
    if in_repository.startswith("docs/"):
        return target
    copy = COPIES.get(in_repository) or (in_repository if in_repository.startswith(COPIED_DIRECTORIES) else None)
    return posixpath.relpath(copy, posixpath.dirname(page) or ".") if copy else target


def on_page_markdown(markdown: str, page, **_) -> str:
    return LINK.sub(lambda found: "](" + site_link(found.group(1), page.file.src_uri), markdown)


# A verdict table's cell this long (a "cause" of up to 1,000 characters) is capped to a few lines that scroll
# (docs/stylesheets/extra.css: .fl-long-cell), so one cell does not make its row hundreds of pixels tall.
# One shorter than this (an arm, an effect and its interval) stays on one line instead of wrapping in three.
LONG_CELL, SHORT_CELL = 160, 40
TABLE = re.compile(r"<table>.*?</table>", re.S)
CELL = re.compile(r"(<td[^>]*>)(.*?)(</td>)", re.S)


def _cap_long_cells(table: str) -> str:
    if not re.search(r"<th[^>]*>\s*verdict\s*</th>", table):
        return table

    def cap(found: re.Match) -> str:
        opening, body, closing = found.groups()
        length = len(re.sub(r"<[^>]+>", "", body))
        if length <= SHORT_CELL:  # a name, a number, an interval: on one line
            return opening.replace("<td", '<td class="fl-short-cell"', 1) + body + closing
        if length <= LONG_CELL:
            return found.group(0)
        return f'{opening}<div class="fl-long-cell" tabindex="0">{body}</div>{closing}'

    return CELL.sub(cap, table)


# A code span in a table cell: each of its words kept whole (docs/stylesheets/extra.css: .fl-word), so a command
# wraps between its words, a dotted key (`algorithm.server_optimizer`) or a path only after a dot or a slash, and
# no word (`server_optimizer`, `--jobs`) breaks inside itself.
CODE = re.compile(r"<code>([^<]*)</code>")


def _whole_words(code: re.Match) -> str:
    def word(found: re.Match) -> str:  # a dotted name or a path may wrap after a dot or a slash, between its parts
        return "<wbr>".join(f'<span class="fl-word">{part}</span>' for part in re.split(r"(?<=[./])", found.group(0)) if part)

    return "<code>" + re.sub(r"\S+", word, code.group(1)) + "</code>"


def _table(table: str) -> str:
    table = CELL.sub(lambda cell: cell.group(1) + CODE.sub(_whole_words, cell.group(2)) + cell.group(3), table)
    return _cap_long_cells(table)


def on_page_content(html: str, **_) -> str:
    return TABLE.sub(lambda found: _table(found.group(0)), html)
