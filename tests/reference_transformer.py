"""A float64 NumPy transformer written from the equations, sharing no code with attnjax.

Parameters are the model's own (a flat dict of path tuples -> arrays, as
`nnx.to_flat_state` gives them; kernels `[in, out]`, stacked blocks `[L, ...]`).

    x_0 = E[ids] + P                  P learned rows 0..T-1, or sinusoidal (Vaswani et al. 2017, §3.5):
                                      P[t, i] = sin(t w_i), P[t, h + i] = cos(t w_i), w_i = 10000^(-i/h), h = D/2
    per layer (a = residual scale), with f in (attention, MLP):
      pre:  x <- x + a f(N(x));  post: x <- N(x + a f(x));  none: x <- x + a f(x)
    N: LayerNorm (x - mu) / sqrt(var + eps) g + b (Ba et al. 2016) or RMSNorm x / sqrt(mean x^2 + eps) g
    attention: q = x W_q + b_q, k, v likewise, split into heads of Dh; QK-norm on q, k: LayerNorm over
      Dh without bias (scale g_q, g_k; eps 1e-6, flax's default; Dehghani et al. 2023), or cosine:
      q sqrt(Dh) / ||q|| (each vector rescaled to norm sqrt(Dh)); then RoPE on q, k (Su et al. 2021);
      query head j reads key/value head j // (H / K) (Ainslie et al. 2023);
      softmax(q k^T / (sqrt(Dh) tau) + mask) v, concatenated, then W_o + b_o
    MLP: W_2 act(W_1 x + b_1) + b_2, act gelu (tanh form) / relu
    logits = N_final(x) W_head + b_head   (or N_final(x) E^T, tied)

Hand-written edits (`edits`, a dict of optional callables, layer index first):
'weights'(l, P) -> P on the softmax weights `[B, H, T, S]` of layer l before
the value product; 'heads'(l, o) -> o on its head outputs `[B, T, H, Dh]`
before W_o; 'residual'(l, x) -> x on the output of block l.

`record(name, layer, value)` (optional) receives each activation of
`attnjax.nn.sites`' vocabulary as it is computed (layer None for 'embed' and 'final').
"""

import math

import numpy as np

from tests.reference import softmax_attention
from tests.reference_llama import _rope

_ACTIVATIONS = {
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "relu": lambda x: np.maximum(x, 0),
}


def norm(x, p, kind, eps):
    """LayerNorm (p: 'scale', 'bias') or RMSNorm (p: 'scale') over the last axis of `x`."""
    if kind == "rmsnorm":
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * p["scale"]
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def sinusoidal(length, features):
    """`[T, D]`: sin of t w_i in the first D/2 columns, cos in the next (zero-padded if D is odd)."""
    half = features // 2
    angle = np.arange(length)[:, None] * 10000.0 ** (-np.arange(half) / max(half, 1))[None, :]
    table = np.zeros((length, features))
    table[:, :half], table[:, half : 2 * half] = np.sin(angle), np.cos(angle)
    return table


def _dense(x, p):
    return x @ p["kernel"] + p.get("bias", 0.0)


# flax.nnx.LayerNorm's default epsilon, which the QK-norm LayerNorms keep.
QK_NORM_EPS = 1e-6


def qk_norm(x, p, kind):
    """QK-norm of queries or keys `[B, T, N, Dh]` over Dh: 'layernorm' (p: {'scale'}, no bias, eps
    `QK_NORM_EPS`), 'cosine' (each vector to norm sqrt(Dh)) or None (x unchanged)."""
    if kind is None:
        return x
    if kind == "cosine":
        return x * math.sqrt(x.shape[-1]) / np.linalg.norm(x, axis=-1, keepdims=True)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + QK_NORM_EPS) * p["scale"]


def multi_head_attention(
    p,
    x,
    *,
    num_heads,
    num_kv_heads,
    temperature=1.0,
    rope=None,
    rope_base=10000.0,
    normalize_qk=None,
    mask=None,
    weights_edit=None,
    heads_edit=None,
    attention=softmax_attention,
    record=None,
):
    """x `[B, T, F]` -> `[B, T, F']` (p: 'query', 'key', 'value', 'out' dense dicts, and 'query_ln',
    'key_ln' for the 'layernorm' QK-norm); `normalize_qk`: None, 'layernorm' or 'cosine' (`qk_norm`);
    `mask` `[T, T]` bool; `weights_edit(P)`, `heads_edit(o)`: see the module docstring; `attention`:
    the attention on the heads, `tests.reference.softmax_attention`'s signature (default: it);
    `record(name, value)`: called with q, k, v, logits, weights, head_out and attn_out."""
    record = record or (lambda name, value: None)
    b, t, _ = x.shape
    dh = p["query"]["kernel"].shape[-1] // num_heads
    q = _dense(x, p["query"]).reshape(b, t, num_heads, dh)
    k = _dense(x, p["key"]).reshape(b, t, num_kv_heads, dh)
    v = _dense(x, p["value"]).reshape(b, t, num_kv_heads, dh)
    q = qk_norm(q, p.get("query_ln"), normalize_qk)
    k = qk_norm(k, p.get("key_ln"), normalize_qk)
    if rope is not None:
        q = np.stack([_rope(qi, rope_base, rope) for qi in q])
        k = np.stack([_rope(ki, rope_base, rope) for ki in k])
    for name, value in (("q", q), ("k", k), ("v", v)):
        record(name, value)
    group = num_heads // num_kv_heads
    logits = np.einsum("bthd,bshd->bhts", q, np.repeat(k, group, axis=-2)) / (
        math.sqrt(dh) * temperature
    )
    record("logits", logits)
    out, weights = attention(q, k, v, mask=mask, scale=1.0 / math.sqrt(dh), temperature=temperature)
    record("weights", weights)
    if weights_edit is not None:
        out = np.einsum(
            "bhts,bshd->bthd",
            weights_edit(weights),
            np.repeat(v, num_heads // num_kv_heads, axis=-2),
        )
    if heads_edit is not None:
        out = heads_edit(out)
    record("head_out", out)
    result = _dense(out.reshape(b, t, num_heads * dh), p["out"])
    record("attn_out", result)
    return result


def _windowed(mask, t: int, window, causal: bool):
    """`mask` `[T, T]` (or None) and a sliding window W: t - W < s (and s < t + W unless causal)."""
    if window is None:
        return mask
    rows, cols = np.arange(t)[:, None], np.arange(t)[None, :]
    band = (cols > rows - window) & (causal | (cols < rows + window))
    return band if mask is None else mask & band


def param_tree(flat):
    """{(a, b, c): array} -> nested dicts of float64 arrays."""
    tree = {}
    for path, value in flat.items():
        node = tree
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = np.asarray(value, np.float64)
    return tree


def _layer(tree, i):
    """Layer i of stacked `[L, ...]` parameters."""
    return {k: _layer(v, i) if isinstance(v, dict) else v[i] for k, v in tree.items()}


def transformer(flat_params, config, ids, edits=None, attention=softmax_attention, record=None):
    """ids `[B, T]` -> (logits `[B, T, V]`, hidden `[L + 1, B, T, D]`), float64; `config` a TransformerConfig;
    `edits`, `record`: see the module docstring; `attention`: see `multi_head_attention`."""
    record = record or (lambda name, layer, value: None)
    p, block, att = param_tree(flat_params), config.block, config.block.attention
    t = ids.shape[1]
    x = p["embed"]["embedding"][np.asarray(ids)]
    if config.positions == "learned":
        x = x + p["position_table"][:t]
    elif config.positions == "sinusoidal":
        x = x + sinusoidal(t, block.features)
    record("embed", None, x)
    mask = np.tril(np.ones((t, t), bool)) if config.causal else None
    windows = config.layer_windows or (att.window,) * config.num_layers
    bases = config.layer_rope_bases or (att.rope_base,) * config.num_layers
    scale = block.branch_scale(config.num_layers)

    def n(h, q):
        return norm(h, q, block.norm_kind, block.norm_eps)

    hidden, edits = [x], edits or {}
    for i in range(config.num_layers):
        w_edit = None if "weights" not in edits else (lambda w, i=i: edits["weights"](i, w))
        o_edit = None if "heads" not in edits else (lambda o, i=i: edits["heads"](i, o))
        layer = _layer(p["blocks"], i)
        record("resid_pre", i, x)

        def attend(h):
            return multi_head_attention(
                layer["attention"],
                h,
                num_heads=block.num_heads,
                num_kv_heads=att.kv_heads(block.num_heads),
                temperature=att.temperature,
                rope=att.rope,
                rope_base=bases[i],
                normalize_qk=att.normalize_qk,
                mask=_windowed(mask, t, windows[i], config.causal),
                weights_edit=w_edit,
                heads_edit=o_edit,
                attention=attention,
                record=lambda name, value, i=i: record(name, i, value),
            )

        def mlp(h):
            hidden = _ACTIVATIONS[block.mlp_activation](_dense(h, layer["mlp"]["fc1"]))
            record("mlp_hidden", i, hidden)
            out = _dense(hidden, layer["mlp"]["fc2"])
            record("mlp_out", i, out)
            return out

        sublayers = [(attend, "attention_norm")] + ([(mlp, "mlp_norm")] if block.mlp else [])
        for f, name in sublayers:
            if name == "mlp_norm":
                record("resid_mid", i, x)
            if block.norm == "pre":
                x = x + scale * f(n(x, layer[name]))
            elif block.norm == "post":
                x = n(x + scale * f(x), layer[name])
            else:
                x = x + scale * f(x)
        x = edits["residual"](i, x) if "residual" in edits else x
        record("resid_post", i, x)
        hidden.append(x)
    h = n(x, p["final_norm"]) if config.final_norm else x
    record("final", None, h)
    logits = h @ p["embed"]["embedding"].T if config.head == "tied" else _dense(h, p["head"])
    return logits, np.stack(hidden)
