"""TaskDataModule: a task's data, and what the models and the tools need to know about it.

Training, the callbacks and the tools use a task only through this class, so a new task is one module
(in `data/`, or anywhere on the Python path) and a config or two: see docs/own_task.md.

A task is plain Python and PyTorch: loading a checkpoint's task and running any analysis imports no
Lightning. Training wraps it in Lightning's datamodule (`transformer_lab.training.datamodule`), which hands
its batches to the Trainer and the Trainer to it (`task.trainer`, e.g. for a DDP rank).
"""

import hashlib
import inspect
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from transformer_lab.data.tokenizer import Tokenizer
from transformer_lab.errors import ConfigError, require
from transformer_lab.nn import IGNORE_INDEX

__all__ = ["IGNORE_INDEX", "TaskDataModule"]


class Hyperparameters(dict):
    """A task's hyperparameters (its constructor's arguments): a dict whose keys read as attributes too."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class TaskDataModule:
    """A task's data (the interface of Lightning's datamodule, without Lightning) that also states what a
    model of the task must look like.

    A subclass calls `self.save_hyperparameters()` in its `__init__` (its arguments are stored in
    checkpoints, and the tools rebuild the task from them) and builds its splits as a LightningDataModule
    does (`setup`, `train_dataloader`, ...), with
    batches laid out as `(*model inputs, labels)`: `(tokens, labels)` for the encoder and decoder models.
    Labels equal to `IGNORE_INDEX` are skipped by the loss and the metrics. It states:

    * `vocab`: the token strings; token id i is `vocab[i]`;
    * `max_len`: the longest sequence a model reads;
    * `architectures`: the `model.arch` values that can learn the task (`encoder`, `decoder`);
    * `separator`: how tokens are written in text ("" for characters, " " for tokens written apart);
    * `pad_id`, `bos_id`, `eos_id`, `sep_id`: special tokens, None where the task has none;
    * `num_classes`: an encoder's output classes, None for one per token; `class_names`, their names
      (default: the tokens, where classes are tokens; else "0", "1", ...).

    From these it provides a `tokenizer` (text <-> ids) and `example(index)`, one example to inspect.
    For the analysis tools a task may also define `alignment` (where attention should look: per-head
    alignment), `corrupted_pairs` (inputs that differ in one token: activation patching) and
    `text_example` (your own text as an example).
    """

    architectures: tuple[str, ...] = ("encoder",)
    separator: str = " "
    pad_id: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    sep_id: int | None = None
    num_classes: int | None = None
    class_names: list[str] | None = None
    # Hyperparameters that name data files, each with the one holding its sha256 (or None), and copies of
    # such files the package ships, by sha256 (the value the path then takes): a checkpoint's record of its
    # task may only make the tools read a file the user names, a shipped copy, or one whose sha256 matches.
    data_files: ClassVar[dict[str, str | None]] = {}
    shipped_files: ClassVar[dict[str, str | None]] = {}
    # The rule by which the explorer page works out the expected output of an input a student types (one
    # its JavaScript knows: next, reverse, sort_unique, induction), or None: the page shows none.
    label_rule: str | None = None
    # The task's own measures: per-head ones (names in `transformer_lab.analysis.measures.MEASURES`), and
    # scores over training (a name in `transformer_lab.analysis.dynamics.TASK_SCORES`), besides those of
    # every model. Register your own there and name them here.
    measures: tuple[str, ...] = ()
    task_scores: str | None = None
    trainer: Any = None  # the Lightning Trainer while one trains on the task (set by its datamodule)

    def __init__(self) -> None:
        self.hparams = Hyperparameters()

    def save_hyperparameters(self) -> None:
        """Keep the arguments this task was constructed with in `hparams` (as Lightning's method of the
        same name does): those of every `__init__` on the way from the class's own down to the caller,
        the outermost winning."""
        frame = inspect.currentframe().f_back
        found: list[dict] = []
        while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is self:
            info = inspect.getargvalues(frame)
            values = {name: info.locals[name] for name in info.args if name != "self"}
            values.update(info.locals.get(info.keywords) or {} if info.keywords else {})
            found.append(values)
            frame = frame.f_back
        self.hparams = Hyperparameters()
        for values in found:  # the innermost __init__ first: an outer one's arguments win
            self.hparams.update(values)

    def record(self) -> dict:
        """How the tools find this task again (a checkpoint's `task`): its class, how its text is written
        and its page's label rule. Its hyperparameters are stored beside it."""
        cls = type(self)
        record = {"class": f"{cls.__module__}.{cls.__qualname__}", "separator": self.separator}
        return record | ({"label_rule": self.label_rule} if self.label_rule else {})

    # ----------------------------------------------------------- what a LightningDataModule has
    def setup(self, stage: str | None = None) -> None:
        """Build the splits `stage` needs (`fit`, `validate`, `test`; None: all)."""

    def train_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define train_dataloader")

    def val_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define val_dataloader")

    def test_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define test_dataloader")

    def check_architecture(self, arch: str) -> None:
        """A one-line error unless `model.arch` can learn this task."""
        require(
            arch in self.architectures,
            f"model={arch} cannot learn {type(self).__name__}'s task; use model="
            + " or model=".join(self.architectures),
        )

    @property
    def vocab(self) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__} must define the property `vocab`")

    @property
    def max_len(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define the property `max_len`")

    @property
    def tokenizer(self) -> Tokenizer:
        return Tokenizer(self.vocab, self.separator)

    def model_settings(self) -> dict:
        """The `ModelConfig` fields the task decides: vocabulary, special tokens, classes, positions."""
        return {
            "vocab_size": len(self.vocab),
            "vocab": list(self.vocab),
            "unused_rows": getattr(self.tokenizer, "unused_rows", 0),  # a hub model's padded rows
            "num_classes": self.num_classes,
            "pad_id": self.pad_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "sep_id": self.sep_id,
            "max_len": self.max_len,
        }

    def example(self, index: int = 0, split: str = "test") -> tuple[tuple[Tensor, ...], Tensor]:
        """Example `index` of a split (`val` or `test`) as (model inputs, labels), a batch of one."""
        require(split in ("val", "test"), f"split={split!r} must be val or test")
        require(isinstance(index, int) and index >= 0, f"index={index!r} must be an integer >= 0")
        self.setup("validate" if split == "val" else "test")
        seen = 0
        for batch in self.val_dataloader() if split == "val" else self.test_dataloader():
            size = batch[0].size(0)
            if index < seen + size:
                row = slice(index - seen, index - seen + 1)
                return tuple(t[row] for t in batch[:-1]), batch[-1][row]
            seen += size
        raise ConfigError(f"index={index} is not a {split} example; use an integer from 0 to {seen - 1}")

    def examples(
        self, count: int, split: str = "test", exact: bool = True
    ) -> tuple[tuple[Tensor, ...], Tensor]:
        """The first `count` examples of a split (`val` or `test`) as one batch (model inputs, labels);
        with `exact=False`, as many as the split has if that is fewer."""
        require(split in ("val", "test"), f"split={split!r} must be val or test")
        require(isinstance(count, int) and count > 0, f"num_examples={count!r} must be a positive integer")
        self.setup("validate" if split == "val" else "test")
        parts, seen = [], 0
        for batch in self.val_dataloader() if split == "val" else self.test_dataloader():
            parts.append(batch)
            seen += batch[0].size(0)
            if seen >= count:
                break
        require(
            seen >= count or not exact,
            f"num_examples={count} is more than the {seen} {split} examples; use {seen} or less",
        )
        batch = [torch.cat(column)[:count] for column in zip(*parts, strict=True)]
        return tuple(batch[:-1]), batch[-1]

    def alignment(self, inputs: tuple[Tensor, ...], labels: Tensor) -> Tensor | None:
        """Where the attention that reads the input should look, for a batch: bool [B, T_query, T_key],
        True at the key positions that hold what the query's output needs. It is about self-attention for
        the encoder and the decoder-only model, cross-attention for the encoder-decoder. None: the task
        defines no such alignment (a language model)."""
        return None

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[tuple, tuple]:
        """`count` examples of a split and a corrupted copy of each, as two batches `(*inputs, labels)`:
        the copy differs in source token `position` only, and its output differs because of it."""
        raise ConfigError(
            f"{type(self).__name__} defines no corruption (inputs differing in one token), which activation "
            "patching needs; define corrupted_pairs in the task (docs/own_task.md) or use analysis=heads, "
            "lens or faithfulness"
        )

    def length_note(self, length: int) -> str | None:
        """A warning when an input of `length` tokens is of a length the task never trains on."""
        return None

    def use_tokenizer(self, tokenizer: Tokenizer) -> None:
        """Take a checkpoint's tokenizer (`transformer_lab.checkpoint` hands it over when it rebuilds the
        task) instead of making one. A task whose vocabulary is fixed has nothing to do; the text task
        then reads its corpus with the tokens the model knows (a BPE is not trained again)."""

    def display_tokens(self, ids: Tensor | list[int]) -> list[str]:
        """Each token as the tools show it (figures, tables): its text, spaces and newlines made visible.
        The one place that decides how a token looks (`Tokenizer.display`)."""
        return self.tokenizer.display(ids)

    @classmethod
    def vouches_for(cls, path: str, checksum: str | None) -> bool:
        """Whether the data file at `path` is the one a checkpoint recorded (its sha256 is `checksum`):
        then a tool may read it. The text task checks a corpus's content hash instead."""
        if checksum is None or not Path(path).is_file():
            return False
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest() == checksum.lower()

    @classmethod
    def names_data(cls, path: str) -> bool:
        """Whether `data_path=` names data this task reads: a file (text: also a folder or a glob)."""
        return Path(path).is_file()

    def text_example(self, ids: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """Your own input (token ids [T], written as the task writes text) as an example of one: (model
        inputs, labels), labels of IGNORE_INDEX where the task cannot say what the output should be."""
        return (ids.reshape(1, -1),), torch.full((1, ids.numel()), IGNORE_INDEX, dtype=torch.long)
