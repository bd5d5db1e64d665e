"""The sort task: a list of digits in, the sorted list of its distinct digits out (`3 1 3 9 1` ->
`1 3 9`). Lengths vary on both sides and the output is usually shorter than the input, so a model must
decide when to stop: the encoder-decoder (the default) or the decoder-only model, not an encoder that
labels each input position."""

import torch

from transformer_lab.data.digit_lists import DigitListDataModule


class SortDataModule(DigitListDataModule):
    """Lists of `min_seq_len` to `seq_len` digits "0" .. str(num_categories - 1) (uniform length, then
    uniform digits); the target is the sorted set of its digits."""

    architectures = ("encoder_decoder", "decoder")
    label_rule = "sort_unique"

    def __init__(
        self,
        arch: str = "encoder_decoder",
        num_categories: int = 10,
        seq_len: int = 16,
        min_seq_len: int = 1,
        train_size: int = 50_000,
        val_size: int = 1_000,
        test_size: int = 10_000,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ):
        super().__init__(arch, train_size, val_size, test_size, batch_size, num_workers, seed)
        self.use_digits(num_categories, seq_len, min_seq_len)
        self.save_hyperparameters()
        self.max_target_len = min(seq_len, num_categories)

    def targets_for(self, sources: torch.Tensor) -> torch.Tensor:
        categories = len(self.symbols)
        present = torch.zeros(len(sources), categories + 1, dtype=torch.bool)
        present = present.scatter_(1, sources + 1, True)[:, 1:]
        # the present digits in increasing order, then -1s: sort the digits, absent ones last
        ranked = torch.where(present, torch.arange(categories), categories).sort(dim=1).values
        return ranked.masked_fill(ranked == categories, -1)[:, : self.max_target_len]

    def expected_sources(self, sources: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Output digit d is found at the source positions holding d (<eos> has no such position)."""
        digits = labels.masked_fill(labels < len(self.vocab) - len(self.symbols), -1)  # specials: none
        return sources[:, None, :] == digits[:, :, None]
