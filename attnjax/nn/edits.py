"""Attention edits: interventions between the softmax and the value product, and on the residual stream.

Each edit is a frozen dataclass registered as a pytree: which layer, head and
key positions it touches are static (part of the compiled program), numbers
(a scale, a pattern, a vector) are leaves, so one program is compiled per
edit structure and new values reuse it. Pass a sequence of them to
`Transformer.__call__(..., edits=...)` or `Transformer.generate(..., edits=...)`:

    from attnjax.nn import edits
    logits = model(tokens, edits=(edits.ablate_head(layer=1, head=0),
                                  edits.remove_keys(layer=None, positions=(0,))))

In layer l, with P^h `[T, S]` the softmax weights of head h, V^h its values
and o^h = P^h V^h `[T, Dh]` its output (before W_o):

    remove_keys(l, J, heads)    P^h_ij <- P^h_ij [j not in J] / sum_j' P^h_ij' [j' not in J]
                                (a row with no mass left becomes 0, so its output is 0)
    replace_pattern(l, h, A)    P^h <- A (`[T, S]` or `[B, T, S]`, used as given)
    ablate_head(l, h, 'zero')   o^h <- 0
    ablate_head(l, h, 'mean')   o^h_i <- (1/T) sum_t o^h_t   (mean over the call's query positions)
    scale_head(l, h, c)         o^h <- c o^h
    edit_residual(l, c, a)      x_l <- c x_l + a   (x_l `[B, T, D]` the output of block l, a `[D]`)

applied in that order (pattern edits, then the output edits; the output
edits of one head compose). An edit naming a layer or head that does not
exist, a key position out of range, or a pattern of the wrong shape raises a
`ValueError` naming it, before any compute (`check_edits`). Pattern edits
(`remove_keys`, `replace_pattern`) make every layer compute its dense weights
`[B, H, T, S]` (the layers share one scanned program) and run without
attention dropout; the others keep the model's attention function. A mean
ablation averages over every query position of the call, padding included.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def _pytree(data: tuple[str, ...]):
    def register(cls):
        meta = tuple(f.name for f in dataclasses.fields(cls) if f.name not in data)
        return jax.tree_util.register_dataclass(cls, data_fields=list(data), meta_fields=list(meta))

    return register


@_pytree(data=())
@dataclasses.dataclass(frozen=True)
class AblateHead:
    """Head `head`'s output in layer `layer` replaced by 0 (`mode='zero'`) or its mean over positions."""

    layer: int
    head: int
    mode: str = "zero"


@_pytree(data=("scale",))
@dataclasses.dataclass(frozen=True)
class ScaleHead:
    """Head `head`'s output in layer `layer` multiplied by `scale` (a number or a scalar array)."""

    layer: int
    head: int
    scale: Any


@_pytree(data=())
@dataclasses.dataclass(frozen=True)
class RemoveKeys:
    """No attention to key `positions` in layer `layer` (None: every layer), heads `heads` (None: all);
    each row renormalised over the remaining keys."""

    layer: Optional[int]
    positions: tuple[int, ...]
    heads: Optional[tuple[int, ...]] = None


@_pytree(data=("pattern",))
@dataclasses.dataclass(frozen=True)
class ReplacePattern:
    """Head `head`'s weights in layer `layer` replaced by `pattern` `[T, S]` or `[B, T, S]`."""

    layer: int
    head: int
    pattern: Any


@_pytree(data=("scale", "add"))
@dataclasses.dataclass(frozen=True)
class EditResidual:
    """The residual stream after block `layer`: x <- scale * x + add (`add` a `[D]` vector or None)."""

    layer: int
    scale: Any = 1.0
    add: Any = None


EDIT_TYPES = (AblateHead, ScaleHead, RemoveKeys, ReplacePattern, EditResidual)
# The edits that act inside the attention (through a `core`), not on the residual stream.
ATTENTION_EDITS = (AblateHead, ScaleHead, RemoveKeys, ReplacePattern)


def ablate_head(layer: int, head: int, mode: str = "zero") -> AblateHead:
    """o^h <- 0 (`mode='zero'`) or its mean over the call's query positions (`'mean'`; not when decoding)."""
    return AblateHead(layer, head, mode)


def scale_head(layer: int, head: int, scale) -> ScaleHead:
    """o^h <- scale * o^h in layer `layer`."""
    return ScaleHead(layer, head, scale)


def remove_keys(
    layer: Optional[int], positions: Sequence[int], heads: Optional[Sequence[int]] = None
) -> RemoveKeys:
    """Remove attention to key `positions` and renormalise (layer None: all layers; heads None: all heads).

    When decoding, positions are cache slots (absolute positions, or the sink
    cache's slots: slot 0 is the first token).
    """
    return RemoveKeys(
        layer,
        tuple(int(p) for p in positions),
        None if heads is None else tuple(int(h) for h in heads),
    )


def replace_pattern(layer: int, head: int, pattern) -> ReplacePattern:
    """P^h <- pattern (`[T, S]` or `[B, T, S]`, not renormalised or masked) in layer `layer`; not when decoding."""
    return ReplacePattern(layer, head, pattern)


def edit_residual(layer: int, scale=1.0, add=None) -> EditResidual:
    """x_l <- scale * x_l + add on the output of block `layer` (`add` `[D]`)."""
    return EditResidual(layer, scale, add)


# --------------------------------------------------------------------------
# Checks


def _name(edit) -> str:
    """e.g. "AblateHead(layer=1, head=0, mode='zero')" (arrays left out)."""
    fields = [
        f"{f.name}={getattr(edit, f.name)!r}"
        for f in dataclasses.fields(edit)
        if f.name not in ("pattern", "add")
    ]
    return f"{type(edit).__name__}({', '.join(fields)})"


def _heads(edit) -> tuple:
    """The head indices an edit names (none for residual edits and all-head key removal)."""
    if isinstance(edit, RemoveKeys):
        return edit.heads or ()
    return (edit.head,) if hasattr(edit, "head") else ()


def check_edits(
    edits, *, num_layers: int, num_heads: int, q_len: int, kv_len: int, features: int, decode: bool
) -> tuple:
    """`edits` as a tuple, each checked against the model and the call; `ValueError` naming the edit."""
    if edits is None:
        return ()
    if isinstance(edits, EDIT_TYPES) or not isinstance(edits, (tuple, list)):
        raise TypeError(
            f"edits must be a sequence of attnjax.nn.edits objects, got {type(edits).__name__}"
        )
    for edit in edits:
        if not isinstance(edit, EDIT_TYPES):
            raise TypeError(
                f"edits must be attnjax.nn.edits objects ({', '.join(t.__name__ for t in EDIT_TYPES)}), "
                f"got {type(edit).__name__}"
            )
        name = _name(edit)
        if not (edit.layer is None and isinstance(edit, RemoveKeys)):
            if (
                isinstance(edit.layer, bool)
                or not isinstance(edit.layer, (int, np.integer))
                or not 0 <= edit.layer < num_layers
            ):
                raise ValueError(
                    f"{name}: layer {edit.layer!r} does not exist (the model has {num_layers} "
                    f"layers, 0..{num_layers - 1})"
                )
        for head in _heads(edit):
            if (
                isinstance(head, bool)
                or not isinstance(head, (int, np.integer))
                or not 0 <= head < num_heads
            ):
                raise ValueError(
                    f"{name}: head {head!r} out of range (the layers have {num_heads} heads, "
                    f"0..{num_heads - 1})"
                )
        if isinstance(edit, AblateHead) and edit.mode not in ("zero", "mean"):
            raise ValueError(f"{name}: mode must be 'zero' or 'mean', got {edit.mode!r}")
        if isinstance(edit, AblateHead) and edit.mode == "mean" and decode:
            raise ValueError(
                f"{name}: a mean ablation averages over the call's positions; not when decoding"
            )
        if isinstance(edit, RemoveKeys):
            bad = [p for p in edit.positions if not 0 <= p < kv_len]
            if bad or not edit.positions:
                raise ValueError(
                    f"{name}: key positions {bad or '()'} out of range [0, {kv_len}) "
                    "(S: the keys of the call, or the cache slots when decoding)"
                )
        if isinstance(edit, ReplacePattern):
            if decode:
                raise ValueError(
                    f"{name}: replace_pattern is for full forward passes, not decoding"
                )
            shape = tuple(jnp.shape(edit.pattern))
            if shape[-2:] != (q_len, kv_len) or len(shape) not in (2, 3):
                raise ValueError(
                    f"{name}: pattern must have shape [T, S] = {(q_len, kv_len)} or [B, T, S], "
                    f"got {shape}"
                )
        if isinstance(edit, (ScaleHead, EditResidual)) and jnp.shape(edit.scale) != ():
            raise ValueError(f"{name}: scale must be a scalar, got shape {jnp.shape(edit.scale)}")
        if (
            isinstance(edit, EditResidual)
            and edit.add is not None
            and tuple(jnp.shape(edit.add)) != (features,)
        ):
            raise ValueError(
                f"{name}: add must be a [D] = ({features},) vector, got {jnp.shape(edit.add)}"
            )
    return tuple(edits)


# --------------------------------------------------------------------------
# Per-layer plan (arrays stacked [L, ...], scanned with the layers)


def build_plan(
    edits: tuple, *, num_layers: int, num_heads: int, kv_len: int, features: int, dtype
) -> Optional[dict]:
    """The edits as arrays with a leading layer axis; only the keys of the kinds present (static structure)."""
    if not edits:
        return None
    L, H = num_layers, num_heads
    plan: dict = {}
    head_scale, mean = jnp.ones((L, H), dtype), np.zeros((L, H), bool)
    keep, on, patterns = np.ones((L, H, kv_len), bool), np.zeros((L, H), bool), {}
    res_scale, res_add = jnp.ones((L,), dtype), jnp.zeros((L, features), dtype)
    kinds = {type(e) for e in edits}
    for e in edits:
        if isinstance(e, AblateHead):
            if e.mode == "zero":
                head_scale = head_scale.at[e.layer, e.head].set(0)
            else:
                mean[e.layer, e.head] = True
        elif isinstance(e, ScaleHead):
            head_scale = head_scale.at[e.layer, e.head].multiply(jnp.asarray(e.scale, dtype))
        elif isinstance(e, RemoveKeys):
            for layer in range(L) if e.layer is None else (e.layer,):
                for head in range(H) if e.heads is None else e.heads:
                    keep[layer, head, list(e.positions)] = False
        elif isinstance(e, ReplacePattern):
            on[e.layer, e.head] = True
            patterns[(e.layer, e.head)] = jnp.asarray(e.pattern, dtype)
        else:
            s = jnp.asarray(e.scale, dtype)
            add = 0 if e.add is None else jnp.asarray(e.add, dtype)
            res_scale = res_scale.at[e.layer].multiply(s)
            res_add = res_add.at[e.layer].set(res_add[e.layer] * s + add)
    if kinds & {AblateHead, ScaleHead}:
        plan["head_scale"] = head_scale
        if mean.any():
            plan["mean"] = jnp.asarray(mean)
    if RemoveKeys in kinds:
        plan["keep"] = jnp.asarray(keep)
    if ReplacePattern in kinds:
        shape = np.broadcast_shapes(*(p.shape for p in patterns.values()))  # [T, S] or [B, T, S]
        stacked = jnp.zeros((L, H) + shape, dtype)
        for (layer, head), p in patterns.items():
            stacked = stacked.at[layer, head].set(jnp.broadcast_to(p, shape))
        plan["pattern"], plan["pattern_on"] = stacked, jnp.asarray(on)
    if EditResidual in kinds:
        plan["res_scale"], plan["res_add"] = res_scale, res_add
    return plan


def _mix(weights: Array, value: Array) -> Array:
    """weights `[B, H, T, S]`, value `[B, S, K, Dv]` -> `[B, T, H, Dv]`; head h reads value head h // (H / K)."""
    b, h, t, s = weights.shape
    kv = value.shape[-2]
    w = jnp.reshape(weights, (b, kv, h // kv, t, s))
    dtype = jnp.promote_types(weights.dtype, value.dtype)
    out = jnp.einsum(
        "bkgts,bskd->btkgd",
        w.astype(dtype),
        value.astype(dtype),
        precision=jax.lax.Precision.HIGHEST,
    )
    return jnp.reshape(out, (b, t, h, value.shape[-1])).astype(value.dtype)


def edited_attend(
    module,
    plan: dict,
    q: Array,
    k: Array,
    v: Array,
    *,
    mask: Optional[Array] = None,
    is_causal: bool = False,
    need_weights: bool = False,
    dropout_rng: Optional[Array] = None,
):
    """`module.attend` (`MultiHeadAttention.attend`, same arguments and results, heads
    `[B, T, H, Dh]`) with one layer's slice of the plan applied."""
    weights = None
    if "keep" in plan or "pattern" in plan:
        if dropout_rng is not None:
            raise ValueError(
                "pattern edits (remove_keys, replace_pattern) run without attention dropout: "
                "call with deterministic=True"
            )
        _, weights = module.attend(
            q, k, v, mask=mask, is_causal=is_causal, need_weights=True
        )  # [B, H, T, S]
        if "keep" in plan:
            weights = jnp.where(plan["keep"][None, :, None, :], weights, 0)
            total = jnp.sum(weights, axis=-1, keepdims=True)
            weights = jnp.where(total > 0, weights / jnp.where(total > 0, total, 1), 0)
        if "pattern" in plan:
            pattern = plan["pattern"]  # [H, T, S] or [H, B, T, S]
            pattern = (
                pattern[None] if pattern.ndim == 3 else jnp.swapaxes(pattern, 0, 1)
            )  # [B or 1, H, T, S]
            on = jnp.reshape(plan["pattern_on"], (1, -1, 1, 1))
            weights = jnp.where(on, pattern.astype(weights.dtype), weights)
        out = _mix(weights, v)
    else:
        out, weights = module.attend(
            q,
            k,
            v,
            mask=mask,
            is_causal=is_causal,
            need_weights=need_weights,
            dropout_rng=dropout_rng,
        )

    def per_head(a):
        return jnp.reshape(a, (1,) * (out.ndim - 2) + (-1, 1))

    if "mean" in plan:
        out = jnp.where(per_head(plan["mean"]), jnp.mean(out, axis=-3, keepdims=True), out)
    if "head_scale" in plan:
        out = out * per_head(plan["head_scale"]).astype(out.dtype)
    return out, (weights if need_weights else None)


def _core(attend, module, q, k, v, *, mask, is_causal, decode, need_weights, dropout_rng):
    """The module's own stages between `project` and `merge`, with `attend` for its `attend`."""
    stage = dict(mask=mask, need_weights=need_weights, dropout_rng=dropout_rng)
    if decode:
        return module.decode(q, k, v, attend=attend, **stage)
    return attend(module.position(q), module.position(k), v, is_causal=is_causal, **stage)


def attend_fn(module, plan: Optional[dict]):
    """One layer's edited `module.attend` (`edited_attend`), or None without attention edits."""
    if plan is None or not ({"keep", "pattern", "mean", "head_scale"} & set(plan)):
        return None
    return functools.partial(edited_attend, module, plan)


def core(plan: Optional[dict]):
    """A `MultiHeadAttention` `core` applying one layer's plan, or None without attention edits."""
    if plan is None or not ({"keep", "pattern", "mean", "head_scale"} & set(plan)):
        return None
    return lambda module, q, k, v, **kwargs: _core(
        attend_fn(module, plan), module, q, k, v, **kwargs
    )


def apply_residual(h: Array, plan: Optional[dict]) -> Array:
    """One layer's residual edit on its output `[B, T, D]` (identity without one)."""
    if plan is None or "res_scale" not in plan:
        return h
    add = jnp.reshape(plan["res_add"], (1,) * (h.ndim - 1) + (-1,))
    return (h * plan["res_scale"].astype(h.dtype) + add.astype(h.dtype)).astype(h.dtype)
