"""Sequence-to-sequence tasks: a source sequence in, a target sequence out, laid out for each architecture.

The same examples train every model that fits the task; only the batches differ (S: the source, T: the
target, each padded with <pad>; labels of -100 count for nothing). Each model lays them out itself
(`transformer_lab.nn`'s `layout`):

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

from transformer_lab.data.splits import SplitsDataModule
from transformer_lab.data.task import IGNORE_INDEX
from transformer_lab.errors import require
from transformer_lab.limits import require_memory
from transformer_lab.nn import Specials
from transformer_lab.nn.models import MODELS

SPECIALS = ["<pad>", "<bos>", "<eos>", "<sep>"]
PAD, BOS, EOS, SEP = range(4)
STAGE_SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}


class Seq2SeqDataModule(SplitsDataModule):
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
        self.check_architecture(arch)
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
        self.model_class = MODELS[arch]  # lays out the batches, generates, aligns: see transformer_lab.nn
        self.specials = Specials(PAD, BOS, EOS, SEP)
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
        return self.model_class.positions(self.max_source_len, self.max_target_len)

    def setup(self, stage: str | None = None) -> None:
        """Build the splits `stage` needs (all three for None), each once: showing a test example
        draws no training set."""
        for split in STAGE_SPLITS.get(stage, ("train", "val", "test")):
            if split not in self.splits:
                offset = ("train", "val", "test").index(split)
                size = self.sizes[split]
                # the split's tensors: sources, targets, and the batch laid out (at most 3 tensors of width
                # max_len + 1), each of int64
                require_memory(
                    size * (self.max_source_len + self.max_target_len + 3 * (self.max_len + 1)) * 8,
                    f"the {split} split of data.{split}_size={size} examples",
                    f"lower data.{split}_size",
                )
                generator = torch.Generator().manual_seed(self.seed + offset)
                self.splits[split] = TensorDataset(*self.layout(*self.draw(size, generator)))

    def layout(self, sources: Tensor, targets: Tensor) -> tuple[Tensor, ...]:
        """Examples (as from `draw`: symbol indices, then -1s) as the batches of `self.arch`, in token ids
        (see the module docstring; the model class lays them out)."""
        shift = len(SPECIALS)
        source_ids = torch.where(sources >= 0, sources + shift, PAD)
        target_ids = torch.where(targets >= 0, targets + shift, PAD)
        return self.model_class.layout(source_ids, target_ids, self.specials)

    def generate(self, net: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor] | None:
        """Greedy outputs of `net` for a batch, next to what they must be: (sources [B, S], generated
        [B, W], expected [B, W]), the outputs ending in <eos> then padding. None for a model that writes
        all its outputs at once (the encoder): its teacher-forced outputs are its outputs."""
        if not net.generates:
            return None
        *inputs, labels = batch
        inputs = tuple(inputs)
        expected = self.model_class.output_labels(inputs, labels, self.specials)
        expected = expected.masked_fill(expected == IGNORE_INDEX, PAD)
        width = int((expected != PAD).sum(dim=1).max())  # the longest expected output, <eos> included
        expected = expected[:, :width]
        prompts = self.model_class.prompts(inputs, self.specials)
        generated = net.answer(prompts, max_new_tokens=width)
        generated = F.pad(generated[:, :width], (0, width - min(width, generated.size(1))), value=PAD)
        return self.model_class.sources(inputs, self.specials), generated, expected

    def alignment(self, inputs: tuple[Tensor, ...], labels: Tensor) -> Tensor:
        """`expected_sources` in the coordinates of the attention that reads the source: the encoder's
        self-attention [B, S, S] (row = output position), the encoder-decoder's cross-attention
        [B, T, S] (row = target position, predicting label t), the decoder-only model's self-attention
        [B, W, W] (row = the position predicting a target token, columns = the source before <sep>)."""
        sources = self.model_class.sources(inputs, self.specials)
        outputs = self.model_class.output_labels(inputs, labels, self.specials)
        expected = self.expected_sources(sources, outputs)
        return self.model_class.alignment(expected, inputs, self.specials)

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

    def source_ids(self, ids: Tensor) -> Tensor:
        """Token ids [S] of your own source (`text="3 1 3 9"`) checked: only the task's symbols, at
        most `max_source_len` of them."""
        ids = ids.reshape(-1)
        require(len(ids) > 0, "the source is empty; give at least one token, e.g. 3 1 3 9")
        specials = [SPECIALS[i] for i in ids.tolist() if i < len(SPECIALS)]
        require(
            not specials,
            f"the source holds {', '.join(specials)}; write only the task's symbols, e.g. 3 1 3 9",
        )
        require(
            len(ids) <= self.max_source_len,
            f"the source has {len(ids)} tokens, more than this task's {self.max_source_len}; shorten it",
        )
        return ids

    def text_example(self, ids: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """Your source (token ids [S]) and the output the task says it has, laid out for `self.arch`."""
        ids = self.source_ids(ids)
        sources = torch.full((1, self.max_source_len), -1, dtype=torch.long)
        sources[0, : len(ids)] = ids - len(SPECIALS)
        *inputs, labels = self.layout(sources, self.targets_for(sources))
        return tuple(inputs), labels

    def expected_output(self, ids: Tensor) -> list[int]:
        """What the task says the output of a source (token ids [S]) is: target ids, then <eos>."""
        sources = torch.full((1, self.max_source_len), -1, dtype=torch.long)
        sources[0, : len(ids)] = self.source_ids(ids) - len(SPECIALS)
        targets = self.targets_for(sources)[0]
        return [*(targets[targets >= 0] + len(SPECIALS)).tolist(), EOS]

    def length_note(self, length: int) -> str | None:
        """A warning when a source's length is one the task never trains on (the model never saw it)."""
        if self.min_seq_len <= length <= self.max_source_len:
            return None
        trained = (
            f"{self.max_source_len}"
            if self.min_seq_len == self.max_source_len
            else f"{self.min_seq_len} to {self.max_source_len}"
        )
        return (
            f"warning: this model was trained on sources of {trained} tokens, never on {length}: expect "
            "an output that means nothing"
        )

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
