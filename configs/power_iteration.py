"""Attention as power iteration: fixed matrices, products across depth, self-attention dynamics.

    python -m experiments.power_iteration --config configs/power_iteration.py --workdir runs/pi
    python -m experiments.power_iteration --config configs/power_iteration.py:smoke --workdir runs/pi_smoke
    python -m experiments.power_iteration --config configs/power_iteration.py \\
        --config.fixed.temperatures='(0.5,1.0)' --config.products.train.steps=500 --workdir runs/pi_long

Three parts, each a set of resumable runs:

* `fixed`: one attention matrix A = softmax(Q K^T / (sqrt(d) tau)) iterated,
  A^k -> 1 pi^T, measured rate against |lambda_2| (one run per temperature).
* `products`: inhomogeneous products A_l ... A_1 across the layers of
  untrained (bidirectional) and trained (causal) models, against the product
  of per-layer Dobrushin coefficients (one run per architecture and setting).
* `clusters`: parameter-free self-attention X <- softmax(X X^T / (sqrt(d) tau)) X
  iterated, token clusters counted per temperature (one run per temperature).
"""
from ml_collections import config_dict


def get_config(arg: str | None = None):
    """Default study (a few minutes on a laptop CPU); `arg='smoke'` for the seconds-long variant."""
    config = config_dict.ConfigDict()
    config.seed = 0
    # Parts `fixed` and `clusters` and the analysis of `products` compute in
    # float64 (the fixed-matrix rate is fitted over ~30 e-folds of decay; in
    # float32 only ~15 remain, too few for |lambda_2| ~ 0.1). False: float32.
    config.float64 = True

    # (a) One fixed attention matrix per draw of Q, K [T, d] with iid N(0, 1) entries.
    config.fixed = config_dict.ConfigDict(dict(
        temperatures=(0.25, 0.5, 1.0, 2.0),
        num_matrices=8,  # random draws per temperature
        seq_len=16,  # T
        head_dim=16,  # d
        steps=1500,  # powers A^1 .. A^steps (enough for |lambda_2| up to ~0.98)
        tolerance=0.1,  # pass if |measured rate / |lambda_2| - 1| <= tolerance
    ))

    # (b) Products across depth. Untrained models are bidirectional; trained
    # ones causal, since associative recall is next-token prediction.
    config.products = config_dict.ConfigDict(dict(
        architectures=("attention_only", "skip_mlp"),
        num_layers=6,
        num_seeds=2,
        measure_batch_size=8,
    ))
    config.products.model = config_dict.ConfigDict(dict(features=64, num_heads=4, mlp_ratio=2, positions="learned"))
    config.products.task = config_dict.ConfigDict(
        dict(name="associative_recall", num_pairs=8, num_queries=8, vocab_size=32))
    config.products.train = config_dict.ConfigDict(dict(
        steps=200, batch_size=32, learning_rate=3e-3, warmup_steps=20, weight_decay=0.01, log_every=50,
        eval_batches=2,
    ))

    # (c) X <- softmax(X X^T / (sqrt(d) tau)) X from X_0 [T, d] with iid N(0, 1) entries.
    config.clusters = config_dict.ConfigDict(dict(
        temperatures=(0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0),
        num_tokens=32,  # T
        dim=8,  # d
        steps=1000,
        num_seeds=4,  # random X_0 per temperature
        # Tokens closer than threshold x (RMS token norm of X_0) are linked;
        # clusters are the connected components (single linkage).
        threshold=1e-3,
    ))

    if arg == "smoke":
        config.fixed.update(temperatures=(0.5, 2.0), num_matrices=3, steps=400)
        config.products.update(architectures=("skip_mlp",), num_layers=3, num_seeds=1,
                               measure_batch_size=4)
        config.products.model.update(features=16, num_heads=2)
        config.products.task.update(num_pairs=4, num_queries=4, vocab_size=16)
        config.products.train.update(steps=20, batch_size=8, warmup_steps=2, log_every=10, eval_batches=1)
        config.clusters.update(temperatures=(0.05, 0.5, 4.0), num_tokens=16, steps=200, num_seeds=2)
    elif arg not in (None, ""):
        raise ValueError(f"unknown config variant {arg!r}; valid: '' (default) or 'smoke'")
    return config
