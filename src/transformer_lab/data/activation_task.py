"""ActivationTask: a task whose examples are activation vectors, what a sparse autoencoder trains on.

Three tasks are of this kind: `ActivationsDataModule` (a model's activations at a hook point, over its
task's examples: data/activations.py), and the two answer keys whose features are known by construction,
`SyntheticFeaturesDataModule` (sparse combinations of known directions) and `SuperpositionDataModule` (the
hidden layer of a toy model of superposition, trained here). Training batches are activations [B, d_in];
validation and test batches are activations too, or, where the activations come from a model, that
model's own batches `(*inputs, labels)`, so that its loss can be measured with the SAE spliced in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from transformer_lab.data.task import TaskDataModule

if TYPE_CHECKING:
    from transformer_lab.nn import TokenModel


class ActivationTask(TaskDataModule):
    """A task of activation vectors of size `d_in` (see the module docstring). Subclasses set `d_in` and
    define the splits; those with known features return them from `true_features`."""

    architectures = ("sae",)
    separator = ""
    d_in: int = 0
    hook: str = ""  # the hook point the activations are read at ("" for activations of no model)
    batch_size: int = 256

    @property
    def vocab(self) -> list[str]:
        return []

    @property
    def max_len(self) -> int:
        return 1

    @property
    def source_model(self) -> TokenModel | None:
        """The model the activations come from (frozen, in eval mode), or None."""
        return None

    def true_features(self) -> Tensor | None:
        """The directions the activations are made of, unit rows [n, d_in], where they are known."""
        return None

    def scale_sample(self, count: int = 4096) -> Tensor:
        """`count` training activations [count, d_in] (fewer if fewer exist): what the SAE's input scale is
        estimated from."""
        self.setup("fit")
        return first_rows(self.train_dataloader(), count)

    def model_settings(self) -> dict:
        return {"d_in": self.d_in, "hook": self.hook}

    def check_architecture(self, arch: str) -> None:
        """An activation task trains an SAE only (checked by its own module)."""


SPLITS = ("train", "val", "test")


class DrawnActivations(ActivationTask):
    """An activation task whose examples are drawn (`draw(count, generator)`), not read: fixed val and
    test sets from seeds of their own, and an endless stream of training batches."""

    def draw(self, count: int, generator: torch.Generator) -> Tensor:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        for split in ("val", "test"):
            if split not in self.splits:
                generator = torch.Generator().manual_seed(self.seed + SPLITS.index(split))
                self.splits[split] = self.draw(self.sizes[split], generator)

    def train_dataloader(self) -> DataLoader:
        rank, _ = rank_of(self)
        batches = Batches(lambda g: self.draw(self.batch_size, g), self.seed + 3, rank)
        return DataLoader(batches, batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["val"], batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=self.batch_size)


class Batches(IterableDataset):
    """An endless stream of batches from `draw(generator) -> Tensor`, a generator per DDP rank."""

    def __init__(self, draw: Any, seed: int, rank: int = 0):
        super().__init__()
        self.draw, self.seed, self.rank = draw, seed, rank

    def __iter__(self) -> Iterator[Tensor]:
        generator = torch.Generator().manual_seed(self.seed + 7919 * self.rank)
        while True:
            yield self.draw(generator)


def first_rows(batches: Iterable[Tensor], count: int) -> Tensor:
    """The first `count` rows of a stream of batches [n, d_in] (fewer if it ends first), as one tensor: the
    stream is read no further than they need."""
    rows, seen = [], 0
    for batch in batches:
        rows.append(batch)
        seen += len(batch)
        if seen >= count:
            break
    return torch.cat(rows)[:count]


def rank_of(task: TaskDataModule) -> tuple[int, int]:
    """(this process's DDP rank, the number of ranks) of the Trainer training on `task` (0, 1 without)."""
    trainer = task.trainer
    if trainer is None:
        return 0, 1
    return int(getattr(trainer, "global_rank", 0)), int(getattr(trainer, "world_size", 1))


def mmcs(true: Tensor, learned: Tensor, level: float = 0.9) -> tuple[float, float]:
    """The mean max cosine similarity of the true directions [n, d] to the learned ones [m, d] (Sharkey et
    al. 2022: for each true direction, its best match among the learned ones, averaged), and the share
    of true directions matched above `level`."""
    true = true / true.norm(dim=1, keepdim=True).clamp(min=1e-12)
    learned = learned / learned.norm(dim=1, keepdim=True).clamp(min=1e-12)
    best = (true.double() @ learned.double().t()).max(dim=1).values
    return float(best.mean()), float((best > level).double().mean())
