"""Mutants by area, one module each (`MUTANTS = (Mutant(...), ...)`), found by `tests.mutation`."""
