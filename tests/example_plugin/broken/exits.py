"""A plugin module written as a script: it exits on import."""

import sys

sys.exit(0)
