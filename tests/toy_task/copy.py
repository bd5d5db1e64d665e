"""A task added from outside the package, as the README's "Add your own task" shows: copy the input.

One module (this file) and two configs (configs/task/copy.yaml, configs/data/copy.yaml); nothing in
transformer_lab changes. tests/test_own_task.py trains it.
"""

import torch
from torch.utils.data import DataLoader, TensorDataset

from transformer_lab.data import TaskDataModule


class CopyDataModule(TaskDataModule):
    """Random digit sequences; the label of each position is its own digit."""

    architectures = ("encoder",)
    separator = " "

    def __init__(self, seq_len: int = 8, size: int = 256, batch_size: int = 32):
        super().__init__()
        self.save_hyperparameters()
        self.seq_len, self.size, self.batch_size = seq_len, size, batch_size

    @property
    def vocab(self) -> list[str]:
        return [str(d) for d in range(10)]

    @property
    def max_len(self) -> int:
        return self.seq_len

    def alignment(self, inputs: tuple[torch.Tensor, ...], labels: torch.Tensor) -> torch.Tensor:
        """Where attention should look: each position at itself (HeadMetricsCallback measures it)."""
        batch, seq_len = inputs[0].shape
        return torch.eye(seq_len, dtype=torch.bool).expand(batch, seq_len, seq_len)

    def _loader(self, seed: int) -> DataLoader:
        x = torch.randint(10, (self.size, self.seq_len), generator=torch.Generator().manual_seed(seed))
        return DataLoader(TensorDataset(x, x.clone()), batch_size=self.batch_size)

    def train_dataloader(self) -> DataLoader:
        return self._loader(0)

    def val_dataloader(self) -> DataLoader:
        return self._loader(1)

    def test_dataloader(self) -> DataLoader:
        return self._loader(2)
