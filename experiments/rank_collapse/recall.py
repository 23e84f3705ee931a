"""The mode-of-context baseline of associative recall, and what a model scores beyond it.

In `attnjax.tasks.AssociativeRecall` an example is k_1 v_1 ... k_N v_N
followed by queried keys, each scored on the value paired with it. A network
that cannot match a query to its key can still count: predicting the most
frequent value of the context (its mode; ties to the smallest id) is the best
strategy that ignores the query, and scores E[max_v count(v)] / N, about 0.26
at N = 8 pairs over 16 values, against 1/16 for uniform guessing. The queries
whose answer is not a context mode (its count below the largest) are those
that only retrieval answers: there the mode scores 0 and uniform guessing
1 / (number of value tokens).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# The per-seed counts of `scores`, summed over a run's evaluation batches.
COUNTS = ("queries", "correct", "mode_correct", "not_mode_queries", "not_mode_correct")


def scores(predictions, inputs, targets, weights, num_pairs: int, vocab_size: int) -> dict:
    """Counts over the scored positions of one batch.

    Args:
      predictions: `[..., B, T]` int, the model's argmax at every position.
      inputs, targets: `[..., B, T]` int; weights `[..., B, T]` (scored where > 0): a recall batch.
      num_pairs: N; the context's values sit at positions 1, 3, ..., 2N - 1.
      vocab_size: the number of token ids.

    Returns:
      `{name: [...]}` for each of `COUNTS`: scored queries, those the model gets
      right, those the mode gets right, the queries whose answer is not a
      context mode, and those of them the model gets right.
    """
    values = inputs[..., 1 : 2 * num_pairs : 2]  # [..., B, N]
    counts = jnp.sum(jax.nn.one_hot(values, vocab_size, dtype=jnp.int32), axis=-2)  # [..., B, V]
    mode = jnp.argmax(counts, axis=-1)  # [..., B], the smallest id among ties
    answer_count = jnp.take_along_axis(counts, targets, axis=-1)  # [..., B, T]
    scored = weights > 0
    not_mode = scored & (answer_count < jnp.max(counts, axis=-1, keepdims=True))
    correct = scored & (predictions == targets)

    def total(mask):
        return jnp.sum(mask, axis=(-2, -1))

    return {
        "queries": total(scored),
        "correct": total(correct),
        "mode_correct": total(scored & (targets == mode[..., None])),
        "not_mode_queries": total(not_mode),
        "not_mode_correct": total(correct & not_mode),
    }
