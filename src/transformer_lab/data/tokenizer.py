"""Text <-> token ids for a fixed vocabulary of token strings."""

from collections.abc import Collection, Sequence

import torch
from torch import Tensor

from transformer_lab.errors import ConfigError, require


class Tokenizer:
    """Maps each token string of a vocabulary to its index and back.

    `separator` says how tokens are written in text: "" for characters (Tiny Shakespeare: "ROMEO:" is six
    tokens), " " for tokens written apart ("3 1 3 9": four digits; any whitespace separates them).
    `Tokenizer.from_text(text)` builds a character vocabulary: the sorted set of the text's characters.
    """

    def __init__(self, vocab: Sequence[str], separator: str = ""):
        vocab = list(vocab)
        require(len(vocab) > 0, "the vocabulary is empty; build the tokenizer from a non-empty text")
        if separator == "":
            bad = [v for v in vocab if not (isinstance(v, str) and len(v) == 1)]
            require(not bad, f"vocabulary entries must be single characters, got {bad[:5]!r}")
        require(len(set(vocab)) == len(vocab), "the vocabulary lists a token twice; entries must be unique")
        self.separator = separator
        self._itos = vocab
        self._stoi = {token: i for i, token in enumerate(vocab)}

    @classmethod
    def from_text(cls, text: str) -> "Tokenizer":
        return cls(sorted(set(text)), separator="")

    @property
    def vocab(self) -> list[str]:
        return list(self._itos)

    def __len__(self) -> int:
        return len(self._itos)

    def split(self, text: str) -> list[str]:
        """The text's tokens as strings."""
        return list(text) if self.separator == "" else text.split()

    def encode(self, text: str) -> Tensor:
        """The text as a LongTensor of token ids, shape [number of tokens]."""
        tokens = self.split(text)
        unknown = sorted(set(tokens) - self._stoi.keys())
        if unknown:
            listed = ", ".join(repr(c) for c in unknown[:20]) + (" ..." if len(unknown) > 20 else "")
            known = "".join(self._itos) if self.separator == "" else " ".join(self._itos)
            what = "character(s)" if self.separator == "" else "token(s)"
            raise ConfigError(
                f"the text contains {len(unknown)} {what} not in the vocabulary: {listed}; "
                f"use only {what} in the checkpoint's vocabulary: {known!r}"
            )
        return torch.tensor([self._stoi[t] for t in tokens], dtype=torch.long)

    def decode(self, ids: Tensor | Sequence[int], skip: Collection[int] = ()) -> str:
        """The text for a 1-D tensor or list of token ids, leaving out the ids in `skip` (e.g. padding)."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return self.separator.join(self._itos[i] for i in ids if i not in skip)

    def tokens(self, ids: Tensor | Sequence[int]) -> list[str]:
        """Each id's token string (for axis labels)."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return [self._itos[i] for i in ids]
