"""Comparing a summary derived again with its committed JSON form.

A committed summary's derived numbers (means, intervals, slopes) are
recomputed from its measurements by the same code; NumPy's reductions add in
an order that depends on the CPU's vector instructions (AVX2 against
AVX-512), so a recomputed mean may differ from the committed one in its last
bit. Structure, keys, strings, ints and booleans must be equal; floats within
`RTOL` relative, 2^-43: 512 ulps of float64, far below any digit a report
prints, above the differences seen (at most 1.5e-15 relative, about 7 ulps).
"""

import math

RTOL = 2.0**-43


def assert_same_summary(derived, committed, path: str = "") -> None:
    """`derived` equals `committed` (JSON forms: dicts, lists, str, int, bool, float), floats to `RTOL`;
    a mismatch names its path (`/key[index]/...`)."""
    if isinstance(committed, float) and isinstance(derived, float):
        assert math.isclose(derived, committed, rel_tol=RTOL, abs_tol=0.0), (
            f"{path or '/'}: {derived!r} != {committed!r}"
        )
        return
    assert type(derived) is type(committed), (
        f"{path or '/'}: {type(derived).__name__} != {type(committed).__name__}"
    )
    if isinstance(committed, dict):
        assert list(derived) == list(committed), (
            f"{path or '/'}: keys {list(derived)} != {list(committed)}"
        )
        for key in committed:
            assert_same_summary(derived[key], committed[key], f"{path}/{key}")
    elif isinstance(committed, list):
        assert len(derived) == len(committed), (
            f"{path or '/'}: {len(derived)} != {len(committed)} items"
        )
        for index, (a, b) in enumerate(zip(derived, committed)):
            assert_same_summary(a, b, f"{path}[{index}]")
    else:
        assert derived == committed, f"{path or '/'}: {derived!r} != {committed!r}"
