"""Screenshots of a built site's main pages in headless Chromium, to look at before a release (how wide tables
scroll, how tall their rows are, whether code breaks mid-word): not run by CI or the tests.

    python -m mkdocs build --strict --site-dir /tmp/site
    python docs/screenshots.py /tmp/site /tmp/shots            # 1,400 px wide, the first 4,000 px of each page
    python docs/screenshots.py /tmp/site /tmp/shots --height 12000 --page results/hfl_convex_smoke/

Needs a Chromium binary (Debian's ``chromium``; ``--chromium`` names another). Pages are opened as files, so
nothing is served.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

# The pages people land on, and those with the widest tables and the longest cells.
PAGES = [
    "",
    "getting-started/",
    "guides/running/",
    "papers/fedbuff/",
    "papers/hfl/",
    "results/",
    "results/fedbuff_table1_smoke/",
    "results/hfl_convex_smoke/",
    "reference/config/",
    "reference/api/fl_bench.engine/",
]


def screenshot(chromium: str, page: Path, out: Path, width: int, height: int) -> None:
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    f"--window-size={width},{height}", f"--screenshot={out}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="a built site (mkdocs build --site-dir)")
    parser.add_argument("out", type=Path, help="the directory the PNGs go to")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=4000, help="pixels of each page, from its top")
    parser.add_argument("--page", action="append", help="a page's path in the site (repeatable; default: the main pages)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = parser.parse_args(argv)
    if not args.chromium:
        print("screenshots: no chromium on PATH (Debian: apt-get install chromium; or --chromium PATH)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.page or PAGES:
        page = (args.site / name / "index.html").resolve()
        if not page.is_file():
            print(f"screenshots: {name or '/'}: no {page}", file=sys.stderr)
            continue
        out = args.out / ((name.strip("/").replace("/", "_") or "home") + ".png")
        screenshot(args.chromium, page, out.resolve(), args.width, args.height)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
