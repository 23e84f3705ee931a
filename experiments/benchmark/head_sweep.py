"""Benchmark rows of section 'pretrained': the all-head ablation sweep on the causal LM, as one compiled
program (`attnjax.nn.patching.ablate_heads`) against a loop of single edits.

For each mode ('zero', 'mean'): the sweep over every (layer, head) of the
model on one `sweep_length`-token sequence, wall time including its compile
(what a researcher waits for); and the loop a user writes without it, one
`edits.ablate_head(l, h, mode)` per head through `nn.jit_forward`, whose
layer and head are static, so every head compiles its own program. The loop
is timed on `sweep_loop_heads` heads spread over the layers and extrapolated
to all of them (seconds per head x L H; noted in the row); the same heads'
metrics are compared with the sweep's cells (`max_abs_diff`). Target: loop /
sweep >= 5. The metric: the logit of the sequence's last token at the
position before it.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import nn
from attnjax.nn import edits, patching
from experiments.benchmark.util import ratio_row

SECTION = "pretrained"
SWEEP_TARGET = ">= 5"


def _metric(ids):
    """Logit of the last token at the position before it, mean over the batch."""
    answer = ids[:, -1]

    def metric(logits):
        return jnp.mean(jnp.take_along_axis(logits[:, -2], answer[:, None], axis=-1))

    return metric


def _looped_heads(layers: int, heads: int, count: int) -> list[tuple[int, int]]:
    """`count` (layer, head) cells spread over the layers and heads."""
    cells = np.linspace(0, layers * heads - 1, count).round().astype(int)
    return [divmod(int(i), heads) for i in cells]


def head_sweep_rows(model, model_label: str, cfg) -> list[dict]:
    """The sweep and loop rows, and their ratio, for both ablation modes."""
    t = cfg.sweep_length
    ids = jax.random.randint(jax.random.key(1), (1, t), 0, model.config.vocab_size, jnp.int32)
    metric = _metric(ids)
    layers, heads = model.config.num_layers, model.config.block.num_heads
    shape = f"B=1 T={t} f32, {layers} x {heads} heads"
    rows = []
    for mode in patching.ABLATIONS:
        start = time.perf_counter()
        grid = patching.ablate_heads(model, ids, metric, mode=mode, chunk_size=cfg.sweep_chunk)
        sweep_seconds = time.perf_counter() - start
        cells = _looped_heads(layers, heads, cfg.sweep_loop_heads)
        looped = []
        start = time.perf_counter()
        for layer, head in cells:
            forward = nn.jit_forward(model, edits=(edits.ablate_head(layer, head, mode),))
            looped.append(float(metric(forward(ids))))
        per_head = (time.perf_counter() - start) / len(cells)
        loop_seconds = per_head * layers * heads
        name = f"{model_label} all-head ablation ({mode})"
        diff = max(abs(looped[i] - float(grid[c])) for i, c in enumerate(cells))
        rows += [
            {
                "section": SECTION,
                "name": f"{name}, one program",
                "shape": shape,
                "seconds": sweep_seconds,
                "note": f"patching.ablate_heads, chunks of {cfg.sweep_chunk}, compile included",
            },
            {
                "section": SECTION,
                "name": f"{name}, loop of single edits",
                "shape": shape,
                "seconds": loop_seconds,
                "note": f"jit_forward per edit, {per_head:.2f} s per head over {len(cells)} heads, "
                f"x {layers * heads}",
            },
            ratio_row(
                SECTION,
                f"{name}, loop / one program",
                shape,
                loop_seconds,
                sweep_seconds,
                f"{name}, one program",
                target=SWEEP_TARGET,
                max_abs_diff=diff,
                note="same numbers: max |loop - sweep| over the looped heads",
            ),
        ]
    return rows
