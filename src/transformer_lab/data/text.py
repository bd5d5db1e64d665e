"""Your own text: a language model of a corpus of files, with a character or a subword tokenizer.

    python train.py task=text data.path=stories/ data.tokenizer=bpe data.vocab_size=1024

What happens on first use (the task's `vocab`, e.g. when the model is sized), each step cached on disk
(`data/tokens.py`) so the next run starts at once:

1. the corpus: the files of `data.path` (a file, a folder, a glob) as documents (`data/corpus.py`), and
   their content hash;
2. the tokenizer (`data/tokenizer.py`): `char` (the corpus's characters), `bpe` (a byte-level BPE of
   `data.vocab_size` tokens trained on the corpus) or a tokenizer.json you name;
3. the token file: the corpus tokenized once into a flat file of ids, read through a memory map;
4. the split: the last documents are held out (`val: documents 901-1000 (10%, 1.2 M tokens)`), or, for
   fewer documents than that needs, the last part of the tokens (`val: the last 10% of the file`); the
   test split is the val split, as a corpus has no other held-out text.

Batches are windows of `block_size` + 1 tokens at random places of the train split (`data/windows.py`).
The tokenizer travels with the model: in the checkpoint's record of its task (tokenizer.json text, never
code) and in the run directory (`tokenizer.json`), so every tool decodes the same tokens anywhere.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from transformer_lab.data.corpus import Corpus, is_glob
from transformer_lab.data.task import IGNORE_INDEX, TaskDataModule
from transformer_lab.data.tokenizer import MAX_VOCAB, AnyTokenizer, BPETokenizer
from transformer_lab.data.tokens import TokenFile, corpus_tokenizer, count, default_cache_dir, token_file
from transformer_lab.data.windows import FixedWindowBatches, RandomWindowBatches, Region, fixed_starts
from transformer_lab.errors import ConfigError, require
from transformer_lab.files import write_text

if TYPE_CHECKING:
    from transformer_lab.data.tokenizer import Tokenizer

log = logging.getLogger(__name__)

SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def shipped_text() -> Path:
    """Tiny Shakespeare (1.1 MB), shipped inside the package: no download, ever."""
    from importlib import resources

    return Path(str(resources.files("transformer_lab.data").joinpath("tinyshakespeare", "input.txt")))


class TextDataModule(TaskDataModule):
    """Next-token prediction on a corpus of text files (see the module docstring).

    Batches are (x, y), LongTensors [batch_size, block_size] with y = x shifted one token ahead. A train
    epoch is `batches_per_epoch` batches of random windows; val and test are `val_batches` batches of
    windows drawn once from `seed`. `sha256` is the corpus's content hash: checked if given, and recorded
    once the corpus is read (a checkpoint then vouches for its data, `transformer_lab.checkpoint`).
    `cache_dir` is where prepared corpora go (default: $TRANSFORMER_LAB_CACHE or data/cache); `verbose`
    logs what was prepared at INFO (train.py's configs set it: a run says how its corpus was read and split;
    a tool does not). Neither is a hyperparameter: a checkpoint never says where a tool writes.
    """

    architectures = ("decoder",)
    separator = ""  # text: the tokens' texts written one after the other
    label_rule = "next"
    data_files: ClassVar = {"path": "sha256"}  # transformer_lab.checkpoint: what a shared file may read
    shipped_files: ClassVar = {SHAKESPEARE_SHA256: None}  # path=None: the package's own copy
    tokenizer_kinds = ("char", "bpe")

    def __init__(
        self,
        path: str | None = None,
        tokenizer: str = "bpe",
        vocab_size: int = 1024,
        text_key: str = "text",
        block_size: int = 128,
        batch_size: int = 64,
        train_fraction: float = 0.9,
        num_workers: int = 0,
        batches_per_epoch: int = 200,
        val_batches: int = 50,
        sha256: str | None = None,
        seed: int = 0,
        cache_dir: str | None = None,
        verbose: bool = False,
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
            f"data.path={path!r} must name a file, a folder or a glob of text files (or be null: Tiny "
            "Shakespeare, shipped)",
        )
        require(
            isinstance(tokenizer, str) and tokenizer.strip() != "",
            f"data.tokenizer={tokenizer!r} must be char, bpe or the path of a tokenizer.json",
        )
        require(
            isinstance(vocab_size, int) and 0 < vocab_size <= MAX_VOCAB,
            f"data.vocab_size={vocab_size!r} must be a positive integer of at most {MAX_VOCAB}",
        )
        require(
            isinstance(text_key, str) and text_key != "",
            f"data.text_key={text_key!r} must name the field of .jsonl lines / column of .parquet files "
            "holding the text",
        )
        self.save_hyperparameters()
        for where in ("cache_dir", "verbose"):  # where this machine keeps files, what it logs: not the task
            self.hparams.pop(where, None)
        self.path = shipped_text() if path is None else Path(path)
        self.tokenizer_name = tokenizer
        self.vocab_size = vocab_size
        self.text_key = text_key
        self.block_size = block_size
        self.batch_size = batch_size
        self.train_fraction = train_fraction
        self.num_workers = num_workers
        self.batches_per_epoch = batches_per_epoch
        self.val_batches = val_batches
        self.sha256 = sha256
        self.seed = seed
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self._say = log.info if verbose else log.debug
        self._tokenizer: AnyTokenizer | None = None
        self._tokens: TokenFile | None = None
        self._n_train = 0
        self._val_start = 0
        self.split_note = ""

    # ------------------------------------------------------------------ preparing the corpus
    def corpus(self) -> Corpus:
        """The files of `data.path` (one file for a preset that reads one)."""
        return Corpus(self.path, self.text_key)

    def use_tokenizer(self, tokenizer: AnyTokenizer) -> None:
        """Take this tokenizer (a checkpoint's) instead of making one: the corpus is read with the tokens
        the model knows."""
        self._tokenizer = tokenizer

    def _make_tokenizer(self, corpus: Corpus) -> tuple[AnyTokenizer, str]:
        name = self.tokenizer_name
        if name in self.tokenizer_kinds:
            return corpus_tokenizer(self.cache_dir, name, corpus, self.vocab_size)
        require(
            Path(name).exists() or Path(name).is_symlink(),
            f"data.tokenizer={name} is neither {' nor '.join(self.tokenizer_kinds)} nor a tokenizer.json "
            "file (or a folder holding one)",
        )
        if Path(name).is_dir():  # a model's folder (save_pretrained): its tokenizer.json
            require(
                (Path(name) / "tokenizer.json").exists(),
                f"data.tokenizer={name} is a folder without a tokenizer.json; name the file, or a folder "
                "saved with save_pretrained",
            )
            name = str(Path(name) / "tokenizer.json")
        tokenizer = BPETokenizer.from_file(name)
        return tokenizer, f"{tokenizer.kind}, {len(tokenizer)} tokens (from {name})"

    def _load(self) -> None:
        """Find, hash, tokenize (or find cached) and split the corpus, once; say what was done."""
        corpus = self.corpus()
        actual = corpus.sha256
        if self.sha256 is not None:
            single = len(corpus.files) == 1 and not is_glob(str(self.path))
            require(
                actual == self.sha256.lower(),
                f"{self.path} has {'sha256' if single else 'content hash'} {actual}, expected {self.sha256}; "
                "replace it with the right file or set data.sha256=null to skip the check (e.g. for your "
                "own text)",
            )
        self._say(f"Corpus: {corpus.description}")
        if self._tokenizer is not None:
            tokenizer = self._tokenizer
            how = f"{tokenizer.kind}, {len(tokenizer)} tokens (the model's)"
        else:
            tokenizer, how = self._make_tokenizer(corpus)
        self._say(f"Tokenizer: {how}")
        tokens, made = token_file(self.cache_dir, corpus, tokenizer)
        self._say(f"Tokens: {made}: {tokens.folder}")
        self._tokenizer, self._tokens = tokenizer, tokens
        self._split(tokens, len(corpus.files))
        self._say(self.split_note)
        if self.sha256 is None:
            self.hparams["sha256"] = actual  # the checkpoint vouches for this corpus, and only this one

    def _split(self, tokens: TokenFile, files: int) -> None:
        """The train split is the tokens before `_n_train`, val (and test) those from `_val_start`: whole
        documents at the end, from the document boundary nearest to holding out (1 - train_fraction) of
        the tokens, when that boundary holds out between half and twice that share; else (one long file,
        or documents too few or too uneven) the last (1 - train_fraction) of the tokens."""
        share = 1 - self.train_fraction
        total, documents = tokens.num_tokens, tokens.num_documents
        cut = self.train_fraction * total
        inner = tokens.offsets[1:-1]  # the boundaries between documents
        first = None
        if len(inner):
            first = int(abs(inner - cut).argmin()) + 1  # the first held-out document
            held = (total - tokens.offsets[first]) / total
            first = first if share / 2 <= held <= share * 2 else None
        if first is not None:
            self._n_train = self._val_start = int(tokens.offsets[first])
            val = total - self._val_start
            which = f"documents {first + 1}-{documents}" if first < documents - 1 else f"document {documents}"
            self.split_note = f"val: {which} of {documents} ({val / total:.0%} of the tokens, {count(val)})"
        else:
            self._n_train = self._val_start = int(self.train_fraction * total)
            what = "file" if files == 1 and documents == 1 else "tokens"
            self.split_note = (
                f"val: the last {share:.0%} of the {what} ({count(total - self._val_start)} tokens)"
            )
        for split, length in (("train", self._n_train), ("val", tokens.num_tokens - self._val_start)):
            require(
                self.block_size < length,
                f"data.block_size={self.block_size} must be smaller than the {split} split ({length} tokens "
                f"of {self.path}); lower data.block_size or change data.train_fraction",
            )

    @property
    def tokens(self) -> TokenFile:
        """The corpus's token file (made or found in the cache on first use)."""
        if self._tokens is None:
            self._load()
        return self._tokens

    @property
    def tokenizer(self) -> Tokenizer | BPETokenizer:
        if self._tokenizer is None:
            self._load()
        return self._tokenizer

    @property
    def train_region(self) -> Region:
        return Region(self.tokens, 0, self._n_train)

    @property
    def val_region(self) -> Region:
        return Region(self.tokens, self._val_start, self.tokens.num_tokens)

    def _all(self, region: Region) -> Tensor:
        return torch.from_numpy(self.tokens.tokens()[region.start : region.stop].astype("int64"))

    @property
    def data(self) -> Tensor:
        """The whole corpus's ids, LongTensor [num_tokens]: a copy in memory (for small corpora and
        tests; training reads the token file)."""
        return self._all(Region(self.tokens, 0, self.tokens.num_tokens))

    @property
    def train_data(self) -> Tensor:
        """The train split's ids in memory (see `data`)."""
        return self._all(self.train_region)

    @property
    def val_data(self) -> Tensor:
        """The val split's ids in memory (see `data`)."""
        return self._all(self.val_region)

    @property
    def vocab(self) -> list[str]:
        return self.tokenizer.vocab

    @property
    def max_len(self) -> int:
        return self.block_size

    def record(self) -> dict:
        """The base record, and a tokenizer that is not a list of characters, as tokenizer.json text."""
        record = super().record()
        if isinstance(self.tokenizer, BPETokenizer):
            record["tokenizer"] = self.tokenizer.json
        return record

    def display_tokens(self, ids: Tensor | list[int]) -> list[str]:
        """Each token's text as the tools show it, spaces made visible (`Tokenizer.display`)."""
        return self.tokenizer.display(ids)

    # ------------------------------------------------------------------ what training reads
    def setup(self, stage: str | None = None) -> None:
        """Prepare the corpus; in a run, also keep the tokenizer in the run directory (tokenizer.json)."""
        _ = self.tokens
        trainer = self.trainer
        if trainer is not None and getattr(trainer, "is_global_zero", False) and stage in ("fit", None):
            folder = getattr(trainer, "default_root_dir", None)
            if isinstance(self.tokenizer, BPETokenizer) and folder:
                Path(folder).mkdir(parents=True, exist_ok=True)
                write_text(Path(folder) / "tokenizer.json", self.tokenizer.json)

    def text_example(self, ids: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """Your text (token ids [T]): each position's label is the text's next token."""
        ids = ids.reshape(1, -1)
        require(ids.size(1) > 1, 'the text needs at least two tokens, e.g. text="ROMEO: I"')
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[:, :-1] = ids[:, 1:]
        return (ids,), labels

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        """The first `count` windows of a split, and copies with the token `position` places before the
        last (0: the last one) replaced by another token of the vocabulary (drawn with a fixed seed; never
        <|endoftext|>, which text does not contain). Labels: the next token after each window at the last
        position only (-100 elsewhere), the same in both: the corrupted text has no answer of its own, so a
        circuit of this corruption compares the clean answer with the corrupted run's most likely other
        token (`metric=logit_diff`) or the whole next-token distribution (`metric=kl`)."""
        require(split in ("val", "test"), f"split={split!r} must be val or test")
        require(
            isinstance(position, int) and 0 <= position < self.block_size,
            f"position={position!r} is not a place in the window: use 0 (the last token) to "
            f"{self.block_size - 1}",
        )
        (inputs,), next_tokens = self.examples(count, split=split)
        labels = torch.full_like(next_tokens, IGNORE_INDEX)
        labels[:, -1] = next_tokens[:, -1]
        column = inputs.size(1) - 1 - position
        ordinary = torch.tensor([i for i in range(len(self.vocab)) if i != self.tokenizer.eot_id])
        generator = torch.Generator().manual_seed(self.seed)
        shift = torch.randint(1, len(ordinary), (len(inputs),), generator=generator)
        rank = torch.searchsorted(ordinary, inputs[:, column].contiguous())  # its place among them
        corrupted = inputs.clone()
        corrupted[:, column] = ordinary[(rank + shift) % len(ordinary)]
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
        region = self.val_region
        starts = fixed_starts(len(region), self.block_size, self.val_batches, self.batch_size, self.seed)
        return FixedWindowBatches(region, starts, self.block_size)

    def train_batches(self, rank: int = 0) -> RandomWindowBatches:
        """An epoch of random train windows as DDP rank `rank` draws them (ranks draw different ones)."""
        return RandomWindowBatches(
            self.train_region, self.block_size, self.batch_size, self.batches_per_epoch, rank
        )

    def train_dataloader(self) -> DataLoader:
        rank = self.trainer.global_rank if self.trainer is not None else 0
        return self._loader(self.train_batches(rank))

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._fixed_batches())

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._fixed_batches())

    # ------------------------------------------------------------------ a checkpoint's data
    @classmethod
    def vouches_for(cls, path: str, checksum: str | None) -> bool:
        """Whether the corpus at `path` (a file, folder or glob) has the content hash `checksum`."""
        if checksum is None:
            return False
        try:
            return Corpus(path).sha256 == checksum.lower()
        except ConfigError:
            return False

    @classmethod
    def names_data(cls, path: str) -> bool:
        """Whether `data_path=` names a corpus: a file, a folder or a glob."""
        return is_glob(path) or Path(path).is_file() or Path(path).is_dir()
