"""Benchmark section 'train_step': one AdamW step of `attnjax.nn.Transformer` against the same model in flax.

Config: `configs/benchmark.py`, `train_step`. The reference is what a flax
user would write for the same network: `flax.nnx.MultiHeadAttention`,
`nnx.LayerNorm` and a two-layer GELU MLP per block, pre-LN, MLP width 4 D,
learned positions, a causal mask from `nnx.make_causal_mask`, the blocks
called in a Python loop, a final LayerNorm and a linear head
(`FlaxTransformer` below). attnjax's model is `TransformerConfig.create(num_layers,
features, num_heads, vocab_size, max_len=T, causal=True)` with its defaults
(the 'skip_mlp' preset). The two must have the same number of parameters
(checked before any timing).

Both run through the same step, jitted once per model, parameters and
optimiser state donated: mean next-token cross-entropy, `jax.value_and_grad`,
then `optax.adamw`. Rows, at each of `shapes` (L, D, H, B, T): the seconds
per step of each, and attnjax's time over flax's (median of `repeats`
interleaved pairs after warm-up), target <= `target`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from attnjax import nn
from experiments.benchmark.util import interleaved_median_times, ratio_row

SECTION = "train_step"
ATTNJAX = "attnjax.nn.Transformer"
FLAX = "flax.nnx (MultiHeadAttention, LayerNorm, MLP)"


class FlaxBlock(nnx.Module):
    """Pre-LN block from flax's own layers: x + MHA(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, features: int, num_heads: int, *, rngs: nnx.Rngs):
        self.attention_norm = nnx.LayerNorm(features, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(
            num_heads=num_heads,
            in_features=features,
            qkv_features=features,
            decode=False,
            rngs=rngs,
        )
        self.mlp_norm = nnx.LayerNorm(features, rngs=rngs)
        self.fc1 = nnx.Linear(features, 4 * features, rngs=rngs)
        self.fc2 = nnx.Linear(4 * features, features, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attention(self.attention_norm(x), mask=mask)
        return x + self.fc2(jax.nn.gelu(self.fc1(self.mlp_norm(x))))


class FlaxTransformer(nnx.Module):
    """Token embedding + learned positions -> L `FlaxBlock`s (a Python loop) -> LayerNorm -> linear head."""

    def __init__(
        self,
        num_layers: int,
        features: int,
        num_heads: int,
        vocab_size: int,
        max_len: int,
        *,
        rngs: nnx.Rngs,
    ):
        self.embed = nnx.Embed(vocab_size, features, rngs=rngs)
        self.positions = nnx.Param(
            nnx.initializers.normal(stddev=0.02)(rngs.params(), (max_len, features))
        )
        self.blocks = nnx.List(
            [FlaxBlock(features, num_heads, rngs=rngs) for _ in range(num_layers)]
        )
        self.final_norm = nnx.LayerNorm(features, rngs=rngs)
        self.head = nnx.Linear(features, vocab_size, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens) + self.positions[: tokens.shape[1]][None]
        mask = nnx.make_causal_mask(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.final_norm(x))


def attnjax_model(num_layers, features, num_heads, vocab_size, max_len, *, rngs):
    config = nn.TransformerConfig.create(
        num_layers=num_layers,
        features=features,
        num_heads=num_heads,
        vocab_size=vocab_size,
        max_len=max_len,
        causal=True,
    )
    return nn.Transformer(config, rngs=rngs)


def num_params(params) -> int:
    return sum(x.size for x in jax.tree.leaves(params))


def make_step(model: nnx.Module, optimizer: optax.GradientTransformation):
    """(jitted step(params, opt_state, tokens, targets) -> (params, opt_state, loss), params, opt_state)."""
    graphdef, params = nnx.split(model, nnx.Param)

    def loss(params, tokens, targets):
        logits = nnx.merge(graphdef, params)(tokens)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, targets))

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, tokens, targets):
        value, grads = jax.value_and_grad(loss)(params, tokens, targets)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step, params, optimizer.init(params)


def _stepper(step, params, opt_state, tokens, targets):
    """A zero-argument callable doing one step on its own state (donated and replaced every call)."""
    holder = {"params": params, "opt_state": opt_state}

    def call():
        holder["params"], holder["opt_state"], value = step(
            holder["params"], holder["opt_state"], tokens, targets
        )
        return value

    return call


def shape_rows(
    cfg, num_layers: int, features: int, num_heads: int, batch: int, length: int
) -> list[dict]:
    """Rows of one shape: each model's seconds per step and tokens/s, and the ratio row."""
    shape = f"L={num_layers} D={features} H={num_heads} B={batch} T={length} V={cfg.vocab_size} f32"
    tokens = jax.random.randint(jax.random.key(1), (batch, length + 1), 0, cfg.vocab_size)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    optimizer = optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay)
    calls, sizes = {}, {}
    for name, build in ((FLAX, FlaxTransformer), (ATTNJAX, attnjax_model)):
        model = build(
            num_layers, features, num_heads, cfg.vocab_size, length, rngs=nnx.Rngs(cfg.seed)
        )
        step, params, opt_state = make_step(model, optimizer)
        sizes[name] = num_params(params)
        calls[name] = _stepper(step, params, opt_state, inputs, targets)
    if sizes[ATTNJAX] != sizes[FLAX]:
        raise ValueError(
            f"the two models differ at {shape}: {sizes[ATTNJAX]} parameters in attnjax, "
            f"{sizes[FLAX]} in flax"
        )
    times = interleaved_median_times(calls, repeats=cfg.repeats, warmup=2)
    rows = [
        {
            "section": SECTION,
            "name": f"AdamW step, {name}",
            "shape": shape,
            "seconds": seconds,
            "tokens_per_s": batch * length / seconds,
            "note": f"{sizes[name]} parameters",
        }
        for name, seconds in times.items()
    ]
    rows.append(
        ratio_row(
            SECTION,
            "attnjax / flax, AdamW step",
            shape,
            times[ATTNJAX],
            times[FLAX],
            rows[0]["name"],
            f"<= {cfg.target:g}",
            note="median of interleaved pairs, same process",
        )
    )
    return rows


def run(cfg) -> list[dict]:
    """All rows of the section (see the module docstring)."""
    return [row for shape in cfg.shapes for row in shape_rows(cfg, *shape)]
