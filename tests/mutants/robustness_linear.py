"""Mutants of linear attention's floating-point range (attnjax/linear.py, attnjax/features.py):
each undoes one part of the rescaling, the division's JVP, the eps check or a log feature map,
and names the quick-tier tests that must fail."""

from tests.mutant import Mutant

LINEAR = "attnjax/linear.py"
FEATURES = "attnjax/features.py"
T = "tests/attnjax/test_linear.py::"
SCALES = (T + "test_relu_feature_scales_give_the_float64_output",)
GRADIENTS = (T + "test_relu_feature_scales_give_finite_float64_gradients",)
FAVOR = (T + "test_favor_plus_large_keys_do_not_underflow",)
ELU = (T + "test_elu_plus_one_very_negative_inputs_are_not_zero",)

MUTANTS = (
    Mutant(
        LINEAR,
        "_, n = jnp.frexp(top)",
        "n = jnp.zeros(top.shape, jnp.int32)",
        "linear: features not rescaled (exponent 0)",
        SCALES + GRADIENTS,
    ),
    Mutant(
        LINEAR,
        "scale = _set_scale(n_k, axis=-2)  # [..., K]: one set of keys per head",
        "scale = jnp.zeros_like(n_k[..., 0, :])",
        "linear: non-causal keys not brought to their set's scale",
        FAVOR,
    ),
    Mutant(
        LINEAR,
        "jax.lax.cummax(n_k, axis=n_k.ndim - 1)",
        "jnp.max(n_k, axis=-1, keepdims=True)",
        "linear: causal rows in their chunk's units, not their running maximum",
        FAVOR,
    ),
    Mutant(
        LINEAR,
        "kv = _ldexp(kv, old[..., None]) + _ldexp(",
        "kv = kv + _ldexp(",
        "linear: carried state not rescaled when a larger key arrives",
        SCALES,
    ),
    Mutant(
        LINEAR,
        "old = (state.log2_scale - scale)[..., None]",
        "old = jnp.zeros_like(scale)[..., None]",
        "linear: recurrent state not rescaled when a larger key arrives",
        SCALES,
    ),
    Mutant(
        LINEAR,
        "return out, _divide(d_num - out * d_den[..., None], den)",
        "return out, _divide(d_num, den) - _divide(num * d_den[..., None], den * den)",
        "linear: division differentiated through den^2",
        (T + "test_gradients_stay_finite_when_the_normaliser_is_tiny",),
    ),
    Mutant(
        LINEAR,
        "        or not math.isfinite(eps)\n",
        "",
        "linear: eps = nan or inf accepted",
        (T + "test_eps_must_be_finite_and_non_negative",),
    ),
    Mutant(
        LINEAR,
        "den = den + _ldexp(jnp.asarray(eps, den.dtype), -log2_units)",
        "den = den + jnp.asarray(eps, den.dtype)",
        "linear: eps added in rescaled units",
        (T + "test_eps_is_added_to_the_unscaled_normaliser",),
    ),
    Mutant(
        LINEAR,
        "f = jnp.exp((log_phi - top[..., None]) + rest[..., None])",
        "f = jnp.exp(log_phi - (top - rest)[..., None])",
        "linear: log-space reduction rounded at the size of log phi",
        ELU,
    ),
    Mutant(
        LINEAR,
        "top = jnp.max(jnp.where(seen, n_k + e, _NO_KEYS), axis=-1)  # [..., K, G, T]",
        "top = jnp.max(jnp.where(seen, n_k + e, _NO_KEYS), axis=(-2, -1))[..., None]",
        "linear: weights rescaled once for all rows, not per row",
        FAVOR,
    ),
    Mutant(
        FEATURES,
        "elu_plus_one.log = _log_elu_plus_one",
        "",
        "features: elu_plus_one without its log",
        ELU,
    ),
    Mutant(
        FEATURES,
        "    phi.log = log_phi\n",
        "",
        "features: favor_plus without its log",
        FAVOR,
    ),
    Mutant(
        FEATURES,
        "return jnp.where(x > 0, x + jnp.ones((), x.dtype), jnp.exp(jnp.minimum(x, 0)))",
        "return jax.nn.elu(x) + jnp.ones((), x.dtype)",
        "features: elu_plus_one as expm1(x) + 1",
        (
            "tests/attnjax/test_features.py::test_elu_plus_one_keeps_its_digits_far_below_zero_in_float32",
        ),
    ),
)
