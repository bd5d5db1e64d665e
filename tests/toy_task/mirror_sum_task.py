"""A second task kept outside the package, with more output classes than input tokens: each position's
label is the sum of its digit and the digit at the mirror position (digits 0-4: sums 0-8, nine classes
from five tokens), named by `class_names`; it defines `corrupted_pairs` (activation patching) and
`alignment` (per-head alignment) as docs/own_task.md describes.
"""

import torch
from torch.utils.data import DataLoader, TensorDataset

from transformer_lab.data import TaskDataModule


class MirrorSumDataModule(TaskDataModule):
    architectures = ("encoder",)
    separator = " "
    num_classes = 9

    def __init__(self, seq_len: int = 6, size: int = 512, batch_size: int = 32):
        super().__init__()
        self.save_hyperparameters()
        self.seq_len, self.size, self.batch_size = seq_len, size, batch_size

    @property
    def vocab(self) -> list[str]:
        return [str(d) for d in range(5)]

    @property
    def class_names(self) -> list[str]:
        return [f"sum{s}" for s in range(self.num_classes)]

    @property
    def max_len(self) -> int:
        return self.seq_len

    def labels_of(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.flip(-1)

    def _examples(self, seed: int, count: int | None = None) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(5, (count or self.size, self.seq_len), generator=generator)

    def _loader(self, seed: int) -> DataLoader:
        x = self._examples(seed)
        return DataLoader(TensorDataset(x, self.labels_of(x)), batch_size=self.batch_size)

    def train_dataloader(self) -> DataLoader:
        return self._loader(0)

    def val_dataloader(self) -> DataLoader:
        return self._loader(1)

    def test_dataloader(self) -> DataLoader:
        return self._loader(2)

    def text_example(self, ids: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        return (ids[None],), self.labels_of(ids[None])

    def alignment(self, inputs: tuple[torch.Tensor, ...], labels: torch.Tensor) -> torch.Tensor:
        """Position t needs the token at the mirror position T-1-t."""
        batch, seq_len = inputs[0].shape
        return torch.eye(seq_len, dtype=torch.bool).flip(-1).expand(batch, seq_len, seq_len)

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        clean = self._examples(2, count)
        corrupted = clean.clone()
        corrupted[:, position] = (corrupted[:, position] + 1) % 5
        return (clean, self.labels_of(clean)), (corrupted, self.labels_of(corrupted))
