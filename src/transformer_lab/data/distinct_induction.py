"""Induction with distinct tokens: task=induction's sequences (a segment of random length repeated at a
random place), except that every token outside the repeat occurs once, so each repeated token has exactly
one earlier occurrence and every label the task counts is determined by the sequence.

    5 11 [3 8 14] 0 7 [3 8 14] 2 ...        the repeat is the only token that occurs twice

In task=induction's random sequences a token often occurs more than once before the repeat, and then the
first repeated label is ambiguous (with its default 32 tokens and 48 positions, more than half of the test
sequences hold such a label): no model reaches accuracy 1.0 there. The hand-built induction model
(`transformer_lab.pretrained.answer_keys`) is graded on these sequences, which need vocab_size > seq_len.

Its corruption moves the earlier occurrence of the repeat's first token A: clean `... A X ... Z Y ... A`
predicts X at the repeat's start; the corrupted copy replaces that A by a token A' found nowhere in the
sequence and writes A at an earlier place p instead of Z (outside both occurrences): `... A' X ... A Y ...
A` predicts Y. Only the place of A changes, i.e. which token a previous-token head writes next to X and Y:
the change reaches the answer through the induction head's keys (K-composition).
"""

import torch
from torch import Tensor

from transformer_lab.data.induction import SPLITS, InductionDataModule
from transformer_lab.errors import require
from transformer_lab.nn import IGNORE_INDEX


class DistinctInductionDataModule(InductionDataModule):
    """task=induction with each sequence's tokens distinct outside the repeat (see the module docstring);
    the same hyperparameters, and vocab_size > seq_len."""

    def __init__(
        self, vocab_size: int = 20, seq_len: int = 16, min_repeat: int = 3, max_repeat: int = 7, **kw
    ):
        super().__init__(vocab_size, seq_len, min_repeat, max_repeat, **kw)
        require(
            vocab_size > seq_len,
            f"data.vocab_size={vocab_size} must be more than data.seq_len={seq_len}: every token of a "
            "sequence but the repeat is a different one",
        )

    def draw(self, size: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """task=induction's `draw` (the same lengths and places), with distinct tokens around the repeat."""
        _, determined, first = super().draw(size, generator)
        distinct = torch.rand(size, self.vocab_size, generator=generator).argsort(dim=1)[
            :, : self.seq_len + 1
        ]
        second, length = _repeat(determined)
        offset = torch.arange(self.seq_len + 1)[None, :] - second[:, None]
        inside = (offset >= 0) & (offset < length[:, None])
        source = (first[:, None] + offset).clamp(0, self.seq_len)
        return torch.where(inside, distinct.gather(1, source), distinct), determined, first

    def alignment(self, inputs: tuple[Tensor, ...], labels: Tensor) -> Tensor:
        """Where the attention that answers should look: for each counted label at position t, the place
        right after the earlier occurrence of token t (what the induction head copies), [B, T, T]."""
        tokens = inputs[0]
        order = torch.arange(tokens.size(1), device=tokens.device)
        earlier = (tokens[:, :, None] == tokens[:, None, :]) & (order[None, None, :] < order[None, :, None])
        after = torch.zeros_like(earlier)
        after[:, :, 1:] = earlier[:, :, :-1]
        return after & (labels != IGNORE_INDEX)[:, :, None]

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        """`count` sequences and copies whose repeat's first token A is moved to an earlier place p (its
        old place gets a token found nowhere in the sequence), see the module docstring; sequences with no
        such place are skipped. (`position` is unused: the corruption's place follows the repeat.)"""
        require(split in ("val", "test"), f"split={split!r} must be val or test")
        require(isinstance(count, int) and count > 0, f"num_examples={count!r} must be a positive integer")
        generator = torch.Generator().manual_seed(self.seed + SPLITS.index(split))
        tokens, determined, first = self.draw(4 * count, generator)
        second, length = _repeat(determined)
        places = torch.arange(self.seq_len + 1)[None, :]
        allowed = ((places <= first[:, None] - 2) | (places >= (first + length)[:, None])) & (
            places <= second[:, None] - 2
        )
        valid = allowed.any(dim=1).nonzero()[:, 0][:count]
        require(
            len(valid) == count,
            f"only {len(valid)} of {4 * count} sequences have room to move the repeat's first token; use "
            f"num_examples={len(valid)} or less",
        )
        tokens, determined, first, second = tokens[valid], determined[valid], first[valid], second[valid]
        allowed = allowed[valid]
        rows = torch.arange(count)
        moved = (allowed.float() * torch.rand(allowed.shape, generator=generator)).argmax(dim=1)  # a random p
        present = torch.zeros(count, self.vocab_size, dtype=torch.bool).scatter_(1, tokens, True)
        absent = (~present).float().argmax(dim=1)  # the first token the sequence lacks
        corrupted = tokens.clone()
        corrupted[rows, moved] = tokens[rows, first]
        corrupted[rows, first] = absent
        inputs, _, clean_labels = self.layout(tokens, determined)
        corrupted_inputs, _, corrupted_labels = self.layout(corrupted, determined)
        corrupted_labels[rows, second] = tokens[rows, moved + 1]  # A now precedes Y
        return (inputs, clean_labels), (corrupted_inputs, corrupted_labels)


def _repeat(determined: Tensor) -> tuple[Tensor, Tensor]:
    """Where each sequence's second occurrence starts and the repeat's length, from the determined labels
    (input positions second .. second + length - 2)."""
    second = determined.int().argmax(dim=1)
    return second, determined.sum(dim=1) + 1


__all__ = ["IGNORE_INDEX", "DistinctInductionDataModule"]
