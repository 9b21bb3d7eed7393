"""Text from the source (docstrings, comments) as Markdown, for the page generators of docs/gen/."""

from __future__ import annotations

import inspect
import re

_CODE = re.compile(r"(``[^`]*``|`[^`]*`)")
_ROLE = re.compile(r":\w+:`~?([^`]*)`")


def cell(text: str) -> str:
    """``text`` (a docstring, a comment) on one line, safe inside a Markdown table cell: a pipe would end the
    cell, ``<...>`` would be read as an HTML tag, and ``*``, ``_``, ``[`` as emphasis or a link (a
    cross-reference that --strict would refuse); code spans are kept as they are, reST roles become ones."""
    parts = _CODE.split(_ROLE.sub(r"`\1`", " ".join(text.split())))
    for i, part in enumerate(parts):
        if not part.startswith("`"):
            part = part.replace("\\", "\\\\")
            for char in "*_[]":
                part = part.replace(char, "\\" + char)
            parts[i] = part.replace("<", "&lt;").replace(">", "&gt;")
    return "".join(parts).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as an inline code span (in a table cell: its pipes escaped)."""
    return f"`{text}`".replace("|", "\\|")


def prose(docstring: str) -> str:
    """A docstring as Markdown paragraphs: reST roles (``:func:`f` ``) and double backticks become code spans,
    and ``<...>`` outside code is text, not an HTML tag."""
    text = _ROLE.sub(r"`\1`", inspect.cleandoc(docstring)).replace("``", "`")
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;") for part in parts)


def source_comment(lines: list[str], first: int, last: int) -> str:
    """The comment of the statement on lines ``first`` to ``last`` (1-based, as ``ast`` numbers them): the
    comment lines right above it, then the comment that ends its last line."""
    above, row = [], first - 2
    while row >= 0 and lines[row].strip().startswith("#"):
        above.insert(0, lines[row].strip().lstrip("#").strip())
        row -= 1
    return " ".join(part for part in [*above, _inline_comment(lines[last - 1])] if part)


def _inline_comment(line: str) -> str:
    """The ``# ...`` that ends a line of code (a ``#`` inside a string literal is not one)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            return line[i + 1:].strip()
    return ""
