"""The analysis functions under jax.vmap: the same numbers as the batched call, the
same memory, the fallbacks of stationary_distribution still branched; and
check_stochastic, which names the rows that are not distributions."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from attnjax import analysis as an
from attnjax.analysis import markov


def softmax_maps(seed, shape, scale=2.0, dtype=np.float64):
    z = scale * np.random.default_rng(seed).normal(size=shape)
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(dtype)


def mixed_chains(n=6):
    """`[2, 3, n, n]`: softmax chains beside a nearly decomposable one (two blocks that leak 1e-6),
    for which power iteration cannot finish, so stationary_distribution takes its fallbacks for
    that lane only, and a reducible one (two closed classes)."""
    a = softmax_maps(0, (2, 3, n, n))
    slow = 0.9 * np.eye(n) + 0.1 * softmax_maps(1, (n, n))
    slow[: n // 2, n // 2 :] *= 1e-5
    slow[n // 2 :, : n // 2] *= 1e-5
    a[0, 1] = slow / slow.sum(-1, keepdims=True)
    a[1, 2] = np.kron(np.eye(2), np.full((n // 2, n // 2), 2 / n))
    return a


# The functions with their own vmap rule (markov_report, rank_one_residual and spectral_gap are built
# from them); the other functions' vmap agreement is tested beside them.
MAP_FUNCTIONS = {
    "stationary_distribution": an.stationary_distribution,
    "slem": an.slem,
    "dobrushin": an.dobrushin,
}


@pytest.mark.parametrize("name", sorted(MAP_FUNCTIONS))
def test_vmap_over_two_axes_is_the_batched_call(name):
    fn, a = MAP_FUNCTIONS[name], mixed_chains()
    two = jax.jit(jax.vmap(jax.vmap(fn), in_axes=1, out_axes=1))(
        a
    )  # nested, the outer axis not first
    np.testing.assert_array_equal(two, fn(a))


def test_stationary_distribution_of_each_lane_as_computed_alone():
    """To rounding: a batch iterates until its slowest lane converges."""
    a = mixed_chains().reshape(6, 6, 6)
    alone = np.stack([an.stationary_distribution(m) for m in a])
    np.testing.assert_allclose(jax.vmap(an.stationary_distribution)(a), alone, atol=1e-9)
    np.testing.assert_allclose(np.einsum("bi,bij->bj", alone, a), alone, atol=1e-9)  # π A = π


def test_vmapped_stationary_distribution_keeps_its_branches():
    """Vmapping the body would turn the fallbacks' lax.cond into selects computing every branch."""
    jaxpr = str(jax.make_jaxpr(jax.vmap(an.stationary_distribution))(mixed_chains()[0]))
    assert jaxpr.count("cond[") == 2 and "while[" in jaxpr


def test_vmapped_dobrushin_chunks_by_the_whole_batch():
    """The rows are taken in chunks sized for the whole batch, as in the batched call (64 maps of
    128 x 128 rows: 16 rows per step, 8 steps); a chunk sized from one matrix would take every row
    at once, one `[128, 128, 128]` difference tensor per lane."""
    spec = jax.ShapeDtypeStruct((64, 128, 128), jnp.float32)
    steps = 128 // (markov.PAIRWISE_BUDGET // (64 * 128 * 128))
    for fn in (an.dobrushin, jax.vmap(an.dobrushin)):
        assert re.findall(r"length=\d+", str(jax.make_jaxpr(fn)(spec))) == [f"length={steps}"]


def test_dobrushin_is_differentiable_and_its_gradient_vmaps():
    a = softmax_maps(1, (3, 5, 5))
    check_grads(an.dobrushin, (a,), order=1, modes=("rev",))
    grads = jax.jit(jax.vmap(jax.grad(an.dobrushin)))(a)
    np.testing.assert_allclose(grads, jax.grad(lambda x: jnp.sum(an.dobrushin(x)))(a), rtol=1e-12)


# ---- check_stochastic ---------------------------------------------------------------


def test_check_stochastic_passes_a_softmax_map():
    an.check_stochastic(softmax_maps(2, (2, 4, 33, 33), dtype=np.float32))
    an.check_stochastic(jax.nn.softmax(jnp.ones((3, 7, 5)), axis=-1))


@pytest.mark.parametrize(
    "edit, sum_, min_",
    [
        (lambda a: a.__setitem__((1, 2), a[1, 2] * 1.1), "1.1", None),  # a row summing to 1.1
        (lambda a: a.__setitem__((1, 2, 0), -0.25), None, "-0.25"),  # a negative entry
        (lambda a: a.__setitem__((1, 2, 3), np.nan), "nan", None),
    ],
)
def test_check_stochastic_names_the_offending_row(edit, sum_, min_):
    a = softmax_maps(3, (2, 4, 6))
    edit(a)
    message = r"a must be row-stochastic .* 1 of 8 rows of a \(shape \(2, 4, 6\)\) are not: row \(1, 2\) sums to "
    message += sum_ if sum_ else r"\S+"
    message += ", min entry " + (min_ if min_ else "")
    with pytest.raises(ValueError, match=message):
        an.check_stochastic(a)
    assert not an.is_row_stochastic(a)[1]


def test_check_stochastic_tolerance_and_traced_input():
    a = softmax_maps(4, (3, 3))
    a[0] *= 1 + 1e-6
    with pytest.raises(ValueError, match=r"row \(0,\) sums to 1"):
        an.check_stochastic(a)
    an.check_stochastic(a, atol=1e-5)
    with pytest.raises(TypeError, match="must be concrete .* use is_row_stochastic inside jit"):
        jax.jit(an.check_stochastic)(a)
    with pytest.raises(TypeError, match="floating"):
        an.check_stochastic(np.eye(3, dtype=np.int32))
