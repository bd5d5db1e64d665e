"""The reverse task: given a sequence of digits, output it reversed.

Every output position must read an input position far from itself (output i = input N-1-i), so the task
cannot be solved without attention, and with one head a trained model's attention map is the
anti-diagonal: an easy first picture of what attention learns. Every architecture can learn it: the
encoder predicts each position, the decoder-only model reads `source <sep>` and writes the target, the
encoder-decoder maps source to target (`data.min_seq_len` < `data.seq_len` makes lengths vary).
"""

import torch

from transformer_lab.data.digit_lists import DigitListDataModule


class ReverseDataModule(DigitListDataModule):
    """Random sequences of `min_seq_len` to `seq_len` digits (default: all `seq_len` long, the course
    tutorial's task), each reversed. Tokens are the digits "0" .. str(num_categories - 1), written apart
    ("3 1 4"); splits come from seeds seed, seed + 1, seed + 2, whatever the global RNG state."""

    architectures = ("encoder", "decoder", "encoder_decoder")
    label_rule = "reverse"

    def __init__(
        self,
        arch: str = "encoder",
        num_categories: int = 10,
        seq_len: int = 16,
        min_seq_len: int | None = None,
        train_size: int = 50_000,
        val_size: int = 1_000,
        test_size: int = 10_000,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ):
        super().__init__(arch, train_size, val_size, test_size, batch_size, num_workers, seed)
        min_seq_len = seq_len if min_seq_len is None else min_seq_len  # saved resolved, as before
        self.use_digits(num_categories, seq_len, min_seq_len)
        self.save_hyperparameters()
        self.max_target_len = seq_len

    def targets_for(self, sources: torch.Tensor) -> torch.Tensor:
        lengths = (sources >= 0).sum(dim=1, keepdim=True)
        position = torch.arange(sources.size(1))
        mirror = (lengths - 1 - position).clamp(min=0)  # target i = source n-1-i
        return sources.gather(1, mirror).masked_fill(position >= lengths, -1)

    def expected_sources(self, sources: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Output k of a source of n tokens is source token n-1-k (the mirror position)."""
        lengths = (sources != self.pad_id).sum(dim=1)[:, None, None]
        k = torch.arange(labels.size(1), device=sources.device)[None, :, None]
        s = torch.arange(sources.size(1), device=sources.device)[None, None, :]
        return (s == lengths - 1 - k) & (k < lengths)
