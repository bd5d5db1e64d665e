"""Tiny Shakespeare: character-level language modelling on 1.1 MB of Shakespeare's plays.

The corpus is one long string ("First Citizen:\\nBefore we proceed any further, hear me speak.\\n...") of
65 distinct characters. Each character is a token, so the model reads `block_size` characters and, at
every position t, predicts character t + 1: the target sequence is the input shifted one step left.
"""

import hashlib
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from transformer_lab.data.task import IGNORE_INDEX, TaskDataModule
from transformer_lab.data.tokenizer import Tokenizer
from transformer_lab.errors import ConfigError, require
from transformer_lab.files import require_regular_file
from transformer_lab.limits import require_memory

SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
MAX_TEXT_BYTES = 2_000_000_000  # a text file larger than this is not what this task reads


def shipped_text() -> Path:
    """Tiny Shakespeare (1.1 MB), shipped inside the package: no download, ever."""
    return Path(str(resources.files("transformer_lab.data").joinpath("tinyshakespeare", "input.txt")))


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_text(path: str | Path, sha256: str | None = None) -> str:
    """The file's contents as a string: a regular, non-empty UTF-8 file (with that sha256, if given)."""
    path = Path(path)
    require_regular_file(path, "data.path", MAX_TEXT_BYTES)
    # the text, its ids (int64) and the tokenizer's work: about 12 bytes per character
    require_memory(12 * path.stat().st_size, f"reading data.path={path}", "use a smaller text file")
    if sha256 is not None:
        actual = sha256_of(path)
        require(
            actual == sha256.lower(),
            f"{path} has sha256 {actual}, expected {sha256}; replace it with the right file "
            "or set data.sha256=null to skip the check (e.g. for your own text)",
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {err.start}: {err.reason}); save it as UTF-8"
        ) from None
    require(len(text) > 0, f"{path} is empty; point data.path at a non-empty UTF-8 text file")
    return text


def windows(data: Tensor, starts: Tensor, block_size: int) -> tuple[Tensor, Tensor]:
    """Inputs and next-character targets for windows beginning at `starts` (any shape S).

    Returns x, y of shape [*S, block_size]: x[..., t] = data[start + t], y[..., t] = data[start + t + 1].
    One gather per tensor: `starts[..., None] + arange(block_size)` is the index of every character.
    """
    index = starts[..., None] + torch.arange(block_size)
    return data[index], data[index + 1]


class RandomWindowBatches(IterableDataset):
    """`num_batches` batches of windows at uniformly random places in `data`, fresh every epoch.

    Random windows instead of a fixed chopping: the model sees every character at every position of the
    context over training, and an "epoch" is simply a fixed number of steps. Each pass draws a seed from
    torch's global RNG (per DataLoader worker, which Lightning seeds per worker and rank), so
    `seed_everything` makes the batches reproducible. `rank` is mixed in so DDP processes without workers,
    which share one global seed, still draw different batches.
    """

    def __init__(self, data: Tensor, block_size: int, batch_size: int, num_batches: int, rank: int = 0):
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

    def __init__(self, data: Tensor, starts: Tensor, block_size: int):
        self.data = data
        self.starts = starts
        self.block_size = block_size

    def __len__(self) -> int:
        return self.starts.size(0)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return windows(self.data, self.starts[index], self.block_size)


class ShakespeareDataModule(TaskDataModule):
    """Next-character prediction on a text file (Tiny Shakespeare by default, shipped in the package).

    The first `train_fraction` of the characters are the train split and the rest the val split; the test
    split reuses the val split (with the same fixed windows), as the corpus has no separate held-out text.
    Batches are (x, y), LongTensors [batch_size, block_size] with y = x shifted one character ahead.
    A train epoch is `batches_per_epoch` batches of random windows; val and test are `val_batches` batches
    of windows drawn once from `seed`. The file is read on first use of `vocab`, `tokenizer`, `data`, ...
    """

    architectures = ("decoder",)
    separator = ""  # one token per character
    label_rule = "next"
    data_files: ClassVar = {"path": "sha256"}  # transformer_lab.checkpoint: what a shared file may read
    shipped_files: ClassVar = {SHAKESPEARE_SHA256: None}  # path=None: the package's own copy

    def __init__(
        self,
        path: str | None = None,
        block_size: int = 128,
        batch_size: int = 64,
        train_fraction: float = 0.9,
        num_workers: int = 0,
        batches_per_epoch: int = 200,
        val_batches: int = 50,
        sha256: str | None = SHAKESPEARE_SHA256,
        seed: int = 0,
    ):
        super().__init__()
        for key, value in (
            ("block_size", block_size),
            ("batch_size", batch_size),
            ("batches_per_epoch", batches_per_epoch),
            ("val_batches", val_batches),
        ):
            require(isinstance(value, int) and value > 0, f"data.{key}={value!r} must be a positive integer")
        require(
            isinstance(train_fraction, int | float) and 0 < train_fraction < 1,
            f"data.train_fraction={train_fraction!r} must be a number strictly between 0 and 1",
        )
        require(
            isinstance(num_workers, int) and num_workers >= 0,
            f"data.num_workers={num_workers!r} must be an integer >= 0",
        )
        require(
            sha256 is None
            or (isinstance(sha256, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha256) is not None),
            f"data.sha256={sha256!r} must be 64 hex digits, or null to skip the checksum",
        )
        require(isinstance(seed, int), f"data.seed={seed!r} must be an integer")
        require(
            path is None or (isinstance(path, str) and path.strip() != ""),
            f"data.path={path!r} must name a text file (or be null: Tiny Shakespeare, shipped)",
        )
        self.save_hyperparameters()
        self.path = shipped_text() if path is None else Path(path)
        self.block_size = block_size
        self.batch_size = batch_size
        self.train_fraction = train_fraction
        self.num_workers = num_workers
        self.batches_per_epoch = batches_per_epoch
        self.val_batches = val_batches
        self.sha256 = sha256
        self.seed = seed
        self._tokenizer: Tokenizer | None = None
        self._data: Tensor | None = None
        self._n_train = 0

    def _load(self) -> None:
        """Read, check and encode the file once."""
        text = read_text(self.path, self.sha256)
        tokenizer = Tokenizer.from_text(text)
        data = tokenizer.encode(text)
        n_train = int(self.train_fraction * len(data))
        for split, length in (("train", n_train), ("val", len(data) - n_train)):
            require(
                self.block_size < length,
                f"data.block_size={self.block_size} must be smaller than the {split} split ({length} "
                f"characters of {self.path}); lower data.block_size or change data.train_fraction",
            )
        self._tokenizer, self._data, self._n_train = tokenizer, data, n_train

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._load()
        return self._tokenizer

    @property
    def data(self) -> Tensor:
        """The whole text encoded, LongTensor [num_characters]."""
        if self._data is None:
            self._load()
        return self._data

    @property
    def train_data(self) -> Tensor:
        return self.data[: self._n_train]

    @property
    def val_data(self) -> Tensor:
        return self.data[self._n_train :]

    @property
    def vocab(self) -> list[str]:
        return self.tokenizer.vocab

    @property
    def max_len(self) -> int:
        return self.block_size

    def text_example(self, ids: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """Your text (token ids [T]): each position's label is the text's next character."""
        ids = ids.reshape(1, -1)
        require(ids.size(1) > 1, 'the text needs at least two characters, e.g. text="ROMEO: I"')
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[:, :-1] = ids[:, 1:]
        return (ids,), labels

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        """The first `count` windows of a split, and copies with the character `position` places before
        the last (0: the last one) replaced by another character of the vocabulary (drawn with a fixed
        seed). Labels: the next character after each window at the last position only (-100 elsewhere),
        the same in both: the corrupted text has no answer of its own, so a circuit of this corruption is
        measured by KL divergence to the clean next-character distribution (`metric=kl`)."""
        require(split in ("val", "test"), f"split={split!r} must be val or test")
        require(
            isinstance(position, int) and 0 <= position < self.block_size,
            f"position={position!r} is not a place in the window: use 0 (the last character) to "
            f"{self.block_size - 1}",
        )
        (inputs,), next_characters = self.examples(count, split=split)
        labels = torch.full_like(next_characters, IGNORE_INDEX)
        labels[:, -1] = next_characters[:, -1]
        column = inputs.size(1) - 1 - position
        generator = torch.Generator().manual_seed(self.seed)
        shift = torch.randint(1, len(self.vocab), (len(inputs),), generator=generator)
        corrupted = inputs.clone()
        corrupted[:, column] = (inputs[:, column] + shift) % len(self.vocab)
        return (inputs, labels), (corrupted, labels.clone())

    def _loader(self, dataset: Dataset) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=None,  # the datasets yield whole batches
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def _fixed_batches(self) -> FixedWindowBatches:
        generator = torch.Generator().manual_seed(self.seed)
        high = len(self.val_data) - self.block_size
        starts = torch.randint(high, (self.val_batches, self.batch_size), generator=generator)
        return FixedWindowBatches(self.val_data, starts, self.block_size)

    def train_dataloader(self) -> DataLoader:
        rank = self.trainer.global_rank if self.trainer is not None else 0
        batches = RandomWindowBatches(
            self.train_data, self.block_size, self.batch_size, self.batches_per_epoch, rank
        )
        return self._loader(batches)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._fixed_batches())

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._fixed_batches())
