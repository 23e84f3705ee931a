"""Token ids outside the vocabulary: an error where it can be raised, a check under `jit`.

`nnx.Embed` gathers with `jnp.take(..., mode="fill")`, so an id outside
[0, vocab_size) embeds as a row of NaN: a tokenizer/vocabulary mismatch would
surface as NaN losses far from its cause. Hence:

* eager calls (concrete `tokens`): `check_tokens` raises a `ValueError`
  naming the bad ids, their positions and the vocabulary size;
* under `jax.jit` (traced `tokens`) nothing can be raised: the bad positions
  embed as NaN, and through attention (a weight of 0 times a NaN value is
  NaN) every logit of a sequence that holds one is NaN, while the other
  sequences of the batch are unaffected: NaN, never silently wrong numbers.
  To raise inside a jitted program, run `check_tokens` there under
  `jax.experimental.checkify.checkify` and throw the error it returns:

      check = checkify.checkify(lambda t: check_tokens(t, vocab_size))
      err, logits = jax.jit(lambda s, t: (check(t)[0], nnx.merge(g, s)(t)))(state, tokens)
      err.throw()   # JaxRuntimeError: token ids outside [0, V): min ..., max ...
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

_SHOWN = 8  # bad ids quoted in an error message


def check_tokens(tokens, vocab_size: int) -> None:
    """Raises unless every id of the integer array `tokens` `[...]` is in [0, vocab_size).

    Concrete `tokens`: a `ValueError` naming up to 8 bad ids and their positions.
    Traced `tokens`: a `checkify.check` (it needs `checkify.checkify` around the traced function).
    """
    if isinstance(tokens, jax.core.Tracer):
        inside = jnp.all((tokens >= 0) & (tokens < vocab_size))
        checkify.check(
            inside,
            f"token ids outside [0, {vocab_size}): min {{lo}}, max {{hi}}",
            lo=jnp.min(tokens),
            hi=jnp.max(tokens),
        )
        return
    ids = np.asarray(tokens)
    bad = np.argwhere((ids < 0) | (ids >= vocab_size))
    if bad.size:
        shown = ", ".join(
            f"{int(ids[tuple(i)])} at {tuple(int(j) for j in i)}" for i in bad[:_SHOWN]
        )
        more = f" (and {len(bad) - _SHOWN} more)" if len(bad) > _SHOWN else ""
        raise ValueError(
            f"token ids must be in [0, vocab_size={vocab_size}); inputs of shape {ids.shape} "
            f"have {len(bad)} outside: {shown}{more}"
        )
