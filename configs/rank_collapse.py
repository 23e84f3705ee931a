"""Rank collapse across depth: which architectures keep token representations apart.

    python -m experiments.rank_collapse --config configs/rank_collapse.py --workdir runs/rc
    python -m experiments.rank_collapse --config configs/rank_collapse.py:smoke --workdir runs/rc_smoke
    python -m experiments.rank_collapse --config configs/rank_collapse.py \\
        --config.train.steps=2000 --config.init_sweep.depths='(1,2,4,8)' --workdir runs/rc_long

Two sweeps, each a grid of depth x architecture x attention kind x
temperature, every grid point run for `num_seeds` seeds at once:

* `init_sweep`: per-layer metrics of untrained models (the setting of Dong et
  al. 2021 and Noci et al. 2022). Cheap: one forward pass per grid point.
* `train_sweep`: the same metrics at initialisation, every `train.log_every`
  steps and at the end of training on `task`, with loss, accuracy and
  per-group gradient norms.

Architectures: the presets of `attnjax.nn.ARCHITECTURES` (attention only,
attention and MLP, skips, pre-LN and post-LN transformers, skips scaled by
1/sqrt(L)); the init sweep runs all of them.
"""
from ml_collections import config_dict

from attnjax import nn


def _sweep(depths, architectures, kinds, temperatures, causal, **extra):
    return config_dict.ConfigDict(dict(depths=depths, architectures=architectures, attention_kinds=kinds,
                                       temperatures=temperatures, causal=causal, **extra))


def get_config(arg: str | None = None):
    """Default study; `arg='smoke'` for the seconds-long variant."""
    config = config_dict.ConfigDict()
    config.seed = 0
    config.num_seeds = 2

    # Multi-query associative recall (Arora et al. 2023): attention as retrieval.
    config.task = config_dict.ConfigDict(dict(name="associative_recall", num_pairs=8, num_queries=8, vocab_size=32))

    # dtype: computation dtype; 'bfloat16' computes in bf16 with float32
    # parameters and optimiser state (softmax and loss stay in float32).
    config.model = config_dict.ConfigDict(
        dict(features=64, num_heads=4, mlp_ratio=4, positions="learned", feature_map="favor_plus",
             num_features=64, dtype="float32")
    )

    # Bidirectional at initialisation: the setting of Dong et al. and Noci et al.
    # (a causal mask makes the attention matrix triangular, and products of
    # triangular stochastic matrices converge only geometrically). Causal for
    # training, since recall is next-token prediction.
    # grad_norms: gradient norms per parameter group at initialisation; they
    # double the compile time of every init run, and the training sweep
    # records them at step 0 anyway.
    config.init_sweep = _sweep((1, 2, 4, 8, 16, 32), tuple(nn.ARCHITECTURES), ("softmax", "linear"), (1.0,), False,
                               grad_norms=False)
    config.train_sweep = _sweep((4, 8), ("attention_only", "skip_mlp"), ("softmax",), (1.0,), True)

    config.train = config_dict.ConfigDict(
        dict(steps=800, batch_size=64, learning_rate=3e-3, warmup_steps=80, weight_decay=0.01,
             log_every=200, eval_batches=4)
    )
    # Metrics are measured on this many held-out examples.
    config.measure_batch_size = 16

    if arg == "smoke":
        config.num_seeds = 2
        config.task.num_pairs = config.task.num_queries = 4
        config.task.vocab_size = 16
        config.model.features = 32
        config.init_sweep = _sweep((1, 8), ("attention_only", "skip_scaled"), ("softmax", "linear"), (1.0,), False,
                                   grad_norms=False)
        config.train_sweep = _sweep((2,), ("attention_only", "skip_mlp"), ("softmax",), (1.0,), True)
        config.train.update(steps=40, batch_size=16, warmup_steps=4, log_every=20, eval_batches=1)
        config.measure_batch_size = 4
    elif arg not in (None, ""):
        raise ValueError(f"unknown config variant {arg!r}; valid: '' (default) or 'smoke'")
    return config
