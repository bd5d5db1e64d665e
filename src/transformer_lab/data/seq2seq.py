"""Sequence-to-sequence tasks: a source sequence in, a target sequence out, laid out for each architecture.

The same examples train every model that fits the task; only the batches differ (S: the source, T: the
target, each padded with <pad>; labels of -100 count for nothing):

    encoder           tokens = S                    labels = T (a class per position: |T| = |S|)
    decoder           tokens = S <sep> T            labels = the next token, on the target part only:
                                                             -100 ... -100 T <eos>
    encoder_decoder   source = S, target = <bos> T  labels = T <eos>

The decoder-only model reads the source and writes the target as one sequence; the encoder-decoder
reads the source with its encoder and writes the target with its decoder. Both are measured by
generating the target from the source (`generate`), not only by teacher forcing.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from transformer_lab.data.task import IGNORE_INDEX, TaskDataModule
from transformer_lab.errors import require

SPECIALS = ["<pad>", "<bos>", "<eos>", "<sep>"]
PAD, BOS, EOS, SEP = range(4)


def pad_rows(rows: list[Tensor], width: int, value: int, left: bool = False) -> Tensor:
    """Stack 1-D tensors into [N, width], padded with `value` on the right (or the left)."""
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, row in enumerate(rows):
        if left:
            out[i, width - len(row) :] = row
        else:
            out[i, : len(row)] = row
    return out


class Seq2SeqDataModule(TaskDataModule):
    """Base class of the sequence-to-sequence tasks: a subclass says which `symbols` its sequences are
    made of and draws its examples (`draw(size, generator)`); this class builds the vocabulary
    (<pad> <bos> <eos> <sep>, then the symbols), the splits (train, val, test from seeds seed, seed + 1,
    seed + 2) and the batches for `arch`, the architecture being trained (`model.arch`)."""

    separator = " "
    pad_id, bos_id, eos_id, sep_id = PAD, BOS, EOS, SEP

    def __init__(
        self,
        arch: str,
        train_size: int,
        val_size: int,
        test_size: int,
        batch_size: int,
        num_workers: int = 0,
        seed: int = 0,
    ):
        super().__init__()
        require(
            arch in self.architectures,
            f"model={arch} cannot learn {type(self).__name__}'s task; use model="
            + " or model=".join(self.architectures),
        )
        for key, value in (
            ("train_size", train_size),
            ("val_size", val_size),
            ("test_size", test_size),
            ("batch_size", batch_size),
        ):
            require(isinstance(value, int) and value > 0, f"data.{key}={value!r} must be a positive integer")
        require(
            isinstance(num_workers, int) and num_workers >= 0, f"data.num_workers={num_workers} must be >= 0"
        )
        self.arch = arch
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.splits: dict[str, TensorDataset] = {}

    # ------------------------------------------------------------------ what a subclass provides
    symbols: list[str]  # the tokens sequences are made of (set in the subclass's __init__)
    max_source_len: int
    max_target_len: int

    def draw_sources(self, size: int, generator: torch.Generator) -> Tensor:
        """`size` sources [size, max_source_len], as indices into `symbols`, each followed by -1s."""
        raise NotImplementedError

    def targets_for(self, sources: Tensor) -> Tensor:
        """The targets [N, max_target_len] of sources (as from `draw_sources`), followed by -1s."""
        raise NotImplementedError

    def expected_sources(self, sources: Tensor, labels: Tensor) -> Tensor:
        """Where a model should look to write each output: bool [B, K, S], True where source position s
        (token ids [B, S]) holds what output k (label ids [B, K]: target tokens, <eos>, -100) needs.
        All False for an output the task has no such position for (the default: none at all)."""
        return torch.zeros(*labels.shape, sources.size(1), dtype=torch.bool, device=sources.device)

    # --------------------------------------------------------------------------- the task
    def draw(self, size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`size` examples: sources [size, max_source_len] and their targets [size, max_target_len]."""
        sources = self.draw_sources(size, generator)
        return sources, self.targets_for(sources)

    @property
    def vocab(self) -> list[str]:
        return SPECIALS + list(self.symbols)

    @property
    def max_len(self) -> int:
        """Positions the model reads: the source (encoder), source <sep> target (decoder), or the longer
        of the source and <bos> target (encoder-decoder)."""
        source, target = self.max_source_len, self.max_target_len
        return {
            "encoder": source,
            "decoder": source + 1 + target,
            "encoder_decoder": max(source, target + 1),
        }[self.arch]

    def setup(self, stage: str | None = None) -> None:
        for offset, split in enumerate(("train", "val", "test")):
            if split not in self.splits:
                generator = torch.Generator().manual_seed(self.seed + offset)
                self.splits[split] = TensorDataset(*self.layout(*self.draw(self.sizes[split], generator)))

    def layout(self, sources: Tensor, targets: Tensor) -> tuple[Tensor, ...]:
        """Examples (as from `draw`) laid out as the batches of `self.arch` (see the module docstring),
        in token ids: a few whole-tensor operations, no loop over examples."""
        shift = len(SPECIALS)
        source_len, target_len = (sources >= 0).sum(1, keepdim=True), (targets >= 0).sum(1, keepdim=True)
        source_ids = torch.where(sources >= 0, sources + shift, PAD)
        target_ids = torch.where(targets >= 0, targets + shift, PAD)
        target_labels = target_ids.masked_fill(targets < 0, IGNORE_INDEX)
        if self.arch == "encoder":
            return source_ids, target_labels
        rows = torch.arange(len(sources))
        if self.arch == "encoder_decoder":
            target_in = torch.cat([torch.full_like(target_ids[:, :1], BOS), target_ids], dim=1)
            labels = torch.cat([target_labels, torch.full_like(target_labels[:, :1], IGNORE_INDEX)], dim=1)
            labels[rows, target_len[:, 0]] = EOS
            return source_ids, target_in, labels
        # decoder: column j of `source <sep> target <eos>` and the label at j (the token at j + 1)
        width = self.max_source_len + 1 + self.max_target_len
        j = torch.arange(width).expand(len(sources), -1)
        in_target = j - source_len - 1  # index into the target, where 0 <= it < target_len
        tokens = torch.where(j < source_len, source_ids.gather(1, j.clamp(max=source_ids.size(1) - 1)), PAD)
        tokens = torch.where(j == source_len, SEP, tokens)
        from_target = target_ids.gather(1, in_target.clamp(0, target_ids.size(1) - 1))
        tokens = torch.where((in_target >= 0) & (in_target < target_len), from_target, tokens)
        predicted = target_ids.gather(1, (j - source_len).clamp(0, target_ids.size(1) - 1))
        labels = torch.where((j >= source_len) & (j < source_len + target_len), predicted, IGNORE_INDEX)
        labels = torch.where(j == source_len + target_len, EOS, labels)
        return tokens, labels

    def generate(self, net: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor] | None:
        """Greedy outputs of `net` for a batch, next to what they must be: (sources [B, S], generated
        [B, W], expected [B, W]), the outputs ending in <eos> then padding. None for the encoder, which
        generates nothing. A decoder's prompts (source <sep>) are padded on the left, so that every row's
        next token is written at the same column."""
        if self.arch == "encoder":
            return None
        *inputs, labels = batch
        expected = labels.masked_fill(labels == IGNORE_INDEX, PAD)
        if self.arch == "encoder_decoder":
            sources = inputs[0]
            generated = net.generate(sources, max_new_tokens=expected.size(1))
        else:
            tokens = inputs[0]
            ends = (tokens == SEP).int().argmax(dim=1).tolist()  # the <sep> of each row
            width = self.max_target_len + 1
            sources = pad_rows(
                [row[:end] for row, end in zip(tokens, ends, strict=True)], self.max_source_len, PAD
            )
            expected = pad_rows(
                [row[end : end + width] for row, end in zip(expected, ends, strict=True)], width, PAD
            )
            prompts = pad_rows(
                [row[: end + 1] for row, end in zip(tokens, ends, strict=True)], max(ends) + 1, PAD, left=True
            )
            prompts, sources, expected = (t.to(tokens.device) for t in (prompts, sources, expected))
            generated = net.generate(prompts, width, temperature=0)[:, prompts.size(1) :]
        width = expected.size(1)
        generated = F.pad(generated[:, :width], (0, width - min(width, generated.size(1))), value=PAD)
        return sources, generated, expected

    def alignment(self, inputs: tuple[Tensor, ...], labels: Tensor) -> Tensor:
        """`expected_sources` in the coordinates of the attention that reads the source: the encoder's
        self-attention [B, S, S] (row = output position), the encoder-decoder's cross-attention
        [B, T, S] (row = target position, predicting label t), the decoder-only model's self-attention
        [B, W, W] (row = the position predicting a target token, columns = the source before <sep>)."""
        if self.arch != "decoder":
            return self.expected_sources(inputs[0], labels)
        tokens = inputs[0]
        lengths = (tokens == SEP).int().argmax(dim=1)  # n: the source is tokens[:, :n]
        width, k = tokens.size(1), torch.arange(self.max_target_len + 1, device=tokens.device)
        column = torch.arange(width, device=tokens.device)
        sources = tokens.masked_fill(column >= lengths[:, None], PAD)
        rows = (lengths[:, None] + k).clamp(max=width - 1)  # the row predicting output k
        expected = self.expected_sources(sources, labels.gather(1, rows))
        expected &= (lengths[:, None] + k < width)[:, :, None]
        out = torch.zeros(tokens.size(0), width, width, dtype=torch.bool, device=tokens.device)
        return out.scatter_(1, rows[:, :, None].expand(-1, -1, width), expected)

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        """The first `count` examples of a split whose output changes when source token `position` is
        replaced by another symbol (the next one that changes it, cyclically), and that corrupted copy:
        (clean batch, corrupted batch), laid out for `self.arch`. Both have the same shapes, and a row's
        tokens differ only at the source position and in the outputs after it."""
        require(split in ("val", "test"), f"split={split!r} must be val or test")
        require(
            isinstance(position, int) and 0 <= position < self.max_source_len,
            f"position={position!r} is not a source position; use 0 to {self.max_source_len - 1}",
        )
        generator = torch.Generator().manual_seed(self.seed + (1 if split == "val" else 2))
        sources = self.draw_sources(self.sizes[split], generator)
        targets = self.targets_for(sources)
        corrupted, chosen = sources.clone(), torch.zeros(len(sources), dtype=torch.bool)
        symbol = sources[:, position]
        for shift in range(1, len(self.symbols)):
            candidate = sources.clone()
            candidate[:, position] = (symbol + shift) % len(self.symbols)
            changes = (self.targets_for(candidate) != targets).any(dim=1) & (symbol >= 0) & ~chosen
            corrupted[changes] = candidate[changes]
            chosen |= changes
        rows = chosen.nonzero()[:, 0][:count]
        require(
            len(rows) == count,
            f"only {len(rows)} {split} examples change their output when token {position} changes; "
            f"use num_examples={len(rows)} or less, or another position",
        )
        return self.layout(sources[rows], targets[rows]), self.layout(
            corrupted[rows], self.targets_for(corrupted[rows])
        )

    def prompt(self, source: Tensor) -> Tensor:
        """A source's ids [S] as the model's generation input [1, ...]: the source itself, or, for the
        decoder-only model, source <sep>."""
        require(len(source) > 0, "the source is empty; give at least one token")
        require(
            len(source) <= self.max_source_len,
            f"the source has {len(source)} tokens, more than this task's {self.max_source_len}; shorten it",
        )
        if self.arch == "decoder":
            source = torch.cat([source, torch.tensor([SEP])])
        return source.unsqueeze(0)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.splits[split],
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
