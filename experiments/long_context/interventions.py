"""The sink's interventions on one segment of T tokens, each one forward with its effect on the loss and on
where attention goes.

Received mass: m_l(j), the attention key j receives in layer l, averaged over
heads and over the query rows that see it, i >= max(j, 1) (row 0 sees only
itself). The sink layers are those from the formation layer l* on: the first
layer whose m_l(0) is at least half of the largest over layers (a half-maximum
onset, read from the unedited forward).

Edits (`attnjax.nn.edits`, `attnjax.nn.sites`):

    remove_formation   attention to key 0 removed (renormalised) in every layer >= l*
    remove_all         attention to key 0 removed in every layer: the relocation control; with
                       relative positions, the same as dropping token 0 from the input
    massive_zero       Sun et al.'s edit of a fixed set (`massive_values`): token 0's massive features
                       at the output of layer l_m, where they first appear in most segments, set to 0
    massive_mean       ... set to their mean over the other segments
    massive_swap       ... set to the next segment's values (the input-to-input variation, the scale
                       of "harmless")
    value_zero         Gu et al.'s key-bias reading: token 0's value set to 0 in the sink layers
                       (>= l*) for every query but token 0 itself (its own output is kept)
    first_newline      token 0 replaced by a newline, no edit
    first_random       token 0 replaced by a random text token, no edit

Relocation: after an edit, r = mean_(l >= l*) max_j m_l(j) / mean_(l >= l*) m_l(0) unedited, the
largest share of the sink's mass that one other token holds, over the rival keys j = 1..T/2 (each seen
by at least half of the rows: a late key's mean over its few rows is mostly its own diagonal); the
sink moved when r >= 1/2 (one token holds most of what the sink held).

Gu et al.'s sink rate at `edits.rate_length` tokens (the paper: 64): from the first rows of the unedited
forward (a causal model's first rows are a shorter input's), and from an input of random text tokens.

Spread (Barbero et al.'s mechanism): token q = T / 2 replaced by a random text token (the same in every
arm); the mean over p > q of ||h'_p - h_p|| / ||h_p||, h the last layer's output, with the model intact,
with `remove_formation` and with `remove_all` (Barbero et al.'s edit: the input without its first token).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax.analysis import massive_activations, sink_rate
from attnjax.nn import edits as edits_lib
from attnjax.nn import sites
from attnjax.pretrained.tokenizer import is_delimiter
from experiments.lab import causal_lm as model_lib

EDITS = (
    "none",
    "remove_formation",
    "remove_all",
    "massive_zero",
    "massive_mean",
    "massive_swap",
    "value_zero",
    "first_newline",
    "first_random",
)
TOP_K = 3  # keys reported per layer
SPREAD = ("none", "remove_formation", "remove_all")  # the spread of a perturbation, with each


@nnx.jit
def forward(model, tokens, edits):
    """`(nll [B, T-1], weights [L, B, H, T, S], hidden [L, B, T, D], head_out [L, B, T, H, Dh])` of one
    forward with `edits`; an edit's layers are part of the compiled program, its arrays are data."""
    logits, captured = model(tokens, edits=edits, capture=("weights", "resid_post", "head_out"))
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    return nll, captured["weights"], captured["resid_post"], captured["head_out"]


@nnx.jit
def hidden_states(model, tokens, edits):
    """Each layer's output `[L, B, T, D]` with `edits` (the head is not run)."""
    return model(tokens, edits=edits, capture=("resid_post",))[1]["resid_post"]


def received_mass(weights) -> np.ndarray:
    """m_l(j) `[L, S]` from weights `[L, 1, H, T, S]`: the mean over heads and over the query rows that see
    key j, i >= max(j, 1) (row 0 sees only itself)."""
    w = np.asarray(weights[:, 0].astype(jnp.float32), np.float64).mean(axis=1)  # [L, T, S]
    rows = np.arange(w.shape[1])[:, None] >= np.maximum(np.arange(w.shape[2]), 1)[None, :]
    return (w * rows).sum(axis=1) / np.maximum(rows.sum(axis=0), 1)


def formation_layer(key0_mass) -> int:
    """l*: the first layer whose mass on key 0 `[L]` is at least half of the largest."""
    m = np.asarray(key0_mass, np.float64)
    return int(np.argmax(m >= m.max() / 2))


def first_massive(hidden) -> tuple[int, np.ndarray]:
    """`(layer, where)`: the first layer whose output `[L, 1, T, D]` has a massive activation and the mask
    `[L, 1, T, D]` of that layer's (False elsewhere); `(-1, all False)` when no layer has one."""
    hits = np.asarray(massive_activations(hidden))
    layers = np.flatnonzero(hits.any(axis=(1, 2, 3)))
    where = np.zeros_like(hits)
    if layers.size == 0:
        return -1, where
    where[layers[0]] = hits[layers[0]]
    return int(layers[0]), where


def _massive_values(config) -> dict:
    model, _ = model_lib.load(config)
    tokens = model_lib.segments(config, config.edits.length)
    hidden = [hidden_states(model, tokens[s : s + 1], ()) for s in range(tokens.shape[0])]
    found = [f for f in (first_massive(h)[0] for h in hidden) if f >= 0]
    if not found:
        return {"layer": -1, "features": [], "values": np.zeros((len(hidden), 0))}
    layer = int(np.bincount(found).argmax())  # where most segments' first appear
    on_first = np.stack([np.asarray(massive_activations(h[layer]))[0, 0] for h in hidden])  # [S, D]
    features = np.flatnonzero(on_first.mean(0) >= 0.5)  # massive on token 0 in half the segments
    values = np.stack([np.asarray(h[layer, 0, 0], np.float64)[features] for h in hidden])
    return {"layer": layer, "features": features.tolist(), "values": values}


_MASSIVE: dict = {}


def massive_values(config) -> dict:
    """Sun et al.'s fixed edit set, once per process: `layer` l_m, the layer whose output first holds a
    massive activation in the most segments (-1: none does); `features`, those massive on token 0 there in
    at least half of the segments; `values` `[S, len(features)]`, each segment's activations there."""
    key = (
        config.model.name,
        config.model.path,
        tuple(config.text.modules),
        config.seed,
        config.text.segment_stride,
        config.text.num_segments,
        config.edits.length,
    )
    if key not in _MASSIVE:
        _MASSIVE[key] = _massive_values(config)
    return _MASSIVE[key]


def _sun_edits(config, index: int, shape: tuple) -> dict:
    """The three values Sun et al.'s activations (token 0, `features`, output of l_m) are set to: 0, the
    mean over the other segments, and the next segment's (a swap: the input-to-input variation)."""
    sun = massive_values(config)
    if sun["layer"] < 0 or not sun["features"]:
        return {}
    values = sun["values"]
    others = np.delete(values, index, axis=0)
    where = np.zeros(shape, bool)  # [L, 1, T, D]
    where[sun["layer"], 0, 0, sun["features"]] = True
    out = {}
    for name, v in (
        ("massive_zero", np.zeros(values.shape[1])),
        ("massive_mean", others.mean(0)),
        ("massive_swap", values[(index + 1) % len(values)]),
    ):
        full = np.zeros(shape[-1], np.float32)
        full[sun["features"]] = v
        out[name] = (sites.replace("resid_post", jnp.asarray(full), jnp.asarray(where)),)
    return out


def _edits(config, model, tokens, head_out, formation: int, index: int, rng) -> dict:
    """`{name: (tokens, edits)}` of every variant of `EDITS` this segment has (the Sun edits need a massive
    activation, `massive_values`; the newline test a newline token)."""
    num_layers, length = model.config.num_layers, tokens.shape[1]
    pool = model_lib.text_vocabulary(config)
    v_where = np.zeros((num_layers, 1, length, 1, 1), bool)
    v_where[formation:, :, 0] = True  # token 0's value in the sink layers ...
    variants = {
        "none": (tokens, ()),
        "remove_formation": (
            tokens,
            tuple(edits_lib.remove_keys(layer, [0]) for layer in range(formation, num_layers)),
        ),
        "remove_all": (tokens, (edits_lib.remove_keys(None, [0]),)),
        "value_zero": (
            tokens,
            (
                sites.replace("v", 0.0, jnp.asarray(v_where)),
                # ... but token 0's own output kept (it attends only to itself): other queries only
                sites.replace("head_out", head_out, jnp.asarray(v_where)),
            ),
        ),
        "first_random": (tokens.at[:, 0].set(_other_token(pool, tokens[0, 0], rng, model)), ()),
    }
    newline = model_lib.token_id_or_none(config, "\n")
    if newline is not None:
        variants["first_newline"] = (tokens.at[:, 0].set(newline), ())
    shape = (num_layers, 1, length, model.config.block.features)
    variants.update({k: (tokens, e) for k, e in _sun_edits(config, index, shape).items()})
    return variants


def _other_token(pool: np.ndarray, current, rng, model) -> int:
    """A text token drawn uniformly from `pool` other than `current` (a text of one distinct token: the
    next id of the vocabulary)."""
    others = pool[pool != int(current)]
    if others.size == 0:
        return (int(current) + 1) % model.config.vocab_size
    return int(rng.choice(others))


def _mass_row(name: str, nll, weights, sink_positions) -> dict:
    """One variant's loss and where its attention goes, per layer."""
    m = received_mass(weights)  # [L, S]
    others = np.full_like(m, -np.inf)  # rivals: keys 1..S/2, each seen by at least half of the rows
    others[:, 1 : m.shape[1] // 2 + 1] = m[:, 1 : m.shape[1] // 2 + 1]
    top = np.argsort(-m, axis=1, kind="stable")[:, :TOP_K]
    return {
        "metric": "edit",
        "edit": name,
        "nll": float(np.mean(np.asarray(nll[0, 1:], np.float64))),
        "key0_mass": m[:, 0].tolist(),
        "other_max": others.max(axis=1).tolist(),
        "other_argmax": others.argmax(axis=1).tolist(),
        "sink_token_mass": m[:, sink_positions].sum(axis=1).tolist(),
        "top_keys": top.tolist(),
        "top_mass": np.take_along_axis(m, top, axis=1).tolist(),
    }


def _spread(hidden, perturbed, position: int) -> list[float]:
    """Per layer `[L]`: the mean over p > position of ||h'_p - h_p|| / ||h_p|| (hidden `[L, 1, T, D]`)."""
    h = np.asarray(hidden[:, 0, position + 1 :], np.float64)
    d = np.asarray(perturbed[:, 0, position + 1 :], np.float64) - h
    return (np.linalg.norm(d, axis=-1) / np.linalg.norm(h, axis=-1)).mean(axis=-1).tolist()


def run(config, index: int) -> list[dict]:
    """Every intervention of the module docstring on segment `index` (`edits.length` tokens)."""
    model, tokenizer = model_lib.load(config)
    tokens = model_lib.segments(config, config.edits.length)[index : index + 1]
    nll, weights, hidden, head_out = forward(model, tokens, ())
    formation = formation_layer(received_mass(weights)[:, 0])
    massive_layer, _ = first_massive(hidden)
    hits = np.asarray(massive_activations(hidden))  # [L, 1, T, D]
    positions = sorted(set(np.flatnonzero(hits.any(axis=(0, 1, 3))).tolist()))
    labels = [tokenizer.decode([int(t)]) for t in np.asarray(tokens[0])]
    rows = [
        {
            "metric": "sink",
            "formation_layer": formation,
            "massive_layer": massive_layer,
            "sun_layer": massive_values(config)["layer"],
            "sun_features": massive_values(config)["features"],
            "sun_positions": _positions_at(hits, massive_values(config)["layer"]),
            "bos": bool(model_lib.prefix(config)),
            "massive_positions": positions,
            "massive_tokens": [labels[p] for p in positions],
            "massive_features": sorted(set(np.flatnonzero(hits.any(axis=(0, 1, 2))).tolist())),
            "massive_hits": hit_classes(hits, labels),
            "unigram_nll": model_lib.unigram_nll(config, np.asarray(tokens[0, 2:])),
            "first_tokens": tokenizer.decode(np.asarray(tokens[0, :4]).tolist()),
        }
    ]
    sink_positions = positions or [0]
    rate = config.edits.rate_length
    random_weights = forward(model, model_lib.random_tokens(config, index, rate), ())[1]
    for inputs, w in (("text", weights[:, :, :, :rate, :rate]), ("random", random_weights)):
        mass = w[:, 0, :, :, 0].astype(jnp.float32)  # [L, H, rate]: each row's weight on token 0
        rows.append(
            {
                "metric": "sink_rate",
                "inputs": inputs,
                "value": float(sink_rate(mass)),
                "head_means": np.asarray(mass.mean(-1)).tolist(),
            }
        )
    outputs = {}
    rng = np.random.default_rng([config.seed, index])
    variants = _edits(config, model, tokens, head_out, formation, index, rng)
    for name, (ids, edits) in variants.items():
        outputs[name] = (ids, edits, forward(model, ids, edits))
        rows.append(_mass_row(name, outputs[name][2][0], outputs[name][2][1], sink_positions))
    q = tokens.shape[1] // 2
    replacement = _other_token(model_lib.text_vocabulary(config), tokens[0, q], rng, model)
    for name in SPREAD:
        ids, edits, (_, _, h, _) = outputs[name]
        h_perturbed = hidden_states(model, ids.at[:, q].set(replacement), edits)
        rows.append(
            {"metric": "spread", "edit": name, "position": q, "values": _spread(h, h_perturbed, q)}
        )
    return rows


def _positions_at(hits: np.ndarray, layer: int) -> int:
    """How many positions hold a massive activation at `layer`'s output (0 for layer -1)."""
    return 0 if layer < 0 else int(hits[layer].any(axis=(0, 2)).sum())


def hit_classes(hits: np.ndarray, labels: list[str]) -> dict:
    """Every criterion hit (layer, position, feature) counted by where it sits: the first token, a delimiter
    (Sun et al.: the first period or newline; here any delimiter token) or another token."""
    per_position = hits.sum(axis=(0, 1, 3))  # [T]
    first = int(per_position[0])
    delimiter = int(sum(per_position[p] for p in range(1, len(labels)) if is_delimiter(labels[p])))
    return {
        "first": first,
        "delimiter": delimiter,
        "other": int(per_position.sum()) - first - delimiter,
    }
