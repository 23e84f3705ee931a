"""A float64 NumPy llama-family causal LM written from the published equations
(Touvron et al. 2023, "LLaMA: Open and efficient foundation language models";
Su et al. 2021, "RoFormer" for rotary embeddings; Zhang & Sennrich 2019 for
RMSNorm; Shazeer 2020 for SwiGLU; Ainslie et al. 2023 for grouped-query
attention), sharing no code with attnjax. Weights are GGUF names, each `[out, in]`.

    x_0 = E[ids]
    h   = RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g
    q, k = RoPE(h W_q^T), RoPE(h W_k^T);  v = h W_v^T     (query head j reads KV head j // (H / K))
    x  <- x + softmax(q k^T / sqrt(d_h) + causal) v W_o^T
    x  <- x + W_down (silu(W_gate h') * W_up h'),   h' = RMSNorm(x)
    logits = RMSNorm(x) E^T                          (tied embeddings)

RoPE here rotates interleaved pairs (x_{2i}, x_{2i+1}) by angle
t * base^(-2i / d_h): the layout GGUF files use (their converter permutes the
query/key rows of each head). `rope="half"` rotates (x_i, x_{i + d_h/2}) instead.
"""

import numpy as np


def _rms_norm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def _rope(x, base, layout):
    """x [T, H, dh] -> rotated, position t = row index."""
    t, _, dh = x.shape
    freq = base ** (-np.arange(0, dh, 2) / dh)  # [dh/2]
    angle = np.arange(t)[:, None, None] * freq[None, None, :]  # [T, 1, dh/2]
    cos, sin = np.cos(angle), np.sin(angle)
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
    a, b = x[..., : dh // 2], x[..., dh // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def llama_forward(
    weights, *, num_layers, num_heads, num_kv_heads, rope_base, eps, ids, rope="interleaved"
):
    """ids [T] -> logits [T, V] in float64 (`weights`: GGUF name -> dequantized [out, in] array)."""

    def w(name):
        return np.asarray(weights[name], np.float64)

    embed = w("token_embd.weight")
    x = embed[np.asarray(ids)]
    t, d = x.shape
    dh = d // num_heads
    group = num_heads // num_kv_heads
    causal = np.tril(np.ones((t, t), bool))
    for layer in range(num_layers):
        p = f"blk.{layer}."
        h = _rms_norm(x, w(p + "attn_norm.weight"), eps)
        q = _rope((h @ w(p + "attn_q.weight").T).reshape(t, num_heads, dh), rope_base, rope)
        k = _rope((h @ w(p + "attn_k.weight").T).reshape(t, num_kv_heads, dh), rope_base, rope)
        v = (h @ w(p + "attn_v.weight").T).reshape(t, num_kv_heads, dh)
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        logits = np.einsum("thd,shd->hts", q, k) / np.sqrt(dh)
        logits = np.where(causal[None], logits, -np.inf)
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = np.einsum("hts,shd->thd", probs, v).reshape(t, d)
        x = x + context @ w(p + "attn_output.weight").T
        h = _rms_norm(x, w(p + "ffn_norm.weight"), eps)
        gate = h @ w(p + "ffn_gate.weight").T
        x = (
            x
            + (gate / (1.0 + np.exp(-gate)) * (h @ w(p + "ffn_up.weight").T))
            @ w(p + "ffn_down.weight").T
        )
    return _rms_norm(x, w("output_norm.weight"), eps) @ embed.T
