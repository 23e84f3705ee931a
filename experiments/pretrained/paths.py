"""The pretrained study's paths of single heads (Dong et al. 2021, Fig. 2): the `paths` run.

A path of length k takes k of the L layers in order and one head in each;
its output is A_{l_k}^{h_k} ... A_{l_1}^{h_1} X_0 W^{l_1 h_1} ... W^{l_k h_k},
with W^{lh} = W_V^{g(h)} W_O^h the head's value-output map (g(h) = h // (H/K),
its key/value head under grouped-query attention), X_0 the embeddings and A
the full model's attention on real text; norms and biases are left out, as
in the paper. Its relative residual is averaged over sentences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import lax

from attnjax import nn
from attnjax.analysis import residual_ratio
from experiments.lab.workdir import RunDir
from experiments.pretrained.corpus import corpus_sentences, forward, length_groups, load

HIGHEST = lax.Precision.HIGHEST


def value_output_maps(model: nn.Transformer) -> tuple[jax.Array, jax.Array]:
    """W_V `[L, K, D, Dh]` and W_O `[L, H, Dh, D]` per head, from the stacked block parameters
    (separate or fused W_qkv, through `attnjax.nn.params`)."""
    block = model.config.block
    kernels = nn.params.attention_kernels(
        nnx.state(model, nnx.Param), block.num_heads, block.attention.num_kv_heads
    )
    value = jnp.swapaxes(kernels["value"], 1, 2)  # [L, D, K, Dh] -> [L, K, D, Dh]
    return value.astype(jnp.float32), kernels["out"].astype(jnp.float32)


def sample_paths(
    seed: int, *, num_layers: int, num_heads: int, length: int, num_paths: int, max_length: int
):
    """`num_paths` paths of `length` layers (in order, without repeats) and one head each.

    Drawn by `numpy.random.default_rng((seed, length))`. Returns layers,
    heads `[P, max_length]` int32 and active `[P, max_length]` bool (steps
    past `length` are inactive), so every length shares one compiled
    `path_residuals`.
    """
    if not 1 <= length <= num_layers:
        raise ValueError(
            f"paths.lengths: a path of {length} layers needs 1 <= k <= L = {num_layers}"
        )
    rng = np.random.default_rng((seed, length))
    layers = np.zeros((num_paths, max_length), np.int32)
    heads = np.zeros((num_paths, max_length), np.int32)
    for i in range(num_paths):
        layers[i, :length] = np.sort(rng.choice(num_layers, size=length, replace=False))
        heads[i, :length] = rng.integers(0, num_heads, size=length)
    active = np.broadcast_to(np.arange(max_length) < length, (num_paths, max_length))
    return layers, heads, active


def _unit(y: jax.Array) -> jax.Array:
    """Each sentence's `[n, D]` block scaled to unit Frobenius norm (the relative residual is scale-free)."""
    norm = jnp.sqrt(jnp.sum(jnp.square(y), axis=(-2, -1), keepdims=True))
    return y / jnp.where(norm > 0, norm, 1)


@jax.jit
def path_residuals(attention, x0, value, out, layers, heads, active) -> jax.Array:
    """Relative residual of every path's output: `[P, B]`.

    attention `[L, B, H, n, n]`, x0 `[B, n, D]`, value `[L, K, D, Dh]`, out
    `[L, H, Dh, D]`, layers/heads/active `[P, k_max]`. Step j maps
    Y <- A_{l_j}^{h_j} Y W_V^{g(h_j)} W_O^{h_j}, rescaled to unit norm.
    """
    group = attention.shape[2] // value.shape[1]

    def path(args):
        def step(y, lha):
            layer, head, on = lha
            z = jnp.einsum("bij,bjd->bid", attention[layer, :, head], y, precision=HIGHEST)
            z = jnp.einsum("bnd,de->bne", z, value[layer, head // group], precision=HIGHEST)
            z = jnp.einsum("bne,ef->bnf", z, out[layer, head], precision=HIGHEST)
            return jnp.where(on, _unit(z), y), None

        y, _ = lax.scan(step, _unit(x0), args)
        return residual_ratio(y)

    return lax.map(path, (layers, heads, active), batch_size=8)


def paths_run(config, spec, run: RunDir) -> list[dict]:
    model, tokenizer = load(config)
    p, c = config.paths, model.config
    lengths = tuple(int(k) for k in p.lengths)
    sampled = {
        k: sample_paths(
            config.seed,
            num_layers=c.num_layers,
            num_heads=c.block.num_heads,
            length=k,
            num_paths=p.num_paths,
            max_length=max(lengths),
        )
        for k in lengths
    }
    value, out = value_output_maps(model)
    groups = length_groups(
        tokenizer,
        corpus_sentences(config),
        tuple(config.corpus.lengths),
        config.corpus.sentences_per_length,
    )
    sums = {k: np.zeros(p.num_paths) for k in lengths}
    input_sum, count = 0.0, 0
    for group in groups:
        ids = jnp.asarray(group.ids[: p.num_sentences])
        run.log(f"      paths: {len(ids)} sentences of {ids.shape[1]} tokens")
        hidden, attention = forward(model, ids)
        for k in lengths:
            residuals = path_residuals(
                attention, hidden[0], value, out, *map(jnp.asarray, sampled[k])
            )
            sums[k] += np.asarray(jnp.sum(residuals, axis=1), np.float64)
        input_sum += float(jnp.sum(residual_ratio(hidden[0])))
        count += len(ids)
    rows = [
        {"metric": "input_residual", "value": input_sum / count},
        {"metric": "path_sentences", "value": count},
    ]
    return rows + [
        {"metric": "path_residual", "length": k, "values": sums[k] / count} for k in lengths
    ]
