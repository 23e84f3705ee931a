"""The long-context study's runs: specs (one per part and text segment) and `run_one`.

Per-position loss: `nll[p] = -log p(x_{p+1} | x_{<=p})` for query positions
p = 0..T-2 of a T-token segment (`token_nll`); perplexity = exp(mean nll).

The attention variants of the `stream` part are masks over one forward of
the whole segment, with each token at its absolute position (`band_mask`):
window-only (query p sees keys p-W < j <= p), sinks + window (also keys
j < n_sink). With RoPE a logit depends only on the query-key offset, so
the window keys see the same offsets as in StreamingLLM's cache; the sink
keys differ: here at offset p - j (<= T < the 8k context the model was
trained on), in the rolling cache at <= W + n_sink - 1 (positions assigned
within the cache). We chose absolute positions so that every variant is one
forward and the comparison with full attention is paired position by
position; the sliding window with re-computation is exact (the W previous
tokens re-encoded at positions 0..W-1, for each sampled position).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax.analysis import residual_ratio
from attnjax.nn import edits as edits_lib
from experiments.lab.workdir import RunDir
from experiments.long_context.text import long_text, segment

PARTS = ("statistics", "stream", "ablation")
STATISTICS = ("sink_mass", "entropy", "normalized_entropy", "mean_distance")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One part of the study on one text segment."""

    part: str
    segment: int

    @property
    def run_id(self) -> str:
        return f"{self.part}_seg{self.segment}"


def _ints(name: str, values, minimum: int, *, increasing: bool = False) -> None:
    values = tuple(values)
    if not values or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in values
    ):
        raise ValueError(f"{name} must be a non-empty sequence of ints >= {minimum}, got {values}")
    if increasing and list(values) != sorted(set(values)):
        raise ValueError(f"{name} must be distinct and increasing, got {values}")


def specs(config) -> list[RunSpec]:
    """Every run (statistics, stream, ablation on each segment), after checking the config."""
    if config.model.path and not os.path.exists(config.model.path):
        raise ValueError(f"model.path {config.model.path!r} does not exist")
    if not config.model.path and config.model.name != "smollm2":
        raise ValueError(
            f"model.name must be 'smollm2' (or give model.path), got {config.model.name!r}"
        )
    _ints("text.num_segments", (config.text.num_segments,), 2)  # an interval needs two segments
    _ints("text.segment_stride", (config.text.segment_stride,), 1)
    _ints("seed", (config.seed,), 0)
    _ints("statistics.lengths", config.statistics.lengths, 2, increasing=True)
    s = config.stream
    _ints("stream.windows", s.windows, 1, increasing=True)
    _ints("stream.sinks", s.sinks, 1, increasing=True)
    _ints("stream.length", (s.length,), 2)
    if max(s.windows) >= s.length - 1:
        raise ValueError(
            f"stream.windows ({tuple(s.windows)}) must be < stream.length - 1 ({s.length - 1})"
        )
    _ints("stream.recompute_positions", (s.recompute_positions,), 1)
    _ints("stream.bin", (s.bin,), 1)
    _ints("ablation.length", (config.ablation.length,), 3)
    if tuple(config.ablation.layers):
        _ints("ablation.layers", config.ablation.layers, 0, increasing=True)
    return [RunSpec(part, i) for part in PARTS for i in range(config.text.num_segments)]


# --------------------------------------------------------------------------
# Model, text and forwards


@functools.lru_cache(maxsize=2)
def _load(name: str, path: str):
    from attnjax import pretrained

    if path and os.path.isdir(path):
        return pretrained.from_pretrained(path)
    return pretrained.load_llama(path or None)


@functools.lru_cache(maxsize=4)
def _tokens(name: str, path: str, modules: tuple) -> np.ndarray:
    _, tokenizer = _load(name, path)
    return np.asarray(tokenizer.encode(long_text(modules)), np.int32)


def load(config):
    """`(model, tokens)`: the model (loaded once per process) and the whole text's token ids `[N]`."""
    model, _ = _load(config.model.name, config.model.path)
    return model, _tokens(config.model.name, config.model.path, tuple(config.text.modules))


def tokens_of(config, index: int, length: int) -> jax.Array:
    """Tokens `[1, length]` of text segment `index`."""
    _, tokens = load(config)
    return jnp.asarray(
        segment(tokens, index, length, stride=config.text.segment_stride, seed=config.seed)[None]
    )


@nnx.jit
def _statistics_forward(model, tokens):
    """The intermediates only (hidden states, per-layer statistics): the logits are not an output of the
    compiled program, so its head (49152 logits per token, a fifth of the model's matmul work) is not run."""
    return model(tokens, return_intermediates="statistics", sink_positions=(0,))[1]


@nnx.jit
def _masked_forward(model, tokens, mask):
    return model(tokens, mask=mask)


def token_nll(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """`-log softmax(logits)[p, x_{p+1}]` `[B, T-1]` from logits `[B, T, V]` and tokens `[B, T]` (float32)."""
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]


def band_mask(length: int, window=None, n_sink: int = 0) -> np.ndarray:
    """Boolean `[T, T]`: query i sees key j iff j <= i and (i - j < window or j < n_sink); window None: causal."""
    i, j = np.arange(length)[:, None], np.arange(length)[None, :]
    seen = j <= i
    return seen if window is None else seen & ((i - j < window) | (j < n_sink))


def stream_variants(config) -> list[tuple[str, object, int]]:
    """`(name, window, n_sink)` of every masked variant: full, then per window: window-only and each sink count."""
    out = [("full", None, 0)]
    for w in config.stream.windows:
        out += [(f"window_{w}", w, 0)] + [
            (f"sink{n}_window_{w}", w, n) for n in config.stream.sinks
        ]
    return out


def recompute_positions(config) -> np.ndarray:
    """The query positions p of the re-computation baseline: evenly spaced in [max(windows), T - 2]."""
    s = config.stream
    return np.unique(
        np.linspace(max(s.windows), s.length - 2, s.recompute_positions).round().astype(int)
    )


def recompute_nll(model, tokens: jax.Array, window: int, positions: np.ndarray) -> np.ndarray:
    """Sliding window with re-computation: for each p, the tokens p-W+1..p re-encoded at positions 0..W-1,
    `-log p(x_{p+1})` from the last logit; `[len(positions)]` for tokens `[1, T]`."""
    x = tokens[0]
    contexts = jnp.stack([x[p - window + 1 : p + 1] for p in positions])
    targets = jnp.stack([x[p + 1] for p in positions])
    logits = _masked_forward(model, contexts, None)
    logp = jax.nn.log_softmax(logits[:, -1].astype(jnp.float32), axis=-1)
    return np.asarray(-jnp.take_along_axis(logp, targets[:, None], axis=-1)[:, 0])


# --------------------------------------------------------------------------
# The three parts


def _row_means(stats, length: int) -> dict:
    """Per layer and head `[L][H]`: each statistic's mean over query rows 1..length-1 (row 0 sees only itself)."""
    return {
        m: np.asarray(getattr(stats, m)[:, 0, :, 1:length].astype(jnp.float32).mean(-1)).tolist()
        for m in STATISTICS
    }


def statistics_run(config, spec: RunSpec) -> list[dict]:
    """Statistics of every length from one forward at the longest (causal: rows < T are a T-token input's);
    residual ratios of the hidden states with and without token 0; on segment 0, the prefix check."""
    model, _ = load(config)
    lengths = tuple(config.statistics.lengths)
    tokens = tokens_of(config, spec.segment, lengths[-1])
    inter = _statistics_forward(model, tokens)
    stats, hidden = inter["statistics"], inter["hidden"][:, 0].astype(jnp.float32)
    rows = [
        {"metric": m, "length": t, "values": v}
        for t in lengths
        for m, v in _row_means(stats, t).items()
    ]
    rows += [
        {
            "metric": "residual",
            "tokens": "all",
            "values": np.asarray(residual_ratio(hidden)).tolist(),
        },
        {
            "metric": "residual",
            "tokens": "without_first",
            "values": np.asarray(residual_ratio(hidden[:, 1:])).tolist(),
        },
    ]
    if spec.segment == 0:
        short = _statistics_forward(model, tokens[:, : lengths[0]])
        gap = max(
            float(
                jnp.max(
                    jnp.abs(getattr(short["statistics"], m) - getattr(stats, m)[..., : lengths[0]])
                )
            )
            for m in ("sink_mass", "normalized_entropy")
        )
        rows.append({"metric": "prefix_gap", "length": lengths[0], "value": gap})
    return rows


def stream_run(config, spec: RunSpec) -> list[dict]:
    """Per-position nll of each masked variant, and at the sampled positions of the re-computation baseline."""
    model, _ = load(config)
    s = config.stream
    tokens = tokens_of(config, spec.segment, s.length)
    positions = recompute_positions(config)
    rows = [{"metric": "positions", "values": positions.tolist()}]
    for name, window, n_sink in stream_variants(config):
        mask = jnp.asarray(band_mask(s.length, window, n_sink))[None, None]
        nll = np.asarray(token_nll(_masked_forward(model, tokens, mask), tokens)[0])
        rows.append(
            {
                "metric": "nll",
                "variant": name,
                "window": window,
                "n_sink": n_sink,
                "values": nll.tolist(),
            }
        )
    for w in s.windows:
        rows.append(
            {
                "metric": "nll_recompute",
                "variant": f"recompute_{w}",
                "window": w,
                "n_sink": 0,
                "values": recompute_nll(model, tokens, w, positions).tolist(),
            }
        )
    return rows


@nnx.jit
def _edited_forward(model, tokens, edits):
    # An edit is a pytree without leaves: its layer is part of the compiled program's key, so each
    # layer compiles once and every segment reuses it.
    return model(tokens, edits=edits)


def ablation_nll(model, tokens: jax.Array, layer) -> float:
    """Mean nll over query positions 1..T-2 with attention to token 0 removed (renormalised) in every head of
    `layer` (None: every layer; 'none': no edit)."""
    if layer == "none":
        logits = _masked_forward(model, tokens, None)
    else:
        logits = _edited_forward(model, tokens, (edits_lib.remove_keys(layer, [0]),))
    return float(token_nll(logits, tokens)[0, 1:].mean())


def ablation_run(config, spec: RunSpec) -> list[dict]:
    """Mean nll without an edit, with token 0 removed in each layer alone, and in all layers."""
    model, _ = load(config)
    tokens = tokens_of(config, spec.segment, config.ablation.length)
    rows = [
        {
            "metric": "nll",
            "removed": "none",
            "layer": -1,
            "value": ablation_nll(model, tokens, "none"),
        }
    ]
    for layer in config.ablation.layers or range(model.config.num_layers):
        rows.append(
            {
                "metric": "nll",
                "removed": "layer",
                "layer": layer,
                "value": ablation_nll(model, tokens, layer),
            }
        )
    rows.append(
        {"metric": "nll", "removed": "all", "layer": -1, "value": ablation_nll(model, tokens, None)}
    )
    return rows


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    """Measure one part on one segment (see the module docstring); progress on `run.log`."""
    run.log(f"      {spec.part} on segment {spec.segment}")
    return {"statistics": statistics_run, "stream": stream_run, "ablation": ablation_run}[
        spec.part
    ](config, spec)
