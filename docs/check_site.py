"""Checks a built site's HTML for what ``mkdocs build --strict`` lets through: one line per problem, exit 1.

    python -m mkdocs build --strict --site-dir /tmp/site && python docs/check_site.py /tmp/site

- a raw Sphinx role (``:meth:`x` ``) on any page: a docstring role that docs/gen/sphinx_roles.py did not render;
- the scoreboard (``results/``) without an entry of its own, labelled Scoreboard, in the navigation;
- a page with a verdict table that no chain of links from the navigation reaches.

CI runs it after the strict build (.ci/run); tests/test_docs.py checks it on small pages.
"""

from __future__ import annotations

import posixpath
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

RAW_ROLE = re.compile(r":(?:py:)?(?:meth|func|class|mod|attr|data|obj|exc|const):(?:<code>|`)")
SCOREBOARD = "results/index.html"


class _Page(HTMLParser):
    """A page's links (and which of them are the primary navigation's, with their text) and whether it holds
    a table with a verdict column."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.nav: list[tuple[str, str]] = []  # (href, text) of the primary navigation's links
        self.has_verdicts = False
        self._nav_depth = 0  # nesting of <nav> inside the primary one (0: outside it)
        self._anchor: list | None = None
        self._in_th = False
        self._th = ""

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if tag == "nav" and (self._nav_depth or "md-nav--primary" in (attributes.get("class") or "")):
            self._nav_depth += 1
        elif tag == "a" and attributes.get("href"):
            self.links.append(attributes["href"])
            if self._nav_depth:
                self._anchor = [attributes["href"], ""]
        elif tag == "th":
            self._in_th, self._th = True, ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._nav_depth:
            self._nav_depth -= 1
        elif tag == "a" and self._anchor:
            self.nav.append((self._anchor[0], " ".join(self._anchor[1].split())))
            self._anchor = None
        elif tag == "th" and self._in_th:
            self._in_th = False
            self.has_verdicts |= self._th.strip().lower() == "verdict"

    def handle_data(self, data: str) -> None:
        if self._anchor:
            self._anchor[1] += data
        if self._in_th:
            self._th += data


def _target(page: str, href: str, pages: dict) -> str | None:
    """The site page (``a/b/index.html``) that ``href``, written in ``page``, points to; None for another
    site, an anchor of the same page or a file that is no page."""
    href = href.split("#")[0].split("?")[0]
    if not href or re.match(r"[a-z]+:", href):
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page), href))
    for candidate in (path, posixpath.join(path, "index.html")):
        if candidate in pages:
            return candidate
    return None


def problems(site: Path) -> list[str]:
    """Every problem of the site built in ``site``, one line each."""
    pages, found = {}, []
    for path in sorted(site.rglob("*.html")):
        name = path.relative_to(site).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        roles = RAW_ROLE.findall(text)
        if roles:
            found.append(f"{name}: {len(roles)} raw Sphinx roles ({roles[0]}...): docs/gen/sphinx_roles.py did not render them")
        parsed = _Page()
        parsed.feed(text)
        pages[name] = parsed
    if "index.html" not in pages:
        return found + [f"{site}: no index.html: not a built site"]
    nav = [(_target("index.html", href, pages), label) for href, label in pages["index.html"].nav]
    if (SCOREBOARD, "Scoreboard") not in nav:
        found.append(f"the navigation has no entry Scoreboard for {SCOREBOARD} (mkdocs.yml's nav)")
    reached, queue = set(), [target for target, _ in nav if target]
    while queue:
        page = queue.pop()
        if page not in reached:
            reached.add(page)
            queue += [target for href in pages[page].links if (target := _target(page, href, pages))]
    found += [f"{name}: a page with verdict tables that no link from the navigation reaches"
              for name, page in pages.items() if page.has_verdicts and name not in reached]
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python docs/check_site.py SITE_DIR", file=sys.stderr)
        return 2
    found = problems(Path(argv[0]))
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
