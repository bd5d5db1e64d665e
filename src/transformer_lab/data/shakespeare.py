"""Tiny Shakespeare: character-level language modelling on 1.1 MB of Shakespeare's plays.

The corpus is one long string ("First Citizen:\\nBefore we proceed any further, hear me speak.\\n...") of
65 distinct characters. Each character is a token, so the model reads `block_size` characters and, at
every position t, predicts character t + 1: the target sequence is the input shifted one step left.

It is the text task (`transformer_lab.data.text`) with the file shipped in the package, its characters as
the vocabulary, and one file's split: the first 90% of the characters train, the last 10% validate.
"""

from pathlib import Path
from typing import ClassVar

from transformer_lab.data.corpus import Corpus
from transformer_lab.data.text import SHAKESPEARE_SHA256, TextDataModule, shipped_text
from transformer_lab.data.windows import FixedWindowBatches, RandomWindowBatches, windows
from transformer_lab.errors import require

__all__ = [
    "SHAKESPEARE_SHA256",
    "FixedWindowBatches",
    "RandomWindowBatches",
    "ShakespeareDataModule",
    "shipped_text",
    "windows",
]


class ShakespeareDataModule(TextDataModule):
    """Next-character prediction on one text file (Tiny Shakespeare by default, shipped in the package):
    `task=text data.tokenizer=char` on that file, with the file's sha256 checked (`sha256=null` for your
    own file).

    The first `train_fraction` of the characters are the train split and the rest the val split; the test
    split reuses the val split (with the same fixed windows). A train epoch is `batches_per_epoch` batches
    of random windows; val and test are `val_batches` batches of windows drawn once from `seed`. The file
    is read (and its tokens cached) on first use of `vocab`, `tokenizer`, `data`, ...
    """

    tokenizer_kinds: ClassVar = ("char",)

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
        cache_dir: str | None = None,
        verbose: bool = False,
    ):
        require(
            path is None or (isinstance(path, str) and path.strip() != ""),
            f"data.path={path!r} must name a text file (or be null: Tiny Shakespeare, shipped)",
        )
        super().__init__(
            path=path,
            tokenizer="char",
            block_size=block_size,
            batch_size=batch_size,
            train_fraction=train_fraction,
            num_workers=num_workers,
            batches_per_epoch=batches_per_epoch,
            val_batches=val_batches,
            sha256=sha256,
            seed=seed,
            cache_dir=cache_dir,
            verbose=verbose,
        )
        self.save_hyperparameters()  # this preset's arguments only: its checkpoints rebuild it by them
        for where in ("cache_dir", "verbose"):
            self.hparams.pop(where, None)

    def corpus(self) -> Corpus:
        """One text file: a folder or a glob is task=text's."""
        path = Path(self.path)
        require(path.exists(), f"data.path={path} does not exist")
        require(
            not path.is_dir(), f"data.path={path} is a folder; point it at a file (task=text reads folders)"
        )
        return Corpus(path, what="data.path")
