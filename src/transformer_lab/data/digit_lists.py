"""What the digit-list tasks (reverse, sort) share: their sources are lists of `min_seq_len` to `seq_len`
digits "0" .. str(num_categories - 1), uniform length, then uniform digits."""

import torch

from transformer_lab.data.seq2seq import Seq2SeqDataModule
from transformer_lab.errors import require


class DigitListDataModule(Seq2SeqDataModule):
    """A sequence-to-sequence task on lists of digits; a subclass says what the target of a list is
    (`targets_for`) and how long it can be (`max_target_len`)."""

    def use_digits(self, num_categories: int, seq_len: int, min_seq_len: int) -> None:
        """Check the sizes and set the symbols and source lengths (call it from `__init__`)."""
        require(
            isinstance(seq_len, int) and seq_len > 0, f"data.seq_len={seq_len!r} must be a positive integer"
        )
        require(
            isinstance(min_seq_len, int) and 1 <= min_seq_len <= seq_len,
            f"data.min_seq_len={min_seq_len!r} must be an integer from 1 to data.seq_len={seq_len}",
        )
        require(
            isinstance(num_categories, int) and num_categories >= 2,
            f"data.num_categories={num_categories!r} must be an integer >= 2",
        )
        self.symbols = [str(i) for i in range(num_categories)]
        self.min_seq_len = min_seq_len
        self.max_source_len = seq_len

    def draw_sources(self, size: int, generator: torch.Generator) -> torch.Tensor:
        lengths = torch.randint(self.min_seq_len, self.max_source_len + 1, (size, 1), generator=generator)
        digits = torch.randint(len(self.symbols), (size, self.max_source_len), generator=generator)
        return digits.masked_fill(torch.arange(self.max_source_len) >= lengths, -1)
