"""Benchmark section 'compile': Transformer compile time against depth.

The layers of `attnjax.nn.Transformer` are one `nnx.scan` over stacked
parameters, so compiling a forward+backward pass should cost about the same
at any depth beyond `nn.UNROLL_MAX_LAYERS` (shallower models unroll the scan:
faster training steps, compile time growing with depth up to that point).
Rows: the compile seconds at each of `depths` (config: `configs/benchmark.py`,
`compile`) and the ratio to the shallowest; target for the deepest: <= `target`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from attnjax import nn
from experiments.benchmark.util import compile_seconds, ratio_row

SECTION = "compile"


def _loss_and_grad(cfg, depth: int):
    """value_and_grad of a next-token-style loss, and abstract params and tokens to compile it for."""
    config = nn.TransformerConfig.create(
        num_layers=depth,
        features=cfg.features,
        num_heads=cfg.heads,
        vocab_size=64,
        max_len=cfg.length,
        causal=True,
    )
    # Shapes only: building the parameters eagerly would cost more than compiling.
    graphdef, params = nnx.split(nnx.eval_shape(lambda: nn.Transformer(config, rngs=nnx.Rngs(0))))
    tokens = jax.ShapeDtypeStruct((cfg.batch, cfg.length), jnp.int32)

    def loss(params, tokens):
        logits = nnx.merge(graphdef, params)(tokens)
        return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

    return jax.value_and_grad(loss), params, tokens


def run(cfg) -> list[dict]:
    shape = f"D={cfg.features} H={cfg.heads} T={cfg.length} B={cfg.batch} fwd+bwd"
    depths = sorted(cfg.depths)
    seconds = {}
    for depth in depths:
        fn, params, tokens = _loss_and_grad(cfg, depth)
        seconds[depth] = min(compile_seconds(fn, params, tokens) for _ in range(cfg.trials))
    first = f"compile Transformer L={depths[0]}"
    rows = [{"section": SECTION, "name": first, "shape": shape, "seconds": seconds[depths[0]]}]
    for depth in depths[1:]:
        target = f"<= {cfg.target:g}" if depth == depths[-1] else None
        rows.append(
            ratio_row(
                SECTION,
                f"compile Transformer L={depth}",
                shape,
                seconds[depth],
                seconds[depths[0]],
                first,
                target,
                seconds=seconds[depth],
            )
        )
    return rows
