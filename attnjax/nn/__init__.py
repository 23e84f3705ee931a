"""Flax NNX modules built from attnjax's pure attention functions (see `attnjax.nn.transformer`)."""
from attnjax.nn.transformer import *  # noqa: F401,F403
from attnjax.nn.transformer import ATTENTION_OPTIONS, UNROLL_MAX_LAYERS  # noqa: F401
