"""The spectra study's runs: one per text segment and context length.

A run reads the segment's first T tokens (`experiments.lab.causal_lm`:
the tokenizer's prefix, then the text) through the model and, for each layer of
`config.layers` and each head, from the layer's own q and k without forming
the `[T, T]` map (`nn.attention_spectra`, `config.iterations` rounds of
subspace iteration):

* `sigma_1`, `sigma_2`, `sigma_3`: the map's largest singular values, and
  `bound_1`, `bound_2`: distances within which a true singular value lies;
* `slem`: |lambda_2|, exactly (a causal map's eigenvalues are its diagonal);
* `sink_mass`: the mass token 0 receives per row, m_0 / T = mean_i a_i0;
* `top_mass`: the largest mass any key receives per row, max_j m_j / T, and
  `top_key`, that key;
* `entropy`: the rows' entropy -sum_j a_ij log a_ij (nats), and
  `normalized_entropy`, divided by the log of the row's visible keys (1 for
  uniform attention over them, whatever the row), each averaged over rows
  1..T-1 (row 0 sees only itself);
* `window`: the layer's sliding window W (0: none), and `max_len`: the longest
  sequence the model's config allows.

Rows: `{"layer", "head", "metric", "value"}`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnjax import checks, nn
from experiments.lab import causal_lm as model_lib
from experiments.lab.workdir import RunDir

METRICS = (
    "sigma_1",
    "sigma_2",
    "sigma_3",
    "bound_1",
    "bound_2",
    "slem",
    "sink_mass",
    "top_mass",
    "top_key",
    "entropy",
    "normalized_entropy",
    "window",
    "max_len",
)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One text segment at one context length."""

    segment: int
    length: int

    @property
    def run_id(self) -> str:
        return f"seg{self.segment}-n{self.length:05d}"


def _distinct(name: str, values, minimum: int, *, allow_empty: bool = False) -> tuple:
    values = tuple(values)
    if not values and allow_empty:
        return values
    if not values:
        raise ValueError(f"config.{name} must not be empty")
    for value in values:
        checks.integer(f"config.{name} (each)", value, minimum)
    if len(set(values)) != len(values):
        raise ValueError(f"config.{name} has repeated values: {values}")
    return values


def specs(config) -> list[RunSpec]:
    """One run per segment and length (lengths ascending); raises ValueError naming the key of a bad
    value, before anything compiles."""
    model_lib.check_model(config)
    checks.integer("config.seed", config.seed, 0)
    checks.integer("config.text.num_segments", config.text.num_segments, 2)
    checks.integer("config.text.segment_stride", config.text.segment_stride, 1)
    checks.integer("config.iterations", config.iterations, 1)
    lengths = _distinct("lengths", config.lengths, 8)
    if len(lengths) < 2:
        raise ValueError(f"config.lengths must hold at least 2 lengths, got {lengths}")
    _distinct("layers", config.layers, 0, allow_empty=True)
    return [RunSpec(s, n) for s in range(config.text.num_segments) for n in sorted(lengths)]


def measure(spectra: nn.AttentionSpectra, length: int, windows, max_len: int) -> dict:
    """Every metric of `METRICS` from `nn.attention_spectra` of one sequence: `{metric: [layer][head]}`;
    `windows` the layers' sliding windows (None: none)."""

    def first(x):  # [L, 1, H, ...] -> [L, H, ...] float64
        return np.asarray(x, np.float64)[:, 0]

    values, bounds = first(spectra.values), first(spectra.bounds)
    return {
        "sigma_1": values[..., 0],
        "sigma_2": values[..., 1],
        "sigma_3": values[..., 2],
        "bound_1": bounds[..., 0],
        "bound_2": bounds[..., 1],
        "slem": first(spectra.slem),
        "sink_mass": first(spectra.mass)[..., 0] / length,
        "top_mass": first(spectra.top_mass)[..., 0] / length,
        "top_key": first(spectra.top_keys)[..., 0],
        "entropy": first(spectra.entropy)[..., 1:].mean(axis=-1),
        "normalized_entropy": first(spectra.normalized_entropy)[..., 1:].mean(axis=-1),
        "window": np.broadcast_to([[w or 0] for w in windows], values.shape[:2]),
        "max_len": np.full(values.shape[:2], max_len),
    }


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    """The metrics of every chosen layer and head on the segment's first `spec.length` tokens."""
    model, _ = model_lib.load(config)
    if not model.config.causal:
        raise ValueError(
            "the spectra study needs a causal LM (|lambda_2| is read off the diagonal)"
        )
    layers = tuple(config.layers) or tuple(range(model.config.num_layers))
    tokens = model_lib.segments(config, spec.length)[spec.segment][None]
    spectra = nn.attention_spectra(
        model, tokens, num_values=3, top_k=1, iterations=config.iterations, layers=layers
    )
    windows = [model.config.windows[layer] for layer in layers]
    measured = measure(spectra, spec.length, windows, model.config.max_len)
    run.log(f"{spec.run_id}: {len(layers)} layers x {measured['sigma_1'].shape[1]} heads")
    return [
        {"layer": layer, "head": head, "metric": metric, "value": float(measured[metric][i, head])}
        for i, layer in enumerate(layers)
        for head in range(measured["sigma_1"].shape[1])
        for metric in METRICS
    ]
