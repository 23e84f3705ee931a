"""Attention spectra of a pretrained causal LM at 2k-8k tokens of real text: sigma_1, sigma_2, |lambda_2|
per layer and head, beside the sink's mass and the rows' entropy.

    python -m experiments.spectra --config configs/spectra.py --workdir runs/spectra
    python -m experiments.spectra --config configs/spectra.py:gemma3 --workdir runs/spectra_gemma3
    python -m experiments.spectra --config configs/spectra.py:smoke --workdir runs/spectra_smoke

Overrides: `--config.layers='(0, 12)'`, `--config.lengths='(1024, 2048)'`, `--config.iterations=60`.
"""

from experiments.lab import causal_lm

VARIANTS = ("", "gemma3", "smoke")


def get_config(arg: str | None = None):
    """The study's config; `arg` one of `VARIANTS` ('' or None: SmolLM2, the default)."""
    arg = arg or ""
    if arg not in VARIANTS:
        raise ValueError(f"unknown config variant {arg!r}; valid: {VARIANTS}")
    name = "gemma3" if arg == "gemma3" else "smollm2"
    config = causal_lm.base_config(name, num_segments=2, segment_stride=8192)
    # Context lengths T (one run per segment and length: the segment's first T tokens).
    config.lengths = (2048, 4096, 8192)
    # The layers analysed (from 0; () for every layer). On a 2-core CPU one SmolLM2 layer takes about
    # 5, 15 and 50 s at T = 2048, 4096, 8192 (20 rounds): every layer at 8k would be 25 minutes per
    # segment. SmolLM2 (30 layers): the first, the last, and every sixth, the sink forming near 12.
    # Gemma 3 (18 layers, five local (window 512) then one global): local 0 and 12, global 5, 11, 17.
    config.layers = (0, 5, 11, 12, 17) if arg == "gemma3" else (0, 6, 12, 18, 24, 29)
    # Rounds of subspace iteration (`nn.attention_spectra`); each value carries its error bound.
    config.iterations = 20
    if arg == "smoke":
        config.lengths = (64, 128)
        config.layers = (0, 29)
        config.iterations = 8
        config.text.segment_stride = 128
    config.lock()
    return config
