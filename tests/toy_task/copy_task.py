"""A task kept outside the package, as docs/own_task.md shows: copy the input.

One module (this file, found through PYTHONPATH) and two configs (configs/task/copy.yaml,
configs/data/copy.yaml, found through hydra.searchpath); nothing in transformer_lab changes.
tests/test_own_task.py trains it and runs every tool on its checkpoint.
"""

import torch
from torch.utils.data import DataLoader, TensorDataset

from transformer_lab.data import TaskDataModule


class CopyDataModule(TaskDataModule):
    architectures = ("encoder",)  # the model.arch values that can learn it
    separator = " "  # how its tokens are written: "3 1 4"

    def __init__(self, seq_len: int = 8, size: int = 256, batch_size: int = 32):
        super().__init__()
        self.save_hyperparameters()  # stored in checkpoints: the tools rebuild the task from them
        self.seq_len, self.size, self.batch_size = seq_len, size, batch_size

    @property
    def vocab(self) -> list[str]:  # token id i is vocab[i]
        return [str(d) for d in range(10)]

    @property
    def max_len(self) -> int:  # the longest sequence a model reads
        return self.seq_len

    def _loader(self, seed: int) -> DataLoader:  # batches are (model inputs..., labels)
        x = torch.randint(10, (self.size, self.seq_len), generator=torch.Generator().manual_seed(seed))
        return DataLoader(TensorDataset(x, x.clone()), batch_size=self.batch_size)

    def train_dataloader(self) -> DataLoader:
        return self._loader(0)

    def val_dataloader(self) -> DataLoader:
        return self._loader(1)

    def test_dataloader(self) -> DataLoader:
        return self._loader(2)

    def text_example(self, ids: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """Your own input (text="3 1 4"): its output is itself."""
        return (ids[None],), ids[None].clone()

    def alignment(self, inputs: tuple[torch.Tensor, ...], labels: torch.Tensor) -> torch.Tensor:
        """Where attention should look: each position at itself (bool [batch, query, key])."""
        batch, seq_len = inputs[0].shape
        return torch.eye(seq_len, dtype=torch.bool).expand(batch, seq_len, seq_len)

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        """`count` test examples and copies with token `position` changed (to the next digit): the
        batches `(inputs..., labels)` activation patching compares."""
        clean = torch.randint(10, (count, self.seq_len), generator=torch.Generator().manual_seed(2))
        corrupted = clean.clone()
        corrupted[:, position] = (corrupted[:, position] + 1) % 10
        return (clean, clean.clone()), (corrupted, corrupted.clone())
