"""The one map of parameter names (`attnjax.nn.params`): fused and separate W_qkv read alike."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn, training
from tests import host_random

H, K, D, L = 4, 2, 16, 2  # query heads, key/value heads, width, layers
DH = D // H


def _models(num_kv_heads=K):
    """A separate-QKV and a fused-QKV Transformer (GQA by default) with the same weights: W_qkv = [W_q | W_k | W_v]."""
    base = dict(
        num_layers=L,
        features=D,
        num_heads=H,
        num_kv_heads=num_kv_heads,
        vocab_size=11,
        max_len=8,
        causal=True,
        param_dtype=jnp.float64,
    )
    separate = nn.Transformer(nn.TransformerConfig.create(**base), rngs=nnx.Rngs(0))
    fused = nn.Transformer(nn.TransformerConfig.create(fused_qkv=True, **base), rngs=nnx.Rngs(1))
    state = nnx.state(separate, nnx.Param)
    attention = state["blocks"]["attention"]
    qkv = {
        name: jnp.concatenate([attention[n][name][...] for n in ("query", "key", "value")], axis=-1)
        for name in ("kernel", "bias")
    }
    fused_state = nnx.state(fused, nnx.Param)
    for path, value in nnx.to_flat_state(fused_state):
        if path[:3] == ("blocks", "attention", "qkv"):
            value[...] = qkv[path[3]]
        else:
            value[...] = dict(nnx.to_flat_state(state))[path][...]
    nnx.update(fused, fused_state)
    return separate, fused


@pytest.fixture(scope="module")
def models():
    """Built once: both tests below only read the models."""
    return _models()


@pytest.mark.slow
def test_fused_and_separate_models_have_the_same_kernels_and_gradient_groups(models):
    separate, fused = models
    tokens = host_random.randint(2, (2, 7), 0, 11)
    forward = nnx.jit(lambda m: m(tokens))
    np.testing.assert_allclose(forward(fused), forward(separate), atol=1e-12)  # the same model
    params = {
        m: nnx.state(model, nnx.Param) for m, model in (("separate", separate), ("fused", fused))
    }
    kernels = {m: nn.params.attention_kernels(p, H, K) for m, p in params.items()}
    shapes = {
        "query": (L, D, H, DH),
        "key": (L, D, K, DH),
        "value": (L, D, K, DH),
        "out": (L, H, DH, D),
    }
    for name, shape in shapes.items():
        assert kernels["fused"][name].shape == shape, name
        np.testing.assert_array_equal(
            kernels["fused"][name], kernels["separate"][name], err_msg=name
        )
    # Head h of the query kernel is columns h Dh : (h + 1) Dh of W_q.
    w_q = np.asarray(params["separate"]["blocks"]["attention"]["query"]["kernel"][...])
    np.testing.assert_array_equal(kernels["separate"]["query"][:, :, 1], w_q[:, :, DH : 2 * DH])
    biases = {m: nn.params.attention_params(p, H, K)["value"]["bias"] for m, p in params.items()}
    np.testing.assert_array_equal(biases["fused"], biases["separate"])

    @nnx.jit  # one compilation per model: eager op-by-op dispatch of the backward pass costs more
    def grad_norms(model):
        grads = nnx.grad(lambda m: jnp.mean(m(tokens) ** 2))(model)
        return training.grad_norms(nnx.state(grads, nnx.Param), H, K)

    norms = {m: grad_norms(model) for m, model in (("separate", separate), ("fused", fused))}
    assert (
        set(norms["fused"])
        == set(norms["separate"])
        == {f"grad_norm/{g}" for g in nn.params.GROUPS} | {"grad_norm/total"}
    )
    for name, value in norms["separate"].items():
        assert float(value) > 0, name
        np.testing.assert_allclose(norms["fused"][name], value, rtol=1e-10, err_msg=name)


@pytest.mark.slow
def test_group_of_names_every_parameter_and_a_fused_kernel_needs_the_heads(models):
    assert nn.params.group_of(("blocks", "attention", "key", "kernel")) == "key"
    assert nn.params.group_of(("blocks", "attention", "qkv", "bias")) == "qkv"
    assert nn.params.group_of(("blocks", "attention", "query_ln", "scale")) == "other"
    assert nn.params.group_of(("blocks", "mlp", "fc1", "kernel")) == "mlp"
    assert nn.params.group_of(("embed", "embedding")) == "other"
    _, fused = models
    with pytest.raises(
        ValueError,
        match=r"\(blocks/attention/qkv/bias\S*, shape \(2, 32\)\) splits .* with num_heads",
    ):
        nn.params.grouped(nnx.state(fused, nnx.Param))
    with pytest.raises(
        ValueError, match=r"shape \(2, 16, 32\) does not split into H \+ 2K = 3 \+ 2 \* 3"
    ):
        nn.params.split_qkv(
            nnx.state(fused, nnx.Param)["blocks"]["attention"]["qkv"]["kernel"], 3, 3
        )


def test_builders_write_the_paths_of_the_model():
    """A tree built with the builders has exactly the paths (and shapes) of a pre-LN GELU Transformer."""
    model = nn.Transformer(
        nn.TransformerConfig.create(num_layers=1, features=8, num_heads=2, vocab_size=5, max_len=4),
        rngs=nnx.Rngs(0),
    )

    def zeros(*shape):
        return np.zeros(shape)

    def lin(i, o):
        return nn.params.linear(zeros(1, i, o), zeros(1, o))

    block = nn.params.block(
        attention=nn.params.attention(lin(8, 8), lin(8, 8), lin(8, 8), lin(8, 8)),
        mlp=nn.params.mlp(fc1=lin(8, 32), fc2=lin(32, 8)),
        attention_norm=nn.params.norm(zeros(1, 8), zeros(1, 8)),
        mlp_norm=nn.params.norm(zeros(1, 8), zeros(1, 8)),
    )
    tree = nn.params.transformer(
        embed=nn.params.embedding(zeros(5, 8)),
        blocks=block,
        position_table=zeros(4, 8),
        final_norm=nn.params.norm(zeros(8), zeros(8)),
        head=nn.params.linear(zeros(8, 5), zeros(5)),
    )
    built = {
        tuple(str(p.key) for p in path): np.shape(x)
        for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]
    }
    want = {path: v.shape for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    assert built == want
    with pytest.raises(
        ValueError, match=r"an Mlp has layers fc1, fc2 or gate, up, down; got \('fc1',\)"
    ):
        nn.params.mlp(fc1=lin(8, 32))
