"""attnjax.sentences: English prose sentences for measuring pretrained models on real text."""

import pytest

from attnjax import sentences, tasks


def test_docstring_sentences_are_deterministic_prose_in_the_word_range():
    a = sentences.docstring_sentences(max_sentences=200, min_words=6, max_words=20)
    assert a == sentences.docstring_sentences(max_sentences=200, min_words=6, max_words=20)
    assert len(a) == 200 and len(set(a)) == 200
    for sentence in a:
        assert 6 <= len(sentence.split()) <= 20
        assert sentence[0].isupper() and sentence[-1] in ".!?"
        assert not any(mark in sentence for mark in (">>>", "(", "=", "_", "\n", "e.g."))
    assert (
        sentences.docstring_sentences(("heapq",))[:3]
        == sentences.docstring_sentences(("heapq", "bisect"))[:3]
    )


def test_split_sentences_keeps_prose_and_drops_code():
    text = (
        "Heaps are binary trees. They are useful.\n\n>>> heappush(h, 3)\n\n"
        "Use a list, e.g. a queue.  This line\nwraps over two lines!"
    )
    assert sentences.split_sentences(text, min_words=2, max_words=10) == [
        "Heaps are binary trees.",
        "They are useful.",
        "This line wraps over two lines!",
    ]
    assert sentences.split_sentences(text, min_words=4, max_words=4) == ["Heaps are binary trees."]


def test_sentence_arguments_are_checked():
    with pytest.raises(ValueError, match=r"max_words \(2\) must be >= min_words \(3\)"):
        sentences.split_sentences("A b c.", min_words=3, max_words=2)
    with pytest.raises(TypeError, match="modules must be a sequence of module names"):
        sentences.docstring_sentences("heapq")
    with pytest.raises(ValueError, match="max_sentences must be"):
        sentences.docstring_sentences(max_sentences=0)


def test_sentences_are_defined_only_in_their_module():
    for name in ("DEFAULT_DOCSTRING_MODULES", "docstring_sentences", "split_sentences"):
        assert hasattr(sentences, name) and not hasattr(tasks, name)
