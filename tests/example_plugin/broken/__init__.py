"""Plugin modules written wrongly, one way each: most cannot be imported, and one imports but registers its
schema under a group no config reads (misspelt_group). tests/test_refusals.py: each is one line naming the
module and what is wrong, exit 1."""
