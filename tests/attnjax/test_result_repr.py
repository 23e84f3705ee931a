"""Result tuples print as dtype[shape] per array, not their entries."""

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import analysis as an
from attnjax.result_repr import compact_repr


def test_result_tuples_print_shapes_and_scalar_values():
    hidden = jax.random.normal(jax.random.key(0), (4, 16, 8), jnp.float32)
    report = an.rank_report(hidden)
    text = repr(report)
    assert text.startswith("RankReport(residual_ratio=float32[4], ")
    assert "singular_values=float32[4, 8]" in text and "numerical_rank=int32[4]" in text
    assert "Array(" not in text and len(text) < 400
    weights = jax.nn.softmax(jax.random.normal(jax.random.key(1), (6, 6), jnp.float32), -1)
    features = an.pattern_features(weights)
    expected = float(np.asarray(features.diagonal))
    assert f"diagonal={expected!r}" in repr(features)  # a concrete scalar shows its value
    iterated = an.power_iteration(weights[None], jnp.ones(6) / 6, 3)
    assert repr(iterated) == "PowerIteration(iterates=float32[1, 4, 6], rate=float32[1])"


def test_inside_jit_a_scalar_shows_its_shape():
    shown = []

    @jax.jit
    def f(x):
        result = an.pattern_features(x)
        shown.append(compact_repr(result))
        return result

    f(jnp.eye(4))
    assert shown == [
        "PatternFeatures(entropy=float64[], diagonal=float64[], local=float64[], global_=float64[])"
    ]
