"""Modular addition: predict (a + b) mod p from "a b =" (Power et al., 2022; Nanda et al., 2023).

    17 40 =  ->  57 mod p            tokens 0 .. p - 1 and "=" (id p); the answer is read at "="

The p^2 pairs (a, b) are split once, by the data seed: a `train_fraction` of them to train on, the rest
held out (the validation and the test split are both the held-out pairs, so `val/acc` and `test/acc`
are the answer accuracy on pairs never trained on). Trained full batch, as Nanda et al. do: a small
model memorises the training pairs early, and generalises to the held-out ones much later (grokking).
"""

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, TensorDataset

from transformer_lab.data.task import TaskDataModule
from transformer_lab.errors import require
from transformer_lab.nn import IGNORE_INDEX

MAX_P = 1000  # p^2 pairs, each a sequence of 3 tokens: a million pairs at most


def is_prime(n: int) -> bool:
    """Whether n is a prime (trial division: n is at most a few thousand here)."""
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def nearest_primes(n: int) -> list[int]:
    """The primes just below and just above n (for the message that asks for one)."""
    below = next((k for k in range(n - 1, 1, -1) if is_prime(k)), None)
    above = next(k for k in range(max(n + 1, 2), 2 * n + 3) if is_prime(k))
    return [k for k in (below, above) if k is not None]


class FullBatch(Dataset):
    """The whole training set as one batch, `repeats` times per epoch (full-batch gradient descent, with
    an epoch long enough that validation and the per-epoch bookkeeping do not run every step)."""

    def __init__(self, tensors: tuple[Tensor, ...], repeats: int):
        self.tensors, self.repeats = tensors, repeats

    def __len__(self) -> int:
        return self.repeats

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return self.tensors


class ModularAdditionDataModule(TaskDataModule):
    """(a + b) mod p for every pair a, b in 0 .. p - 1: a batch is (tokens [B, 3] = a, b, "="; labels
    [B, 3] = -100, -100, (a + b) mod p), so loss and accuracy count the answer only.

    p: a prime (the paper's 113). train_fraction: the share of the p^2 pairs trained on, in (0, 1)
    (the paper's 0.3); the others are the validation and test pairs. The split is a permutation of the
    pairs drawn from `seed` alone: the same seed, the same split. batch_size: null trains full batch
    (every training pair in each step; `batches_per_epoch` such steps make an epoch), or an integer for
    shuffled minibatches. Evaluation batches hold up to `eval_batch_size` pairs.
    """

    architectures = ("decoder",)
    separator = " "
    task_scores = "grokking"

    def __init__(
        self,
        p: int = 113,
        train_fraction: float = 0.3,
        batch_size: int | None = None,
        batches_per_epoch: int = 100,
        eval_batch_size: int = 4096,
        seed: int = 0,
    ):
        super().__init__()
        require(
            isinstance(p, int) and not isinstance(p, bool) and 2 <= p <= MAX_P,
            f"data.p={p!r} must be a prime from 2 to {MAX_P}, e.g. 113 (the paper's) or 59",
        )
        require(
            is_prime(p),
            f"data.p={p} is not prime; modular addition needs a prime p: use "
            + " or ".join(f"data.p={k}" for k in nearest_primes(p)),
        )
        require(
            isinstance(train_fraction, int | float)
            and not isinstance(train_fraction, bool)
            and 0 < train_fraction < 1,
            f"data.train_fraction={train_fraction!r} must be in (0, 1), the share of the p^2 pairs trained "
            "on (the rest are the test pairs), e.g. data.train_fraction=0.3",
        )
        trained = int(train_fraction * p * p)
        require(
            0 < trained < p * p,
            f"data.train_fraction={train_fraction} of data.p={p}: {trained} of {p * p} pairs to train on; "
            "both the training and the test pairs need at least one: move train_fraction towards 0.5",
        )
        for key, value in (("batches_per_epoch", batches_per_epoch), ("eval_batch_size", eval_batch_size)):
            require(
                isinstance(value, int) and not isinstance(value, bool) and value > 0,
                f"data.{key}={value!r} must be a positive integer",
            )
        require(
            batch_size is None
            or (isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size > 0),
            f"data.batch_size={batch_size!r} must be a positive integer, or null for full batch",
        )
        require(
            isinstance(seed, int) and not isinstance(seed, bool), f"data.seed={seed!r} must be an integer"
        )
        self.save_hyperparameters()
        self.p, self.train_fraction, self.seed = p, float(train_fraction), seed
        self.minibatch, self.batches_per_epoch, self.eval_batch_size = (
            batch_size,
            batches_per_epoch,
            eval_batch_size,
        )
        self.splits: dict[str, TensorDataset] = {}

    @property
    def batch_size(self) -> int:
        """Training pairs per step: every training pair (full batch), or `batch_size`."""
        return self.minibatch or int(self.train_fraction * self.p * self.p)

    @property
    def vocab(self) -> list[str]:
        return [str(i) for i in range(self.p)] + ["="]

    @property
    def equals_id(self) -> int:
        """The id of "=" (p): the position whose output is the answer."""
        return self.p

    @property
    def max_len(self) -> int:
        return 3

    # ------------------------------------------------------------------------------ the pairs
    def all_pairs(self) -> tuple[Tensor, Tensor]:
        """Every pair as a batch: tokens [p^2, 3] (pair a * p + b is row a * p + b) and labels [p^2, 3]."""
        a = torch.arange(self.p).repeat_interleave(self.p)
        b = torch.arange(self.p).repeat(self.p)
        tokens = torch.stack([a, b, torch.full_like(a, self.equals_id)], dim=1)
        labels = torch.full_like(tokens, IGNORE_INDEX)
        labels[:, -1] = (a + b) % self.p
        return tokens, labels

    def split_indices(self) -> tuple[Tensor, Tensor]:
        """(train pair indices, held-out pair indices) into `all_pairs`: a permutation drawn from the seed,
        its first int(train_fraction * p^2) entries to train on; disjoint, together every pair."""
        generator = torch.Generator().manual_seed(self.seed)
        order = torch.randperm(self.p * self.p, generator=generator)
        cut = int(self.train_fraction * self.p * self.p)
        return order[:cut], order[cut:]

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        tokens, labels = self.all_pairs()
        train, held_out = self.split_indices()
        self.splits["train"] = TensorDataset(tokens[train], labels[train])
        self.splits["val"] = self.splits["test"] = TensorDataset(tokens[held_out], labels[held_out])

    def train_dataloader(self) -> DataLoader:
        data = self.splits["train"]
        if self.minibatch is None:
            return DataLoader(FullBatch(data.tensors, self.batches_per_epoch), batch_size=None)
        return DataLoader(data, batch_size=self.minibatch, shuffle=True, drop_last=False)

    def _eval_loader(self, split: str) -> DataLoader:
        return DataLoader(self.splits[split], batch_size=self.eval_batch_size, shuffle=False)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

    # ------------------------------------------------------------------------- for the tools
    def text_example(self, ids: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """ "a b =": labelled with (a + b) mod p at "="; any other input has no label."""
        ids = ids.reshape(1, -1)
        labels = torch.full_like(ids, IGNORE_INDEX)
        if (
            ids.size(1) == 3
            and int(ids[0, 2]) == self.equals_id
            and max(int(ids[0, 0]), int(ids[0, 1])) < self.p
        ):
            labels[0, 2] = (ids[0, 0] + ids[0, 1]) % self.p
        return (ids,), labels

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        """`count` held-out pairs and copies with operand `position` (0: a, 1: b) plus one, whose answer is
        one more (activation patching)."""
        require(split in ("val", "test"), f"split={split!r} must be val or test")
        require(position in (0, 1), f"position={position} must be 0 (a) or 1 (b), the operand changed")
        inputs, labels = self.examples(count, split=split)
        corrupted, corrupted_labels = inputs[0].clone(), labels.clone()
        corrupted[:, position] = (corrupted[:, position] + 1) % self.p
        corrupted_labels[:, -1] = (corrupted[:, 0] + corrupted[:, 1]) % self.p
        return (inputs[0], labels), (corrupted, corrupted_labels)
