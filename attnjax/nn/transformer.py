"""`Transformer`: embedding, positions, L scanned `Block`s, final norm and output head.

Built from a `TransformerConfig`; the L blocks' parameters are stacked on a
leading axis and the forward pass is an `nnx.scan` over them (compile time
independent of depth); optionally returns every layer's hidden states and
attention weights. Decoding: `init_cache(batch_size, max_len)` then calls
with `decode=True`; `generate` prefills a prompt and samples
(`attnjax.nn.generate`). Dropout, off by default, has a `deterministic`
switch and explicit `rngs` as in `flax.nnx.Dropout`.

Shapes: tokens `[B, T]` (int) or features `[B, T, F]`; hidden states
`[B, T, D]`; attention weights `[B, H, T, S]`.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import checks
from attnjax import features as features_lib
from attnjax.nn import edits as edits_lib
from attnjax.nn import generate as generate_lib
from attnjax.nn import sink_cache as sink_lib
from attnjax.nn import sites as sites_lib
from attnjax.nn import statistics as statistics_lib
from attnjax.nn.attention import LayerSetting, as_key
from attnjax.nn.attention_fn import check_weights_available
from attnjax.nn.block import Block, make_norm
from attnjax.nn.configs import TransformerConfig
from attnjax.nn.initializers import DEFAULT_EMBED_INIT, DEFAULT_KERNEL_INIT
from attnjax.nn.tokens import check_tokens

Array = jax.Array


def sinusoidal_positions(
    length: int, features: int, offset: Union[int, Array] = 0, dtype=jnp.float32
) -> Array:
    """Sinusoidal position table `[length, features]` of positions offset..offset+length-1
    (Vaswani et al. 2017, §3.5), computed in `dtype`; `offset` may be traced (decoding)."""
    position = (jnp.arange(length) + offset).astype(dtype)[:, None]
    half = features // 2
    rates = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=dtype) / max(half, 1))[None, :]
    table = jnp.concatenate([jnp.sin(position * rates), jnp.cos(position * rates)], axis=-1)
    return jnp.pad(table, ((0, 0), (0, features - 2 * half)))


def _layer_core(plan, statistics, sink_positions, sink, windows):
    """The attention core of one layer (None: the plain path); see `MultiHeadAttention.__call__`.
    `windows`: the model's distinct per-layer windows (`layer_windows`), or None."""
    if statistics:
        return statistics_lib.core(sink_positions, windows=windows)
    if sink is not None:
        attend = None if plan is None else (lambda module: edits_lib.attend_fn(module, plan))
        return sink_lib.core(*sink, attend)
    return edits_lib.core(plan)


# Depths up to this run the layer scan unrolled (`nnx.scan(..., unroll=True)`).
# On a CPU the rolled scan's backward pass zero-fills, writes and copies
# stacked residuals `[L, B, H, T, S]`, `[L, B, T, 4D]`, ... every step:
# AdamW steps of an L=8, D=64, B=64, T=33 model took 1.3-1.45x the time of
# the unrolled scan (same process, interleaved; profile: ~40% of the step's
# op time in broadcast, dynamic-update-slice and copy ops), and 1.25x at L=4,
# B=8, T=512. Unrolling costs compile time (1.4-1.8x at L=8), so deeper
# models keep the rolled scan, whose compile time does not grow with depth.
UNROLL_MAX_LAYERS = 8


@functools.partial(
    jax.jit,
    static_argnames=(
        "graphdef",
        "return_intermediates",
        "deterministic",
        "sink_positions",
        "capture",
        "decode",
        "sink_cache",
    ),
)
def _compiled_call(graphdef, params, rest, inputs, mask, token_type_ids, edits, **static):
    """The call of the model `nnx.merge(graphdef, params, rest)` (traced: its parameters are tracers, so
    it runs `Transformer._forward`) as one program per model structure, shapes and options. Returns
    `(output, rest)`: the model's state other than its parameters (caches, dropout streams) after the
    call. The parameters go in only: returning them, as `nnx.jit` returns every variable of a model it
    is given, copies them all at every call (SmolLM2-135M, one decoding step on a 2-core CPU: 183 ms,
    against 26 ms without)."""
    model = nnx.merge(graphdef, params, rest)
    out = model(inputs, mask=mask, token_type_ids=token_type_ids, edits=edits, **static)
    return out, nnx.state(model, nnx.Not(nnx.Param))


class Transformer(nnx.Module):
    """Embedding -> positions -> L scanned `Block`s -> final norm -> head.

    The L blocks' parameters are stacked on a leading axis and the forward pass
    is an `nnx.scan` over them, so compile time does not grow with depth
    (the scan is unrolled for L <= `UNROLL_MAX_LAYERS`, which trains faster).
    So are the decoding caches (`init_cache`): each layer's cache `[L, ...]`.
    """

    def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
        self.config = config
        block, features = config.block, config.block.features
        kw = dict(dtype=block.dtype, param_dtype=block.param_dtype, rngs=rngs)
        if config.vocab_size is not None:
            init = config.embedding_init or DEFAULT_EMBED_INIT
            self.embed = nnx.Embed(config.vocab_size, features, embedding_init=init, **kw)
        else:
            init = config.embedding_init or DEFAULT_KERNEL_INIT
            self.embed = nnx.Linear(config.input_features, features, kernel_init=init, **kw)
        if config.positions == "learned":
            shape = (config.max_len, features)
            self.position_table = nnx.Param(
                config.position_init(rngs.params(), shape, block.param_dtype)
            )
        if config.type_vocab_size is not None:
            self.type_embed = nnx.Embed(config.type_vocab_size, features, **kw)
        norm = functools.partial(
            make_norm, features, kind=block.norm_kind, eps=block.norm_eps, **kw
        )
        if config.embedding_norm:
            self.embed_norm = norm()
        layer = config.layer()

        @nnx.split_rngs(splits=config.num_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make_blocks(rngs):
            return Block(layer, rngs=rngs)

        self.blocks = make_blocks(rngs)
        self.set_layer_settings()
        if config.final_norm:
            self.final_norm = norm()
        if config.head == "linear":
            self.head = nnx.Linear(features, config.out_features, use_bias=config.head_bias, **kw)

    def set_layer_settings(self) -> None:
        """Each layer's window and rotary base (`TransformerConfig.layer_windows`, `layer_rope_bases`)
        as `LayerSetting`s `[L]` of the stacked attention, read by the layer in the scan. Done at
        construction; call again on a model built by `nnx.eval_shape` (where they are abstract)."""
        config, attention = self.config, self.blocks.attention
        if config.layer_windows is not None:
            windows = [0 if w is None else w for w in config.layer_windows]
            attention.layer_window = LayerSetting(jnp.asarray(windows, jnp.int32))
        if config.layer_rope_bases is not None:
            bases = [float(b) for b in config.layer_rope_bases]
            attention.layer_rope_base = LayerSetting(jnp.asarray(bases))

    def redraw(self, key: Array) -> None:
        """New random feature projections for every layer (linear attention), one key per layer."""
        attention = self.blocks.attention
        if not hasattr(attention, "projection"):
            raise ValueError(
                "redraw needs linear attention with random features "
                f"(attention_kind={attention.config.attention_kind!r}, "
                f"feature_map={attention.config.feature_map!r})"
            )
        keys = jax.random.split(key, self.config.num_layers)
        num_features = attention.projection.shape[-2]
        head_dim = self.config.block.head_dim

        def draw(k):
            return features_lib.orthogonal_random_matrix(k, num_features, head_dim)

        attention.projection[...] = jax.vmap(draw)(keys)

    def _check_inputs(self, inputs: Array) -> None:
        config = self.config
        if config.vocab_size is not None:
            if inputs.ndim != 2 or not jnp.issubdtype(inputs.dtype, jnp.integer):
                raise ValueError(
                    f"inputs must be integer tokens [B, T], got {inputs.dtype} {inputs.shape}"
                )
            if not isinstance(inputs, jax.core.Tracer):
                check_tokens(inputs, config.vocab_size)
        elif inputs.ndim != 3 or inputs.shape[-1] != config.input_features:
            raise ValueError(
                f"inputs must have shape [B, T, {config.input_features}], got {inputs.shape}"
            )
        if inputs.shape[1] > config.max_len and config.positions == "learned":
            raise ValueError(f"sequence length {inputs.shape[1]} exceeds max_len {config.max_len}")

    def _check_token_types(self, inputs: Array, token_type_ids: Optional[Array]) -> None:
        if token_type_ids is None:
            return
        if self.config.type_vocab_size is None:
            raise ValueError(
                "token_type_ids given, but the model has no token types "
                "(TransformerConfig.type_vocab_size)"
            )
        if token_type_ids.shape != inputs.shape[:2] or not jnp.issubdtype(
            token_type_ids.dtype, jnp.integer
        ):
            raise ValueError(
                f"token_type_ids must be integers of shape [B, T] = {inputs.shape[:2]}, "
                f"got {token_type_ids.dtype} {token_type_ids.shape}"
            )

    def _embed(
        self, inputs: Array, offset: Union[int, Array] = 0, token_type_ids: Optional[Array] = None
    ) -> Array:
        """Embedding (times `embedding_scale`, if any) plus the positions offset..offset+T-1 (offset:
        the cache index when decoding), plus token types (type 0 when not given), then the
        embedding norm, if any."""
        config, length = self.config, inputs.shape[1]
        x = self.embed(inputs)
        if config.embedding_scale is not None:
            x = x * jnp.asarray(config.embedding_scale, x.dtype)
        if config.positions == "learned":
            table = jax.lax.dynamic_slice_in_dim(self.position_table[...], offset, length, axis=0)
            x = x + table[None].astype(x.dtype)
        elif config.positions == "sinusoidal":
            table = sinusoidal_positions(
                length, config.block.features, offset, jnp.promote_types(x.dtype, jnp.float32)
            )
            x = x + table[None].astype(x.dtype)
        if config.type_vocab_size is not None:
            types = (
                jnp.zeros(inputs.shape[:2], jnp.int32) if token_type_ids is None else token_type_ids
            )
            x = x + self.type_embed(types)
        return self.embed_norm(x) if config.embedding_norm else x

    def _head(self, h: Array, sites=None) -> Array:
        """Final norm and output head: `[B, T, D]` -> `[B, T, out_features]`; `sites` (model-level
        `attnjax.nn.sites.Sites`) sees the final norm's output as 'final'."""
        h = self.final_norm(h) if self.config.final_norm else h
        if sites is not None:
            h = sites("final", h)
        return self.project(h)

    def project(self, final: Array) -> Array:
        """The output head alone: the final norm's output (the 'final' site) `[..., D]` -> `[...,
        out_features]` (tied: `final @ E^T`; linear: `final W + b`; no head: `final` itself).

        With `capture=("final",)` under `jit`, `model.project(captured["final"][:, -1])` gives the
        last position's logits without the head over every position (the unused logits are not computed).
        """
        if self.config.head == "tied":
            return self.embed.attend(final)
        return self.head(final) if self.config.head == "linear" else final

    # ------------------------------------------------------------- decoding

    def init_cache(self, batch_size: int, max_len: int, dtype: Optional[Any] = None) -> None:
        """Empty decoding caches of every layer, stacked `[L, ...]` (see `MultiHeadAttention.init_cache`)."""
        checks.positive_int("max_len", max_len)
        if self.config.positions == "learned" and max_len > self.config.max_len:
            raise ValueError(
                f"max_len={max_len} exceeds the learned position table's "
                f"TransformerConfig.max_len={self.config.max_len}"
            )

        @nnx.vmap(in_axes=(0,), out_axes=None)
        def init(block):
            block.attention.init_cache(batch_size, max_len, dtype)

        init(self.blocks)

    def _decode_offset(self, inputs: Array) -> Array:
        """Validates a decoding call; returns the cache index (the chunk's first position)."""
        if not self.config.causal:
            raise ValueError("decode=True needs a causal model (TransformerConfig.causal=True)")
        attention = self.blocks.attention
        attention.check_decode(inputs.shape[0], inputs.shape[1], inputs.shape)
        return attention.cache_index[...][0]

    def _check_sink_decode(self, inputs: Array, decode: bool, sink_cache) -> tuple[int, int]:
        """Validates a call with the sink cache (`attnjax.nn.sink_cache`); returns (n_sink, window)."""
        n_sink, window = sink_lib.check_sink_cache(sink_cache)
        if not decode or not self.config.causal or self.config.positions is not None:
            raise ValueError(
                "sink_cache needs decode=True, a causal model and no absolute position embedding "
                f"(decode={decode}, causal={self.config.causal}, positions={self.config.positions!r})"
            )
        attention = self.blocks.attention
        if getattr(attention, "cache_index", None) is None or attention.cache_shape != (
            inputs.shape[0],
            n_sink + window,
        ):
            raise ValueError(
                f"sink_cache={sink_cache!r} needs init_cache(batch_size={inputs.shape[0]}, "
                f"max_len=n_sink + window = {n_sink + window}) first "
                f"(cache: {getattr(attention, 'cache_shape', None)})"
            )
        index = attention.cache_index[...]
        if (
            not isinstance(index, jax.core.Tracer)
            and inputs.shape[1] > 1
            and int(np.max(index)) + inputs.shape[1] > n_sink + window
        ):
            raise ValueError(
                f"sink_cache: a chunk of {inputs.shape[1]} positions must fit the cache of "
                f"{n_sink + window} slots without eviction ({int(np.max(index))} filled); "
                "decode one token at a time after that"
            )
        return n_sink, window

    @staticmethod
    def _split_edits(edits) -> tuple:
        """`edits` as (attention and residual edits, site edits); anything but a sequence passes to
        `edits.check_edits`, which names the problem."""
        if not isinstance(edits, (tuple, list)):
            return edits, ()
        site_edits = tuple(e for e in edits if isinstance(e, sites_lib.SITE_EDITS))
        rest = tuple(e for e in edits if not isinstance(e, sites_lib.SITE_EDITS))
        return (rest if rest or not site_edits else None), site_edits

    def _check_sites(self, inputs, capture, site_edits, edits, decode, statistics, sink) -> tuple:
        """The call's (capture, site edits, site shapes), checked against the model and the call
        (`ValueError`)."""
        if decode or sink is not None:
            raise ValueError(
                "capture and site edits are for full forward passes (not decode=True or sink_cache)"
            )
        shapes = sites_lib.site_shapes(self.config, *inputs.shape[:2])
        capture = sites_lib.check_capture(capture, shapes)
        site_edits = sites_lib.check_site_edits(site_edits, shapes, self.config.num_layers)
        if statistics:
            dense = [s for s in capture if s in sites_lib.DENSE_SITES]
            if dense:
                raise ValueError(
                    f"return_intermediates='statistics' keeps memory linear in T: the sites {dense} "
                    "are [B, H, T, S] (capture them with return_intermediates=True or False)"
                )
            if site_edits:
                raise ValueError(
                    "site edits and return_intermediates='statistics' do not combine (the statistics "
                    "are of the unedited softmax); capture does"
                )
        if edits and any(e.site in ("q", "k", "v") for e in site_edits):
            if any(isinstance(e, edits_lib.ATTENTION_EDITS) for e in edits):
                raise ValueError(
                    "editing the sites q, k or v does not combine with attention edits "
                    "(ablate_head, scale_head, remove_keys, replace_pattern): edit head_out instead"
                )
        return capture, site_edits, shapes

    def __call__(
        self,
        inputs: Array,
        *,
        mask: Optional[Array] = None,
        token_type_ids: Optional[Array] = None,
        return_intermediates: Union[bool, str] = False,
        decode: bool = False,
        deterministic: Optional[bool] = None,
        rngs=None,
        sink_positions: Sequence[int] = (),
        edits: Optional[Sequence] = None,
        sink_cache: Optional[tuple[int, int]] = None,
        capture: Sequence[str] = (),
    ):
        """Forward pass.

        Called outside `jit`, `vmap` and `grad` (without `rngs`), it runs as
        one compiled program per model structure, shapes and options, reused
        by later calls (`jax.jit` of the split model, the parameters inputs
        only), decoding calls included (their cache room is checked on the
        concrete cache index first); otherwise it is traced into the caller's
        program. For many calls on a large model, `attnjax.nn.jit_forward` also
        skips splitting the model at every call.

        Args:
          inputs: tokens `[B, T]` (int) or features `[B, T, input_features]`.
            Token ids must be in [0, vocab_size): concrete inputs outside
            raise a `ValueError` naming them; under `jit` such positions embed
            as NaN, so every logit of that sequence is NaN (the others are
            unaffected); `attnjax.nn.check_tokens` under `checkify.checkify`
            raises there instead (see `attnjax.nn.tokens`).
          mask: optional boolean attention mask broadcastable to `[B, H, T, T]`
            (combined with the causal mask when `config.causal`; when decoding,
            to `[B, H, T, max_len]`), e.g. `attnjax.key_padding_mask(valid=...)`.
          token_type_ids: integer `[B, T]` token types (models with
            `type_vocab_size`; default all 0).
          return_intermediates: also return a dict with 'hidden' `[L + 1, B, T, D]`
            (index 0 is the input to the first block, index l the output of
            block l) and 'attention' `[L, B, H, T, T]` (`[L, B, H, T, max_len]`
            when decoding). `"statistics"`: 'hidden' and 'statistics', an
            `attnjax.analysis.AttentionStatistics` of `[L, B, H, T]` arrays
            from each layer's own q and k (after RoPE, with its scale,
            temperature, mask and GQA) and `sink_positions`, with the layers'
            outputs accumulated in the same pass, block of queries by chunk
            of keys: memory linear in T, no weights (`attnjax.nn.statistics`;
            softmax attention, not decoding).
          decode: `inputs` are the next T positions of the sequences in the
            caches (`init_cache`; causal models only): positions are offset
            by the cache index, every layer attends to its cache and advances.
          deterministic: True turns dropout off; None uses the modules' own.
          rngs: randomness for dropout (`nnx.Rngs`, `nnx.RngStream` or a key,
            split over layers); None uses the streams forked at construction.
          sink_positions: key positions whose mass is `sink_mass` (statistics).
          edits: `attnjax.nn.edits` objects (head ablations, key removal,
            patterns, residual edits) and `attnjax.nn.sites` edits (`replace`,
            `affine` at a named site, from arrays); bad layers, heads, sites or
            shapes raise before compute.
          sink_cache: `(n_sink, window)`: decode with the rolling cache of the
            first n_sink and last `window` tokens (`attnjax.nn.sink_cache`;
            `init_cache(B, n_sink + window)` first, `decode=True`), past max_len.
          capture: names of `attnjax.nn.sites` to return: layer sites stacked
            `[L, ...]` (layer 0 first), model sites ('embed', 'final') as they are.
            Full passes only (not with `decode` or `sink_cache`); with the
            statistics, every site but the `[B, H, T, S]` ones (logits, weights).

        Returns:
          logits `[B, T, out_features]` (hidden states `[B, T, D]` when
          `config.head` is None), or `(logits, intermediates)`: with
          `return_intermediates` and/or `capture`, one dict holding both.
        """
        options = dict(
            return_intermediates=return_intermediates,
            deterministic=deterministic,
            sink_positions=sink_positions,
            capture=capture,
        )
        static = None if rngs is not None else self._static_options(options, decode, sink_cache)
        if static is not None and self._concrete((inputs, mask, token_type_ids), edits):
            self._check_inputs(inputs)  # token ids against the vocabulary, on the concrete ones
            if decode or sink_cache is not None:
                self._check_cache_room(inputs, decode, static["sink_cache"])
            graphdef, params, rest = nnx.split(self, nnx.Param, ...)
            out, rest = _compiled_call(
                graphdef,
                params,
                rest,
                inputs,
                mask,
                token_type_ids,
                edits,
                **static,
            )
            nnx.update(self, rest)  # caches, dropout streams: what a forward pass may change
            return out
        return self._forward(
            inputs,
            mask=mask,
            token_type_ids=token_type_ids,
            decode=decode,
            rngs=rngs,
            edits=edits,
            sink_cache=sink_cache,
            **options,
        )

    @staticmethod
    def _static_options(options: dict, decode, sink_cache) -> Optional[dict]:
        """The options of `_compiled_call` (static, so hashable: sink_positions, capture and sink_cache
        as tuples), or None when one is not (then the call runs op by op and its checks name the problem)."""
        sequences = ("sink_positions", "capture")
        if not all(isinstance(options[name], (tuple, list)) for name in sequences):
            return None
        if not (sink_cache is None or isinstance(sink_cache, (tuple, list))):
            return None
        static = {**options, **{name: tuple(options[name]) for name in sequences}}
        static.update(decode=decode, sink_cache=None if sink_cache is None else tuple(sink_cache))
        try:
            hash(tuple(static.values()))
        except TypeError:
            return None
        return static

    def _check_cache_room(self, inputs, decode, sink_cache) -> None:
        """A decoding call's checks on the concrete cache index, before `_compiled_call` (inside it the
        index is traced, and only a chunk longer than the whole cache could be refused)."""
        checks.boolean("decode", decode)
        if sink_cache is not None:
            self._check_sink_decode(inputs, decode, sink_cache)
        else:
            self._decode_offset(inputs)

    def _concrete(self, arrays, edits) -> bool:
        """Whether the call is made outside any transformation: no input, edit array or parameter is a
        tracer (and the edits are a sequence of edit objects, which `jax.jit` can trace). Then a full
        pass or decoding step runs as one compiled program per model structure, shapes and options
        (`_compiled_call`); op by op, an eager call compiled its layer scan anew at every call (SmolLM2-135M
        on a 2-core CPU: T = 64, 0.5 s a call, 0.25 s of it compiling, now 0.12 s; one decoding step 0.58 s,
        now 33 ms)."""
        if edits is not None and not (
            isinstance(edits, (tuple, list))
            and all(isinstance(e, edits_lib.EDIT_TYPES + sites_lib.SITE_EDITS) for e in edits)
        ):
            return False
        parameter = next(iter(jax.tree_util.tree_leaves(nnx.state(self, nnx.Param))), None)
        return all(
            checks.concrete(x) for x in jax.tree_util.tree_leaves((arrays, edits, parameter))
        )

    def _forward(
        self,
        inputs,
        *,
        mask,
        token_type_ids,
        return_intermediates,
        deterministic,
        sink_positions,
        edits,
        capture,
        decode=False,
        rngs=None,
        sink_cache=None,
    ):
        """`__call__`'s computation (its arguments, all given), traced into the caller's program or
        `_compiled_call`'s (`rngs` keeps its default in the latter)."""
        self._check_inputs(inputs)
        self._check_token_types(inputs, token_type_ids)
        checks.boolean("decode", decode)
        checks.boolean("deterministic", deterministic, optional=True)
        statistics = isinstance(return_intermediates, str) and return_intermediates == "statistics"
        if not (statistics or isinstance(return_intermediates, (bool, np.bool_))):
            raise ValueError(
                f"return_intermediates must be True, False or 'statistics', got {return_intermediates!r}"
            )
        want = statistics or bool(return_intermediates)
        if want and not statistics:
            check_weights_available(self.config.block.attention)
        if tuple(sink_positions) and not statistics:
            raise ValueError("sink_positions is for return_intermediates='statistics'")
        sink = None if sink_cache is None else self._check_sink_decode(inputs, decode, sink_cache)
        offset = self._decode_offset(inputs) if decode and sink is None else 0
        kv_len = self.blocks.attention.cache_shape[1] if decode else inputs.shape[1]
        block = self.config.block
        edits, site_edits = self._split_edits(edits)
        edits = edits_lib.check_edits(
            edits,
            num_layers=self.config.num_layers,
            num_heads=block.num_heads,
            q_len=inputs.shape[1],
            kv_len=kv_len,
            features=block.features,
            decode=decode,
        )
        if edits and statistics:
            raise ValueError(
                "edits and return_intermediates='statistics' do not combine (the statistics are of "
                "the unedited softmax)"
            )
        plan = edits_lib.build_plan(
            edits,
            num_layers=self.config.num_layers,
            num_heads=block.num_heads,
            kv_len=kv_len,
            features=block.features,
            dtype=jnp.promote_types(block.dtype or block.param_dtype, jnp.float32),
        )
        at_sites = bool(capture) or bool(site_edits)
        if at_sites:
            capture, site_edits, shapes = self._check_sites(
                inputs, capture, site_edits, edits, decode, statistics, sink
            )
            site_kinds, site_arrays = sites_lib.layer_plan(
                site_edits, shapes, self.config.num_layers
            )
            outer = sites_lib.model_sites(capture, site_edits)
            layer_capture = tuple(s for s in capture if s in sites_lib.LAYER_SITES)
        key = as_key(rngs)
        layer_keys = None if key is None else jax.random.split(key, self.config.num_layers)
        x = self._embed(inputs, offset, token_type_ids)
        if at_sites:
            x = outer("embed", x)
        causal = self.config.causal

        unroll = self.config.num_layers <= UNROLL_MAX_LAYERS
        windows = self.config.layer_windows
        windows = None if windows is None else tuple(dict.fromkeys(windows))

        @nnx.scan(in_axes=(0, nnx.Carry, None, 0, 0, 0), out_axes=(nnx.Carry, 0), unroll=unroll)
        def run_blocks(block, h, mask, key, plan, arrays):
            core = _layer_core(plan, statistics, tuple(sink_positions), sink, windows)
            sites = sites_lib.Sites(layer_capture, site_kinds, arrays) if at_sites else None
            h, weights = block(
                h,
                mask=mask,
                is_causal=causal,
                return_weights=want,
                decode=decode and sink is None,
                deterministic=deterministic,
                rngs=key,
                core=core,
                sites=sites,
            )
            h = edits_lib.apply_residual(h, plan)
            if at_sites:
                h = sites("resid_post", h)
            return h, ((h, weights) if want else None, sites.captured if at_sites else None)

        h, (per_layer, captured) = run_blocks(
            self.blocks, x, mask, layer_keys, plan, site_arrays if at_sites else None
        )
        logits = self._head(h, outer if at_sites else None)
        if not (want or capture):
            return logits
        out = {} if not capture else {**captured, **outer.captured}
        if want:
            hidden, weights = per_layer
            hidden = jnp.concatenate([x[None], hidden], axis=0)
            out.update({"hidden": hidden, ("statistics" if statistics else "attention"): weights})
        return logits, out

    def generate(
        self,
        prompt_tokens: Array,
        max_new_tokens: int,
        *,
        key: Optional[Array] = None,
        temperature: float = 0.0,
        edits: Optional[Sequence] = None,
        sink_cache: Optional[tuple[int, int]] = None,
    ) -> Array:
        """Continue `prompt_tokens` `[B, P]` by `max_new_tokens` tokens -> `[B, P + max_new_tokens]`.

        The prompt is prefilled as one chunk into fresh caches of length
        P + max_new_tokens, then tokens are decoded one at a time in a
        `lax.scan`, all in one jitted program; dropout is off. The model is
        not modified (the caches live in that program). `temperature=0`
        (default) is greedy (argmax); `temperature > 0` samples from
        softmax(logits / temperature) with `key` (token t uses fold_in(key, t)),
        so the same key gives the same tokens (a negative or NaN temperature
        raises a ValueError). `edits`: `attnjax.nn.edits`
        applied at every step (key positions are cache slots).
        `sink_cache=(n_sink, window)`: a rolling cache of n_sink + window
        slots (`attnjax.nn.sink_cache`), so P + max_new_tokens may exceed
        any length; the prompt's first n_sink + window tokens are one chunk,
        the rest are fed one at a time.
        """
        generate_lib.check_generate(
            self.config, prompt_tokens, max_new_tokens, key, temperature, sink_cache
        )
        total = prompt_tokens.shape[1] + max_new_tokens
        slots = total if sink_cache is None else sum(sink_cache)
        block = self.config.block
        if self._split_edits(edits)[1]:
            raise ValueError(
                "site edits (attnjax.nn.sites) are for full forward passes, not generate"
            )
        edits = edits_lib.check_edits(
            edits,
            num_layers=self.config.num_layers,
            num_heads=block.num_heads,
            q_len=1,
            kv_len=slots,
            features=block.features,
            decode=True,
        )
        graphdef, state = nnx.split(self)
        return generate_lib.generate(
            graphdef,
            state,
            prompt_tokens,
            key,
            edits or None,
            max_new_tokens=max_new_tokens,
            temperature=float(temperature),
            sink_cache=None if sink_cache is None else tuple(int(x) for x in sink_cache),
        )
