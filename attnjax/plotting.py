"""Matplotlib figures of attention maps and of metrics across depth.

Every function returns a `matplotlib.figure.Figure` built without pyplot
(`figure`), so nothing depends on (or changes) a global backend: figures
render headless (Agg canvas) and are saved with `fig.savefig(path)` (or
atomically with `experiments.lab.workdir.atomic_write_figure`). matplotlib is imported
inside the functions, so `import attnjax` does not pull it in. Inputs are
NumPy or JAX arrays, converted to float64 NumPy on the host.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

# Cells a mask hides: a light grey, outside every default colour map, so that a hidden key never reads as
# weight 0.
MASKED_COLOUR = "0.82"


def figure(width: float, height: float):
    """An empty headless Figure of `width` x `height` inches (constrained layout, Agg canvas).

    The one figure factory of attnjax and its studies: add axes with
    `fig.subplots(...)` or `fig.add_subplot()`.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _as_numpy(x, name: str, ndims: tuple[int, ...]) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim not in ndims:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndims))} dimensions; got shape {x.shape}"
        )
    return x


def attention_heatmaps(
    weights,
    tokens: Sequence[str] | None = None,
    heads: Sequence[int] | None = None,
    *,
    layer: int | None = None,
    head: int | None = None,
    mask=None,
    vmax: float | None = None,
    log: bool = False,
    vmin: float | None = None,
    ncols: int | None = None,
    cmap: str = "viridis",
    title: str | None = None,
    annotate: bool | None = None,
):
    """Grid of attention heatmaps, one per head, on one shared colour scale.

    Args:
      weights: `[T, S]` (one map) or `[H, T, S]` (heads of one example).
      tokens: axis labels: one list for self-attention (`T == S`), or a pair
        `(query_tokens, key_tokens)`; default: positions. For a pretrained
        model's tokens, `TextTokenizer.token_labels(text)` gives each token
        decoded (byte-level BPE's 'Ġcat' as ' cat', a newline as '↵').
      heads: indices of the heads to draw from `[H, T, S]` (default: all).
      layer: the layer the maps come from, named in every panel title
        (attnjax counts layers from 0, as the model's `blocks` list does).
      head: the head a single `[T, S]` map comes from, named in its title
        (a `[T, S]` map is otherwise titled by its layer alone, or not at all).
      mask: which keys each query may see, boolean, True visible: `[T, S]` or
        `[H, T, S]` (e.g. `attnjax.masks.causal_mask`); masked cells are drawn
        grey, apart from visible weights of 0, and left out of the colour scale.
      vmax: top of the colour scale (default: the largest weight drawn); a
        smaller value keeps a sink column from flattening every other cell.
      log: logarithmic colour scale, from `vmin` to `vmax`.
      vmin: bottom of the log scale (default: the smallest positive weight
        drawn); ignored unless `log`.
      ncols: grid columns (default: 4, or fewer heads).
      cmap: colour map, with a single colour bar for all panels.
      title: figure title.
      annotate: write each weight in its cell (default: when `S <= 12`).

    Returns:
      A Figure with one axes per head plus one for the colour bar.
    """
    from matplotlib import colormaps

    w = _as_numpy(weights, "weights", (2, 3))
    single = w.ndim == 2
    if head is not None and not single:
        raise ValueError(
            f"head names a single [T, S] map; got weights of shape {w.shape} (select with heads=)"
        )
    w = w[None] if single else w
    num_heads, t, s = w.shape
    heads = list(range(num_heads)) if heads is None else [int(h) for h in heads]
    if not heads or any(not 0 <= h < num_heads for h in heads):
        raise ValueError(
            f"heads must be non-empty indices in [0, {num_heads}); "
            f"got {heads} for weights shape {w.shape}"
        )
    visible = _visible(mask, w.shape)
    drawn = np.ma.masked_array(w, mask=~visible)
    q_labels, k_labels = _token_labels(tokens, t, s)
    ncols = min(len(heads), 4) if ncols is None else int(ncols)
    nrows = math.ceil(len(heads) / ncols)
    annotate = s <= 12 if annotate is None else annotate
    norm = _colour_norm(drawn[heads], vmax, log, vmin)
    colours = colormaps[cmap].with_extremes(bad=MASKED_COLOUR)
    cell = max(0.1, min(0.3, 3.0 / max(t, s)))  # inches per cell: panels of about 3 in
    fig = figure(ncols * (s * cell + 0.9) + 1.2, nrows * (t * cell + 0.9) + (0.4 if title else 0.1))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    image, used = None, []
    for k, ax in enumerate(axes.flat):
        if k >= len(heads):
            fig.delaxes(ax)
            continue
        used.append(ax)
        h = heads[k]
        image = ax.imshow(
            drawn[h], cmap=colours, norm=norm, aspect="equal", interpolation="nearest"
        )
        ax.set_title(_panel_title(layer, head if single else h), fontsize=10)
        _label_axes(
            ax, q_labels, k_labels, first_col=k % ncols == 0, last_row=k + ncols >= len(heads)
        )
        if annotate:
            _annotate(ax, drawn[h], norm)
    fig.colorbar(image, ax=used, shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def _visible(mask, shape: tuple[int, int, int]) -> np.ndarray:
    """`mask` (None, `[T, S]` or `[H, T, S]` boolean) broadcast to `shape` `[H, T, S]`."""
    if mask is None:
        return np.ones(shape, bool)
    m = np.asarray(mask)
    if m.dtype != bool:
        raise TypeError(f"mask must be boolean (True: visible); got dtype {m.dtype}")
    if m.shape not in (shape[1:], shape, (1,) + shape[1:]):
        raise ValueError(
            f"mask must have shape {shape[1:]} or {shape} to match the weights; got {m.shape}"
        )
    return np.broadcast_to(m, shape)


def _colour_norm(drawn: np.ma.MaskedArray, vmax, log: bool, vmin):
    """The shared colour scale: linear from 0, or logarithmic from `vmin` (default the smallest positive
    visible weight), up to `vmax` (default the largest visible weight)."""
    from matplotlib.colors import LogNorm, Normalize

    if not drawn.count():
        raise ValueError("mask hides every cell of the heads drawn")
    top = float(drawn.max()) if vmax is None else float(vmax)
    if not log:
        return Normalize(vmin=0.0, vmax=top or 1.0)
    positive = drawn[drawn > 0]
    if vmin is None and not positive.count():
        raise ValueError("log colour scale: no positive weight is drawn; pass vmin")
    bottom = float(positive.min()) if vmin is None else float(vmin)
    if not 0 < bottom < top:
        raise ValueError(f"log colour scale needs 0 < vmin < vmax; got vmin={bottom}, vmax={top}")
    return LogNorm(vmin=bottom, vmax=top)


def _panel_title(layer: int | None, head: int | None) -> str:
    parts = ([] if layer is None else [f"layer {layer}"]) + (
        [] if head is None else [f"head {head}"]
    )
    return ", ".join(parts)


def _token_labels(tokens, t: int, s: int):
    if tokens is None:
        return [str(i) for i in range(t)], [str(j) for j in range(s)]
    tokens = list(tokens)
    if len(tokens) == 2 and not isinstance(tokens[0], str):
        q, k = (list(map(str, x)) for x in tokens)
    else:
        q = k = [str(x) for x in tokens]
    if len(q) != t or len(k) != s:
        raise ValueError(
            f"tokens must give {t} query and {s} key labels; got {len(q)} and {len(k)}"
        )
    return q, k


def _label_axes(ax, q_labels, k_labels, *, first_col: bool, last_row: bool) -> None:
    ax.set_xticks(range(len(k_labels)))
    ax.set_yticks(range(len(q_labels)))
    ax.set_xticklabels(k_labels, rotation=90, fontsize=8)
    ax.set_yticklabels(q_labels, fontsize=8)
    ax.tick_params(labelbottom=last_row, labelleft=first_col, length=2)
    if last_row:
        ax.set_xlabel("key")
    if first_col:
        ax.set_ylabel("query")


def _annotate(ax, m: np.ma.MaskedArray, norm) -> None:
    """Each visible weight written in its cell, dark on light colours (masked cells stay blank)."""
    for i, j in zip(*np.nonzero(~np.ma.getmaskarray(m))):
        colour = "black" if norm(m[i, j]) > 0.6 else "white"
        text = f"{m[i, j]:.2f}"
        text = text[1:] if text.startswith("0") else text  # ".25" keeps cells narrow
        ax.text(j, i, text, ha="center", va="center", fontsize=6, color=colour)


def metric_vs_depth(
    metrics: Mapping[str, object],
    *,
    ylabel: str = "metric",
    depths=None,
    log: bool = True,
    band: str = "minmax",
    title: str | None = None,
    start: int = 1,
):
    """A metric against depth, one line per variant, with a band over seeds.

    Args:
      metrics: `{variant: values}` with values `[layers]` or `[seeds, layers]`.
        The line is the mean over seeds; the band is the min–max range
        (`band='minmax'`) or mean ± one standard deviation (`band='std'`).
      ylabel: y-axis label.
      depths: x values `[layers]` (default start..start + layers - 1).
      log: logarithmic y axis (rank-collapse metrics decay geometrically or
        faster); non-positive values are masked.
      band: `'minmax'` or `'std'`.
      title: axes title.
      start: first default x value (0 when index 0 is the network's input).

    Returns:
      A Figure with one axes.
    """
    if band not in ("minmax", "std"):
        raise ValueError(f"band must be 'minmax' or 'std'; got {band!r}")
    if not metrics:
        raise ValueError("metrics must name at least one variant")
    fig = figure(6.0, 4.0)
    ax = fig.add_subplot()
    for name, values in metrics.items():
        v = _as_numpy(values, f"metrics[{name!r}]", (1, 2))
        v = v[None] if v.ndim == 1 else v
        x = (
            np.arange(start, start + v.shape[1])
            if depths is None
            else np.asarray(depths, dtype=np.float64)
        )
        if x.shape != (v.shape[1],):
            raise ValueError(f"depths must have shape ({v.shape[1]},); got {x.shape}")
        mean = v.mean(axis=0)
        (line,) = ax.plot(x, mean, marker="o", markersize=3, label=name)
        if v.shape[0] > 1:
            lo, hi = (
                (v.min(axis=0), v.max(axis=0))
                if band == "minmax"
                else (mean - v.std(axis=0), mean + v.std(axis=0))
            )
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    if log:
        ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("depth (layer)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return fig


def singular_value_spectrum(
    x, labels: Sequence[str] | None = None, *, normalize: bool = True, title: str | None = None
):
    """Singular values of one or several matrices, sorted, on a log scale.

    Args:
      x: `[T, D]` or `[L, T, D]` (e.g. hidden states or attention maps per
        layer); one line per matrix.
      labels: one label per matrix (default `layer 0..L-1`: the index into `[L, ...]`, as the API
        counts layers).
      normalize: divide by the largest singular value, so spectra of
        different scales compare (rank collapse shows as a fast drop).

    Returns:
      A Figure with one axes.
    """
    m = _as_numpy(x, "x", (2, 3))
    m = m[None] if m.ndim == 2 else m
    labels = [f"layer {i}" for i in range(m.shape[0])] if labels is None else list(labels)
    if len(labels) != m.shape[0]:
        raise ValueError(f"labels must have {m.shape[0]} entries; got {len(labels)}")
    s = np.linalg.svd(m, compute_uv=False)
    if normalize:
        s = s / np.where(s[:, :1] > 0, s[:, :1], 1.0)
    fig = figure(6.0, 4.0)
    ax = fig.add_subplot()
    colours = _colours(m.shape[0])
    for i in range(m.shape[0]):
        ax.plot(np.arange(1, s.shape[1] + 1), s[i], color=colours[i], label=labels[i])
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("index i")
    ax.set_ylabel(r"$\sigma_i / \sigma_1$" if normalize else r"$\sigma_i$")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncols=2 if m.shape[0] > 6 else 1)
    if title:
        ax.set_title(title)
    return fig


def eigenvalue_spectrum(a, labels: Sequence[str] | None = None, *, title: str | None = None):
    """Eigenvalues of one or several square matrices in the complex plane.

    For a row-stochastic attention map every eigenvalue lies in the unit disc
    (drawn) and 1 is an eigenvalue (Perron–Frobenius); the radius of the
    rest is the `slem` that sets how fast powers collapse to rank one.
    Eigenvalues are computed on the host with `numpy.linalg.eigvals`.

    Args:
      a: `[n, n]` or `[L, n, n]`.
      labels: one label per matrix (default `layer 0..L-1`: the index into `[L, ...]`, as the API
        counts layers).

    Returns:
      A Figure with one axes.
    """
    m = _as_numpy(a, "a", (2, 3))
    m = m[None] if m.ndim == 2 else m
    if m.shape[-1] != m.shape[-2]:
        raise ValueError(f"a must be square [..., n, n]; got shape {m.shape}")
    labels = [f"layer {i}" for i in range(m.shape[0])] if labels is None else list(labels)
    if len(labels) != m.shape[0]:
        raise ValueError(f"labels must have {m.shape[0]} entries; got {len(labels)}")
    ev = np.linalg.eigvals(m)
    fig = figure(5.0, 5.0)
    ax = fig.add_subplot()
    theta = np.linspace(0.0, 2.0 * np.pi, 361)
    ax.plot(np.cos(theta), np.sin(theta), color="0.6", linewidth=1.0, label="unit circle")
    colours = _colours(m.shape[0])
    for i in range(m.shape[0]):
        ax.scatter(ev[i].real, ev[i].imag, s=12, color=colours[i], alpha=0.8, label=labels[i])
    ax.set_aspect("equal")
    ax.set_xlim(-1.1, 1.1)
    ax.set_ylim(-1.1, 1.1)
    ax.axhline(0.0, color="0.85", linewidth=0.8, zorder=0)
    ax.axvline(0.0, color="0.85", linewidth=0.8, zorder=0)
    ax.set_xlabel("Re λ")
    ax.set_ylabel("Im λ")
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    return fig


def _colours(n: int):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(x) for x in np.linspace(0.0, 0.9, max(n, 1))]
