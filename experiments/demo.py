"""A first look: the articles' example, and rank collapse in pure attention.

    python -m experiments.demo

1. The articles' example (batch 2, 10 tokens, d_model 512, 8 heads) through
   `attnjax.nn.MultiHeadAttention`: every row of every head's weight matrix
   sums to one (a row-stochastic, Markov, matrix).
2. A stack of attention-only layers at initialisation (no skip, no MLP, no
   norm): the relative residual ||X - 1 x_bar^T||_F / ||X||_F of the token
   representations falls towards 0 with depth (Dong et al. 2021), while
   with skip connections scaled by 1/sqrt(L) it stays near 1 (Noci et al. 2022).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import nn
from attnjax.analysis import residual_ratio
from experiments.architectures import architecture


def articles_example() -> None:
    mha = nn.MultiHeadAttention(512, 8, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (2, 10, 512), jnp.float32)
    out, weights = mha(x, return_weights=True)
    row_sums = weights.sum(-1)
    print(
        f"articles' example: out {out.shape}, weights {weights.shape}, "
        f"row sums in [{float(row_sums.min()):.6f}, {float(row_sums.max()):.6f}]"
    )


def depth_profile(skip: bool, depth: int = 12) -> np.ndarray:
    """Mean relative residual `[depth + 1]` of untrained attention-only layers, with or without scaled skips."""
    config = nn.TransformerConfig.create(
        num_layers=depth,
        features=64,
        num_heads=4,
        input_features=64,
        positions=None,
        final_norm=False,
        **architecture("skip_scaled" if skip else "attention_only"),
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(1))
    x = jax.random.normal(jax.random.key(2), (4, 32, 64), jnp.float32)
    _, inter = model(x, return_intermediates=True)
    return np.asarray(residual_ratio(inter["hidden"]).mean(axis=1))


def main() -> None:
    articles_example()
    pure, scaled = depth_profile(skip=False), depth_profile(skip=True)
    print("layer  residual (attention only)  residual (skip, 1/sqrt(L))")
    for layer, (a, b) in enumerate(zip(pure, scaled)):
        print(f"{layer:5d}  {a:25.3e}  {b:26.3f}")


if __name__ == "__main__":
    main()
