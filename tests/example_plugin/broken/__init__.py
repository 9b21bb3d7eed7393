"""Plugin modules that cannot be imported, one way each (tests/test_refusals.py: each is one line naming
the module and the first line of its error, exit 1)."""
