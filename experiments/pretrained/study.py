r"""Real pretrained attention across depth: measurements.

    python -m experiments.pretrained --config configs/pretrained.py --workdir runs/pt
    python -m experiments.pretrained --config configs/pretrained.py:causal --workdir runs/pt_causal

One pretrained model (all-MiniLM-L6-v2: bidirectional, post-LN; or
SmolLM2-135M: causal, pre-RMSNorm, RoPE, grouped-query attention) reads real
English sentences (docstrings of standard-library modules, or
`config.text_file`). Sentences are grouped by their exact token count and
each group is one unpadded batch, so every metric sees real tokens only
(`corpus.py`: the model, the sentences and their sink tokens).

Runs:

* `depth-<variant>`: one forward pass per group through the model (`full`)
  or through the same weights rebuilt without skip connections
  (`no_skip`), without MLPs (`no_mlp`), with neither (`attention_only`), or
  with neither and without the block norms (`no_norm`: the pure attention
  network of Dong, Cordonnier & Loukas 2021, "Attention is not all you
  need: pure attention loses rank doubly exponentially with depth"); the
  other variants keep the block norms (`norms`: which norms a variant
  keeps, a string row), and every variant keeps BERT's embedding norm,
  which acts on the input X_0. Per layer and head, averaged over sentences: normalised entropy
  (over log of the visible keys), |lambda_2| (`slem`) and the spectral gap,
  Dobrushin's tau, the Perron vector's and the attention's mass on sink
  tokens (BERT: [CLS], [SEP], punctuation; causal LM: the first token)
  with the mass uniform attention would give them, the diagonal of the
  attention (for a causal map: its eigenvalues), head redundancy and
  pattern classes (the surgery variants keep the per-head metrics as their
  mean over heads). Per layer: the relative residual ||X - 1 x_bar^T||_F /
  ||X||_F, the absolute residual and the norm of the shared component
  ||1 x_bar^T||_F, the mean token cosine and the effective rank of the
  hidden states; the relative residual and the cosine of the tokens
  without the sinks (`CONTENT_SPAN`: the first token, or [CLS] and [SEP]);
  the largest |activation| over the median (Sun et al. 2024), where it sits
  (first token, a delimiter, which feature dimension) and its spread over
  sentences; and each sentence's log-residual per layer; and the products P_l = A_l ... A_1 of head-averaged
  attention: tau(P_l) and the distance of their rows from e_1. The `full`
  run also keeps a few heads' maps of one sentence for heatmaps.
* `paths` (`paths.py`): single-head paths of length k (Dong et al. 2021, Fig. 2): k of
  the L layers in order and one head in each; the path output is
  A_{l_k}^{h_k} ... A_{l_1}^{h_1} X_0 W^{l_1 h_1} ... W^{l_k h_k}, with
  W^{lh} = W_V^{g(h)} W_O^h the head's value-output map (g(h) = h // (H/K),
  its key/value head under grouped-query attention), X_0 the embeddings and
  A the full model's attention on real text; norms and biases are left out,
  as in the paper. Its relative residual is averaged over sentences.

Everything is float32. Rows: `{"metric", "values"}` (means over sentences,
`[L, H]` per head, `[L, 1]` their mean over heads in the surgery variants,
`[L + 1]` per hidden state, `[L]` per layer), with a
`sink` field for sink masses, `{"metric", "value"}` for the worst cases; `{"metric": "model", ...}` and `{"metric":
"groups", ...}` describe the model and the sentences; `{"metric": "example",
"layer", "head", "reason", "tokens", "values"}` the heatmaps; and
`{"metric": "path_residual", "length", "values": [num_paths]}`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import lax

from attnjax import checks, nn
from attnjax.analysis import (
    PATTERN_NAMES,
    classify_pattern,
    default_squarings,
    distance_to_first,
    dobrushin,
    head_redundancy,
    normalized_entropy,
    path_product,
    rank_report,
    residual_norm,
    residual_ratio,
    shared_norm,
    sink_mass,
    slem,
    spectral_radius_by_squaring,
    stationary_distribution,
    token_cosine_similarity,
    triangular_slem,
    uniform_sink_mass,
)
from attnjax.analysis import massive_activations as sun_massive
from attnjax.nn.attention import LayerSetting
from attnjax.pretrained.hf import MODEL_TYPES
from experiments.lab.workdir import RunDir
from experiments.pretrained.constants import BAND_WIDTHS, MASSIVE_FACTOR, MASSIVE_VALUE, QK_NORM
from experiments.pretrained.corpus import (
    CONTENT_SPAN,
    MODELS,
    SINKS,
    Group,
    check_content_span,
    checkpoint_config,
    corpus_sentences,
    delimiter_masks,
    family,
    forward,
    length_groups,
    load,
    sink_masks,
)
from experiments.pretrained.paths import paths_run

HIGHEST = lax.Precision.HIGHEST
# Surgery variants: the BlockConfig fields they change (every layer); `band`: every layer's window.
VARIANTS = {
    "full": {},
    "no_skip": {"skip": False},
    "no_mlp": {"mlp": False},
    "attention_only": {"skip": False, "mlp": False},
    "no_norm": {"skip": False, "mlp": False, "norm": None, "final_norm": False},
}
VARIANTS.update(
    {
        f"{base}_band{width}": {**VARIANTS[base], "band": width}
        for base in ("attention_only", "no_norm")
        for width in BAND_WIDTHS
    }
)
# Heatmaps of the last layer: (reason, metric, pick the largest?).
EXAMPLE_HEADS = (
    ("highest sink mass", "attention_sink", True),
    ("lowest entropy", "entropy", False),
    ("highest entropy", "entropy", True),
)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: the depth measurements of one surgery variant, or the sampled paths."""

    part: str
    variant: str = "full"

    @property
    def run_id(self) -> str:
        return f"depth-{self.variant}" if self.part == "depth" else "paths"


# --------------------------------------------------------------------------
# Config -> runs (every check before anything loads or compiles)


def _check_ints(name: str, values, minimum: int, *, allow_empty: bool = False) -> None:
    values = tuple(values)
    if not values and not allow_empty:
        raise ValueError(f"{name} must name at least one value")
    for v in values:
        checks.integer(f"{name}: every value", v, minimum)
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must be distinct, got {values}")


def _check_path(name: str, path, kind: str) -> None:
    if not isinstance(path, str):
        raise ValueError(f"{name} must be a string ('' for the default), got {path!r}")
    exists = os.path.isfile if kind == "file" else os.path.exists
    if path and not exists(path):
        raise ValueError(f"{name}: no such {kind}: {path!r}")


def specs(config) -> list[RunSpec]:
    """Every run of the study; raises ValueError on a bad config, before anything loads."""
    checks.integer("seed", config.seed, 0)
    if config.model.name not in MODELS:
        raise ValueError(f"model.name must be one of {tuple(MODELS)}, got {config.model.name!r}")
    _check_path("model.path", config.model.path, "path")
    hf_config = checkpoint_config(config)
    if hf_config is not None and hf_config.get("model_type") not in MODEL_TYPES:
        raise ValueError(
            f"model.path: {config.model.path!r} holds model_type {hf_config.get('model_type')!r}; "
            f"supported: {MODEL_TYPES}"
        )
    _check_path("text_file", config.text_file, "file")
    c = config.corpus
    if not config.text_file and (isinstance(c.modules, str) or not tuple(c.modules)):
        raise ValueError(f"corpus.modules must name at least one module, got {c.modules!r}")
    checks.integer("corpus.min_words", c.min_words, 1)
    checks.integer("corpus.max_words", c.max_words, c.min_words)
    _check_ints("corpus.lengths", c.lengths, 4, allow_empty=True)  # two tokens besides [CLS], [SEP]
    checks.integer("corpus.sentences_per_length", c.sentences_per_length, 1)
    variants = tuple(config.variants)
    unknown = [v for v in variants if v not in VARIANTS]
    if not variants or unknown or len(set(variants)) != len(variants):
        raise ValueError(f"variants must be distinct names from {tuple(VARIANTS)}, got {variants}")
    _check_ints("paths.lengths", config.paths.lengths, 1)
    checks.integer("paths.num_paths", config.paths.num_paths, 1)
    checks.integer("paths.num_sentences", config.paths.num_sentences, 1)
    return [RunSpec("depth", v) for v in variants] + [RunSpec("paths")]


# --------------------------------------------------------------------------
# Surgery


def surgery(model: nn.Transformer, variant: str) -> nn.Transformer:
    """The same pretrained weights in a Transformer whose config has `VARIANTS[variant]` changed.

    The new graph comes from `nnx.eval_shape` of the changed config; it takes
    the pretrained variables at its own paths (so without MLPs, the MLP and
    its norm are dropped). No layer is re-implemented.
    """
    changes = dict(VARIANTS[variant])
    if not changes:
        return model
    if "band" in changes:
        changes["layer_windows"] = (changes.pop("band"),) * model.config.num_layers
    block_fields = {f.name for f in dataclasses.fields(nn.BlockConfig)}
    block = dataclasses.replace(
        model.config.block, **{k: v for k, v in changes.items() if k in block_fields}
    )
    config = dataclasses.replace(
        model.config, block=block, **{k: v for k, v in changes.items() if k not in block_fields}
    )
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: nn.Transformer(config, rngs=nnx.Rngs(0))))
    pretrained = dict(nnx.to_flat_state(nnx.state(model)))
    # The per-layer settings (windows, rotary bases) come from the new config, not the model's.
    subset = nnx.from_flat_state(
        {
            path: value if isinstance(value, LayerSetting) else pretrained[path]
            for path, value in nnx.to_flat_state(abstract)
        }
    )
    edited = nnx.merge(graphdef, subset)
    edited.set_layer_settings()
    return edited


def kept_norms(config: nn.TransformerConfig) -> str:
    """Which norm layers act on the hidden states of a (surgery) model, in words.

    E.g. 'post-LayerNorm in every block, embedding norm'; a QK-norm (Gemma 3)
    is named too (it bounds the logits, not the hidden states). The final
    norm, before the head, acts on no hidden state measured here.
    """
    kind = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[config.block.norm_kind]
    parts = [f"{config.block.norm}-{kind} in every block"] if config.block.norm else []
    qk = config.block.attention.normalize_qk
    parts += [f"{qk} {QK_NORM} on queries and keys"] if qk else []
    parts += ["embedding norm"] * bool(config.embedding_norm)
    return ", ".join(parts) or "none"


# --------------------------------------------------------------------------
# Measurements (sums over the sentences of a group; means are taken over all groups)


def visible_keys(n: int, causal: bool) -> jax.Array:
    """Keys each query may attend to, `[n, n]` bool: the lower triangle when causal."""
    return jnp.tril(jnp.ones((n, n), bool)) if causal else jnp.ones((n, n), bool)


def _query_mean(x: jax.Array, weight: jax.Array) -> jax.Array:
    """Weighted mean over the last (query) axis: `[..., n]`, weight `[n]` summing to 1 -> `[...]`."""
    return jnp.matmul(x, weight, precision=HIGHEST)


@functools.partial(jax.jit, static_argnames=("causal",))
def attention_sums(attention: jax.Array, sinks: jax.Array, *, causal: bool) -> dict:
    """Per-layer/head attention metrics summed over sentences.

    attention `[L, B, H, n, n]`, sinks `[C, B, n]` bool. Means over queries
    skip those with a single visible key (the first query of a causal map,
    which can only attend to itself). Returns sums over B: `[L, H]` per head
    (`patterns` `[L, H, len(PATTERN_NAMES)]` class counts, sink masses
    `[C, L, H]`, `uniform_sink` `[C]`), `[L]` per layer (`redundancy`: the
    mean cosine between two heads' maps; `path_tau`, `path_first_max`: of
    the products of head-averaged attention); `sentence_sink` `[B, L]` (per
    sentence, the first category's mass, mean over heads; kept per
    sentence, not summed); and worst cases, scalars: `slem_over_tau` (max
    of |lambda_2| - tau, <= 0 in exact arithmetic) and, for causal maps,
    `slem_diagonal_error` (max of |slem(A) - max_(i>=2) a_ii|: the general
    iterative estimate, repeated squaring of A - 1 pi^T, against the exact
    diagonal). |lambda_2| of a causal map is read off its
    diagonal (`slem` does so for any triangular map), exactly; a sink head's
    map, all its mass in the first column, is so far from normal that
    iterative estimates of its small eigenvalues are unreliable.
    """
    a = attention
    n = a.shape[-1]
    visible = visible_keys(n, causal)
    informative = jnp.sum(visible, axis=-1) > 1
    weight = informative.astype(a.dtype) / jnp.sum(informative)
    pi = stationary_distribution(a)  # [L, B, H, n]
    lam2 = slem(a, pi=pi)  # read off the diagonal of a causal map, exactly
    # The general iterative estimate (what slem gives a map that is not triangular) against it:
    squaring = spectral_radius_by_squaring(a - pi[..., None, :], default_squarings(a.dtype))
    error = jnp.abs(squaring - triangular_slem(a)) if causal else jnp.zeros_like(lam2)
    tau = dobrushin(a)
    s = sinks.astype(a.dtype)  # [C, B, n]
    attn_sink = _query_mean(sink_mass(a[None], s[:, None, :, None, :]), weight)  # [C, L, B, H]
    perron_sink = sink_mass(pi[None, ..., None, :], s[:, None, :, None, :])[..., 0]  # [C, L, B, H]
    diagonal = jnp.diagonal(a, axis1=-2, axis2=-1)  # [L, B, H, n]
    head_mean = jnp.swapaxes(jnp.mean(a, axis=2), 0, 1)  # [B, L, n, n], still row-stochastic
    products = path_product(head_mean)
    first = distance_to_first(products)  # [B, L, n]
    patterns = jax.nn.one_hot(
        classify_pattern(a, visible=visible), len(PATTERN_NAMES), dtype=a.dtype
    )  # [L, B, H, 6]
    heads = a.shape[2]
    redundancy = head_redundancy(a)  # [L, B, H, H], ones on the diagonal
    pairs = (jnp.sum(redundancy, axis=(-2, -1)) - heads) / max(heads * (heads - 1), 1)  # [L, B]

    def over_b(x):
        return jnp.sum(x, axis=-2)

    return {
        "entropy": over_b(_query_mean(normalized_entropy(a, visible), weight)),
        "slem": over_b(lam2),
        "tau": over_b(tau),
        "attention_sink": over_b(attn_sink),
        "sentence_sink": jnp.swapaxes(jnp.mean(attn_sink[0], axis=-1), 0, 1),  # [B, L]
        "perron_sink": over_b(perron_sink),
        "uniform_sink": jnp.sum(_query_mean(uniform_sink_mass(visible, s), weight), axis=-1),
        "diagonal_mean": over_b(_query_mean(diagonal, weight)),
        "redundancy": jnp.sum(pairs, axis=1),
        "patterns": jnp.sum(patterns, axis=1),
        "path_tau": jnp.sum(dobrushin(products), axis=0),
        "path_first_max": jnp.sum(jnp.max(first, axis=-1), axis=0),
        "slem_over_tau": jnp.max(lam2 - tau),
        "slem_diagonal_error": jnp.max(error),
    }


# Worst-case metrics of `attention_sums` (max over sentences, not sums).
WORST = ("slem_over_tau", "slem_diagonal_error")
# Per-sentence metrics of `attention_sums` and `hidden_sums` (concatenated over groups, not summed).
PER_SENTENCE = (
    "sentence_sink",
    "sentence_log_residual",
    "sentence_log_residual_abs",
    "sentence_hits",
    "sentence_hit_dims",
)
# Counts per feature dimension of `hidden_sums` (sums over sentences, not means).
COUNTS = ("massive_dims", "massive_hit_dims")
# Per-head metrics of `attention_sums` (head on the last axis).
PER_HEAD = ("entropy", "slem", "tau", "attention_sink", "perron_sink", "diagonal_mean")


def _content_metrics(hidden: jax.Array, start: int, stop: int) -> tuple[jax.Array, jax.Array]:
    """Relative residual and mean token cosine `[L + 1, B]` of tokens start..n - stop - 1 (the sinks left out)."""
    content = hidden[..., start : hidden.shape[-2] - stop, :]
    return residual_ratio(content), token_cosine_similarity(content)


def massive_activations(hidden: jax.Array, delimiters: jax.Array) -> dict:
    """The largest |activation| of each hidden state and where it sits (Sun et al. 2024).

    hidden `[L + 1, B, n, D]`, delimiters `[B, n]` bool. Per state: m =
    max |h_td|, the ratio m / median_(t,d) |h_td|, its token t* and feature
    dimension d*, and the count of activations with |h| >= MASSIVE_VALUE and
    >= MASSIVE_FACTOR x the median. Returns `[L + 1, B]` arrays `ratio`,
    `value`, `count`, `first` (t* = 0), `delimiter` (t* a delimiter, not
    the first token) and `dims` `[L + 1, B, D]` (one-hot d*); and every
    criterion hit (`attnjax.analysis.massive_activations`), not only the
    largest: `hits_first`, `hits_first_delimiter`, `hits_delimiter`
    `[L + 1, B]` (hits on the first token, on the first delimiter after it,
    on every delimiter after it) and `hit_dims` `[L + 1, B, D]`.
    """
    size = hidden.shape[-1]
    a = jnp.abs(hidden).reshape(*hidden.shape[:2], -1)  # [L + 1, B, n D]
    top, where = jnp.max(a, axis=-1), jnp.argmax(a, axis=-1)
    median = jnp.median(a, axis=-1)
    token, dim = where // size, where % size
    hits = sun_massive(hidden, MASSIVE_VALUE, MASSIVE_FACTOR)  # [L + 1, B, n, D]
    per_token = jnp.sum(hits, axis=-1)  # [L + 1, B, n]
    later = delimiters[:, 1:]  # [B, n - 1]: the delimiters after the first token
    first_delimiter = later & (jnp.cumsum(later, axis=-1) == 1)
    on_delimiters = jnp.sum(per_token[..., 1:] * later[None], axis=-1)
    on_first_delimiter = jnp.sum(per_token[..., 1:] * first_delimiter[None], axis=-1)
    on_delimiter = jnp.take_along_axis(
        jnp.broadcast_to(delimiters, a.shape[:2] + delimiters.shape[-1:]), token[..., None], axis=-1
    )[..., 0]
    return {
        "ratio": top / jnp.maximum(median, jnp.finfo(a.dtype).tiny),
        "value": top,
        "count": jnp.sum(per_token, axis=-1).astype(a.dtype),
        "hits_first": per_token[..., 0].astype(a.dtype),
        "hits_first_delimiter": on_first_delimiter.astype(a.dtype),
        "hits_delimiter": on_delimiters.astype(a.dtype),
        "hit_dims": jnp.sum(hits, axis=-2).astype(a.dtype),
        "first": (token == 0).astype(a.dtype),
        "delimiter": (on_delimiter & (token > 0)).astype(a.dtype),
        "dims": jax.nn.one_hot(dim, size, dtype=a.dtype),
    }


def _log(x: jax.Array) -> jax.Array:
    """log x, with 0 read as the smallest positive number of its dtype (never -inf)."""
    return jnp.log(jnp.maximum(x, jnp.finfo(x.dtype).tiny))


@functools.partial(jax.jit, static_argnames=("span",))
def hidden_sums(hidden: jax.Array, delimiters: jax.Array, *, span: tuple[int, int]) -> dict:
    """Per-layer metrics of hidden states `[L + 1, B, n, D]`, summed over B -> each `[L + 1]`.

    `residual` (relative, Dong et al. 2021), `residual_abs` and `shared_norm`
    (`residual_norm`, `shared_norm`), `cosine` (mean token cosine, Noci et al. 2022),
    `effective_rank` (Roy & Vetterli 2007), `first_norm_ratio`: the first
    token's norm over the median of the others', and `log_residual` (log of
    the relative residual; its mean gives the geometric mean over
    sentences, the average that keeps a per-sentence decay rate);
    `residual_content`, `cosine_content`: the same without the sink tokens
    (`span` = (first, last) tokens dropped); `massive_*` (`massive_activations`;
    `massive_value_sq` the sum of squares, for the spread over sentences,
    `massive_dims`, `massive_hit_dims` `[L + 1, D]` counts). Kept per
    sentence, not summed: `sentence_log_residual` and
    `sentence_log_residual_abs` `[B, L + 1]` (log of the relative and of the
    absolute residual), `sentence_hits` `[B, 4]` (massive activations
    over all states: on the first token, on the first delimiter, on every
    delimiter after the first token, all) and
    `sentence_hit_dims` `[B, D]` (them per feature dimension).
    """
    ranks = rank_report(hidden)  # one SVD for every rank metric
    residual, shared = residual_norm(hidden), shared_norm(hidden)
    norms = jnp.sqrt(jnp.sum(jnp.square(hidden), axis=-1))  # [L + 1, B, n]
    first_ratio = norms[..., 0] / jnp.median(norms[..., 1:], axis=-1)
    content_residual, content_cosine = _content_metrics(hidden, *span)
    massive = massive_activations(hidden, delimiters)
    log_residual = _log(ranks.residual_ratio)

    def total(x):
        return jnp.sum(x, axis=1)

    return {
        "residual": total(ranks.residual_ratio),
        "residual_abs": total(residual),
        "shared_norm": total(shared),
        "cosine": total(ranks.token_cosine_similarity),
        "effective_rank": total(ranks.effective_rank),
        "first_norm_ratio": total(first_ratio),
        "log_residual": total(log_residual),
        "residual_content": total(content_residual),
        "cosine_content": total(content_cosine),
        **{f"massive_{k}": total(v) for k, v in massive.items()},
        "massive_value_sq": total(jnp.square(massive["value"])),
        "sentence_log_residual": jnp.swapaxes(log_residual, 0, 1),
        "sentence_log_residual_abs": jnp.swapaxes(_log(residual), 0, 1),
        "sentence_hits": jnp.stack(
            [
                jnp.sum(massive[k], axis=0)
                for k in ("hits_first", "hits_first_delimiter", "hits_delimiter", "count")
            ],
            -1,
        ),
        "sentence_hit_dims": jnp.sum(massive["hit_dims"], axis=0),
    }


def accumulate(total: dict, part: dict) -> dict:
    """`total` (the sums of the groups so far, `{}` before the first) with one group's `part` added: sums
    add, the worst cases (`WORST`) take the max, the per-sentence rows (`PER_SENTENCE`) are appended."""
    part = {k: np.asarray(v, np.float64) for k, v in part.items()}
    if not total:
        return part

    def merge(k, v):
        return (
            np.maximum(total[k], v)
            if k in WORST
            else (np.concatenate([total[k], v]) if k in PER_SENTENCE else total[k] + v)
        )

    return {k: merge(k, v) for k, v in part.items()}


def _example_rows(kind: str, group: Group, attention: np.ndarray, means: dict) -> list[dict]:
    """Heatmap rows: `EXAMPLE_HEADS` of the last layer on the group's first sentence (distinct heads, so
    as many as the model has heads)."""
    layer, rows, chosen = attention.shape[0] - 1, [], set()
    for reason, metric, largest in EXAMPLE_HEADS[: attention.shape[1]]:
        values = np.asarray(means[metric][0] if metric == "attention_sink" else means[metric])[
            layer
        ]
        order = np.argsort(-values if largest else values, kind="stable")
        head = int(next(h for h in order if h not in chosen))
        chosen.add(head)
        rows.append(
            {
                "metric": "example",
                "layer": layer,
                "head": head,
                "reason": reason,
                "tokens": list(group.tokens[0]),
                "values": attention[layer, head],
            }
        )
    return rows


def _nonzero_pairs(counts: np.ndarray) -> list:
    """Counts per feature dimension `[D]` as `[dimension, count]` pairs, largest first, nonzero only."""
    return [[int(d), int(counts[d])] for d in np.argsort(-counts, kind="stable") if counts[d] > 0]


def depth_run(config, spec: RunSpec, run: RunDir) -> list[dict]:
    base, tokenizer = load(config)
    model = surgery(base, spec.variant)
    kind, causal = family(config), base.config.causal
    groups = length_groups(
        tokenizer,
        corpus_sentences(config),
        tuple(config.corpus.lengths),
        config.corpus.sentences_per_length,
    )
    totals, example = {}, None
    for group in groups:
        run.log(f"      {spec.variant}: {len(group.ids)} sentences of {group.ids.shape[1]} tokens")
        check_content_span(kind, group.tokens)
        hidden, attention = forward(model, jnp.asarray(group.ids))
        sums = {
            **attention_sums(attention, jnp.asarray(sink_masks(kind, group.tokens)), causal=causal),
            **hidden_sums(
                hidden, jnp.asarray(delimiter_masks(group.tokens)), span=CONTENT_SPAN[kind]
            ),
        }
        totals = accumulate(totals, jax.device_get(sums))
        if example is None:
            example = (group, np.asarray(attention[:, 0]))
    count = sum(len(g.ids) for g in groups)
    means = {k: v if k in WORST + PER_SENTENCE + COUNTS else v / count for k, v in totals.items()}
    c = base.config.block
    rows = [
        {
            "metric": "model",
            "num_layers": base.config.num_layers,
            "num_heads": c.num_heads,
            "num_kv_heads": c.attention.kv_heads(c.num_heads),
            "causal": causal,
            "norm": c.norm,
            "family": kind,
        },
        {
            "metric": "groups",
            "lengths": [int(g.ids.shape[1]) for g in groups],
            "counts": [len(g.ids) for g in groups],
            "first_tokens": collections.Counter(t[0] for g in groups for t in g.tokens).most_common(
                3
            ),
        },
        {"metric": "norms", "value": kept_norms(model.config)},
    ]
    categories = SINKS[kind]
    if spec.variant != "full":  # the surgery variants keep only the mean over heads, [L, 1]
        means = {
            k: v.mean(axis=-1, keepdims=True) if k in PER_HEAD else v for k, v in means.items()
        }
    for name, values in means.items():
        if name in ("attention_sink", "perron_sink", "uniform_sink"):
            rows += [
                {"metric": name, "sink": cat, "values": values[i]}
                for i, cat in enumerate(categories)
            ]
        elif name in WORST:
            rows.append({"metric": name, "value": float(values)})
        elif name in COUNTS:  # sentences (or hits) per dimension, nonzero only
            rows.append({"metric": name, "values": [_nonzero_pairs(row) for row in values]})
        elif name == "sentence_hit_dims":  # per sentence, [dimension, hits] pairs, nonzero only
            rows.append({"metric": name, "values": [_nonzero_pairs(row) for row in values]})
        elif name == "patterns":  # each head's most frequent class over the sentences
            rows.append({"metric": "pattern", "values": np.argmax(values, axis=-1)})
        else:
            rows.append({"metric": name, "values": values})
    if spec.variant == "full":
        rows += _example_rows(kind, *example, means)
    return rows


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    return depth_run(config, spec, run) if spec.part == "depth" else paths_run(config, spec, run)
