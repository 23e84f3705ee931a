"""The long-context study's runs: specs and `run_one`.

Four parts (`experiments.lab.causal_lm` for the segments):

* `statistics`, one run per segment: one forward at the longest length
  (`return_intermediates="statistics"`, memory linear in T) with the mass on
  token 0, entropies and mean distance per layer, head and query row, read
  for every length of `statistics.lengths` (a causal model's first T rows are
  a T-token input's), on the first `statistics.num_segments` segments
  (descriptive: no verdict reads them); residual ratios of the hidden
  states; on segment 0, a separate forward at the shortest length (the
  prefix check).
* `stream`, one run per cache size C, every segment in one batch: the
  next-token loss at positions C-1..C+K-1 (K = `stream.positions`) through
  StreamingLLM's rolling cache with n sinks and C - n window slots (n = 0:
  window attention), fed one token at a time with positions assigned within
  the cache (`streaming.cache_nll`); at the smallest C also full attention
  and Xiao et al.'s first-token test (the first 4 tokens replaced by
  newlines, 4 sinks).
* `recompute`, one run per cache size of `stream.recompute`: the sliding
  window with re-computation at the same positions (`streaming.recompute_nll`).
* `edits`, one run per segment: the interventions of
  `experiments.long_context.interventions`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax.analysis import residual_ratio
from experiments.lab import causal_lm as model_lib
from experiments.lab.workdir import RunDir
from experiments.long_context import interventions, streaming

PARTS = ("statistics", "stream", "recompute", "edits")
STATISTICS = ("sink_mass", "entropy", "normalized_entropy", "mean_distance")
N_NEWLINE = 4  # Xiao et al.'s first-token test: the first four tokens replaced by newlines


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: a part on one segment (statistics, edits) or on every segment at one cache size (stream,
    recompute)."""

    part: str
    segment: int = -1
    cache: int = 0

    @property
    def run_id(self) -> str:
        if self.part in ("statistics", "edits"):
            return f"{self.part}_seg{self.segment}"
        return f"{self.part}_c{self.cache}"


def _ints(name: str, values, minimum: int, *, increasing: bool = False) -> None:
    values = tuple(values)
    if not values or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in values
    ):
        raise ValueError(f"{name} must be a non-empty sequence of ints >= {minimum}, got {values}")
    if increasing and list(values) != sorted(set(values)):
        raise ValueError(f"{name} must be distinct and increasing, got {values}")


def check(config) -> None:
    """Every config value, before anything compiles (`ValueError` naming the field)."""
    model_lib.check_model(config)
    _ints("text.num_segments", (config.text.num_segments,), 2)  # an interval needs two segments
    _ints("text.segment_stride", (config.text.segment_stride,), 1)
    _ints("seed", (config.seed,), 0)
    _ints("statistics.lengths", config.statistics.lengths, 2, increasing=True)
    _ints("statistics.num_segments", (config.statistics.num_segments,), 2)
    if config.statistics.num_segments > config.text.num_segments:
        raise ValueError(
            f"statistics.num_segments ({config.statistics.num_segments}) must be <= "
            f"text.num_segments ({config.text.num_segments})"
        )
    s = config.stream
    _ints("stream.caches", s.caches, 2, increasing=True)
    _ints("stream.sinks", s.sinks, 1, increasing=True)
    _ints("stream.positions", (s.positions,), 1)
    if max(s.sinks) >= min(s.caches):
        raise ValueError(
            f"stream.sinks ({tuple(s.sinks)}) must be < the smallest cache ({min(s.caches)})"
        )
    if tuple(s.recompute) and not set(s.recompute) <= set(s.caches):
        raise ValueError(
            f"stream.recompute ({tuple(s.recompute)}) must be among stream.caches ({tuple(s.caches)})"
        )
    _ints("edits.length", (config.edits.length,), 4)
    _ints("edits.rate_length", (config.edits.rate_length,), 2)
    if config.edits.rate_length > config.edits.length:
        raise ValueError(
            f"edits.rate_length ({config.edits.rate_length}) must be <= edits.length "
            f"({config.edits.length})"
        )


def specs(config) -> list[RunSpec]:
    """Every run (see the module docstring), after checking the config."""
    check(config)
    segments = range(config.text.num_segments)
    s = config.stream
    return (
        [RunSpec("statistics", g) for g in range(config.statistics.num_segments)]
        + [RunSpec("stream", cache=c) for c in s.caches]
        + [RunSpec("recompute", cache=c) for c in s.recompute]
        + [RunSpec("edits", g) for g in segments]
    )


# --------------------------------------------------------------------------
# statistics


@nnx.jit
def _statistics_forward(model, tokens):
    """The intermediates only (hidden states, per-layer statistics): the logits are not an output of the
    compiled program, so the head is not run."""
    return model(tokens, return_intermediates="statistics", sink_positions=(0,))[1]


def _row_means(stats, length: int) -> dict:
    """Per layer and head `[L][H]`: each statistic's mean over query rows 1..length-1 (row 0 sees only itself)."""
    return {
        m: np.asarray(getattr(stats, m)[:, 0, :, 1:length].astype(jnp.float32).mean(-1)).tolist()
        for m in STATISTICS
    }


def statistics_run(config, spec: RunSpec) -> list[dict]:
    """Statistics of every length from one forward at the longest; residual ratios; on segment 0, the prefix
    check (see the module docstring)."""
    model, _ = model_lib.load(config)
    lengths = tuple(config.statistics.lengths)
    tokens = model_lib.segments(config, lengths[-1])[spec.segment : spec.segment + 1]
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


# --------------------------------------------------------------------------
# stream, recompute


def stream_tokens(config, cache: int) -> jax.Array:
    """`[S, cache + positions + 1]`: every segment, long enough for `positions` evicting steps."""
    return model_lib.segments(config, cache + config.stream.positions + 1)


def stream_run(config, spec: RunSpec) -> list[dict]:
    """Per variant and segment, the nll at positions cache-1..cache+K-1: window (n = 0) and n sinks + window
    through the rolling cache; at the smallest cache also full attention, and the paper's first-token test,
    `N_NEWLINE` newlines in place of the first tokens with as many sinks."""
    model, _ = model_lib.load(config)
    tokens = stream_tokens(config, spec.cache)
    n_sinks = (0, *config.stream.sinks)
    variants = dict(
        zip(
            ["window", *(f"sink{n}" for n in config.stream.sinks)],
            streaming.cache_nll(model, tokens, n_sinks, spec.cache),
        )
    )
    if spec.cache == min(config.stream.caches):
        variants["full"] = streaming.full_nll(model, tokens, spec.cache - 1)
        newline = model_lib.token_id_or_none(config, "\n")
        if newline is not None:
            lines = tokens.at[:, :N_NEWLINE].set(newline)
            variants[f"newline{N_NEWLINE}"] = streaming.cache_nll(
                model, lines, (N_NEWLINE,), spec.cache
            )[0]
    return [
        {"metric": "nll", "variant": v, "index": g, "values": np.asarray(row, np.float64).tolist()}
        for v, nll in variants.items()
        for g, row in enumerate(np.asarray(nll))
    ]


def recompute_run(config, spec: RunSpec) -> list[dict]:
    """Per segment, the nll at the same positions with the window re-computed for each."""
    model, _ = model_lib.load(config)
    nll = streaming.recompute_nll(
        model, stream_tokens(config, spec.cache), spec.cache, prefix=model_lib.prefix(config)
    )
    return [
        {
            "metric": "nll",
            "variant": "recompute",
            "index": g,
            "values": np.asarray(row, np.float64).tolist(),
        }
        for g, row in enumerate(np.asarray(nll))
    ]


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    """Measure one run (see the module docstring); progress on `run.log`."""
    run.log(f"      {spec.run_id}")
    if spec.part == "edits":
        return interventions.run(config, spec.segment)
    return {"statistics": statistics_run, "stream": stream_run, "recompute": recompute_run}[
        spec.part
    ](config, spec)
