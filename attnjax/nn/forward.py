"""A model's forward pass as one compiled function of its inputs.

`nnx.jit(lambda m, x: m(x))(model, x)` walks the model's NNX graph in Python
on every call (to split it into a pytree and merge it back) and returns every
variable of the model, so the compiled program copies all the parameters at
every call: for SmolLM2-135M on a 2-core CPU that copy (0.1-0.15 s) costs more
than a short forward itself. `jit_forward` splits the model once and passes
its state to `jax.jit` as a plain pytree, returning the output alone
(measured in the benchmark's pretrained section). A model called outside
transformations (`model(tokens)`) also keeps its parameters out of its
program's outputs.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
from flax import nnx

Array = jax.Array


def jit_forward(model, **call: Any) -> Callable[..., Any]:
    """`model(inputs, mask=mask, **call)` as one jitted function `forward(inputs, mask=None)`.

    The model is split once (`nnx.split`), here; the state it gives holds the
    model's own variables, so each call reads their current values (after
    `nnx.update` or an optimiser step, the forward computes with the new
    parameters, without compiling again). A change of the model's structure (a
    submodule replaced or added) needs a new `jit_forward`. The keywords in
    `call` (`return_intermediates=True`, `edits=...`, `deterministic=True`,
    ...) are fixed when it is built; `inputs` `[B, T]` and `mask`
    (broadcastable to `[B, H, T, T]`, or None) are traced, so a new shape
    compiles once and is then reused.

    Example:
      forward = nn.jit_forward(model, return_intermediates=True)
      logits, inter = forward(tokens)
    """
    graphdef, state = nnx.split(model)

    @jax.jit
    def compiled(state, inputs: Array, mask: Optional[Array]):
        return nnx.merge(graphdef, state)(inputs, mask=mask, **call)

    def forward(inputs, mask: Optional[Array] = None):
        return compiled(state, inputs, mask)

    return forward
