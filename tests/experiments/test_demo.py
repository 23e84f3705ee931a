"""The first-look demo: rank collapse without skips, none with scaled skips."""

import pytest

from experiments import demo


@pytest.mark.slow
def test_demo_shows_rank_collapse_without_skips_and_not_with_them():
    pure = demo.depth_profile(skip=False, depth=6)
    scaled = demo.depth_profile(skip=True, depth=6)
    assert pure[4] < 1e-3 * pure[0]
    assert scaled[-1] > 0.9
