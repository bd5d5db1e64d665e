"""How a language model's batches are drawn from a long run of tokens: windows at random places.

A window of `block_size` + 1 consecutive tokens gives a training example: the model reads the first
`block_size` and, at every position t, predicts token t + 1 (the targets are the inputs shifted one step).
Training draws windows at uniformly random starts instead of chopping the text into fixed pieces: over a
run the model sees every token at every position of its context, and an "epoch" is just a number of steps.
Validation uses windows at starts drawn once from a seed, the same every run.

The tokens are a `Region` of a token file on disk (read through a memory map: only the pages a batch
touches are read) or, for small data and tests, a tensor in memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from transformer_lab.data.tokens import TokenFile


class Region:
    """Tokens `start` to `stop` of a token file: a split of the corpus, read through the file's map."""

    def __init__(self, tokens: TokenFile, start: int, stop: int):
        self.tokens, self.start, self.stop = tokens, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def gather(self, index: np.ndarray) -> Tensor:
        """The ids at positions `index` of the region (any shape), as a LongTensor of that shape."""
        return torch.from_numpy(self.tokens.read(index + self.start))


Tokens = Tensor | Region


def windows(data: Tokens, starts: Tensor, block_size: int) -> tuple[Tensor, Tensor]:
    """Inputs and next-token targets for windows beginning at `starts` (any shape S).

    Returns x, y of shape [*S, block_size]: x[..., t] = data[start + t], y[..., t] = data[start + t + 1].
    One gather of `block_size` + 1 tokens per window: `starts[..., None] + arange(block_size + 1)` is the
    index of every token, and x and y are two views of it.
    """
    index = starts[..., None] + torch.arange(block_size + 1)
    tokens = data[index] if isinstance(data, Tensor) else data.gather(index.numpy())
    return tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()


class RandomWindowBatches(IterableDataset):
    """`num_batches` batches of windows at uniformly random places in `data`, fresh every epoch.

    Each pass draws a seed from torch's global RNG (per DataLoader worker, which Lightning seeds per worker
    and rank), so `seed_everything` makes the batches reproducible. `rank` is added to that seed, so DDP
    processes, which share one global seed, draw different windows.
    """

    def __init__(self, data: Tokens, block_size: int, batch_size: int, num_batches: int, rank: int = 0):
        self.data = data
        self.block_size = block_size
        self.batch_size = batch_size
        self.num_batches = num_batches
        self.rank = rank

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        worker = get_worker_info()
        share = range(self.num_batches)
        if worker is not None:  # the workers split the epoch's batches between them
            share = share[worker.id :: worker.num_workers]
        generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())) + self.rank)
        high = len(self.data) - self.block_size  # starts below this keep the last target inside `data`
        for _ in share:
            starts = torch.randint(high, (self.batch_size,), generator=generator)
            yield windows(self.data, starts, self.block_size)


class FixedWindowBatches(Dataset):
    """Batches of windows at fixed `starts` [num_batches, batch_size]: the same every run and every epoch."""

    def __init__(self, data: Tokens, starts: Tensor, block_size: int):
        self.data = data
        self.starts = starts
        self.block_size = block_size

    def __len__(self) -> int:
        return self.starts.size(0)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return windows(self.data, self.starts[index], self.block_size)


def fixed_starts(length: int, block_size: int, num_batches: int, batch_size: int, seed: int) -> Tensor:
    """Window starts [num_batches, batch_size] drawn once from `seed`, uniformly over `length` tokens."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(length - block_size, (num_batches, batch_size), generator=generator)
