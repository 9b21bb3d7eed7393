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
