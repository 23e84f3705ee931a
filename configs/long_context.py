"""Attention sinks at long context on a causal LM: statistics, StreamingLLM's caches, the sink's interventions.

    python -m experiments.long_context --config configs/long_context.py --workdir runs/lc
    python -m experiments.long_context --config configs/long_context.py:gemma3 --workdir runs/lc_gemma3
    python -m experiments.long_context --config configs/long_context.py:smoke --workdir runs/lc_smoke

Variants: '' (SmolLM2-135M-Instruct Q4_1), 'gemma3' (Gemma 3 270M Q4_K_M), and their smoke runs
'smoke' and 'gemma3_smoke' (under a minute, for the tests). Four parts (`experiments.long_context.study`):
statistics (one forward per segment at the longest length, memory linear in T), stream (StreamingLLM's
rolling cache of n sinks + C - n window slots against window attention at equal size C, fed one token
at a time, every segment in one batch), recompute (the sliding window re-computed at each position)
and edits (the sink's interventions at `edits.length` tokens).
"""

from ml_collections import config_dict

from experiments.lab import causal_lm

VARIANTS = ("", "smoke", "gemma3", "gemma3_smoke")


def get_config(arg: str | None = None):
    """The study's config; `arg` one of `VARIANTS` ('' or None: the default)."""
    arg = arg or ""
    if arg not in VARIANTS:
        raise ValueError(f"unknown config variant {arg!r}; valid: {VARIANTS}")
    name = "gemma3" if arg.startswith("gemma3") else "smollm2"
    config = causal_lm.base_config(name, num_segments=10, segment_stride=8192)
    # Statistics of T-token inputs for T in `lengths` (increasing; one forward at the last) on the first
    # `num_segments` segments (descriptive; a forward at 8192 is ~90 s for SmolLM2, ~35 s for Gemma 3).
    config.statistics = config_dict.ConfigDict(
        dict(lengths=(256, 1024, 4096, 8192), num_segments=2)
    )
    # StreamingLLM at cache sizes `caches`: window (0 + C) and n + (C - n) for n in `sinks`, the loss at
    # `positions` positions past the cache, full attention too; re-computation at the caches `recompute`.
    config.stream = config_dict.ConfigDict(
        dict(caches=(64, 256), sinks=(1, 2, 4), positions=128, recompute=(64,))
    )
    # The sink's interventions on `length`-token segments (`experiments.long_context.interventions`);
    # Gu et al.'s sink rate at `rate_length` tokens (the paper: 64).
    config.edits = config_dict.ConfigDict(dict(length=256, rate_length=64))
    if arg == "":  # SmolLM2's forward at 8192 takes ~90 s, Gemma 3's ~30 s
        config.statistics.lengths = (256, 1024, 4096)
    if arg == "gemma3":  # every forward and decoding step also runs the 262,144-token head
        config.statistics.num_segments = 2
        config.stream.caches = (64,)
        config.edits.length = 128
    if arg.endswith("smoke"):
        config.text.update(num_segments=2, segment_stride=256)
        # One length (the prefix check then reads a forward of the same shape) and Gu's rate at the
        # edits' length: fewer programs to compile, the smoke run's main cost.
        config.statistics.update(lengths=(64,), num_segments=2)
        config.stream.update(caches=(32,), sinks=(1, 4), positions=8, recompute=(32,))
        config.edits.update(length=32, rate_length=32)
    config.lock()
    return config
