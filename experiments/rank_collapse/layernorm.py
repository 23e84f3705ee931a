"""Wu et al. 2024's self-attention dynamics with LayerNorm, on constructed weights.

Wu, Ajorlou, Wang, Jegelka & Jadbabaie 2024 ("On the role of attention masks
and LayerNorm in transformers") study tokens X `[N, d]` under

    X_(t+1) = LN(A_t X_t W_V,t),   A_t = softmax(X_t W_QK,t X_t^T / sqrt(d) + causal mask),

with LN the token-wise normalisation x -> x / ||x||_2 (the centring of a
LayerNorm is a linear map of the features, absorbed into W_V; its gain and bias
are 1 and 0 at initialisation). Their abstract: "for certain classes of value
matrices, collapse to a rank one subspace still happens exponentially.
However, ... with proper choice of value matrices, a general class of
sequences may not converge to a rank one subspace". Two constructions, each
run with LN and, as a control, without it (X_(t+1) = A_t X_t W_V,t):

* `orthogonal`: W_V,t random orthogonal, W_QK,t with N(0, 1) entries, tokens
  drawn in the positive orthant (one open hemisphere) and normalised: the class
  of value matrices under which LN does not prevent exponential collapse.
* `full_rank` (N = 2, d = 2, Wu et al.'s two-token picture): W_V = diag(1/2, 1),
  W_QK = diag(4, 0). Token 1 sees only itself, so LN makes it a power iteration
  of W_V: it sits at (0, 1), started within 0.1 rad of it. Token 2, started in
  the lower half-plane at least 0.2 rad from the axis, converges to
  B = (+-0.558, -0.830): attention pulls it toward token 1, W_V toward the
  y-axis, and its self-attention logit 4 x_1^2 / sqrt(2) balances the two, so the
  tokens keep rank 2. Without LN the same weights average token 2 onto token 1.
  (These weights are ours; the paper's own are not reproduced here, only what
  its figure shows: token 1 at (0, +-1), token 2 at a point B off that axis.)

The consensus distance is the relative residual ||X - 1 x_bar^T||_F / ||X||_F
(`attnjax.analysis.residual_ratio`), 0 when every token is the same.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import attnjax
from attnjax.analysis.residual import residual_ratio
from experiments.rank_collapse.constants import RESOLVED

CONSTRUCTIONS = ("orthogonal", "full_rank")
# The full-rank construction's weights: W_V and W_QK diagonal.
FULL_RANK_VALUE = (0.5, 1.0)
FULL_RANK_QK = (4.0, 0.0)


def attention_layer(x, w_qk, w_v, normalize: bool):
    """One layer: x `[N, d]`, w_qk and w_v `[d, d]` -> LN(A x W_V) (or A x W_V), A causal with logits
    x W_QK x^T / sqrt(d)."""
    query, key, value = (x @ w_qk)[:, None], x[:, None], (x @ w_v)[:, None]  # [N, 1, d]: one head
    y = attnjax.dot_product_attention(query, key, value, is_causal=True)[:, 0]
    return y / jnp.linalg.norm(y, axis=-1, keepdims=True) if normalize else y


def trajectory(x0, w_qk, w_v, normalize: bool):
    """x0 `[N, d]`, w_qk and w_v `[L, d, d]` -> the tokens after every layer, `[L + 1, N, d]` (row 0 is x0)."""

    def step(x, weights):
        x = attention_layer(x, *weights, normalize)
        return x, x

    _, xs = jax.lax.scan(step, x0, (w_qk, w_v))
    return jnp.concatenate([x0[None], xs])


def weights(name: str, key, num_tokens: int, dim: int, num_layers: int):
    """(x0 `[N, d]`, w_qk `[L, d, d]`, w_v `[L, d, d]`) of construction `name` for one seed (`key`);
    the full-rank construction is two tokens in two dimensions whatever `num_tokens` and `dim`."""
    k_x, k_qk, k_v = jax.random.split(key, 3)
    if name == "orthogonal":
        x0 = jnp.abs(jax.random.normal(k_x, (num_tokens, dim)))
        w_qk = jax.random.normal(k_qk, (num_layers, dim, dim))
        w_v = jnp.linalg.qr(jax.random.normal(k_v, (num_layers, dim, dim)))[0]
    elif (
        name == "full_rank"
    ):  # token 1 within 0.1 rad of pi/2, token 2 at -pi/2 +- (0.2 .. 1.3) rad
        first = np.pi / 2 + jax.random.uniform(k_x, (), minval=-0.1, maxval=0.1)
        offset = jax.random.uniform(k_qk, (), minval=0.2, maxval=1.3) * jnp.where(
            jax.random.bernoulli(k_v), 1, -1
        )
        angles = jnp.stack([first, -np.pi / 2 + offset])
        x0 = jnp.stack([jnp.cos(angles), jnp.sin(angles)], axis=-1)
        w_qk = jnp.broadcast_to(jnp.diag(jnp.asarray(FULL_RANK_QK)), (num_layers, 2, 2))
        w_v = jnp.broadcast_to(jnp.diag(jnp.asarray(FULL_RANK_VALUE)), (num_layers, 2, 2))
    else:
        raise ValueError(f"unknown construction {name!r}; valid: {CONSTRUCTIONS}")
    return x0 / jnp.linalg.norm(x0, axis=-1, keepdims=True), w_qk, w_v


def measure(name: str, keys, num_tokens: int, dim: int, num_layers: int) -> dict:
    """Per seed (`keys` `[S]`), the consensus distance after every layer with and without LN:
    `{"consensus_ln": [S, L + 1], "consensus_plain": [S, L + 1], "rank_ln": [S]}` (rank_ln: numerical rank
    of the last layer's tokens with LN: singular values above `RESOLVED` times the largest, the float64
    resolution)."""

    def one(key):
        x0, w_qk, w_v = weights(name, key, num_tokens, dim, num_layers)
        with_ln, plain = trajectory(x0, w_qk, w_v, True), trajectory(x0, w_qk, w_v, False)
        sv = jnp.linalg.svd(with_ln[-1], compute_uv=False)
        return {
            "consensus_ln": residual_ratio(with_ln),
            "consensus_plain": residual_ratio(plain),
            "rank_ln": jnp.sum(sv > RESOLVED * sv[0]),
        }

    return jax.jit(jax.vmap(one))(keys)
