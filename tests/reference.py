"""Float64 NumPy references, written independently of the library code."""

import numpy as np


def softmax_attention(q, k, v, *, mask=None, bias=None, scale=None, temperature=1.0):
    """Exact attention in float64. q [..., T, H, D], k/v [..., S, K, D]; returns (out, weights)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    num_heads, num_kv = q.shape[-2], k.shape[-2]
    k = np.repeat(k, num_heads // num_kv, axis=-2)
    v = np.repeat(v, num_heads // num_kv, axis=-2)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("...thd,...shd->...hts", q, k) * scale
    if bias is not None:
        logits = logits + np.asarray(bias, np.float64)
    logits = logits / temperature
    if mask is None:
        mask = np.ones(logits.shape, bool)
    mask = np.broadcast_to(mask, logits.shape)
    logits = np.where(mask, logits, -np.inf)
    row_max = np.max(logits, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.where(mask, np.exp(logits - row_max), 0.0)
    total = e.sum(-1, keepdims=True)
    weights = e / np.where(total > 0, total, 1.0)
    out = np.einsum("...hts,...shd->...thd", weights, v)
    return out, weights
