"""One hand mutant of `python -m tests.mutation`: a snippet of one file, what replaces it, and the
tests that must fail when it does."""

from typing import NamedTuple


class Mutant(NamedTuple):
    file: str  # path from the repository root
    original: str  # occurs exactly once in `file`
    replacement: str
    description: str
    tests: tuple[str, ...]  # test files or ids, run with pytest -x
