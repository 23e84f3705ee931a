"""Hugging Face's PyTorch models as the oracle of `attnjax.pretrained.from_pretrained` (tests only).

* `write_checkpoint(family, path)`: a tiny random checkpoint of a family
  (2 layers, hidden 64, 4 heads, GQA with 2 key/value heads where the family
  has it), written by `transformers` (`from_config(...).save_pretrained`, no
  network) with a tiny `tokenizer.json` from the `tokenizers` package.
* `hf_outputs(model, ids, valid)`: logits (or the encoder's last hidden
  state), every layer's hidden states and attention weights of the eager
  PyTorch forward, as float64 NumPy arrays.
* `exact_float64(model)`: Hugging Face computes some parts in float32 even in
  a double model (the softmax of llama / mistral / qwen2's eager attention,
  their RMSNorm, every rotary table, Gemma's embedding scale sqrt(D)). Within this context those parts run
  in the model's dtype, so a `.double()` model is a float64 reference. The
  float64 rotary rates are recomputed here from the config (the same formula
  for 'default', 'linear' and 'llama3') and checked against Hugging Face's
  float32 rates first.
* `relative_error(a, b)`: max |a - b| / max |b|, over the entries compared.

torch and transformers are imported where they are used, so that collecting the
tests (every worker imports every test module) does not import them;
`AVAILABLE` says whether both are installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import types

import numpy as np

AVAILABLE = all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))

LAYERS, HIDDEN, HEADS, KV_HEADS, VOCAB, MAX_LEN = 2, 64, 4, 2, 96, 64
# Weights of std 0.2 (Hugging Face's default is 0.02): every layer then moves the logits and the
# attention is far from uniform, so a mis-mapped tensor changes the greedy tokens too.
INIT_STD = 0.2
FAMILIES = ("bert", "llama", "mistral", "qwen2", "gpt2", "gemma3_text")
CAUSAL = ("llama", "mistral", "qwen2", "gpt2", "gemma3_text")
# gemma3_text: a local layer (window 4, rotary base 100) then a global one (base 1000); heads of
# width 24, not 64 / 4; logits scaled by 32^(-1/2), not 24^(-1/2).
GEMMA3 = dict(
    head_dim=24,
    query_pre_attn_scalar=32,
    sliding_window=4,
    layer_types=["sliding_attention", "full_attention"],
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
    },
)
WORDS = [f"w{i}" for i in range(VOCAB - 4)]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


def hf_config(family: str, **overrides):
    """A tiny `transformers` config of `family` (llama: llama3 rope scaling, untied head; mistral: sliding
    window 4 and linear rope scaling; qwen2: q/k/v biases, tied head; gpt2: tied head; gemma3_text:
    `GEMMA3`, tied head)."""
    import transformers

    common = dict(
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=128,
        vocab_size=VOCAB,
        max_position_embeddings=MAX_LEN,
        pad_token_id=0,
        initializer_range=INIT_STD,
    )
    if family == "bert":
        config = transformers.BertConfig(**common, type_vocab_size=2)
    elif family == "gpt2":
        config = transformers.GPT2Config(
            n_embd=HIDDEN,
            n_layer=LAYERS,
            n_head=HEADS,
            vocab_size=VOCAB,
            n_positions=MAX_LEN,
            bos_token_id=2,
            eos_token_id=3,
            pad_token_id=0,
            initializer_range=INIT_STD,
        )
    else:
        kw = dict(common, num_key_value_heads=KV_HEADS, bos_token_id=2, eos_token_id=3)
        if family == "llama":
            kw["rope_parameters"] = {
                "rope_type": "llama3",
                "rope_theta": 500.0,
                "factor": 4.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            }
            config = transformers.LlamaConfig(**kw)
        elif family == "gemma3_text":
            config = transformers.Gemma3TextConfig(**kw, **GEMMA3)
        elif family == "mistral":
            kw["rope_parameters"] = {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0}
            config = transformers.MistralConfig(**kw, sliding_window=4)
        else:
            config = transformers.Qwen2Config(**kw, tie_word_embeddings=True)
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


def model_class(family: str):
    import transformers

    return transformers.AutoModel if family == "bert" else transformers.AutoModelForCausalLM


def write_tokenizer(path: str, family: str) -> None:
    """A tiny `tokenizer.json`: words w0, w1, ... split on whitespace; BERT's wraps them in [CLS] ... [SEP]."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    if family == "bert":
        tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
    else:
        tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(SPECIAL)
    tokenizer.save(os.path.join(path, "tokenizer.json"))


def write_checkpoint(
    family: str, path: str, *, seed: int = 0, torch_dtype=None, max_shard_size=None, **overrides
):
    """A random checkpoint of `family` in directory `path` (saved in `torch_dtype`, default float32); returns the
    float32 eager PyTorch model."""
    import torch

    torch.manual_seed(seed)
    config = hf_config(family, **overrides)
    model = model_class(family).from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():  # visible norms and biases: random init sets them to 1 and 0
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    saved = model.to(torch.float32 if torch_dtype is None else torch_dtype)
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    saved.save_pretrained(path, **kwargs)
    write_tokenizer(path, family)
    return saved.to(torch.float32)


def _float64_rates(rope: dict, dim: int) -> np.ndarray:
    """The rotary rates `[dim / 2]` in float64, as Hugging Face's `rope_parameters` define them."""
    inv = rope["rope_theta"] ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        return inv / rope["factor"]
    if kind == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        original = rope["original_max_position_embeddings"]
        wavelength = 2 * math.pi / inv
        smooth = (original / wavelength - low) / (high - low)
        scaled = np.where(wavelength > original / low, inv / factor, inv)
        medium = (wavelength >= original / high) & (wavelength <= original / low)
        return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    assert kind == "default", kind
    return inv


def _rotary_forward(module, rates):
    """`rates`: the rotary rates, or a dict of them by Gemma 3's layer type."""
    import torch

    def forward(self, x, position_ids, layer_type=None):
        rate = rates if layer_type is None else rates[layer_type]
        scaling = getattr(
            self, "attention_scaling" if layer_type is None else f"{layer_type}_attention_scaling"
        )
        freqs = position_ids[..., None].to(torch.float64) * rate
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)

    return types.MethodType(forward, module)


def _rms_forward(module):
    """Llama's RMSNorm (w x / rms) or Gemma 3's ((1 + w) x / rms, epsilon `eps`) in x's dtype."""
    import torch

    gemma = type(module).__name__.startswith("Gemma")

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        normed = x * torch.rsqrt(variance + (self.eps if gemma else self.variance_epsilon))
        return (1.0 + self.weight) * normed if gemma else self.weight * normed

    return types.MethodType(forward, module)


def _rotary_rates(module, config):
    """The float64 rates of a rotary module: one array, or Gemma 3's by layer type, each checked
    against Hugging Face's float32 rates."""
    import torch

    kinds = getattr(module, "layer_types", None)
    if kinds is None:
        pairs = {None: (config.rope_parameters, module.inv_freq)}
    else:
        pairs = {k: (config.rope_parameters[k], getattr(module, f"{k}_inv_freq")) for k in kinds}
    rates = {}
    for kind, (rope, theirs) in pairs.items():
        rates[kind] = _float64_rates(rope, theirs.shape[0] * 2)
        np.testing.assert_allclose(rates[kind], theirs.double().numpy(), rtol=1e-6)
        rates[kind] = torch.as_tensor(rates[kind])
    return rates[None] if kinds is None else rates


@contextlib.contextmanager
def exact_float64(model):
    """Within: `model`'s float32 islands (softmax, RMSNorm, rotary tables) run in its own dtype."""
    import torch

    softmax = torch.nn.functional.softmax
    patched = []

    def softmax64(x, dim=None, *args, dtype=None, **kwargs):
        return softmax(x, dim, *args, dtype=None if x.dtype == torch.float64 else dtype, **kwargs)

    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RotaryEmbedding"):
            patched.append(module)
            module.forward = _rotary_forward(module, _rotary_rates(module, model.config))
        elif name.endswith("RMSNorm"):
            patched.append(module)
            module.forward = _rms_forward(module)
        elif hasattr(module, "scalar_embed_scale"):  # Gemma's sqrt(D), else rounded to float32
            module.embed_scale = torch.tensor(module.scalar_embed_scale, dtype=torch.float64)
    torch.nn.functional.softmax = softmax64
    try:
        yield model
    finally:
        torch.nn.functional.softmax = softmax
        for module in patched:
            del module.forward


def hf_outputs(model, ids: np.ndarray, valid: np.ndarray) -> dict:
    """The eager forward on ids `[B, T]` with attention_mask `valid` `[B, T]`: 'out' (logits `[B, T, V]`, or
    the encoder's last hidden state `[B, T, D]`), 'hidden' `[L + 1, B, T, D]`, 'attention' `[L, B, H, T, T]`."""
    import torch

    with torch.no_grad():
        out = model(
            input_ids=torch.as_tensor(ids, dtype=torch.long),
            attention_mask=torch.as_tensor(valid, dtype=torch.long),
            output_hidden_states=True,
            output_attentions=True,
        )
    first = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return {
        "out": first.double().numpy(),
        "hidden": np.stack([h.double().numpy() for h in out.hidden_states]),
        "attention": np.stack([a.double().numpy() for a in out.attentions]),
    }


def relative_error(actual, expected) -> float:
    """max |actual - expected| / max |expected|."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
