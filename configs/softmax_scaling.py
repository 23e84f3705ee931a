r"""Why attention logits are scaled by 1/sqrt(d_k): variance, saturation, gradients.

    python -m experiments.softmax_scaling --config configs/softmax_scaling.py --workdir runs/softmax_scaling
    python -m experiments.softmax_scaling --config configs/softmax_scaling.py:smoke --workdir runs/softmax_scaling_smoke

Overrides: `--config.num_samples=400000`, `--config.dims='(4, 64, 1024)'`.
"""
import ml_collections


def get_config(arg: str = "") -> ml_collections.ConfigDict:
    """`arg`: '' (the study, minutes on a laptop CPU) or 'smoke' (seconds)."""
    if arg not in ("", "smoke"):
        raise ValueError(f"unknown config variant {arg!r}; valid: '' (default) or 'smoke'")
    config = ml_collections.ConfigDict()
    config.seed = 0
    # Key/query widths d_k; each is one resumable run.
    config.dims = (4, 8, 16, 32, 64, 128, 256, 512, 1024)

    # Var(q.k): pairs (q, k) with iid N(0, 1) components. The relative standard
    # error of the sample variance is sqrt((2 + 6/d_k) / n), at most
    # sqrt(3.5 / n) (d_k = 4): n = 500k gives 0.26%, so the 5% band is 19 SEs.
    config.num_samples = 500_000
    config.variance_tolerance = 0.05  # pass if |measured / predicted - 1| <= this

    # Saturation and the softmax Jacobian: one query against num_keys keys.
    config.num_keys = 64  # T
    config.saturation_samples = 10_000  # queries (each with its own T keys) per d_k
    # Scaled statistics must stay within this relative distance of their
    # d_k -> infinity limit (logits iid N(0, 1)) at every d_k.
    config.saturation_tolerance = 0.2
    # The unscaled Jacobian norm's decay exponent (log-log slope) is fitted over
    # d_k >= this; predicted -1/2, pass within +-0.25.
    config.decay_fit_min_dim = 64

    # Samples generated and reduced per vectorised step (memory, not results).
    config.chunk_size = 8_192

    if arg == "smoke":
        config.dims = (4, 32, 256, 1024)
        config.num_samples = 50_000  # worst relative SE 0.84%: the 5% band is 6 SEs
        config.saturation_samples = 400
    return config
