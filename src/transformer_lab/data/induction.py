"""Induction: sequences of random tokens in which a segment of random length repeats at a random place
(Olsson et al., 2022, "In-context learning and induction heads": repeated random tokens).

    7 3 9 1 [4 8 2 6] 5 0 [4 8 2 6] 3 ...        a segment, and later the same segment again

Random tokens cannot be predicted from what came before, except inside the repeat: once the repeat has
begun, each next token is the one that followed the same token the first time. A model learns that with an
induction circuit: a previous-token head (each position reads the one before it) and an induction head
(a position attends to the token after the earlier occurrence of its own token, and copies it). Because
the segment's length and both places are random, no positional head can solve it. Accuracy counts the
repeated tokens only (the second occurrence's tokens after its first); every position is still trained.
"""

import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from transformer_lab.data.splits import SplitsDataModule
from transformer_lab.errors import require
from transformer_lab.limits import require_memory
from transformer_lab.nn import IGNORE_INDEX

SPLITS = ("train", "val", "test")


class InductionDataModule(SplitsDataModule):
    """Sequences of `seq_len` tokens out of `vocab_size`, with a segment of `min_repeat` to `max_repeat`
    tokens repeated once at random places; splits from seeds seed, seed + 1, seed + 2. A batch is
    (tokens, labels): labels are the next tokens (a language model), and `repeated` marks the positions
    whose next token the repeat determines (the ones `acc` counts: labels elsewhere are -100 in the
    evaluation batches, but train on every position)."""

    architectures = ("decoder",)
    separator = " "
    label_rule = "induction"
    measures = ("induction", "previous_token")
    task_scores = "induction"

    def __init__(
        self,
        vocab_size: int = 32,
        seq_len: int = 48,
        min_repeat: int = 4,
        max_repeat: int = 16,
        train_size: int = 50_000,
        val_size: int = 1_000,
        test_size: int = 2_000,
        batch_size: int = 64,
        seed: int = 0,
    ):
        super().__init__()
        for key, value in (
            ("vocab_size", vocab_size),
            ("seq_len", seq_len),
            ("train_size", train_size),
            ("val_size", val_size),
            ("test_size", test_size),
            ("batch_size", batch_size),
        ):
            require(isinstance(value, int) and value > 0, f"data.{key}={value!r} must be a positive integer")
        require(vocab_size >= 2, f"data.vocab_size={vocab_size} must be at least 2")
        require(
            isinstance(min_repeat, int) and isinstance(max_repeat, int) and 2 <= min_repeat <= max_repeat,
            f"data.min_repeat={min_repeat!r} and data.max_repeat={max_repeat!r} must be integers with "
            "2 <= min_repeat <= max_repeat",
        )
        require(
            2 * max_repeat + 1 <= seq_len,
            f"data.seq_len={seq_len} cannot hold a segment of data.max_repeat={max_repeat} twice; "
            f"use seq_len >= {2 * max_repeat + 1}",
        )
        require(isinstance(seed, int), f"data.seed={seed!r} must be an integer")
        self.save_hyperparameters()
        self.vocab_size, self.seq_len, self.batch_size, self.seed = vocab_size, seq_len, batch_size, seed
        self.min_repeat, self.max_repeat = min_repeat, max_repeat
        self.sizes = dict(zip(SPLITS, (train_size, val_size, test_size), strict=True))
        self.splits: dict[str, TensorDataset] = {}

    @property
    def vocab(self) -> list[str]:
        return [str(i) for i in range(self.vocab_size)]

    @property
    def max_len(self) -> int:
        return self.seq_len

    def draw(self, size: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """`size` sequences [size, seq_len + 1], per input position whether its next token is determined
        by the repeat (bool [size, seq_len]), and where the segment's first occurrence starts [size]."""
        tokens = torch.randint(self.vocab_size, (size, self.seq_len + 1), generator=generator)
        length = torch.randint(self.min_repeat, self.max_repeat + 1, (size,), generator=generator)
        # the first occurrence starts at a in [0, L + 1 - 2 len], the second at b in [a + len, L + 1 - len]
        room = self.seq_len + 1 - 2 * length
        first = (torch.rand(size, generator=generator) * (room + 1)).long()
        gap = (torch.rand(size, generator=generator) * (room - first + 1)).long()
        second = first + length + gap
        position = torch.arange(self.seq_len + 1)
        offset = position[None, :] - second[:, None]  # position within the second occurrence
        inside = (offset >= 0) & (offset < length[:, None])
        source = (first[:, None] + offset).clamp(0, self.seq_len)
        tokens = torch.where(inside, tokens.gather(1, source), tokens)
        # token t + 1 is determined once the repeat has begun: offset of t + 1 in 1 .. len - 1
        determined = inside & (offset >= 1)
        return tokens, determined[:, 1:], first

    def layout(self, tokens: Tensor, determined: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(inputs, training labels: every next token, evaluation labels: the determined ones only)."""
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        return inputs, labels, labels.masked_fill(~determined, IGNORE_INDEX)

    def setup(self, stage: str | None = None) -> None:
        wanted = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(stage, SPLITS)
        for split in wanted:
            if split not in self.splits:
                size = self.sizes[split]
                require_memory(
                    size * (self.seq_len + 1) * 8 * 5,
                    f"the {split} split of data.{split}_size={size}",
                    "lower it",
                )
                generator = torch.Generator().manual_seed(self.seed + SPLITS.index(split))
                inputs, labels, scored = self.layout(*self.draw(size, generator)[:2])
                self.splits[split] = TensorDataset(inputs, labels if split == "train" else scored)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(self.splits[split], batch_size=self.batch_size, shuffle=shuffle, drop_last=shuffle)

    def text_example(self, ids: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """Your own tokens: every next token that repeats an earlier continuation is a label."""
        ids = ids.reshape(1, -1)
        labels = torch.full_like(ids, IGNORE_INDEX)
        for t in range(1, ids.size(1) - 1):
            earlier = (ids[0, :t] == ids[0, t]).nonzero()
            if len(earlier):
                labels[0, t] = ids[0, int(earlier[-1]) + 1]
        return (ids,), labels

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        """`count` examples and copies in which the token after the segment's first token, in its first
        occurrence, is changed: the induction answer at the start of the repeat (copy what followed this
        token before) changes with it. (`position` is unused: the corruption's place follows the repeat.)"""
        require(split in ("val", "test"), f"split={split!r} must be val or test")
        require(isinstance(count, int) and count > 0, f"num_examples={count!r} must be a positive integer")
        generator = torch.Generator().manual_seed(self.seed + SPLITS.index(split))
        tokens, determined, first = self.draw(count, generator)
        inputs, _, clean_labels = self.layout(tokens, determined)
        corrupted = inputs.clone()
        rows = torch.arange(count)
        corrupted[rows, first + 1] = (inputs[rows, first + 1] + 1) % self.vocab_size
        # the corrupted sequence's own labels: its repeat copies the changed token
        corrupted_tokens = torch.cat([corrupted, tokens[:, -1:]], dim=1)
        second = (clean_labels != IGNORE_INDEX).int().argmax(dim=1)  # the repeat's start reads first's token
        corrupted_tokens[rows, second + 1] = corrupted[rows, first + 1]
        _, _, corrupted_labels = self.layout(corrupted_tokens, determined)
        return (inputs, clean_labels), (corrupted_tokens[:, :-1], corrupted_labels)
