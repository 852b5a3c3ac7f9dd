"""Chapter 13: a character-level tokenizer — one token per character, a fixed vocabulary.

Character level keeps the model small and the unit of the loss plain: nats per character.
The vocabulary (the sorted set of characters of the whole corpus, training and validation files:
``CharTokenizer.from_text(corpus.text)`` in ``train.py``) is stored in every
checkpoint, so a checkpoint always decodes its own ids.
"""

from __future__ import annotations

import warnings

import torch


class CharTokenizer:
    """Characters <-> ids; id ``i`` is ``vocab[i]``.

    Shape:
        encode: str of length T -> (T,) int64; decode: (T,) ids -> str.
    """

    def __init__(self, vocab: str) -> None:
        if len(set(vocab)) != len(vocab) or not vocab:
            raise ValueError(
                f"vocab: expected a non-empty string of distinct characters, "
                f"got {len(vocab)} characters with {len(set(vocab))} distinct"
            )
        self.vocab = vocab
        self.index = {c: i for i, c in enumerate(vocab)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The vocabulary of ``text``: its distinct characters, sorted."""
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        """V, the number of distinct tokens."""
        return len(self.vocab)

    def encode(self, text: str) -> torch.Tensor:
        """Ids of ``text``; characters outside the vocabulary are dropped with a warning."""
        unknown = set(text) - self.index.keys()
        if unknown:
            warnings.warn(
                f"text: {len(unknown)} characters are not in the vocabulary "
                f"(e.g. {sorted(unknown)[0]!r}); they are dropped",
                stacklevel=2,
            )
            text = "".join(c for c in text if c in self.index)
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """Text of ``ids`` (a 1-D tensor or list)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids: expected shape (T,), got {tuple(ids.shape)}")
            ids = ids.tolist()
        return "".join(self.vocab[i] for i in ids)
