"""Fused attention kernels (Pallas) as `attention_fn`s: TPU splash and flash attention, the GPU Pallas kernel.

Each factory returns a function with the signature of
`jax.nn.dot_product_attention` (attnjax's `attention_fn` contract, see
`attnjax.nn.MultiHeadAttention`): query `[..., T, H, D]`, key and value
`[..., S, K, D]`, output `[..., T, H, D]`,

    out = softmax(scale * Q K^T + causal / local-window mask) V,   scale default 1/sqrt(D),

and raises `ValueError` for what its kernel cannot do: an additive `bias`,
an array `mask` (the kernels take masks as structure, not data),
`return_weights` (a fused kernel never forms the `[T, S]` weights), dropout,
sequence lengths. Leading axes are flattened into one batch axis. Keys no
query can reach (s >= T when causal, s >= T + right with a local window) are
zeroed before the kernel, so NaN or inf there cannot reach the output or a
gradient; a key that some row reaches is read by the rows of its block that
mask it, so garbage there can (as in `attnjax.dot_product_attention`).

* `splash_attention()`: `jax.experimental.pallas.ops.tpu.splash_attention`
  (in jax itself, 0.10 included). Its kernel (`make_splash_mha`, or
  `make_splash_mqa` for grouped queries) takes one example `[H, T, D]`, so it is
  vmapped over the batch; causal and local-window masks are its mask classes
  (`CausalMask`, `LocalMask`); it has no scale, so the queries are scaled;
  GQA (K dividing H): the multi-query kernel vmapped over the K key heads.
  Blocks of 128 (its minimum): T and S must be multiples of 128.
* `tpu_flash_attention()`: `jax.experimental.pallas.ops.tpu.flash_attention`,
  layout `[B, H, T, D]`, `sm_scale`, causal; no local window; GQA by
  repeating the K key/value heads to H. Blocks of min(128, T).
* `gpu_flash_attention()`: `jax.experimental.pallas.ops.gpu.attention.mha`,
  the Triton-lowered Pallas kernel, layout `[B, T, H, D]`, `sm_scale`, causal;
  GQA by repeating key/value heads. The Triton backend of Pallas is
  deprecated in jax 0.11 (the `pallas.ops.gpu` Triton ops with it); its
  successor is the Mosaic GPU backend (`jax.experimental.pallas.mosaic_gpu`,
  whose attention kernel is `pallas.ops.gpu.attention_mgpu`, Hopper and
  later), with `tokamax.dot_product_attention` named as the maintained
  replacement. On a GPU, `attnjax.dot_product_attention` already calls cuDNN's
  fused kernel for bf16/fp16 inputs.

`interpret=True` runs a kernel in Pallas' interpret mode (TPU kernels: the
TPU interpreter, `pltpu.force_tpu_interpret_mode`), which is how the tests
check them on a CPU against `attnjax.dot_product_attention`. All three
define a backward pass (a `custom_vjp` of Pallas kernels).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from attnjax import checks
from attnjax import masks as masks_lib
from attnjax.attention import default_scale, without_unread_keys

Array = jax.Array
SPLASH_BLOCK = 128  # the smallest block the splash kernel accepts (a TPU lane width)


def _check_call(
    kernel: str,
    query,
    key,
    value,
    bias,
    mask,
    *,
    scale=None,
    is_causal=False,
    return_weights=False,
    dropout_rate=0.0,
    query_seq_lengths=None,
    key_value_seq_lengths=None,
    **ignored,
) -> tuple[int, int]:
    """Reject what a kernel cannot do, and check shapes and scalars; returns (H, K)."""
    del ignored  # implementation, dropout_rng: nothing to do
    checks.boolean("is_causal", is_causal)
    checks.scale(scale)
    unsupported = {
        "bias": bias is not None,
        "mask": mask is not None,
        "return_weights": bool(return_weights),
        "dropout_rate": dropout_rate != 0,
        "query_seq_lengths": query_seq_lengths is not None,
        "key_value_seq_lengths": key_value_seq_lengths is not None,
    }
    for name, given in unsupported.items():
        if given:
            raise ValueError(
                f"{kernel} cannot take {name}: it expresses only causal and local-window masks as "
                f"structure and never forms the weights; use attnjax.dot_product_attention"
            )
    if not (query.ndim == key.ndim == value.ndim >= 3):
        raise ValueError(
            f"{kernel}: query, key, value must be [..., T, H, D] of one rank >= 3, got "
            f"query {query.shape}, key {key.shape}, value {value.shape}"
        )
    if (
        key.shape != value.shape
        or query.shape[:-3] != key.shape[:-3]
        or query.shape[-1] != key.shape[-1]
    ):
        raise ValueError(
            f"{kernel}: key and value must have one shape [..., S, K, D], with query's batch axes "
            f"and D, got query {query.shape}, key {key.shape}, value {value.shape}"
        )
    if query.shape[-1] < 1:
        raise ValueError(
            f"{kernel}: query and key must have a head dim D >= 1, got query {query.shape}, "
            f"key {key.shape}"
        )
    heads, kv_heads = query.shape[-2], key.shape[-2]
    if heads % kv_heads:
        raise ValueError(
            f"{kernel}: key heads K={kv_heads} must divide query heads H={heads}, "
            f"got query {query.shape}, key {key.shape}"
        )
    return heads, kv_heads


def _batched(query: Array, key: Array, value: Array, is_causal: bool, window=None):
    """Flatten leading axes: `[..., T, H, D]` -> `[B, T, H, D]`, and the function restoring `[..., T, H, D]`.

    Keys that no query reaches through the causal / local-window structure (s >= T
    when causal, s >= T + right with a window) are zeroed first
    (`attention.without_unread_keys`): a kernel multiplies their zero weights by
    their values, so a NaN there (padding garbage) would reach every row of its block.
    """
    reachable = masks_lib.reachable_keys(
        query.shape[-3], key.shape[-3], is_causal=is_causal, window=window
    )
    key, value = without_unread_keys(key, value, reachable=reachable)
    lead = query.shape[:-3]
    flat = [x.reshape((-1, *x.shape[-3:])) for x in (query, key, value)]
    return flat, lambda out: out.reshape((*lead, *out.shape[-3:]))


def _scale(query: Array, scale: Optional[float]) -> float:
    return default_scale(query.shape[-1]) if scale is None else scale


def _repeat_heads(x: Array, heads: int) -> Array:
    """`[B, S, K, D]` -> `[B, S, H, D]`: key head k serves query heads k*G .. k*G+G-1 (G = H // K)."""
    return jnp.repeat(x, heads // x.shape[-2], axis=-2)


def _without_x64(kernel: Callable, context: Callable = contextlib.nullcontext) -> Callable:
    """`kernel(q, k, v)`, its forward and backward traced with 64-bit types off (the kernels' index
    arithmetic assumes int32, which `jax_enable_x64` breaks) and inside `context()` (interpret mode)."""

    @contextlib.contextmanager
    def scoped():
        with jax.enable_x64(False), context():
            yield

    @jax.custom_vjp
    def call(q, k, v):
        with scoped():
            return kernel(q, k, v)

    def forward(q, k, v):
        with scoped():
            return jax.vjp(kernel, q, k, v)

    def backward(vjp, cotangent):
        with scoped():
            return vjp(cotangent)

    call.defvjp(forward, backward)
    return call


# --------------------------------------------------------------------------
# TPU splash attention


@functools.lru_cache(maxsize=64)
def _splash_kernel(
    heads: int, kv_heads: int, q_len: int, kv_len: int, window: Optional[tuple], interpret: bool
):
    """The splash kernel of one example: q `[G, T, D]` with k, v `[S, D]` (K < H), or all `[H, ., D]` (K = H)."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    shape = (q_len, kv_len)
    if window is None:
        head_mask = splash.FullMask(shape)
    elif window == (None, 0):
        head_mask = splash.CausalMask(shape)
    else:
        head_mask = splash.LocalMask(shape, window_size=window, offset=0)
    group = heads if kv_heads == heads else heads // kv_heads
    block = SPLASH_BLOCK
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    make = splash.make_splash_mha if kv_heads == heads else splash.make_splash_mqa
    return make(
        splash.MultiHeadMask([head_mask] * group),
        head_shards=1,
        q_seq_shards=1,
        block_sizes=sizes,
        interpret=interpret,
    )


def _mask_window(is_causal: bool, local_window_size) -> Optional[tuple]:
    """(left, right) of the band to keep (None: unbounded), or None for no mask."""
    window = checks.window(local_window_size)
    if window is None:
        return (None, 0) if is_causal else None
    left, right = window
    return (left, 0) if is_causal else (left, right)


def splash_attention(*, interpret: bool = False) -> Callable:
    """An `attention_fn` running the TPU splash kernel (see the module docstring); T, S multiples of 128."""

    def attention(
        query,
        key,
        value,
        bias=None,
        mask=None,
        *,
        scale=None,
        is_causal=False,
        local_window_size=None,
        **options,
    ):
        heads, kv_heads = _check_call(
            "splash_attention",
            query,
            key,
            value,
            bias,
            mask,
            scale=scale,
            is_causal=is_causal,
            **options,
        )
        q_len, kv_len = query.shape[-3], key.shape[-3]
        if q_len % SPLASH_BLOCK or kv_len % SPLASH_BLOCK:
            raise ValueError(
                f"splash_attention needs T and S multiples of {SPLASH_BLOCK} (its block), got "
                f"query {query.shape}, key {key.shape}"
            )
        kernel = _splash_kernel(
            heads, kv_heads, q_len, kv_len, _mask_window(is_causal, local_window_size), interpret
        )
        (q, k, v), restore = _batched(
            query, key, value, is_causal, checks.window(local_window_size)
        )
        q = (q * jnp.asarray(_scale(query, scale), q.dtype)).transpose(0, 2, 1, 3)  # [B, H, T, D]
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, K, S, D]
        if kv_heads == heads:
            out = _without_x64(jax.vmap(kernel))(q, k, v)
        else:  # [B, K, G, T, D] against [B, K, S, D]: the multi-query kernel per key head
            grouped = q.reshape(q.shape[0], kv_heads, heads // kv_heads, *q.shape[2:])
            out = _without_x64(jax.vmap(jax.vmap(kernel)))(grouped, k, v).reshape(q.shape)
        return restore(out.transpose(0, 2, 1, 3))

    return attention


# --------------------------------------------------------------------------
# TPU flash attention


def _no_window(kernel: str, local_window_size) -> None:
    if local_window_size is not None:
        raise ValueError(
            f"{kernel} has no local window (got local_window_size={local_window_size!r}); "
            f"use splash_attention"
        )


def tpu_flash_attention(*, interpret: bool = False) -> Callable:
    """An `attention_fn` running the TPU flash-attention kernel (see the module docstring)."""

    def attention(
        query,
        key,
        value,
        bias=None,
        mask=None,
        *,
        scale=None,
        is_causal=False,
        local_window_size=None,
        **options,
    ):
        heads, _ = _check_call(
            "tpu_flash_attention",
            query,
            key,
            value,
            bias,
            mask,
            scale=scale,
            is_causal=is_causal,
            **options,
        )
        _no_window("tpu_flash_attention", local_window_size)
        from jax.experimental.pallas import tpu as pltpu
        from jax.experimental.pallas.ops.tpu import flash_attention as flash

        (q, k, v), restore = _batched(query, key, value, is_causal)
        k, v = _repeat_heads(k, heads), _repeat_heads(v, heads)
        bq, bk = min(128, q.shape[1]), min(128, k.shape[1])
        sizes = flash.BlockSizes(
            block_q=bq,
            block_k_major=bk,
            block_k=bk,
            block_b=1,
            block_q_major_dkv=bq,
            block_k_major_dkv=bk,
            block_k_dkv=bk,
            block_q_dkv=bq,
            block_k_major_dq=bk,
            block_k_dq=bk,
            block_q_dq=bq,
        )

        def to_bhtd(x):
            return x.transpose(0, 2, 1, 3)

        kernel = functools.partial(
            flash.flash_attention,
            causal=is_causal,
            sm_scale=_scale(query, scale),
            block_sizes=sizes,
        )
        context = pltpu.force_tpu_interpret_mode if interpret else contextlib.nullcontext
        out = _without_x64(kernel, context)(to_bhtd(q), to_bhtd(k), to_bhtd(v))
        return restore(to_bhtd(out))

    return attention


# --------------------------------------------------------------------------
# GPU Pallas (Triton) flash attention


def gpu_flash_attention(
    *, block_q: int = 64, block_k: int = 64, interpret: bool = False
) -> Callable:
    """An `attention_fn` running the GPU Pallas kernel `mha` (see the module docstring), blocks of
    min(block_q, T) x min(block_k, S) queries x keys."""

    def attention(
        query,
        key,
        value,
        bias=None,
        mask=None,
        *,
        scale=None,
        is_causal=False,
        local_window_size=None,
        **options,
    ):
        heads, _ = _check_call(
            "gpu_flash_attention",
            query,
            key,
            value,
            bias,
            mask,
            scale=scale,
            is_causal=is_causal,
            **options,
        )
        _no_window("gpu_flash_attention", local_window_size)
        from jax.experimental.pallas.ops.gpu import attention as gpu

        (q, k, v), restore = _batched(query, key, value, is_causal)
        bq, bk = min(block_q, q.shape[1]), min(block_k, k.shape[1])
        sizes = gpu.BlockSizes(
            block_q=bq, block_k=bk, block_q_dkv=bq, block_kv_dkv=bk, block_q_dq=bq, block_kv_dq=bk
        )
        kernel = functools.partial(
            gpu.mha,
            segment_ids=None,
            sm_scale=_scale(query, scale),
            causal=is_causal,
            block_sizes=sizes,
            interpret=interpret,
        )
        out = _without_x64(kernel)(q, _repeat_heads(k, heads), _repeat_heads(v, heads))
        return restore(out)

    return attention
