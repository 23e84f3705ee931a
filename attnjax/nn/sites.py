"""Named activation sites: capture any of them, and replace, scale or add to them from data.

One vocabulary of sites, per layer l of a `Transformer` (B sequences of T
tokens, S = T keys, H query heads and K key/value heads of Dh, width D, MLP
width F):

    site         shape              the value
    resid_pre    [B, T, D]          the block's input (the residual stream before layer l)
    q            [B, T, H, Dh]      queries after QK-norm and RoPE (what the softmax reads)
    k            [B, S, K, Dh]      keys after QK-norm and RoPE
    v            [B, S, K, Dh]      values
    logits       [B, H, T, S]       q . k / (sqrt(Dh) tau), before the mask (softmax layers; capture only)
    weights      [B, H, T, S]       the attention weights, rows summing to 1 (capture only)
    head_out     [B, T, H, Dh]      each head's output o^h = P^h V^h, before W_o (after head edits)
    attn_out     [B, T, D]          the attention block's output, concat_h(o^h) W_o + b_o (before the output
                                    norm of norm='sandwich')
    resid_mid    [B, T, D]          the residual stream between the attention and MLP sublayers (blocks with an MLP)
    mlp_hidden   [B, T, F]          the MLP's hidden activation, act(W_1 x + b_1) (gated: act(W_g x) * W_u x)
    mlp_out      [B, T, D]          the MLP's output (before the output norm of norm='sandwich')
    resid_post   [B, T, D]          the block's output (after residual edits): resid_pre of layer l + 1

and two of the model:

    embed        [B, T, D]          the embeddings with positions (the first block's input)
    final        [B, T, D]          the final norm's output (the head's input)

Layers count from 0 everywhere: in the API, in captured stacks `[L, ...]`
and in figure titles.

`model(tokens, capture=("resid_pre", "head_out"))` returns `(logits, captured)`,
`captured[site]` stacked over layers `[L, ...]` (model sites: `[...]`). Only
the requested sites are kept (a site not asked for is not materialised beyond
what the forward pass computes anyway; `logits` and `weights` are computed only
when asked for). The same names edit the forward pass, as items of `edits=`:

    replace(site, value, where=True)      x <- where(where, value, x)
    affine(site, scale=1, add=0)          x <- scale * x + add

with arrays that broadcast against the site's stack `[L, *site shape]` (model
sites: the site's shape), so a clean run's captured activations patch a
corrupted run (`replace("resid_pre", clean["resid_pre"], where)`, `where` True
at the layers and positions to patch). The arrays are data, not part of the
compiled program: a sweep over `where` masks is one program (`attnjax.nn.patching`).
Full forward passes only (not decoding or the sink cache). The statistics mode
(`return_intermediates="statistics"`, memory linear in T) captures every site
but the `[B, H, T, S]` ones (`DENSE_SITES`), under the same names; it takes no
site edits (its statistics are those of the unedited softmax).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

LAYER_SITES = (
    "resid_pre",
    "q",
    "k",
    "v",
    "logits",
    "weights",
    "head_out",
    "attn_out",
    "resid_mid",
    "mlp_hidden",
    "mlp_out",
    "resid_post",
)
MODEL_SITES = ("embed", "final")
SITES = LAYER_SITES + MODEL_SITES
# The sites of size T x S per head, which the statistics mode (memory linear in T) does not capture.
DENSE_SITES = ("logits", "weights")
# Computed from other sites for capture; editing them would not change what the layer computes.
# They are the dense sites.
CAPTURE_ONLY = DENSE_SITES


def _pytree(data: tuple[str, ...]):
    def register(cls):
        meta = [f.name for f in dataclasses.fields(cls) if f.name not in data]
        return jax.tree_util.register_dataclass(cls, data_fields=list(data), meta_fields=meta)

    return register


@_pytree(data=("value", "where"))
@dataclasses.dataclass(frozen=True)
class Replace:
    """Site `site` takes `value` where `where` is True: x <- where(where, value, x)."""

    site: str
    value: Any
    where: Any = True


@_pytree(data=("scale", "add"))
@dataclasses.dataclass(frozen=True)
class Affine:
    """Site `site` becomes scale * x + add."""

    site: str
    scale: Any = 1.0
    add: Any = 0.0


SITE_EDITS = (Replace, Affine)


def replace(site: str, value, where=True) -> Replace:
    """x <- where(where, value, x) at `site`; value and where broadcast against `[L, *site shape]`
    (a layer site; a model site: its shape), where boolean."""
    return Replace(site, value, where)


def affine(site: str, scale=1.0, add=0.0) -> Affine:
    """x <- scale * x + add at `site`; scale and add broadcast against `[L, *site shape]` (model sites:
    the site's shape)."""
    return Affine(site, scale, add)


def site_shapes(config, batch: int, length: int) -> dict[str, tuple[int, ...]]:
    """Each site's shape in one layer (model sites: in the model) for `batch` sequences of `length` tokens,
    for a `TransformerConfig`; sites a model lacks (no MLP: resid_mid, mlp_*) are left out."""
    block = config.block
    b, t, d = batch, length, block.features
    h, dh = block.num_heads, block.head_dim
    kv = block.attention.kv_heads(h)
    shapes = {
        "resid_pre": (b, t, d),
        "q": (b, t, h, dh),
        "k": (b, t, kv, dh),
        "v": (b, t, kv, dh),
        "weights": (b, h, t, t),
        "head_out": (b, t, h, dh),
        "attn_out": (b, t, d),
        "resid_post": (b, t, d),
        "embed": (b, t, d),
        "final": (b, t, d),
    }
    if block.attention.attention_kind == "softmax":
        shapes["logits"] = (b, h, t, t)
    if block.mlp:
        f = block.mlp_features or 4 * d
        shapes.update(resid_mid=(b, t, d), mlp_hidden=(b, t, f), mlp_out=(b, t, d))
    return shapes


def _missing_site(site, shapes: dict) -> ValueError:
    known = [s for s in SITES if s in shapes]
    return ValueError(f"site {site!r} does not exist in this model; its sites: {', '.join(known)}")


def check_capture(capture, shapes: dict) -> tuple[str, ...]:
    """`capture` (a sequence of site names) as a tuple, each a site of the model; `ValueError` otherwise."""
    if isinstance(capture, str) or not isinstance(capture, (tuple, list)):
        raise TypeError(
            f"capture must be a sequence of site names, got {type(capture).__name__} {capture!r}"
        )
    for site in capture:
        if site not in shapes:
            raise _missing_site(site, shapes)
    return tuple(dict.fromkeys(capture))


def _check_operand(
    label: str, name: str, value, shape: tuple[int, ...], layered: bool, num_layers: int
):
    """One array (`name`) of the site edit `label`: it must broadcast against the site's stack."""
    target = ((num_layers,) if layered else ()) + shape
    operand = tuple(np.shape(value))
    described = f"[L, *site shape] = {target}" if layered else f"the site's shape {target}"
    if len(operand) > len(target):
        raise ValueError(f"{label}: {name} of shape {operand} has more axes than {described}")
    try:
        np.broadcast_shapes(operand, target)
    except ValueError:
        raise ValueError(
            f"{label}: {name} of shape {operand} does not broadcast against {described}"
        ) from None
    if np.broadcast_shapes(operand, target) != target:
        raise ValueError(f"{label}: {name} of shape {operand} would grow {described}")


def check_site_edits(edits: Sequence, shapes: dict, num_layers: int) -> tuple:
    """Site edits checked against the model's sites and the call's shapes; `ValueError` naming the edit."""
    for edit in edits:
        if edit.site not in shapes:
            raise _missing_site(edit.site, shapes)
        label = f"{type(edit).__name__}({edit.site!r})"
        if edit.site in CAPTURE_ONLY:
            raise ValueError(
                f"{label}: site {edit.site!r} is capture only (to change the attention weights, "
                "use attnjax.nn.edits.replace_pattern or remove_keys)"
            )
        layered = edit.site in LAYER_SITES
        kind, a, b = _operands(edit)
        names = ("value", "where") if kind == "replace" else ("scale", "add")
        for name, value in zip(names, (a, b)):
            _check_operand(label, name, value, shapes[edit.site], layered, num_layers)
        if isinstance(edit, Replace) and not jnp.issubdtype(jnp.result_type(edit.where), jnp.bool_):
            raise TypeError(f"{label}: where must be boolean, got {jnp.result_type(edit.where)}")
    return tuple(edits)


def _plan(edits: Sequence, names: Sequence[str], prepare) -> tuple[dict, dict]:
    """(kinds, arrays) of the edits at the sites `names`: kinds `{site: ("replace" | "affine", ...)}`
    (static, in the order given), arrays `{site: [(a, b), ...]}` (value and where, or scale and add),
    each array given as `prepare(site, array)`."""
    kinds: dict = {}
    arrays: dict = {}
    for edit in edits:
        if edit.site in names:
            kind, a, b = _operands(edit)
            kinds[edit.site] = kinds.get(edit.site, ()) + (kind,)
            arrays.setdefault(edit.site, []).append((prepare(edit.site, a), prepare(edit.site, b)))
    return kinds, arrays


def layer_plan(edits: Sequence, shapes: dict, num_layers: int) -> tuple[dict, dict]:
    """The layer-site edits as `_plan`'s (kinds, arrays), the arrays broadcast to the site's stack
    `[L, *site shape]`, scanned with the layers."""

    def stack(site, x):
        target = (num_layers,) + shapes[site]
        x = jnp.asarray(x)
        return jnp.broadcast_to(jnp.reshape(x, (1,) * (len(target) - x.ndim) + x.shape), target)

    return _plan(edits, LAYER_SITES, stack)


def _operands(edit) -> tuple[str, Any, Any]:
    if isinstance(edit, Replace):
        return "replace", edit.value, edit.where
    return "affine", edit.scale, edit.add


def _apply(x: Array, kind: str, a: Array, b: Array) -> Array:
    """x <- where(b, a, x) ("replace") or a * x + b ("affine"), in x's dtype."""
    if kind == "replace":
        return jnp.where(b, a.astype(x.dtype), x)
    return (x * a.astype(x.dtype) + b.astype(x.dtype)).astype(x.dtype)


class Sites:
    """One layer's (or the model's) capture and edits: `sites(name, x)` at each site returns x, edited.

    `capture`: the site names to keep (`captured[name]` after the call);
    `kinds`, `arrays`: the edits of this layer (or the model), as `layer_plan`
    gives them (the arrays sliced to one layer by the layer scan), applied in order.
    """

    def __init__(
        self,
        capture: Sequence[str] = (),
        kinds: Optional[dict] = None,
        arrays: Optional[dict] = None,
    ):
        self.capture, self.kinds, self.arrays = tuple(capture), kinds or {}, arrays or {}
        self.captured: dict = {}

    def wants(self, name: str) -> bool:
        """Whether site `name` is captured or edited (sites computed only on request: logits, weights)."""
        return name in self.capture or name in self.kinds

    def edits_any(self, names: Sequence[str]) -> bool:
        """Whether any of the sites `names` is edited."""
        return any(name in self.kinds for name in names)

    def __call__(self, name: str, x: Array) -> Array:
        for kind, (a, b) in zip(self.kinds.get(name, ()), self.arrays.get(name, ())):
            x = _apply(x, kind, a, b)
        if name in self.capture:
            self.captured[name] = x
        return x


def model_sites(capture: Sequence[str], edits: Sequence) -> Sites:
    """The model-level `Sites` (embed, final) of a call's capture and site edits."""
    kinds, arrays = _plan(edits, MODEL_SITES, lambda site, x: jnp.asarray(x))
    return Sites([s for s in capture if s in MODEL_SITES], kinds, arrays)
