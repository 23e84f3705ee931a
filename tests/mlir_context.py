"""One MLIR context per thread for JAX's lowering in the test processes.

JAX lowers every program it compiles (a jitted function, and each eager op at
its first shapes and dtypes) into a fresh MLIR context, and making one loads
every dialect JAX uses: 4-10 ms a program on a 2-core machine, and destroying
it costs more. The suite lowers about 12,000 programs, most of them single
eager ops a few milliseconds long to compile, so in a test process the
contexts cost about as much as the lowering itself. `reuse()` makes JAX's
`make_ir_context` return one context per thread, the first one JAX's own
function made; measured on tests/attnjax/test_upstream_attention.py alone,
57.8 -> 44.4 s of CPU and 2.5 -> 0.65 GB peak memory.

Only the context's lifetime changes: the lowered module is the same text
(tests/test_mlir_context.py compares it with a fresh context's), XLA compiles
its own parsed copy of it, and nothing the tests compute depends on it. The
study commands, launcher jobs and distributed workers the tests start run
JAX as shipped.
"""

import threading

from jax._src.interpreters import mlir

MAKE_FRESH_CONTEXT = mlir.make_ir_context
_PER_THREAD = threading.local()


def reused_context():
    """The calling thread's MLIR context, made by JAX's `make_ir_context` the first time it is asked for."""
    if not hasattr(_PER_THREAD, "context"):
        _PER_THREAD.context = MAKE_FRESH_CONTEXT()
    return _PER_THREAD.context


def reuse() -> None:
    """Make JAX's lowering use `reused_context` (where JAX asks for a new context)."""
    mlir.make_ir_context = reused_context
