"""An attention variant with parameters of its own, in an attnjax Transformer, no library code changed:
each head learns its temperature and a sigmoid gate on its output.

A subclass of `nn.MultiHeadAttention` adds the parameters and overrides one public stage, `attend`;
the library still projects, positions (RoPE), masks, groups query heads over key/value heads, returns
the weights and decodes from its cache. `nn.TransformerConfig.create(attention_module=...)` builds
every layer with it, each layer with its own parameters.
"""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from attnjax import nn, tasks


class GatedTemperatureAttention(nn.MultiHeadAttention):
    """Per head h, a learned temperature tau_h = exp(log_temperature_h) and output gate g_h:

        p^h_ts = softmax_s(q^h_t . k_s / (sqrt(Dh) tau tau_h)),   o^h_t = sigmoid(g_h) sum_s p^h_ts v_s,

    tau the layer's `config.temperature`. Parameters `log_temperature`, `gate` `[H]`, initialised to 0
    (tau_h = 1, gates 1/2)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        shape = (self.num_heads,)
        self.log_temperature = nnx.Param(jnp.zeros(shape, self.param_dtype))
        self.gate = nnx.Param(jnp.zeros(shape, self.param_dtype))

    def attend(self, q, k, v, **kwargs):
        """q `[..., T, H, Dh]`, k, v `[..., S, K, Dh]` -> (out `[..., T, H, Dh]`, weights or None)."""
        per_head = (1,) * (q.ndim - 2) + (self.num_heads, 1)  # broadcasts over [..., T, H, Dh]
        inverse_temperature = jnp.exp(-self.log_temperature[...]).reshape(per_head)
        out, weights = super().attend(q * inverse_temperature.astype(q.dtype), k, v, **kwargs)
        gate = jax.nn.sigmoid(self.gate[...]).reshape(per_head)
        return out * gate.astype(out.dtype), weights


def build_model(rngs, **options):
    """A causal `nn.Transformer` (`TransformerConfig.create` keywords) whose layers attend with
    `GatedTemperatureAttention`."""
    config = nn.TransformerConfig.create(
        causal=True, attention_module=GatedTemperatureAttention, **options
    )
    return nn.Transformer(config, rngs=rngs)


def recall_loss(model, batch):
    """Mean cross-entropy (nats) of the answers: the scored positions of a `tasks` batch."""
    logits = model(batch.inputs).astype(jnp.float32)  # [B, T, V]
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch.targets)
    return jnp.sum(loss * batch.weights) / jnp.sum(batch.weights)


def train(steps: int = 100, seed: int = 0):
    """`steps` AdamW steps of a 2-layer model on associative recall (`attnjax.tasks`); returns the model
    and the loss of every step."""
    task = tasks.AssociativeRecall(num_pairs=4, num_queries=4, vocab_size=16)
    model = build_model(
        nnx.Rngs(seed),
        num_layers=2,
        features=32,
        num_heads=4,
        vocab_size=task.vocab_size,
        max_len=task.seq_len,
    )
    optimizer = nnx.Optimizer(model, optax.adamw(3e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, batch):
        loss, grads = nnx.value_and_grad(recall_loss)(model, batch)
        optimizer.update(model, grads)
        return loss

    keys = jax.random.split(jax.random.key(seed), steps)
    losses = [float(step(model, optimizer, task.batch(key, 32))) for key in keys]
    return model, losses
