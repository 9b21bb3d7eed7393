"""mkdocs-gen-files' script (mkdocs.yml): the site's generated pages, written by docs/gen/pages.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pages  # noqa: E402

pages.main()
