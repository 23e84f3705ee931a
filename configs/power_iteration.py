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
* `clusters`: Geshkovski et al. 2023's self-attention dynamics of tokens on the
  unit sphere, the number of clusters over time and the time to reach one
  cluster (one run per inverse temperature beta).
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
    config.fixed = config_dict.ConfigDict(
        dict(
            temperatures=(0.25, 0.5, 1.0, 2.0),
            num_matrices=8,  # random draws per temperature
            seq_len=16,  # T
            head_dim=16,  # d
            steps=1500,  # powers A^1 .. A^steps (enough for |lambda_2| up to ~0.98)
            tolerance=0.1,  # pass if |measured rate / |lambda_2| - 1| <= tolerance
        )
    )

    # (b) Products across depth. Untrained models are bidirectional; trained
    # ones causal, since associative recall is next-token prediction.
    config.products = config_dict.ConfigDict(
        dict(
            architectures=("attention_only", "skip_mlp"),
            num_layers=6,
            num_seeds=2,
            measure_batch_size=8,
            # Prediction threshold, written before the run: delta(P_l) within this factor
            # of prod_(i<=l) |lambda_2(A_i)| at every resolved layer l >= 2.
            lambda_factor=10.0,
        )
    )
    config.products.model = config_dict.ConfigDict(
        dict(features=64, num_heads=4, mlp_ratio=2, positions="learned")
    )
    config.products.task = config_dict.ConfigDict(
        dict(name="associative_recall", num_pairs=8, num_queries=8, vocab_size=32)
    )
    config.products.train = config_dict.ConfigDict(
        dict(
            steps=200,
            batch_size=32,
            learning_rate=3e-3,
            warmup_steps=20,
            weight_decay=0.01,
            log_every=50,
            eval_batches=2,
        )
    )

    # (c) Geshkovski et al. 2023: tokens on the unit sphere S^(d-1), Q = K = V = I,
    # dx_i/dt = P_(x_i)((1/Z_i) sum_j exp(beta <x_i, x_j>) x_j), projected Euler.
    config.clusters = config_dict.ConfigDict(
        dict(
            variant="SA",  # "SA" (softmax, Z_i = sum_k exp(beta <x_i, x_k>)) or "USA" (Z_i = n)
            betas=(1.0, 2.0, 4.0, 8.0),  # inverse temperatures, increasing
            num_tokens=32,  # n
            dim=3,  # d (the sphere S^(d-1)); d >= 3, where the paper expects one cluster at every beta
            dt=0.1,  # Euler step; SA moves a token by at most dt per step
            steps=100_000,  # horizon t = steps * dt = 10^4
            measure_every=10,  # count clusters every 10 steps (time 1)
            num_seeds=4,  # random starts per beta (the same ones at every beta)
            radius=1e-2,  # tokens closer than this (Euclidean, on the unit sphere) are linked
            probe_time=30.0,  # the time at which the cluster counts are compared across beta
        )
    )

    if arg == "smoke":
        config.fixed.update(temperatures=(0.5, 2.0), num_matrices=3, steps=400)
        config.products.update(
            architectures=("skip_mlp",), num_layers=3, num_seeds=1, measure_batch_size=4
        )
        config.products.model.update(features=16, num_heads=2)
        config.products.task.update(num_pairs=4, num_queries=4, vocab_size=16)
        config.products.train.update(
            steps=20, batch_size=8, warmup_steps=2, log_every=10, eval_batches=1
        )
        config.clusters.update(
            betas=(1.0, 8.0), num_tokens=16, steps=2000, num_seeds=2, probe_time=20.0
        )
    elif arg not in (None, ""):
        raise ValueError(f"unknown config variant {arg!r}; valid: '' (default) or 'smoke'")
    return config
