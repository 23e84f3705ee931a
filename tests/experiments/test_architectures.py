"""The presets that the studies compare (`experiments.architectures`)."""

import dataclasses

import pytest

from attnjax import nn
from experiments import architectures


@pytest.mark.parametrize("name", sorted(architectures.ARCHITECTURES))
def test_architecture_presets_are_valid_configs(name):
    config = nn.TransformerConfig.create(
        num_layers=3,
        features=16,
        num_heads=4,
        vocab_size=11,
        max_len=32,
        **architectures.architecture(name),
    )
    assert all(getattr(config.block, k) == v for k, v in architectures.ARCHITECTURES[name].items())
    assert set(architectures.ARCHITECTURES[name]) <= {
        f.name for f in dataclasses.fields(nn.BlockConfig)
    }  # only the block's switches


def test_presets_are_fresh_dicts_and_attention_only_is_exactly_that():
    preset = architectures.architecture("skip")
    preset["skip"] = False
    assert architectures.ARCHITECTURES["skip"]["skip"] is True
    only = {n for n in architectures.ARCHITECTURES if architectures.is_attention_only(n)}
    assert only == {"attention_only"}  # attention_only_ln has a norm, attention_mlp an MLP
    layer = nn.TransformerConfig.create(
        num_layers=4, vocab_size=3, **architectures.architecture("skip_scaled")
    ).layer()
    assert dataclasses.asdict(layer)["residual_scale"] == pytest.approx(0.5)


def test_unknown_architecture_raises_naming_the_field():
    with pytest.raises(
        ValueError, match=r"architecture: unknown 'resnet'; valid: \('attention_only', "
    ):
        architectures.architecture("resnet")
    with pytest.raises(ValueError, match=r"sweep.architectures: unknown 'attention'; valid"):
        architectures.check_architectures("sweep.architectures", ("skip", "attention"))
