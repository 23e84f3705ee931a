"""The one map of parameter names: where each parameter of an `attnjax.nn` model lives.

Paths are keys into `nnx.state(model, nnx.Param)` (or the params pytree of a
train state, or a loader's nested dict), e.g. ('blocks', 'attention', 'query',
'kernel'). A `Transformer`'s tree:

    embed/{embedding | kernel, bias}     token embedding [V, D] (or input projection)
    position_table                       learned positions [max_len, D]
    type_embed/embedding                 token types [types, D]
    embed_norm, final_norm/{scale, bias} norms (RMSNorm: scale only)
    head/{kernel, bias}                  output head [D, out]
    blocks/...                           every leaf of a layer, stacked [L, ...]:
      attention/{query, key, value | qkv, out}/{kernel, bias}
      attention/{query_ln, key_ln}/scale (QK-norm)
      attention_norm, mlp_norm           the block's norms
      attention_post_norm, mlp_post_norm the sub-layers' output norms (norm='sandwich')
      mlp/{fc1, fc2 | gate, up, down}    the MLP

The builders (`linear`, `norm`, `embedding`, `attention`, `fused_attention`, `mlp`,
`block`, `transformer`) write these names for checkpoint loaders; the readers
(`group_of`, `split_qkv`, `attention_params`,
`attention_kernels`, `grouped`) read them, slicing a fused W_qkv
`[..., F, (H + 2K) Dh]` (columns: the H query heads, then K key heads, then K
value heads) into its query, key and value parts.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp

Array = jax.Array

ATTENTION = "attention"
QKV = ("query", "key", "value")
FUSED_QKV = "qkv"
OUT = "out"
MLP = "mlp"
# The gradient groups of `group_of`: W_Q, W_K, W_V, W_O, the MLP, the rest.
GROUPS = ("query", "key", "value", "out", "mlp", "other")


# ----------------------------------------------------------------- builders


def linear(kernel, bias=None) -> dict:
    """An `nnx.Linear`'s leaves: kernel `[in, out]` (note: torch stores `[out, in]`), bias `[out]`."""
    return {"kernel": kernel} if bias is None else {"kernel": kernel, "bias": bias}


def norm(scale, bias=None) -> dict:
    """A LayerNorm's (scale, bias) or an RMSNorm's (scale) leaves, `[D]`."""
    return {"scale": scale} if bias is None else {"scale": scale, "bias": bias}


def attention(
    query: dict,
    key: dict,
    value: dict,
    out: dict,
    *,
    query_norm: Optional[dict] = None,
    key_norm: Optional[dict] = None,
) -> dict:
    """A `MultiHeadAttention` with separate projections, each a `linear(...)` dict, and the QK-norms
    (`norm(...)` over Dh, `normalize_qk`) when given."""
    tree = {"query": query, "key": key, "value": value, OUT: out}
    if query_norm is not None or key_norm is not None:
        tree.update(query_ln=query_norm, key_ln=key_norm)
    return tree


def fused_attention(qkv: dict, out: dict) -> dict:
    """A `MultiHeadAttention` with `fused_qkv=True`: `qkv` kernel `[F, (H + 2K) Dh]` (columns: the H query
    heads, then K key heads, then K value heads) and `out`, each a `linear(...)` dict."""
    return {FUSED_QKV: qkv, OUT: out}


def mlp(**layers: dict) -> dict:
    """An `Mlp`'s tree: `fc1`, `fc2` (GELU / ReLU) or `gate`, `up`, `down` (SwiGLU, GeGLU), each a
    `linear(...)`."""
    for names_ in (("fc1", "fc2"), ("gate", "up", "down")):
        if set(layers) == set(names_):
            return dict(layers)
    raise ValueError(f"an Mlp has layers fc1, fc2 or gate, up, down; got {tuple(layers)}")


def block(
    *,
    attention: dict,
    mlp: Optional[dict] = None,
    attention_norm: Optional[dict] = None,
    mlp_norm: Optional[dict] = None,
    attention_post_norm: Optional[dict] = None,
    mlp_post_norm: Optional[dict] = None,
) -> dict:
    """A `Block`'s tree: `attention(...)`, `mlp(...)` and the norms (`norm(...)`: before each
    sub-layer, and after it with norm='sandwich'); None leaves a part out."""
    tree = {
        ATTENTION: attention,
        MLP: mlp,
        "attention_norm": attention_norm,
        "mlp_norm": mlp_norm,
        "attention_post_norm": attention_post_norm,
        "mlp_post_norm": mlp_post_norm,
    }
    return {k: v for k, v in tree.items() if v is not None}


def embedding(table) -> dict:
    """An `nnx.Embed`'s leaf: the table `[num_embeddings, D]`."""
    return {"embedding": table}


def transformer(
    *,
    embed: dict,
    blocks: dict,
    position_table=None,
    type_embed: Optional[dict] = None,
    embed_norm: Optional[dict] = None,
    final_norm: Optional[dict] = None,
    head: Optional[dict] = None,
) -> dict:
    """A `Transformer`'s tree: `embedding(...)` (or an input `linear(...)`), the `block(...)` trees
    stacked `[L, ...]`, the learned position table `[max_len, D]`, token types, norms and head
    (`linear(...)`); None leaves a part out."""
    tree = {
        "embed": embed,
        "position_table": position_table,
        "type_embed": type_embed,
        "embed_norm": embed_norm,
        "blocks": blocks,
        "final_norm": final_norm,
        "head": head,
    }
    return {k: v for k, v in tree.items() if v is not None}


# ------------------------------------------------------------------ readers


def names(path) -> list[str]:
    """A `jax.tree_util` key path (or a tuple of strings) -> its names."""
    return [str(getattr(p, "key", getattr(p, "name", p))) for p in path]


def group_of(path) -> str:
    """The gradient group of a parameter from its path: 'query', 'key', 'value', 'qkv' (a fused
    W_qkv, which `grouped` splits), 'out', 'mlp' or 'other' (embeddings, norms, the head,
    QK-norm scales). E.g. ('blocks', 'attention', 'key', 'kernel') -> 'key'."""
    parts = names(path)
    if ATTENTION in parts[:-1]:
        sub = parts[parts.index(ATTENTION) + 1]
        return sub if sub in QKV + (FUSED_QKV, OUT) else "other"
    return MLP if MLP in parts else "other"


def _value(x) -> Array:
    return x[...] if hasattr(x, "__getitem__") else x


def split_qkv(fused: Array, num_heads: int, num_kv_heads: Optional[int] = None) -> dict[str, Array]:
    """Fused W_qkv `[..., (H + 2K) Dh]` (kernel `[..., F, (H + 2K) Dh]` or bias) ->
    {'query': `[..., H Dh]`, 'key': `[..., K Dh]`, 'value': `[..., K Dh]`}."""
    fused = jnp.asarray(_value(fused))
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    width = fused.shape[-1]
    if width % (num_heads + 2 * num_kv_heads):
        raise ValueError(
            f"a fused qkv parameter of shape {fused.shape} does not split into "
            f"H + 2K = {num_heads} + 2 * {num_kv_heads} heads"
        )
    head_dim = width // (num_heads + 2 * num_kv_heads)
    q_end, k_end = num_heads * head_dim, (num_heads + num_kv_heads) * head_dim
    return {
        "query": fused[..., :q_end],
        "key": fused[..., q_end:k_end],
        "value": fused[..., k_end:],
    }


def _attention_tree(params) -> Any:
    return params["blocks"][ATTENTION] if "blocks" in params else params


def attention_params(params, num_heads: int, num_kv_heads: Optional[int] = None) -> dict[str, dict]:
    """The projections of the attention layers, separate or fused alike.

    `params`: a `Transformer`'s tree (its `blocks/attention`, leading `[L]`)
    or one attention layer's. Returns {'query', 'key', 'value', 'out'}, each
    {'kernel': `[..., F, H Dh]` (`[..., H Dh, F]` for 'out'), 'bias': ... or
    None}, the fused W_qkv split by `split_qkv`.
    """
    tree = _attention_tree(params)

    def get(layer, name):
        return _value(layer[name]) if name in layer else None

    if FUSED_QKV in tree:
        kernels = split_qkv(tree[FUSED_QKV]["kernel"], num_heads, num_kv_heads)
        bias = get(tree[FUSED_QKV], "bias")
        biases = (
            split_qkv(bias, num_heads, num_kv_heads) if bias is not None else dict.fromkeys(QKV)
        )
        out = {n: {"kernel": kernels[n], "bias": biases[n]} for n in QKV}
    else:
        out = {n: {"kernel": get(tree[n], "kernel"), "bias": get(tree[n], "bias")} for n in QKV}
    out[OUT] = {"kernel": get(tree[OUT], "kernel"), "bias": get(tree[OUT], "bias")}
    return out


def attention_kernels(
    params, num_heads: int, num_kv_heads: Optional[int] = None
) -> dict[str, Array]:
    """Per-head kernels: {'query': `[..., F, H, Dh]`, 'key', 'value': `[..., F, K, Dh]`,
    'out': `[..., H, Dh, F]`} (leading `[L]` for a `Transformer`), fused or not."""
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    flat = {n: p["kernel"] for n, p in attention_params(params, num_heads, num_kv_heads).items()}
    heads = {"query": num_heads, "key": num_kv_heads, "value": num_kv_heads}
    out = {n: jnp.reshape(flat[n], flat[n].shape[:-1] + (heads[n], -1)) for n in QKV}
    w_o = flat[OUT]
    out[OUT] = jnp.reshape(w_o, w_o.shape[:-2] + (num_heads, -1, w_o.shape[-1]))
    return out


def grouped(
    tree, num_heads: Optional[int] = None, num_kv_heads: Optional[int] = None
) -> dict[str, list[Array]]:
    """The leaves of `tree` (params or their gradients) by `GROUPS`; a fused W_qkv (kernel and
    bias) is split into its query, key and value parts, which needs `num_heads`."""
    groups = {g: [] for g in GROUPS}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        group = group_of(path)
        if group != FUSED_QKV:
            groups[group].append(leaf)
            continue
        if num_heads is None:
            raise ValueError(
                f"a fused qkv parameter ({'/'.join(names(path))}, shape {jnp.shape(leaf)}) "
                "splits into query, key and value only with num_heads"
            )
        for name, part in split_qkv(leaf, num_heads, num_kv_heads).items():
            groups[name].append(part)
    return groups
