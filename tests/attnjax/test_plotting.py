"""Figures: axes counts, shared colour scale, labels, PNG output."""

import numpy as np
import pytest

from attnjax import plotting

TOKENS = "the cat sat on the mat because it was tired".split()


def example_weights():
    """The articles' example: batch 2, seq 10, d_model 512, 8 heads of 64.

    softmax(Q Kᵀ / √64) with Q, K random projections of random inputs, in
    float64 NumPy: `[2, 8, 10, 10]`.
    """
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 10, 512))
    wq, wk = rng.normal(size=(2, 512, 512)) / np.sqrt(512)
    q = (x @ wq).reshape(2, 10, 8, 64)
    k = (x @ wk).reshape(2, 10, 8, 64)
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(64)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def saved_png(fig, path):
    fig.savefig(path, dpi=60)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return len(data)


def test_attention_heatmaps_eight_heads(tmp_path):
    w = example_weights()
    fig = plotting.attention_heatmaps(w[0], TOKENS, title="example 0")
    assert len(fig.axes) == 9  # 8 heads + one shared colour bar
    heads = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in heads] == [f"head {h}" for h in range(8)]
    limits = {ax.images[0].get_clim() for ax in heads}
    assert limits == {(0.0, float(w[0].max()))}  # one colour scale for every head
    assert [t.get_text() for t in heads[0].get_yticklabels()] == TOKENS
    assert [t.get_text() for t in heads[4].get_xticklabels()] == TOKENS
    assert saved_png(fig, tmp_path / "heads.png") > 20_000


def test_attention_heatmaps_subset_single_map_and_labels(tmp_path):
    w = example_weights()[1]
    assert len(plotting.attention_heatmaps(w, heads=[0, 3, 5]).axes) == 4
    single = plotting.attention_heatmaps(w[2])
    assert len(single.axes) == 2
    assert [t.get_text() for t in single.axes[0].get_xticklabels()] == [str(i) for i in range(10)]
    cross = plotting.attention_heatmaps(w[0, :4], tokens=(TOKENS[:4], TOKENS))
    assert [t.get_text() for t in cross.axes[0].get_yticklabels()] == TOKENS[:4]
    assert saved_png(cross, tmp_path / "cross.png") > 2_000
    with pytest.raises(ValueError, match="tokens"):
        plotting.attention_heatmaps(w, TOKENS[:5])
    with pytest.raises(ValueError, match="heads"):
        plotting.attention_heatmaps(w, heads=[8])
    with pytest.raises(ValueError, match=r"weights .*\(10,\)"):
        plotting.attention_heatmaps(w[0, 0])


def test_metric_vs_depth(tmp_path):
    rng = np.random.default_rng(1)
    depth = np.arange(1, 7)
    metrics = {
        "softmax": np.exp(-depth)[None] * rng.uniform(0.5, 1.5, size=(3, 6)),  # [seeds, layers]
        "linear": 0.5**depth * rng.uniform(0.8, 1.2, size=(3, 6)),
        "single seed": np.linspace(1.0, 0.1, 6),  # [layers]: a line, no band
    }
    fig = plotting.metric_vs_depth(metrics, ylabel="residual ratio", band="std")
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    assert [line.get_label() for line in ax.get_lines()] == list(metrics)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), metrics["softmax"].mean(0))
    assert len(ax.collections) == 2  # a band for each variant with several seeds
    assert saved_png(fig, tmp_path / "depth.png") > 5_000
    with pytest.raises(ValueError, match="band"):
        plotting.metric_vs_depth(metrics, band="iqr")
    with pytest.raises(ValueError, match="depths"):
        plotting.metric_vs_depth(metrics, depths=[1, 2])


def test_spectrum_plots(tmp_path):
    w = example_weights()[0, :3]  # three heads [3, 10, 10]
    sv = plotting.singular_value_spectrum(w, labels=["a", "b", "c"])
    (ax,) = sv.axes
    assert len(ax.get_lines()) == 3 and ax.get_yscale() == "log"
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata()[0], 1.0)  # normalised by σ_1
    assert saved_png(sv, tmp_path / "sv.png") > 5_000
    ev = plotting.eigenvalue_spectrum(w)
    (ax,) = ev.axes
    assert ax.get_lines()[0].get_label() == "unit circle"
    assert len(ax.collections) == 3  # one scatter per matrix
    # Default labels count layers as the API does: index l of the [L, ...] stack is "layer l".
    assert [c.get_label() for c in ax.collections] == ["layer 0", "layer 1", "layer 2"]
    default = plotting.singular_value_spectrum(w).axes[0]
    assert [line.get_label() for line in default.get_lines()] == ["layer 0", "layer 1", "layer 2"]
    points = np.concatenate([c.get_offsets() for c in ax.collections])
    modulus = np.hypot(points[:, 0], points[:, 1])
    assert modulus.max() <= 1 + 1e-9 and np.isclose(modulus.max(), 1.0)  # Perron eigenvalue 1
    assert saved_png(ev, tmp_path / "ev.png") > 5_000
    with pytest.raises(ValueError, match="square"):
        plotting.eigenvalue_spectrum(np.ones((3, 4)))


def test_metric_vs_depth_start_shifts_the_layer_axis():
    fig = plotting.metric_vs_depth({"a": np.array([1.0, 0.5, 0.25])}, start=0)
    np.testing.assert_array_equal(fig.axes[0].lines[0].get_xdata(), [0, 1, 2])


def _pixel(fig, ax, row: int, col: int) -> np.ndarray:
    """The rendered RGB colour at the centre of cell (row, col) of `ax`."""
    fig.canvas.draw()
    x, y = ax.transData.transform((col, row))
    height = fig.canvas.get_width_height()[1]
    rgba = np.asarray(fig.canvas.buffer_rgba())
    return rgba[int(round(height - y)), int(round(x)), :3] / 255.0


def test_heatmap_titles_name_layer_and_head_and_masked_cells_are_grey():
    rng = np.random.default_rng(1)
    causal = np.tril(np.ones((6, 6), bool))
    logits = np.where(causal, rng.normal(size=(3, 6, 6)), -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    w[1, 3, 0] = 0.0  # a visible weight of exactly 0: drawn in the colour map, not grey
    fig = plotting.attention_heatmaps(w, TOKENS[:6], heads=[1, 2], layer=7, mask=causal)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["layer 7, head 1", "layer 7, head 2"]
    grey = np.full(3, float(plotting.MASKED_COLOUR))
    assert np.allclose(_pixel(fig, panels[0], 0, 5), grey, atol=0.01)  # above the diagonal: masked
    assert not np.allclose(_pixel(fig, panels[0], 3, 0), grey, atol=0.05)  # visible zero
    assert not np.allclose(_pixel(fig, panels[0], 5, 5), grey, atol=0.05)
    # A single map is titled by what it is, not "head 0".
    single = plotting.attention_heatmaps(w[2], layer=0, head=4)
    assert single.axes[0].get_title() == "layer 0, head 4"
    assert plotting.attention_heatmaps(w[2]).axes[0].get_title() == ""
    with pytest.raises(ValueError, match="head names a single"):
        plotting.attention_heatmaps(w, head=4)
    with pytest.raises(ValueError, match=r"mask must have shape \(6, 6\)"):
        plotting.attention_heatmaps(w, mask=causal[:5])
    with pytest.raises(ValueError, match="mask hides every cell"):
        plotting.attention_heatmaps(w, mask=np.zeros((6, 6), bool))
    with pytest.raises(TypeError, match="mask must be boolean"):
        plotting.attention_heatmaps(w, mask=causal.astype(float))


def test_heatmap_colour_scale_options():
    w = example_weights()[0]
    sink = w.copy()
    sink[:, :, 0] = 0.9  # a sink column would set the scale
    linear = plotting.attention_heatmaps(sink, vmax=0.3)
    assert {ax.images[0].get_clim() for ax in linear.axes if ax.images} == {(0.0, 0.3)}
    log = plotting.attention_heatmaps(w, log=True)
    norms = {type(ax.images[0].norm).__name__ for ax in log.axes if ax.images}
    assert norms == {"LogNorm"}
    assert log.axes[0].images[0].get_clim() == (float(w[w > 0].min()), float(w.max()))
    assert (
        plotting.attention_heatmaps(w, log=True, vmin=1e-3).axes[0].images[0].get_clim()[0] == 1e-3
    )
    with pytest.raises(ValueError, match="0 < vmin < vmax"):
        plotting.attention_heatmaps(w, log=True, vmin=2.0)
    with pytest.raises(ValueError, match="no positive weight"):
        plotting.attention_heatmaps(np.zeros((3, 3)), log=True)
