"""Softmax with temperature over the last axis, masked, with its own JVPs.

    softmax_with_temperature(x, t)_s = exp(x_s / t) / sum_s' exp(x_s' / t)

temperature -> 0 gives a one-hot (hard max) row, temperature -> inf a uniform
row; masked entries get exactly zero weight.

Numerics: the softmax runs in at least float32 (bf16/fp16 logits are
promoted). A row with every entry masked gets zero weights (not the NaN of
`0/0`, nor the uniform average a large negative fill gives), with zero
gradients. Logits are clipped to +-finfo.max/4 (`clip_logits`) so that extreme
temperatures or logits cannot overflow to inf and produce inf - inf. An array
(traced) temperature has its own JVP (`_tempered_softmax`), so its gradient
stays finite down to t ~ 1e-38 (0 for one-hot rows).
"""

from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp

from attnjax import checks

Array = jax.Array
Scalar = Union[float, Array]


def softmax_with_temperature(
    logits: Array, temperature: Scalar = 1.0, *, mask: Optional[Array] = None
) -> Array:
    """Masked softmax over the last axis: softmax(logits / temperature).

    Args:
      logits: `[..., S]` scores; computed in at least float32.
      temperature: positive scalar dividing the logits (softmax(x / t)): a
        number > 0 (+inf: the uniform limit) or a scalar array. A concrete one
        that is 0, negative or NaN raises; a traced one is unchecked (0 or a
        negative one then gives what x / t gives: NaN rows or the inverted softmax).
      mask: optional boolean array broadcastable to `logits`, True = keep.

    Returns:
      `[..., S]` probabilities in `promote_types(logits.dtype, float32)`. Masked
      entries are exactly 0; rows with nothing unmasked are all zeros. Never NaN
      for finite inputs, however large the logits or small the temperature.

    Raises:
      ValueError: a concrete temperature that is not > 0, or not a scalar.
      TypeError: a temperature that is not a number or an array (a string, a bool).
    """
    checks.temperature(temperature)
    dtype = jnp.promote_types(logits.dtype, jnp.float32)
    logits = logits.astype(dtype)
    if isinstance(temperature, checks.NUMBERS):  # a constant: nothing to differentiate
        return _softmax(logits / jnp.asarray(temperature, dtype), mask)
    return _tempered_softmax(logits, jnp.asarray(temperature, dtype), mask)


def clip_logits(x: Array) -> Array:
    """`x` `[...]` clipped elementwise to [-c, c], c = finfo(x.dtype).max / 4.

    The softmax's guard against overflow: after it, differences of two
    logits are finite, so exp(x - max x) never meets inf - inf.
    """
    bound = jnp.asarray(jnp.finfo(x.dtype).max / 4, x.dtype)
    return jax.lax.clamp(-bound, x, bound)


def _centred(probs: Array, x: Array) -> Array:
    """p * (x - sum_s p_s x_s) over the last axis: the softmax's JVP applied to x."""
    return probs * (x - jnp.sum(probs * x, axis=-1, keepdims=True))


@jax.custom_jvp
def _tempered_softmax(logits: Array, temperature: Array, mask: Optional[Array]) -> Array:
    """`_softmax(logits / temperature, mask)` for an array temperature t, differentiable in t.

    With z = clip(logits / t) and p its softmax,

        dp = p (dlogits - E_p dlogits) / t  -  p (z - E_p z) dt / t

    (the derivative of z in t is -z / t). Written this way, not as the JVP of
    logits / t (whose -logits / t^2 overflows for t < ~1e-19 in float32 and
    meets a zero p as inf * 0 = NaN), a near one-hot row gets the vanishing
    derivative it has: p (z - E_p z) is exactly 0 there.
    """
    return _softmax(logits / temperature, mask)


@_tempered_softmax.defjvp
def _tempered_softmax_jvp(primals, tangents):
    logits, temperature, mask = primals
    dlogits, dtemperature, _ = tangents
    z = clip_logits(logits / temperature)
    probs = _softmax(z, mask)
    return probs, (
        _centred(probs, dlogits) / temperature - _centred(probs, z) * (dtemperature / temperature)
    )


@jax.custom_jvp
def _softmax(logits: Array, mask: Optional[Array]) -> Array:
    """Masked softmax over the last axis of float `logits` `[..., S]`; `mask` None or broadcastable.

    With x = clip(logits, -c, c), c = finfo.max/4, masked entries set to -2c,
    and m = max_s x_s (>= -c in a row with an unmasked entry):

        p_s = exp(x_s - m) / sum_s' exp(x_s' - m)

    has no inf - inf, a sum >= 1 (the max term is exp(0)), and exactly 0 at
    masked entries (exp(<= -c) underflows). A row with every entry masked is
    multiplied by 0 (it would be uniform). The JVP is the softmax's,
    dp = p * (dlogits - sum_s p_s dlogits_s) (as in `jax.nn.softmax`): the
    backward pass needs only p, which is 0 at masked entries and in fully
    masked rows, so those get zero gradients without a select. (It is the
    exact derivative inside the clip; the clip itself, a guard against
    overflow at |logits| > finfo.max/4, is treated as the identity.)
    """
    bound = jnp.finfo(logits.dtype).max / 4
    x = clip_logits(logits)
    if mask is not None:
        x = jnp.where(mask, x, jnp.asarray(-2 * bound, logits.dtype))
    unnormalised = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    inv_total = 1 / jnp.sum(unnormalised, axis=-1, keepdims=True)
    if mask is not None:
        inv_total = jnp.where(
            jnp.any(mask, axis=-1, keepdims=True), inv_total, jnp.zeros_like(inv_total)
        )
    return unnormalised * inv_total


@_softmax.defjvp
def _softmax_jvp(primals, tangents):
    logits, mask = primals
    dlogits, _ = tangents
    probs = _softmax(logits, mask)
    return probs, _centred(probs, dlogits)
