r"""Rank collapse in width: the spectral gap of attention maps at initialisation as the context grows.

    python -m experiments.width --config configs/width.py --workdir runs/width
    python -m experiments.width --config configs/width.py:smoke --workdir runs/width_smoke

Overrides: `--config.lengths='(64, 256, 1024)'`, `--config.num_seeds=20`.
"""

import math

import ml_collections


def get_config(arg: str = "") -> ml_collections.ConfigDict:
    """`arg`: '' (the study, a few minutes on a laptop CPU) or 'smoke' (seconds)."""
    if arg not in ("", "smoke"):
        raise ValueError(f"unknown config variant {arg!r}; valid: '' (default) or 'smoke'")
    config = ml_collections.ConfigDict()
    config.seed = 0
    # Seeds: the units of every interval (the protocol asks for at least 10 for a verdict).
    config.num_seeds = 10
    # Context lengths n (one run per model and length). Each seed takes three dense float64
    # SVDs of n x n matrices (the map, the layer's output with and without the fix): 5-8 s at
    # n = 2048 on a 2-core CPU, 45 s at n = 4096, which would be 20 minutes for 10 seeds of
    # the three models; `--config.lengths` adds it.
    config.lengths = (64, 128, 256, 512, 1024, 2048)
    # "markov": the random Markov model (logits iid N(-s2/2, s2), s2 = logit_variance);
    # "key_query": softmax(X W_Q (X W_K)^T / sqrt(d)) with orthonormal tokens X and W_Q, W_K
    # iid N(0, weight_std^2); "key_query_xavier": the same with Xavier's initialisation.
    config.models = ("markov", "key_query", "key_query_xavier")
    # The authors' code draws the Markov model's logits with variance log 2 (so that
    # Var e^G = 1 with E e^G = 1).
    config.logit_variance = math.log(2)
    # W_Q, W_K entries iid N(0, weight_std^2): the key-query logits then have variance
    # weight_std^4 (orthonormal X); 1 is the authors' "normal" initialisation (their
    # default, Xavier, gives variance 1 / d^2: a nearly uniform map).
    config.weight_std = 1.0
    # gamma = n / d, the tokens' count over their width (orthonormal rows need gamma <= 1;
    # the authors' experiments mostly use gamma = 1).
    config.width_ratio = 1.0
    if arg == "smoke":
        config.lengths = (32, 64, 128, 256)
    return config
