"""Tokenizers of pretrained checkpoints, built with the `tokenizers` library.

`TextTokenizer` wraps a `tokenizers.Tokenizer` with the two calls studies
need: `encode(text) -> list[int]` and `decode(ids) -> str`, plus `batch`, which
pads a list of texts to the longest and returns the validity mask.

* Hugging Face directories (BERT's WordPiece, byte-level BPE, ...):
  `tokenizer.json` as shipped, with the shipped padding and truncation
  turned off (`batch` pads to the longest instead).
* llama family in GGUF: a byte-level BPE built from the file's vocabulary and
  merges (`gguf_bpe_tokenizer`): digits split one by one, then the GPT-2
  byte-level split, no prefix space, byte-level decoder; control tokens are
  special tokens.
"""

from __future__ import annotations

import dataclasses
import string
from typing import Optional, Sequence

import numpy as np


@dataclasses.dataclass
class TextTokenizer:
    """`encode` / `decode` / `batch` around a `tokenizers.Tokenizer`.

    Attributes:
      backend: the `tokenizers.Tokenizer`.
      pad_id: id used to pad `batch`.
      add_special_tokens: whether `encode` adds the template's special tokens
        (BERT: [CLS] ... [SEP]; the llama GGUF: none, `add_bos_token` is false).
    """

    backend: object
    pad_id: int
    add_special_tokens: bool = True

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of one text."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self.backend.encode(text, add_special_tokens=self.add_special_tokens).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a sequence of ids (special tokens kept)."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)

    def tokens(self, text: str) -> list[str]:
        """The vocabulary entries of one text's tokens, as stored (byte-level BPE: 'Ġcat' for ' cat');
        `token_labels` gives them readable."""
        return self.backend.encode(text, add_special_tokens=self.add_special_tokens).tokens

    def token_labels(self, text: str) -> list[str]:
        """One readable label per token of `text` (plot axes): each token decoded alone, so byte-level
        BPE's 'Ġcat' reads ' cat' and 'Ã¯' reads 'ï' (WordPiece keeps its '##'), with line breaks and
        tabs shown as '↵' and '⇥' and a token of spaces only as '␣' per space."""
        labels = []
        for token_id in self.encode(text):
            label = self.backend.decode([token_id], skip_special_tokens=False)
            label = label.replace("\n", "↵").replace("\t", "⇥")
            labels.append("␣" * len(label) if label and not label.strip(" ") else label)
        return labels

    def batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Pad to the longest: ids `[N, T]` int32 and valid `[N, T]` bool."""
        if isinstance(texts, str) or not len(texts):
            raise ValueError("texts must be a non-empty list of strings")
        encoded = [self.encode(t) for t in texts]
        length = max(len(e) for e in encoded)
        ids = np.full((len(encoded), length), self.pad_id, np.int32)
        valid = np.zeros((len(encoded), length), bool)
        for i, e in enumerate(encoded):
            ids[i, : len(e)] = e
            valid[i, : len(e)] = True
        return ids, valid


PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>", "<|endoftext|>")


def file_tokenizer(path: str, pad_id=None) -> TextTokenizer:
    """A Hugging Face `tokenizer.json` as shipped (its template's special tokens added), padding and
    truncation off; pad id: `pad_id` when an int, else the first of `PAD_TOKENS` it has, else 0."""
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(path)
    except Exception as error:  # the tokenizers library raises its own exception type
        raise ValueError(
            f"{path} is not a tokenizer.json the tokenizers library reads: {error}"
        ) from None
    backend.no_padding()
    backend.no_truncation()
    if not isinstance(pad_id, int):
        found = [backend.token_to_id(t) for t in PAD_TOKENS if backend.token_to_id(t) is not None]
        pad_id = found[0] if found else 0
    return TextTokenizer(backend, pad_id, add_special_tokens=True)


def wordpiece_tokenizer(path: str) -> TextTokenizer:
    """BERT family: `tokenizer.json`, padding and truncation off, [PAD] as the pad id."""
    return file_tokenizer(path)


CONTROL_TOKEN = 3  # GGUF token_type of control tokens (<|im_start|>, <|endoftext|>, ...)


def gguf_bpe_tokenizer(
    tokens: Sequence[str], merges: Sequence[str], token_types: Sequence[int], *, pad_id: int
) -> TextTokenizer:
    """GPT-2 byte-level BPE from GGUF metadata (`tokenizer.ggml.tokens`, `.merges`, `.token_type`)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    special = [tokens[i] for i, kind in enumerate(token_types) if kind == CONTROL_TOKEN]
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    return TextTokenizer(backend, pad_id, add_special_tokens=False)


USER_DEFINED_TOKEN = 4  # GGUF token_type of user-defined tokens (Gemma's "\n", "\n\n", ...)
SENTENCEPIECE_SPACE = "\u2581"  # "▁", SentencePiece's spelling of a space


def sentencepiece_merges(tokens: Sequence[str]) -> list[tuple[str, str]]:
    """BPE merges recovered from a SentencePiece vocabulary listed best-first (Gemma's GGUF files
    carry no merges, and their scores do not follow the merge order; the position does).

    Every split of a token into two vocabulary entries is a merge, ranked by the token's position,
    then by the longer left part first.
    """
    vocab = set(tokens)
    return [
        (token[:cut], token[cut:])
        for token in tokens
        for cut in range(len(token) - 1, 0, -1)
        if token[:cut] in vocab and token[cut:] in vocab
    ]


def gguf_sentencepiece_tokenizer(
    tokens: Sequence[str], token_types: Sequence[int], *, bos_id: Optional[int], pad_id: int
) -> TextTokenizer:
    """A SentencePiece BPE vocabulary from GGUF metadata (`tokenizer.ggml.model` 'llama'; Gemma's):
    spaces read as '▁', no pre-split, byte fallback (`<0x..>` tokens), merges from the vocabulary's
    order (`sentencepiece_merges`); control tokens special, user-defined ones ("\\n", ...) whole;
    `bos_id` (None: none) prepended by `encode`. A token of spaces only is stored with spaces
    and read as '▁'s."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    tokens = [SENTENCEPIECE_SPACE * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = {token: i for i, token in enumerate(tokens)}
    unknown = "<unk>" if "<unk>" in vocab else None
    backend = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=sentencepiece_merges(tokens),
            fuse_unk=True,
            unk_token=unknown,
            byte_fallback=True,
        )
    )
    backend.normalizer = normalizers.Replace(" ", SENTENCEPIECE_SPACE)
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    backend.decoder = decoders.Sequence(
        [decoders.Replace(SENTENCEPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )

    def added(kind: int, special: bool) -> list:
        return [
            AddedToken(token, special=special, normalized=False)
            for token, token_type in zip(tokens, token_types)
            if token_type == kind
        ]

    backend.add_special_tokens(added(CONTROL_TOKEN, True))
    backend.add_tokens(added(USER_DEFINED_TOKEN, False))
    if bos_id is not None:
        bos = tokens[bos_id]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    return TextTokenizer(backend, pad_id, add_special_tokens=bos_id is not None)


# Space markers of byte-level and SentencePiece tokens, stripped before a token is classed.
SPACE_MARKERS = "\u0120\u2581 "


def is_punctuation(token: str) -> bool:
    """A token made of punctuation characters only (BERT's '.', ',', ';', ...)."""
    return bool(token) and all(ch in string.punctuation for ch in token)


def is_delimiter(token: str) -> bool:
    """A delimiter token (Sun et al. 2024): punctuation, a newline or [SEP], space markers stripped."""
    bare = token.lstrip(SPACE_MARKERS)
    return token == "[SEP]" or bare in ("\n", "\u010a") or is_punctuation(bare)
