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


def masked_attention_and_vjp(q, k, v, cotangent, lse_cotangent, *, mask, scale, bias=None):
    """Exact attention and its gradients in float64, where a masked pair (t, s) is absent from every sum.

    q `[..., T, H, D]`, k `[..., S, K, D]`, v `[..., S, K, Dv]`, mask broadcastable to
    `[..., H, T, S]` (True = attend), bias likewise (additive); `cotangent` `[..., T, H, Dv]` and
    `lse_cotangent` `[..., T, H]` weight the output and the row log-sum-exp in the loss
    sum(out * cotangent) + sum(lse * lse_cotangent). Every product q_t . k_s, w_ts v_s and the
    gradients' sums run over visible pairs only (a `where` on the pairwise terms), so whatever a
    masked key or value holds, NaN and inf included, it never enters. A fully masked row has zero
    output and gradients and lse -0.7 x float32 max. Returns (out, lse, dq, dk, dv).
    """
    q, k, v, g, gl = (np.asarray(x, np.float64) for x in (q, k, v, cotangent, lse_cotangent))
    num_heads, num_kv = q.shape[-2], k.shape[-2]
    group = num_heads // num_kv
    qh = np.swapaxes(q, -3, -2)[..., :, :, None, :]  # [..., H, T, 1, D]
    kh = np.swapaxes(np.repeat(k, group, axis=-2), -3, -2)[..., :, None, :, :]  # [..., H, 1, S, D]
    vh = np.swapaxes(np.repeat(v, group, axis=-2), -3, -2)[..., :, None, :, :]  # [..., H, 1, S, Dv]
    gh = np.swapaxes(g, -3, -2)[..., :, :, None, :]  # [..., H, T, 1, Dv]
    shape = q.shape[:-3] + (num_heads, q.shape[-3], k.shape[-3])
    visible = np.broadcast_to(np.asarray(mask, bool), shape)

    def pairwise_sum(terms, axis):  # terms of masked pairs (inf * 0, NaN, ...) are dropped
        return np.where(visible[..., None], terms, 0.0).sum(axis)

    with np.errstate(invalid="ignore", over="ignore"):
        logits = pairwise_sum(qh * kh, -1) * scale  # [..., H, T, S]
        if bias is not None:
            logits = logits + np.where(visible, np.asarray(bias, np.float64), 0.0)
        x = np.where(visible, logits, -np.inf)
        has = visible.any(-1, keepdims=True)
        top = np.where(has, x.max(-1, keepdims=True), 0.0)
        e = np.where(visible, np.exp(x - top), 0.0)
        total = np.where(has, e.sum(-1, keepdims=True), 1.0)
        w = e / total
        masked_lse = -0.7 * float(np.finfo(np.float32).max)
        lse = np.where(has, top + np.log(total), masked_lse)[..., 0]  # [..., H, T]
        out = pairwise_sum(w[..., None] * vh, -2)  # [..., H, T, Dv]
        dw = pairwise_sum(gh * vh, -1)  # [..., H, T, S]
        dx = w * (dw - (w * dw).sum(-1, keepdims=True)) + w * np.swapaxes(gl, -1, -2)[..., None]
        dlogits = dx * scale
        dq = pairwise_sum(dlogits[..., None] * kh, -2)  # [..., H, T, D]
        dk = pairwise_sum(dlogits[..., None] * qh, -3)  # [..., H, S, D]
        dv = pairwise_sum(w[..., None] * gh, -3)  # [..., H, S, Dv]

    def to_kv_heads(x):  # [..., H, S, D] -> [..., S, K, D], summing each key head's group
        x = x.reshape(x.shape[:-3] + (num_kv, group) + x.shape[-2:]).sum(-3)
        return np.swapaxes(x, -3, -2)

    return (
        np.swapaxes(out, -3, -2),
        np.swapaxes(lse, -1, -2),
        np.swapaxes(dq, -3, -2),
        to_kv_heads(dk),
        to_kv_heads(dv),
    )
