# A plugin module with a syntax error (deliberate: tests/test_refusals.py).
def broken(:
    pass
