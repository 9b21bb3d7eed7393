"""Small helpers shared by the page generators: text from the source made safe for a Markdown table cell."""

from __future__ import annotations

import inspect
import re

_CODE = re.compile(r"(``[^`]*``|`[^`]*`)")
_ROLE = re.compile(r":\w+:`~?([^`]*)`")


def cell(text: str) -> str:
    """``text`` (a docstring, a comment) on one line, safe inside a Markdown table cell: a pipe would end the
    cell, ``<...>`` would be read as an HTML tag, and ``*``, ``_``, ``[`` as emphasis or a link (a
    cross-reference that --strict would refuse); code spans are kept as they are."""
    parts = _CODE.split(" ".join(text.split()))
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
