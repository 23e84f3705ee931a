import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import tasks


@functools.lru_cache(maxsize=None)
def _default_corpus():
    return tasks.CharCorpus(seq_len=32)


# One instance and one batch size per task, so each compiles once.
RECALL = tasks.AssociativeRecall(num_pairs=6, num_queries=4, vocab_size=32, num_key_tokens=10)
SORTING = tasks.Sorting(length=6, vocab_size=10)
B = 5


def _synthetic_tasks():
    return [RECALL, SORTING]


@pytest.mark.parametrize("task", _synthetic_tasks(), ids=lambda t: type(t).__name__)
def test_batches_are_deterministic_and_typed(task):
    a = task.batch(jax.random.key(3), B)
    b = task.batch(jax.random.key(3), B)
    c = task.batch(jax.random.key(4), B)
    chex.assert_trees_all_equal(a, b)
    assert not np.array_equal(np.asarray(a.inputs), np.asarray(c.inputs))
    chex.assert_shape([a.inputs, a.targets, a.weights], (B, task.seq_len))
    assert (a.inputs.dtype, a.targets.dtype, a.weights.dtype) == (jnp.int32, jnp.int32, jnp.float32)
    assert 0 <= int(a.inputs.min()) and int(a.inputs.max()) < task.vocab_size
    assert 0 <= int(a.targets.min()) and int(a.targets.max()) < task.vocab_size


@pytest.mark.parametrize("task", _synthetic_tasks() + [None], ids=["recall", "sorting", "char_lm"])
def test_batches_under_jit_and_vmap_match_eager(task):
    task = task or _default_corpus()
    keys = jax.random.split(jax.random.key(7), 2)
    stacked = jax.jit(jax.vmap(lambda k: task.batch(k, B)))(keys)
    for i in range(2):
        chex.assert_trees_all_equal(jax.tree.map(lambda x: x[i], stacked), task.batch(keys[i], B))


def test_associative_recall_targets_are_the_paired_values():
    task, n = RECALL, RECALL.num_pairs
    batches = [jax.tree.map(np.asarray, task.batch(jax.random.key(i), B)) for i in range(10)]
    for inputs, targets, weights in zip(*[np.concatenate(x) for x in zip(*batches)]):
        keys, values = list(inputs[0 : 2 * n : 2]), list(inputs[1 : 2 * n : 2])
        assert len(set(keys)) == n and all(0 <= k < 10 for k in keys)
        assert all(10 <= v < 32 for v in values)
        queries = list(inputs[2 * n :])
        assert len(set(queries)) == len(queries) == 4 and set(queries) <= set(keys)
        for t in range(task.seq_len):
            if t < 2 * n:
                assert weights[t] == 0 and targets[t] == 0
            else:
                assert weights[t] == 1
                assert targets[t] == values[keys.index(inputs[t])]
                # The answer is no token of the query section: only the pair gives it away.
                assert targets[t] not in inputs[2 * n : t + 1]
    assert task.chance_accuracy == pytest.approx(1 / 22)


def test_associative_recall_values_vary_across_examples():
    answers = np.concatenate(
        [np.asarray(RECALL.batch(jax.random.key(i), B).targets[:, -1]) for i in range(4)]
    )
    assert len(set(answers.tolist())) > 4
    assert tasks.AssociativeRecall().seq_len == 24


def test_sorting_targets_are_the_sorted_inputs():
    task, n = SORTING, SORTING.length
    inputs, targets, weights = map(np.asarray, task.batch(jax.random.key(2), B))
    np.testing.assert_array_equal(targets[:, n:], np.sort(inputs[:, :n], axis=1))
    np.testing.assert_array_equal(inputs[:, n], np.full(B, task.separator))
    np.testing.assert_array_equal(inputs[:, n + 1 :], targets[:, n:-1])  # teacher forcing
    np.testing.assert_array_equal(inputs[:, 1:n], targets[:, : n - 1])
    np.testing.assert_array_equal(weights, np.broadcast_to(np.arange(2 * n) >= n, weights.shape))
    assert inputs[:, :n].max() < task.separator
    assert task.chance_accuracy == pytest.approx(1 / 9)


def test_default_corpus_round_trip_split_and_determinism():
    corpus = _default_corpus()
    text = tasks.default_corpus_text()[: corpus.max_chars]
    ids = np.concatenate(
        [np.asarray(corpus.split_ids("train")), np.asarray(corpus.split_ids("val"))]
    )
    assert corpus.decode(ids) == text
    assert len(corpus.split_ids("val")) == len(text) - round(0.9 * len(text))
    assert "def " in text and corpus.vocab_size == len(set(text)) + 1
    again = tasks.CharCorpus(seq_len=32)
    chex.assert_trees_all_equal(
        corpus.batch(jax.random.key(5), 4, "val"), again.batch(jax.random.key(5), 4, "val")
    )
    inputs, targets, weights = corpus.batch(jax.random.key(5), 4)
    np.testing.assert_array_equal(np.asarray(inputs)[:, 1:], np.asarray(targets)[:, :-1])
    assert np.all(np.asarray(weights) == 1)
    assert corpus.decode(inputs[0]) in text


def test_user_corpus_train_and_val_are_disjoint(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("ab" * 450 + "cé" * 50, encoding="utf-8")  # the last 10% is the "cé" part
    corpus = tasks.make_task("char_lm", path=str(path), seq_len=8, val_fraction=0.1)
    assert corpus.chars == ("a", "b", "c", "é") and corpus.vocab_size == 5
    assert corpus.decode(corpus.split_ids("val")) == "cé" * 50
    for split, allowed in (("train", "ab"), ("val", "cé")):
        batch = corpus.batch(jax.random.key(0), 16, split)
        assert batch.inputs.shape == (16, 8) and batch.inputs.dtype == jnp.int32
        seen = set(corpus.decode(batch.inputs)) | set(corpus.decode(batch.targets))
        assert seen == set(allowed)
    np.testing.assert_array_equal(corpus.encode("ba?"), np.array([2, 1, 0], np.int32))
    assert corpus.decode(corpus.encode("ba?")) == "ba\ufffd"


def test_corpus_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such text file"):
        tasks.CharCorpus(path=str(tmp_path / "missing.txt"))
    short = tmp_path / "short.txt"
    short.write_text("x" * 40, encoding="utf-8")
    with pytest.raises(ValueError, match="val split .* needs at least seq_len"):
        tasks.CharCorpus(path=str(short), seq_len=8)
    with pytest.raises(ValueError, match="val_fraction"):
        tasks.CharCorpus(path=str(short), seq_len=8, val_fraction=1.0)
    with pytest.raises(ValueError, match="split"):
        tasks.CharCorpus(path=str(short), seq_len=2).batch(jax.random.key(0), 2, "test")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_pairs=5, num_queries=6), "num_queries"),
        (dict(num_pairs=40, vocab_size=64), "num_pairs .* distinct keys"),
        (dict(num_pairs=0), "num_pairs must be an int >= 1"),
        (dict(vocab_size=16, num_key_tokens=16), "num_key_tokens"),
    ],
)
def test_recall_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tasks.AssociativeRecall(**kwargs)


def test_bad_sizes_and_names():
    with pytest.raises(ValueError, match="length"):
        tasks.Sorting(length=0)
    with pytest.raises(ValueError, match="vocab_size"):
        tasks.Sorting(vocab_size=2)
    with pytest.raises(TypeError, match="length must be an int"):
        tasks.Sorting(length=2.5)
    with pytest.raises(ValueError, match="batch_size"):
        tasks.Sorting().batch(jax.random.key(0), 0)
    with pytest.raises(ValueError, match="valid names: .*associative_recall.*char_lm.*sorting"):
        tasks.make_task("copying")
    with pytest.raises(ValueError, match="unknown argument.*'lenght'.*valid"):
        tasks.make_task("sorting", lenght=3)
    assert tasks.make_task(
        "associative_recall", num_pairs=4, num_queries=2
    ) == tasks.AssociativeRecall(4, 2)
