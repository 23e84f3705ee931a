"""Every field of `BlockConfig` and `TransformerConfig` is checked at construction.

A bad value raises, naming the field and the value, from the config, from
`dataclasses.replace` and from `TransformerConfig.create` alike, before any
parameter is drawn (`AttentionConfig`'s fields: tests/attnjax/nn/test_options.py).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn
from attnjax.nn.configs import BLOCK_OPTIONS, MODEL_OPTIONS

INF = float("inf")

# (field, bad value, error, message): at least one case for every BlockConfig field.
BLOCK_BAD = [
    ("features", 0, ValueError, r"features must be a positive int, got 0"),
    ("features", 66, ValueError, r"features \(66\) must be divisible by num_heads \(4\)"),
    ("num_heads", 2.0, ValueError, r"num_heads must be a positive int, got 2.0"),
    ("attention", {}, TypeError, r"attention must be an AttentionConfig, got dict"),
    ("skip", 1, TypeError, r"skip must be a bool, got 1"),
    ("mlp", "yes", TypeError, r"mlp must be a bool, got 'yes'"),
    (
        "norm",
        "mid",
        ValueError,
        r"norm must be one of \('pre', 'post', 'sandwich', None\), got 'mid'",
    ),
    ("residual_scale", 0.0, ValueError, r"residual_scale must be a positive number, got 0.0"),
    ("residual_scale", INF, ValueError, r"residual_scale must be a finite number, got inf"),
    ("residual_scale", "sqrt", ValueError, r"residual_scale must be a number or 'inv_sqrt_depth'"),
    ("mlp_features", 0, ValueError, r"mlp_features must be a positive int, got 0"),
    ("mlp_activation", "tanh", ValueError, r"mlp_activation must be one of .*, got 'tanh'"),
    ("norm_kind", "batchnorm", ValueError, r"norm_kind must be one of .*, got 'batchnorm'"),
    ("norm_eps", 0.0, ValueError, r"norm_eps must be a positive number, got 0.0"),
    ("norm_eps", INF, ValueError, r"norm_eps must be a finite number, got inf"),
    ("use_bias", None, TypeError, r"use_bias must be a bool, got None"),
    (
        "residual_dropout_rate",
        1.0,
        ValueError,
        r"residual_dropout_rate must be a number in \[0, 1\)",
    ),
    ("deterministic", 0, TypeError, r"deterministic must be a bool, got 0"),
    ("dtype", "float33", TypeError, r"dtype must be a floating-point dtype .*got 'float33'"),
    ("dtype", jnp.int32, TypeError, r"dtype must be a floating-point dtype .*got int32"),
    ("dtype", jnp.complex64, TypeError, r"dtype must be a floating-point dtype .*got complex64"),
    (
        "param_dtype",
        jnp.int32,
        TypeError,
        r"param_dtype must be a floating-point dtype .*got int32",
    ),
    (
        "param_dtype",
        "float33",
        TypeError,
        r"param_dtype must be a floating-point dtype .*'float33'",
    ),
    (
        "attention_module",
        "MultiHeadAttention",
        TypeError,
        r"attention_module must be None or a subclass of MultiHeadAttention, got 'MultiHeadAttention'",
    ),
    ("param_dtype", None, TypeError, r"param_dtype must be a floating-point dtype .*got None"),
    ("param_dtype", "bool", TypeError, r"param_dtype must be a floating-point dtype .*got bool"),
]

# (field, keyword arguments of TransformerConfig.create, error, message): every TransformerConfig
# field; the arguments hold the field, on top of a valid base (token inputs unless they say otherwise).
MODEL_BAD = [
    ("num_layers", dict(num_layers=0), ValueError, r"num_layers must be a positive int, got 0"),
    ("block", dict(block={}), TypeError, r"block must be an? BlockConfig, got dict"),
    ("vocab_size", dict(vocab_size=0), ValueError, r"vocab_size must be a positive int, got 0"),
    (
        "vocab_size",
        dict(vocab_size=10.5),
        ValueError,
        r"vocab_size must be a positive int, got 10.5",
    ),
    (
        "vocab_size",
        dict(vocab_size=True),
        ValueError,
        r"vocab_size must be a positive int, got True",
    ),
    (
        "vocab_size",
        dict(vocab_size=11, input_features=4),
        ValueError,
        r"give exactly one of vocab_size .* or input_features",
    ),
    (
        "input_features",
        dict(vocab_size=None, input_features=0),
        ValueError,
        r"input_features must be a positive int, got 0",
    ),
    (
        "input_features",
        dict(vocab_size=None, input_features="4"),
        ValueError,
        r"input_features must be a positive int, got '4'",
    ),
    (
        "output_features",
        dict(output_features=0),
        ValueError,
        r"output_features must be a positive int, got 0",
    ),
    (
        "output_features",
        dict(output_features=2.5),
        ValueError,
        r"output_features must be a positive int, got 2.5",
    ),
    (
        "output_features",
        dict(head=None, output_features=5),
        ValueError,
        r"head=None returns hidden states of width features=64, got output_features=5",
    ),
    ("max_len", dict(max_len=0), ValueError, r"max_len must be a positive int, got 0"),
    ("positions", dict(positions="rope"), ValueError, r"positions must be one of .*, got 'rope'"),
    (
        "type_vocab_size",
        dict(type_vocab_size=2.0),
        ValueError,
        r"type_vocab_size must be a positive int, got 2.0",
    ),
    ("embedding_norm", dict(embedding_norm=1), TypeError, r"embedding_norm must be a bool, got 1"),
    ("final_norm", dict(final_norm="no"), TypeError, r"final_norm must be a bool, got 'no'"),
    ("head", dict(head="mlp"), ValueError, r"head must be one of .*, got 'mlp'"),
    ("head_bias", dict(head_bias=None), TypeError, r"head_bias must be a bool, got None"),
    ("causal", dict(causal="False"), TypeError, r"causal must be a bool, got 'False'"),
    ("embedding_init", dict(embedding_init=0.02), TypeError, r"embedding_init must be callable"),
    ("position_init", dict(position_init=None), TypeError, r"position_init must be callable"),
    (
        "embedding_scale",
        dict(embedding_scale=0.0),
        ValueError,
        r"embedding_scale must be a positive number, got 0.0",
    ),
    (
        "embedding_scale",
        dict(embedding_scale=INF),
        ValueError,
        r"embedding_scale must be a finite number, got inf",
    ),
    (
        "layer_windows",
        dict(layer_windows=(4,)),
        ValueError,
        r"layer_windows must hold one entry per layer \(num_layers=2\), got \(4,\)",
    ),
    (
        "layer_windows",
        dict(layer_windows=(4, 0)),
        ValueError,
        r"layer_windows\[1\] must be a positive int, got 0",
    ),
    (
        "layer_rope_bases",
        dict(layer_rope_bases=[1e4, 1e6]),
        ValueError,
        r"layer_rope_bases needs a rotary embedding without rope_scaling, got rope=None",
    ),
    (
        "layer_rope_bases",
        dict(layer_rope_bases=(1e4, -1.0)),
        ValueError,
        r"layer_rope_bases\[1\] must be a positive number, got -1.0",
    ),
]

# A valid config that `dataclasses.replace` turns into each bad one.
VALID = {"input_features": {"input_features": 4}}


def test_every_block_and_model_field_has_a_validation_case():
    assert {name for name, *_ in BLOCK_BAD} == set(BLOCK_OPTIONS)
    assert {name for name, *_ in MODEL_BAD} == set(MODEL_OPTIONS)
    assert all(name in kwargs for name, kwargs, *_ in MODEL_BAD)


@pytest.mark.parametrize("name, value, error, message", BLOCK_BAD)
def test_block_config_validates_each_field(name, value, error, message):
    """Each bad BlockConfig field raises, naming it and the value, however the config is made."""
    with pytest.raises(error, match=message):
        nn.BlockConfig(**{name: value})
    with pytest.raises(error, match=message):
        dataclasses.replace(nn.BlockConfig(), **{name: value})
    with pytest.raises(error, match=message):
        nn.TransformerConfig.create(vocab_size=11, **{name: value})


@pytest.mark.parametrize("name, kwargs, error, message", MODEL_BAD)
def test_transformer_config_validates_each_field(name, kwargs, error, message):
    """Each bad TransformerConfig field raises, naming it and the value, however the config is made."""
    options = {"vocab_size": 11, **kwargs}
    with pytest.raises(error, match=message):
        nn.TransformerConfig.create(**options)
    with pytest.raises(error, match=message):
        nn.TransformerConfig(**options)
    valid = nn.TransformerConfig(**VALID.get(name, {"vocab_size": 11}))
    with pytest.raises(error, match=message):
        dataclasses.replace(valid, **kwargs)


def test_a_bad_config_fails_before_any_parameter_is_drawn():
    """The check is the config's: no initialiser runs, and no error comes from inside one."""
    drawn = []

    def init(key, shape, dtype):
        drawn.append(shape)
        return jnp.zeros(shape, dtype)

    for bad in (dict(vocab_size=0), dict(output_features=0), dict(param_dtype=jnp.int32)):
        with pytest.raises((ValueError, TypeError), match=next(iter(bad))):
            nn.Transformer(
                nn.TransformerConfig.create(embedding_init=init, **{"vocab_size": 11, **bad}),
                rngs=nnx.Rngs(0),
            )
    assert drawn == []


@pytest.mark.parametrize(
    "dtype", [jnp.bfloat16, "bfloat16", np.float16, jnp.dtype("float32"), float, "float64"]
)
def test_every_spelling_of_a_floating_dtype_is_accepted(dtype):
    """A dtype class, its name, a NumPy dtype or Python's float: what `jnp.dtype` resolves."""
    config = nn.TransformerConfig.create(
        num_layers=1,
        features=8,
        num_heads=2,
        vocab_size=5,
        max_len=4,
        dtype=dtype,
        param_dtype=dtype,
    )
    assert config.block.dtype is dtype and config.block.param_dtype is dtype
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    assert model.embed.embedding[...].dtype == jax.dtypes.canonicalize_dtype(dtype)
    assert nn.BlockConfig(dtype=None).dtype is None  # None: the parameters' dtype
