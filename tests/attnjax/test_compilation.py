"""`attnjax.compilation`: programs compiled fast give the numbers of a plain `jax.jit`."""

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import compilation, tasks


def test_level_one_on_a_cpu_unless_xla_flags_set_a_level(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_concurrency_optimized_scheduler=false")
    assert compilation.fast_compile_options() == {"xla_backend_optimization_level": 1}
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    assert compilation.fast_compile_options() == {}


def test_jit_fast_gives_the_numbers_of_jax_jit(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "")  # the suite sets a level; let the fast options apply

    def f(x):
        return jnp.tanh(x @ x.T) + jnp.exp(-x).sum(axis=-1, keepdims=True)

    x = jax.random.normal(jax.random.key(0), (8, 16), jnp.float32)
    compiled = compilation.jit_fast(f).lower(x).compile()
    assert "xla_backend_optimization_level" in str(compilation.fast_compile_options())
    np.testing.assert_array_equal(np.asarray(compiled(x)), np.asarray(jax.jit(f)(x)))


def test_a_task_batch_is_the_same_eager_jitted_and_vmapped(monkeypatch):
    monkeypatch.setenv(
        "XLA_FLAGS", ""
    )  # eager calls compile with the fast options, nested ones without
    task = tasks.AssociativeRecall(num_pairs=4, num_queries=4, vocab_size=16)
    keys = jax.random.split(jax.random.key(1), 3)
    eager = [task.batch(k, 5) for k in keys]
    jitted = jax.jit(lambda k: task.batch(k, 5))(keys[0])
    vmapped = jax.vmap(lambda k: task.batch(k, 5))(keys)
    for got, want in (
        (jitted, eager[0]),
        *((jax.tree.map(lambda x, i=i: x[i], vmapped), eager[i]) for i in range(3)),
    ):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
