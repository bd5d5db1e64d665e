"""The reverse task: given a sequence of digits, output it reversed.

Every output position must read an input position far from itself (output i = input N-1-i), so the task
cannot be solved without attention, and with one head a trained model's attention map is the
anti-diagonal: an easy first picture of what attention learns.
"""

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from transformer_lab.data.task import TaskDataModule
from transformer_lab.errors import require


class ReverseDataset(Dataset):
    """`size` random sequences of `seq_len` integers in [0, num_categories); label = the input reversed.

    Drawn from a generator seeded with `seed`, so a split is the same in every run, whatever the global
    RNG state.
    """

    def __init__(self, num_categories: int, seq_len: int, size: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.data = torch.randint(num_categories, (size, seq_len), generator=generator)
        self.labels = self.data.flip(-1)

    def __len__(self) -> int:
        return self.data.size(0)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.data[index], self.labels[index]


class ReverseDataModule(TaskDataModule):
    """Train / val / test splits of the reverse task, each from its own seed (seed, seed + 1, seed + 2).

    Tokens are the digits "0" .. "9" (`num_categories` of them), written apart: "3 1 3 9".
    """

    architectures = ("encoder",)
    separator = " "

    def __init__(
        self,
        num_categories: int = 10,
        seq_len: int = 16,
        train_size: int = 50_000,
        val_size: int = 1_000,
        test_size: int = 10_000,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ):
        super().__init__()
        for key, value in (
            ("seq_len", seq_len),
            ("train_size", train_size),
            ("val_size", val_size),
            ("test_size", test_size),
            ("batch_size", batch_size),
        ):
            require(isinstance(value, int) and value > 0, f"data.{key}={value!r} must be a positive integer")
        require(
            isinstance(num_categories, int) and num_categories >= 2,
            f"data.num_categories={num_categories!r} must be an integer >= 2",
        )
        require(num_workers >= 0, f"data.num_workers={num_workers} must be >= 0")
        self.save_hyperparameters()
        self.num_categories = num_categories
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.num_workers = num_workers

    @property
    def vocab(self) -> list[str]:
        return [str(i) for i in range(self.num_categories)]

    @property
    def max_len(self) -> int:
        return self.seq_len

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        make = lambda size, offset: ReverseDataset(h.num_categories, h.seq_len, size, h.seed + offset)  # noqa: E731
        self.train_set = make(h.train_size, 0)
        self.val_set = make(h.val_size, 1)
        self.test_set = make(h.test_size, 2)

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)
