"""Rank collapse across depth: which architectures keep token representations apart.

    python -m experiments.rank_collapse --config configs/rank_collapse.py --workdir runs/rc
    python -m experiments.rank_collapse --config configs/rank_collapse.py:smoke --workdir runs/rc_smoke
    python -m experiments.rank_collapse --config configs/rank_collapse.py \\
        --config.train.steps=2000 --config.init_sweep.depths='(1,2,4,8)' --workdir runs/rc_long

Sweeps, each a grid of depth x architecture x attention kind x temperature x
embedding std, every grid point run for `num_seeds` seeds at once:

* `init_sweep`: per-layer metrics of untrained models (the setting of Dong et
  al. 2021), bidirectional; for attention-only networks also Dong et al.'s
  bound from the actual weights, layer by layer, and at `dong_embedding_std`
  the eps-scaling identity of every layer (its input 1 x_bar^T + eps R fed
  through the layer).
* `scale_sweep`: the initialisation scale as a variable: the same
  measurements against the std of the token embedding.
* `mask_sweep`: the causal counterparts of init-sweep runs (Wu et al. 2024,
  causal mask x LayerNorm); for causal attention-only runs also the exact
  uniform causal chain (a_ij = 1/i, j <= i) applied to the same inputs.
* `local_sweep`: causal attention only with local (band) masks of several
  widths W (query t sees keys t - W < s <= t; Wu et al. 2024: local masks
  slow the collapse), against the mask sweep's full causal run.
* `float32_sweep`: runs of the mask sweep again in float32 (Wu et al.'s
  random-init LayerNorm figure, whose precision is not retrieved, read in
  both precisions).
* `noci_sweep`: Noci et al. 2022's setting, bidirectional transformers with
  LayerNorm (pre- and post-LN) and MLPs, with and without residual branches
  scaled by 1/sqrt(L): per-layer metrics and the per-layer gradient norms of
  the attention projections (training loss on the first `measure_batch_size`
  examples of each seed's training data).
* `layernorm`: Wu et al. 2024's self-attention dynamics with LayerNorm on
  constructed weights (`experiments/rank_collapse/layernorm.py`), not a grid.
* `train_sweep`: the same metrics at initialisation, every `train.log_every`
  steps and at the end of training on `task`, with loss, accuracy and
  per-group gradient norms; after training, Dong et al.'s path-length
  experiment on networks with skips, and on held-out recall queries the
  mode-of-context baseline (predict the most frequent value in the context)
  and the accuracy on the queries whose answer is not a context mode.
  `train_sweep.exclude`: (architecture, depth) pairs of the grid not to
  train; `train_sweep.architecture_seeds`: (architecture, seeds) pairs whose
  runs take their own seed count.

The untrained sweeps run in float64 (`measure_float64`, or a sweep's own
`float64`), so residuals are resolved down to ~1e-15; training runs in
`model.dtype`.

Architectures: the presets of `experiments.architectures` (attention only,
attention and MLP, skips, pre-LN and post-LN transformers, with or without
1/sqrt(L) branches, `attention_only_ln`: attention only with a LayerNorm before
every attention layer, as in Dong et al.'s own code, and
`attention_only_postln`, LayerNorm after it, as in Wu et al. 2024).

Embedding std (`embedding_stds`): the std of the token embedding at
initialisation; None is `nnx.Embed`'s default 1/sqrt(D). With std 1 the
tokens have unit-variance entries, the premise of the 1/sqrt(d_k) scaling
argument (Var(q.k / sqrt(d_k)) = 1 for unit-variance q and k); with the
default 1/sqrt(D) the logits have std ~1/D and attention at initialisation is
uniform, so a pure-attention network averages its tokens in one step.
"""

from ml_collections import config_dict


def _sweep(
    depths,
    architectures,
    kinds,
    temperatures,
    causal,
    embedding_stds=(1.0,),
    grad_norms=False,
    num_seeds=None,
    float64=None,
    windows=(None,),
    **extra,
):
    """One sweep's grid; `num_seeds`: its seeds per run (None: the study's `num_seeds`); `float64`: whether an
    untrained sweep computes in float64 (None: the study's `measure_float64`); `windows`: local-mask widths W
    (None: the full mask)."""
    return config_dict.ConfigDict(
        dict(
            depths=depths,
            architectures=architectures,
            attention_kinds=kinds,
            temperatures=temperatures,
            causal=causal,
            embedding_stds=embedding_stds,
            grad_norms=grad_norms,
            num_seeds=num_seeds,
            float64=float64,
            windows=windows,
            **extra,
        )
    )


def get_config(arg: str | None = None):
    """Default study; `arg='smoke'` for the seconds-long variant."""
    config = config_dict.ConfigDict()
    config.seed = 0
    config.num_seeds = 5

    # Multi-query associative recall (Arora et al. 2023): attention as retrieval.
    config.task = config_dict.ConfigDict(
        dict(name="associative_recall", num_pairs=8, num_queries=8, vocab_size=32)
    )

    # dtype: computation dtype of training; 'bfloat16' computes in bf16 with
    # float32 parameters and optimiser state (softmax and loss stay in float32).
    config.model = config_dict.ConfigDict(
        dict(
            features=64,
            num_heads=4,
            mlp_ratio=4,
            positions="learned",
            feature_map="favor_plus",
            num_features=64,
            dtype="float32",
        )
    )
    # The untrained sweeps compute (parameters included) in float64.
    config.measure_float64 = True

    # Bidirectional at initialisation: the setting of Dong et al. (pre-LN and post-LN, with and without
    # 1/sqrt(L) branches: the Noci sweep); skips without LayerNorm show the shared component growing.
    # L = 8 and 16 are left out (attention only is at float64 rounding from L = 4 on at std 1; the skips'
    # shared component is read at L = 4 and 32): their cost pays for the Noci sweep's 10 seeds.
    config.init_sweep = _sweep(
        (4, 8, 16, 32),
        ("attention_only", "skip"),
        ("softmax",),
        (1.0,),
        False,
        exclude=tuple((a, d) for a in ("attention_only", "skip") for d in (8, 16)),
    )
    # Seeds are batched in one program, so 10 cost little more than 2 in an untrained sweep.
    config.scale_sweep = _sweep(
        (8,),
        ("attention_only",),
        ("softmax",),
        (1.0,),
        False,
        embedding_stds=(None, 0.5, 2.0),
        num_seeds=10,
    )
    # Dong et al.'s exponent is read from the attention-only run at this embedding std (init or
    # scale sweep): at std 2 and L = 8, layers 4-6 of the 16 examples put 6-14 pairs per seed in the
    # local window (r_(l-1) below 1e-2, r_l above 1e-13).
    config.dong_embedding_std = 2.0
    # Wu et al.'s causal rate is read with an interval over these seeds; attention_only_postln places
    # LayerNorm after attention, as Wu et al. do.
    config.mask_sweep = _sweep(
        (32,),
        ("attention_only", "attention_only_ln", "attention_only_postln", "skip"),
        ("softmax",),
        (1.0,),
        True,
        num_seeds=10,
    )
    # Wu et al.'s local masks: query t sees keys t - W < s <= t, W below the sequence length (24), each
    # against the mask sweep's full causal run of the same seeds.
    config.local_sweep = _sweep(
        (32,), ("attention_only",), ("softmax",), (1.0,), True, num_seeds=10, windows=(2, 4, 8)
    )
    # Wu et al.'s random-init LayerNorm figure (precision not retrieved): the post-LN run again in float32.
    config.float32_sweep = _sweep(
        (32,), ("attention_only_postln",), ("softmax",), (1.0,), True, num_seeds=10, float64=False
    )
    # Noci et al.'s remedy: each LayerNorm placement with and without 1/sqrt(L) branches (grad_norms:
    # per-layer gradient norms; they double the compile time of a run). In float32: gradient ratios of
    # 1e-3..1 and token cosines need no float64. 10 seeds: the depth trends are read with an interval
    # over seeds (seeds are batched in one program).
    config.noci_sweep = _sweep(
        (4, 8, 16, 32),
        ("skip_mlp", "skip_mlp_scaled", "post_ln", "post_ln_scaled"),
        ("softmax",),
        (1.0,),
        False,
        grad_norms=True,
        float64=False,
        num_seeds=10,
    )
    # Wu et al.'s LayerNorm constructions: `num_tokens` tokens in `dim` dimensions (the full-rank
    # construction is 2 in 2-D), `num_layers` layers, in float64.
    config.layernorm = config_dict.ConfigDict(
        dict(
            constructions=("orthogonal", "full_rank"),
            num_layers=64,
            num_tokens=8,
            dim=8,
            num_seeds=10,
        )
    )
    # Causal for training, since recall is next-token prediction; the library's
    # default embedding init 1/sqrt(D) (the recipe below is tuned for it; the
    # untrained sweeps' std 1-2 is the regime Dong et al.'s exponent needs, not a
    # training recipe). skip_mlp runs 3 seeds: its row is a per-seed sanity
    # condition (each seed above the mode baseline), and a seed costs ~2.2x an
    # attention-only one (its MLPs: 44 s against 20 s on a 2-core CPU);
    # attention only, whose row is a verdict over seeds, runs 10.
    config.train_sweep = _sweep(
        (4,),
        ("attention_only", "skip_mlp"),
        ("softmax",),
        (1.0,),
        True,
        embedding_stds=(None,),
        exclude=(),
        architecture_seeds=(("attention_only", 10), ("skip_mlp", 3)),
    )

    # The cosine schedule decays to 0.1 x learning_rate at `steps`; recall
    # leaves its plateau at a seed-dependent step (400-1000 at this learning
    # rate), so the schedule must keep the rate up until then. At batch 32
    # skip_mlp (L = 4) stayed on the plateau for all 1200 steps (accuracy 0.29).
    config.train = config_dict.ConfigDict(
        dict(
            steps=1200,
            batch_size=64,
            learning_rate=3e-3,
            warmup_steps=80,
            weight_decay=0.01,
            log_every=100,
            eval_batches=4,
        )
    )
    # Metrics are measured on this many held-out examples.
    config.measure_batch_size = 16
    # Dong et al.'s path-length experiment: paths sampled per length.
    config.num_paths = 64

    if arg == "smoke":
        # Every program at LLVM's level 0 (`experiments.lab.cli.set_compile_level`; the command line only):
        # a smoke run is mostly compiling. Measured on a 2-core CPU: 72.1 s at the default levels, 50.8 s.
        config.compile_level = 0
        config.num_seeds = 2
        config.task.num_pairs = config.task.num_queries = 4
        config.task.vocab_size = 16
        config.model.features = 32
        # Std 1.25 at L = 4 puts layer 3 in Dong's local window (r ~ 1e-3) and layer 4 above 1e-13.
        config.init_sweep = _sweep(
            (4,),
            ("attention_only",),
            ("softmax",),
            (1.0,),
            False,
            embedding_stds=(1.25,),
            num_seeds=10,
        )
        config.scale_sweep = _sweep(
            (4,), ("attention_only",), ("softmax",), (1.0,), False, embedding_stds=()
        )
        config.dong_embedding_std = 1.25
        config.mask_sweep = _sweep(
            (4,), ("attention_only",), ("softmax",), (1.0,), True, num_seeds=10
        )
        config.local_sweep = _sweep(
            (4,), ("attention_only",), ("softmax",), (1.0,), True, num_seeds=10, windows=(2,)
        )
        config.float32_sweep = _sweep((4,), (), ("softmax",), (1.0,), True, float64=False)
        config.noci_sweep = _sweep(
            (1, 4),
            ("skip_mlp", "skip_mlp_scaled"),
            ("softmax",),
            (1.0,),
            False,
            grad_norms=True,
            float64=False,
            num_seeds=10,
        )
        config.layernorm.update(num_layers=48, num_tokens=4, dim=4)
        config.train_sweep = _sweep(
            (2,),
            ("skip_mlp",),
            ("softmax",),
            (1.0,),
            True,
            embedding_stds=(None,),
            exclude=(),
            architecture_seeds=(),
        )
        config.train.update(steps=40, batch_size=16, warmup_steps=4, log_every=20, eval_batches=1)
        # 8 examples: at least two pairs per seed in Dong's local window.
        config.measure_batch_size = 8
        config.num_paths = 8
    elif arg not in (None, ""):
        raise ValueError(f"unknown config variant {arg!r}; valid: '' (default) or 'smoke'")
    return config
