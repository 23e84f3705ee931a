"""The default initialisers of the `attnjax.nn` modules.

Each is a function `init(key, shape, dtype) -> Array`: those `nnx.Linear` and
`nnx.Embed` use by default, and the normal N(0, 0.02^2) of a learned position
table `[max_len, D]` (GPT-2, BERT).
"""

from __future__ import annotations

from flax import nnx

DEFAULT_KERNEL_INIT = nnx.nn.linear.default_kernel_init
DEFAULT_BIAS_INIT = nnx.nn.linear.default_bias_init
DEFAULT_EMBED_INIT = nnx.nn.linear.default_embed_init
POSITION_INIT_STD = 0.02  # std of the learned position table at initialisation (GPT-2, BERT)
DEFAULT_POSITION_INIT = nnx.initializers.normal(stddev=POSITION_INIT_STD)
