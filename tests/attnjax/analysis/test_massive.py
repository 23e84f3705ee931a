"""Sun et al. 2024's massive activations (`analysis.massive_activations`) from the criterion's two parts."""

import jax.numpy as jnp
import numpy as np
import pytest

from attnjax.analysis import massive_activations


def test_an_activation_is_massive_only_when_both_parts_of_the_criterion_hold():
    h = np.ones((2, 5, 4), np.float32)  # two sequences, median |a| = 1
    h[0, 0, 2] = -150_000.0  # >= 100 and >= 1000 x the median
    h[0, 3, 1] = 500.0  # >= 100, but only 500 x the median
    h[1] *= 0.01  # median 0.01
    h[1, 2, 0] = 50.0  # 5000 x the median, but < 100
    h[1, 4, 3] = 120.0  # both
    got = np.asarray(massive_activations(jnp.asarray(h)))
    want = np.zeros(h.shape, bool)
    want[0, 0, 2] = want[1, 4, 3] = True
    np.testing.assert_array_equal(got, want)
    # One median per leading index: sequence 1's scale does not change sequence 0's hits.
    np.testing.assert_array_equal(np.asarray(massive_activations(jnp.asarray(h[:1]))), want[:1])
    loose = np.asarray(massive_activations(jnp.asarray(h), minimum=10.0, factor=100.0))
    assert loose[0, 3, 1] and loose[1, 2, 0]


@pytest.mark.parametrize(
    "hidden, options, match",
    [
        (np.ones(3), {}, r"hidden must be \[..., T, D\]"),
        (np.ones((2, 0)), {}, r"got shape \(2, 0\)"),
        (np.ones((2, 2)), {"factor": -1.0}, "minimum and factor must be >= 0"),
    ],
)
def test_bad_input_raises_naming_it(hidden, options, match):
    with pytest.raises(ValueError, match=match):
        massive_activations(hidden, **options)
