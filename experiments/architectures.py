"""The architectures that the depth studies compare: presets of the block switches.

Each preset names the `attnjax.nn.BlockConfig` switches (`skip`, `mlp`,
`norm`, `residual_scale`) of one architecture; every study, config and the
benchmark name architectures by these keys, and `check_architectures`
validates a config's list of them (before anything compiles).

    python -c "from experiments import architectures; print(architectures.architecture('skip'))"
"""

from __future__ import annotations

ARCHITECTURES = {
    # Dong et al. 2021, "Attention is not all you need": X -> SA(X) collapses to rank one with depth.
    "attention_only": dict(skip=False, mlp=False, norm=None),
    "attention_mlp": dict(skip=False, mlp=True, norm=None),
    "skip": dict(skip=True, mlp=False, norm=None),
    "skip_mlp": dict(skip=True, mlp=True, norm="pre"),
    "post_ln": dict(skip=True, mlp=True, norm="post"),
    # The `skip` network with its residual branch scaled by 1/sqrt(L) (Noci et al.
    # 2022). Without MLP and norm, so that the comparison with `skip` isolates
    # the scaling (a GELU MLP adds the same vector to every token at
    # initialisation, which lowers the residual whatever attention does).
    "skip_scaled": dict(skip=True, mlp=False, norm=None, residual_scale="inv_sqrt_depth"),
    # Noci et al. 2022's remedy in their setting (LayerNorm and MLP): the pre-LN and post-LN
    # transformers with every residual branch scaled by 1/sqrt(L).
    "skip_mlp_scaled": dict(skip=True, mlp=True, norm="pre", residual_scale="inv_sqrt_depth"),
    "post_ln_scaled": dict(skip=True, mlp=True, norm="post", residual_scale="inv_sqrt_depth"),
    # Attention only with a LayerNorm before every attention layer, X -> SA(LN(X)),
    # as in Dong et al.'s own code.
    "attention_only_ln": dict(skip=False, mlp=False, norm="pre"),
    # Attention only with a LayerNorm after every attention layer, X -> LN(SA(X)), where Wu et al. 2024
    # place it.
    "attention_only_postln": dict(skip=False, mlp=False, norm="post"),
}


def check_architectures(field: str, names) -> None:
    """Raise a ValueError naming `field` unless every name is a key of `ARCHITECTURES`."""
    for name in names:
        if name not in ARCHITECTURES:
            raise ValueError(f"{field}: unknown {name!r}; valid: {tuple(ARCHITECTURES)}")


def architecture(name: str) -> dict:
    """The `BlockConfig` switches of the preset `name` (a fresh dict)."""
    check_architectures("architecture", (name,))
    return dict(ARCHITECTURES[name])


def is_attention_only(name: str) -> bool:
    """Each layer is exactly X -> MHA(X) (no skip, MLP or norm): Dong et al.'s bound applies."""
    fields = architecture(name)
    return not fields["skip"] and not fields["mlp"] and fields["norm"] is None
