"""The checkpoint object: one way to a trained model, its task and its examples, and the one place that
checks a checkpoint file someone else made (people share them).

    ckpt = transformer_lab.load("saved_models/reverse/<run>/checkpoints/best.ckpt")  # or "pretrained:sort"
    ckpt.model                  the plain nn.Module (EncoderClassifier, DecoderLM, ...), in eval mode
    ckpt.config                 its ModelConfig
    ckpt.task                   the TaskDataModule, rebuilt from the checkpoint's record of it
    ckpt.tokenizer              text <-> token ids, as the task writes its text
    ckpt.output_names           the name of each output class
    ckpt.example(5)             test example 5 as (model inputs, labels), a batch of one
    ckpt.examples(64)           the first 64 test examples as one batch
    ckpt.text_example("3 1 4")  your own input (text, or a sequence-to-sequence task's source), as one
    ckpt.encode(text), ckpt.decode(ids)
    ckpt.corrupted_pairs(64, position=0)   clean and corrupted batches, where the task defines them

A location is a checkpoint file, a run directory (its checkpoints/best.ckpt, else last.ckpt),
`pretrained:<name>` (a file shipped in the package, checked against the sha256 of its record) or
`hf:<folder>` (a GPT-2 saved with Hugging Face's save_pretrained: `transformer_lab.interop.hf_import`).

What is checked, and when. On `load`, before anything is allocated: the file is a regular file whose zip
directory says it unpacks to little (its pickle at most `files.MAX_PICKLE`; a 1.7 MB file may claim 1.6 GB)
and is read as tensors and plain values only (`torch.load(weights_only=True)`: unpickling can run no code);
every field has the structure it must have; the model's config holds only known keys with values in bounds
(`ModelConfig`'s LIMITS); the model is built on the meta device (no memory) and every weight's shape in the
file is compared with the shape the config makes (the first mismatch names the key and both shapes); the
memory the model needs is compared with what the machine has free; every weight is finite (a diverged run's
NaN is named, not printed as an empty answer). When the task is first used: its class is imported only if it
lives in `transformer_lab.data`, or if its module is found on the Python path outside the current directory
and the checkpoint's folder and its source defines the class as a task (`transformer_lab.data.find`); a data
file the record names is read only if the user names it (`data_path=`), if it is a copy shipped in the
package, or if it is a regular file whose sha256 matches the record (never created, downloaded or followed
otherwise); only the split a tool asks for is built."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from transformer_lab import pretrained
from transformer_lab.errors import ConfigError, require
from transformer_lab.files import reading, require_small_unpacked, unpickling_refusal
from transformer_lab.limits import require_memory
from transformer_lab.nn import IGNORE_INDEX, ModelConfig, TokenModel, build_model
from transformer_lab.nn.config import UnknownSetting

if TYPE_CHECKING:
    from transformer_lab.data.task import TaskDataModule
    from transformer_lab.data.tokenizer import BPETokenizer, Tokenizer

RETRAIN = "retrain it with this version: python train.py task=<its task> <its settings>"
PLAIN = (str, int, float, bool, type(None))
Batch = tuple[tuple[Tensor, ...], Tensor]  # (model inputs, labels)


def load(
    location: str | Path, device: str | torch.device = "cpu", data_path: str | Path | None = None
) -> Checkpoint:
    """The checkpoint at `location` (a file, a run directory or `pretrained:<name>`), checked (see the
    module docstring); `device` is where its model goes; `data_path` names the data file its task reads, if
    it reads one (Tiny Shakespeare needs none: a copy ships in the package). `hf:<folder>`: a model
    saved with save_pretrained, read by the same rules (`transformer_lab.interop.hf_import`)."""
    if str(location).startswith("hf:"):  # also a snapshot of a folder of checkpoints over training
        from transformer_lab.interop import hf_import

        location = str(location)
        with reading(location):
            contents = hf_import.read(location)
        return Checkpoint(contents, location, None, device, data_path)
    file = resolve(location)
    with reading(f"checkpoint {location}"):
        contents = read(file, location)
    return Checkpoint(contents, location, file, device, data_path)


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> TokenModel:
    """The plain `nn.Module` of a checkpoint (EncoderClassifier, DecoderLM, ...), in eval mode, read with
    `weights_only=True` (`load(path).model`). A bad file is a one-line ConfigError."""
    return load(path, device=map_location).model


def resolve(location: str | Path) -> Path:
    """The checkpoint file a location names; a one-line ConfigError for anything that is not one."""
    if pretrained.is_pretrained(location):
        return pretrained.path(str(location).removeprefix(pretrained.PREFIX))
    path = Path(location)
    try:
        os.stat(path)
    except FileNotFoundError:
        raise ConfigError(
            f"checkpoint {path} does not exist; pass e.g. <run>/checkpoints/best.ckpt, a run directory, or "
            f"pretrained:<name> ({pretrained.LIST_COMMAND} lists them)"
        ) from None
    except OSError as exc:  # a symlink loop, a path too long, no permission to look
        raise ConfigError(f"checkpoint {path} cannot be read: {exc.strerror or exc}") from None
    if path.is_dir():
        for name in ("best.ckpt", "last.ckpt"):
            if (path / "checkpoints" / name).is_file():
                return path / "checkpoints" / name
        raise ConfigError(
            f"{path} is a folder, not a checkpoint, and holds no checkpoints/best.ckpt or last.ckpt; pass a "
            "checkpoint file or a run directory"
        )
    require(path.is_file(), f"checkpoint {path} is not a regular file (a device or a pipe); pass a file")
    return path


def read(file: Path, location: str | Path | None = None) -> dict:
    """The file's contents as tensors and plain values only, with the structure a checkpoint has."""
    contents = read_file(file)
    check_structure(contents, location or file)
    return contents


def read_file(file: Path) -> object:
    """The file's contents as tensors and plain values only (the zip's checks, `weights_only=True`),
    whatever they hold: `read` checks a model's structure, `sae_checkpoint.read` an SAE's."""
    require(file.is_file(), f"checkpoint {file} is not a regular file (a device or a pipe); pass a file")
    try:
        with open(file, "rb") as f:
            zipped = f.read(4) == b"PK\x03\x04"  # torch.save writes a zip archive
    except OSError as exc:  # no permission to read, ...
        raise ConfigError(f"checkpoint {file} cannot be read: {exc.strerror or exc}") from None
    if not zipped:
        raise ConfigError(
            f"{file} is not a readable checkpoint: not the zip archive torch.save writes (a text file, a "
            "legacy-format or an empty save); point ckpt_path= at a best.ckpt or last.ckpt, a run "
            "directory or pretrained:<name>"
        )
    require_small_unpacked(file)
    try:
        contents = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch.load raises many types for a bad file; all mean "not loadable"
        if "Weights only load failed" in str(exc):
            raise unpickling_refusal(file, exc) from None
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(
            f"{file} is not a readable checkpoint (truncated, or not a torch file): "
            f"{type(exc).__name__}: {first_line[:200]}"
        ) from None
    return contents


def check_structure(contents: object, where: str | Path) -> None:
    """Every field a tool reads, of the type it must be (a list where a dict belongs is a one-line
    error here, not an AttributeError later)."""
    require(
        isinstance(contents, dict) and "state_dict" in contents and "hyper_parameters" in contents,
        f"{where} is not a transformer-lab checkpoint (no state_dict / hyper_parameters)",
    )
    weights, hparams = contents["state_dict"], contents["hyper_parameters"]
    require(
        isinstance(weights, dict)
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in weights.items()),
        f"{where}: state_dict must map names to tensors",
    )
    require(isinstance(hparams, dict), f"{where}: hyper_parameters must be a mapping")
    require(
        not isinstance(hparams.get("sae"), dict),
        f"{where} is a sparse autoencoder (an SAE run), not a model; pass it as sae={where} (the tools "
        "splice it into the model it was trained on)",
    )
    require(
        isinstance(hparams.get("net"), dict),
        f"{where} was written by an older transformer-lab (no model config 'net' in its hyperparameters) "
        f"or is not a transformer-lab checkpoint, and cannot be read; {RETRAIN}",
    )
    init_from = contents.get("init_from")
    require(
        init_from is None or isinstance(init_from, str),
        f"{where}: init_from must be the location its run started from, not {init_from!r:.60}",
    )
    for key in ("task", "datamodule_hyper_parameters"):
        value = contents.get(key)
        require(
            value is None or isinstance(value, dict), f"{where}: {key} must be a mapping, not {value!r:.60}"
        )
    record = contents.get("task")
    if record is not None:
        require(
            isinstance(record.get("class"), str) and isinstance(record.get("separator"), str),
            f"{where}: its task record must name a class and a separator, e.g. "
            '{"class": "transformer_lab.data.ReverseDataModule", "separator": " "}',
        )
        text = record.get("tokenizer")
        require(
            text is None or isinstance(text, str),
            f"{where}: its task record's tokenizer must be tokenizer.json text, not {type(text).__name__}",
        )
        rule = record.get("label_rule")
        require(
            rule is None or (isinstance(rule, str) and rule.isidentifier()),
            f"{where}: its task record's label_rule={rule!r:.60} must be a rule's name, such as reverse",
        )
    data = contents.get("datamodule_hyper_parameters") or {}
    bad = [k for k, v in data.items() if not (isinstance(k, str) and _plain(v))]
    require(not bad, f"{where}: the task's hyperparameter {bad[:1]} is not a plain value")


def _plain(value: object, depth: int = 0) -> bool:
    if isinstance(value, list | tuple):
        return depth < 4 and all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return depth < 4 and all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return isinstance(value, PLAIN)


def model_config(net: dict, where: str | Path) -> ModelConfig:
    """The model's config, every key known and every value in bounds."""
    try:
        return ModelConfig.from_dict(net)
    except UnknownSetting as exc:
        raise ConfigError(
            f"{where}: its model config has a key this version does not know ({exc}); {RETRAIN}"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"{where}: its model config is invalid: {exc}") from None


def check_weights(config: ModelConfig, weights: dict[str, Tensor], where: str | Path) -> None:
    """Every weight against the shape the config makes (the model built on the meta device: no memory),
    then the memory the real model needs against what the machine has free."""
    with torch.device("meta"):
        skeleton = build_model(config)
    expected = skeleton.state_dict()
    missing = [k for k in expected if k not in weights]
    if missing:
        raise ConfigError(f"{where} has no weight net.{missing[0]}, which its config's model has; {RETRAIN}")
    unexpected = [k for k in weights if k not in expected]
    if unexpected:
        raise ConfigError(f"{where} has a weight net.{unexpected[0]} that its config's model does not have")
    for key, tensor in expected.items():
        found = weights[key]
        require(
            tuple(found.shape) == tuple(tensor.shape),
            f"{where}: weight net.{key} has shape {tuple(found.shape)} in the file but the config makes "
            f"{tuple(tensor.shape)}; the file does not match its own config",
        )
        require(
            found.dtype.is_floating_point, f"{where}: weight net.{key} is {found.dtype}, not floating point"
        )
    elements = sum(t.numel() for t in skeleton.parameters()) + sum(b.numel() for b in skeleton.buffers())
    require_memory(8 * elements, f"the model of {where}", "it is too large for this machine")
    for key in expected:
        require(
            bool(torch.isfinite(weights[key]).all()),
            f"{where} holds non-finite weights (net.{key} has NaN or infinite values): the run it comes from "
            "diverged; use an earlier checkpoint of it (a snapshot, or best.ckpt)",
        )


class Checkpoint:
    """A checkpoint file, checked; its model, config, task and examples (see the module docstring)."""

    def __init__(
        self,
        contents: dict,
        location: str | Path = "checkpoint",
        file: Path | None = None,
        device: str | torch.device = "cpu",
        data_path: str | Path | None = None,
    ):
        self.location = str(location)
        self.file = Path(file) if file is not None else None
        self.device = torch.device(device)
        self.data_path = data_path
        self._vocab_checked = False
        self.contents = contents
        self.config = model_config(contents["hyper_parameters"]["net"], self.location)
        self.weights = {
            k.removeprefix("net."): v for k, v in contents["state_dict"].items() if k.startswith("net.")
        }
        check_weights(self.config, self.weights, self.location)

    def __repr__(self) -> str:
        return f"Checkpoint({self.location!r}: {self.config.arch}, {self.task_name})"

    @property
    def format_version(self) -> int:
        """1 for checkpoints that say so; 0 for those from before the field existed (read the same)."""
        return int(self.contents.get("format_version", 0))

    @property
    def hyper_parameters(self) -> dict:
        """The TransformerPredictor's hyperparameters (the model's config under `net`)."""
        return self.contents["hyper_parameters"]

    @property
    def global_step(self) -> int | None:
        return self.contents.get("global_step")

    @cached_property
    def model(self) -> TokenModel:
        """The plain `nn.Module`, its weights loaded, in eval mode, on `device`."""
        model = build_model(self.config)
        model.load_state_dict(self.weights)
        return model.to(self.device).eval()

    @property
    def init_from(self) -> str | None:
        """What its run started from (train.py's init_from=, recorded absolute), or None."""
        return self.contents.get("init_from")

    # ------------------------------------------------------------------------------------ the task
    @property
    def record(self) -> dict:
        """The record of the checkpoint's task: {"class": "package.module.Class", "separator": str}."""
        record = self.contents.get("task")
        require(
            record is not None,
            f"{self.location} has no record of its task (it was not trained by train.py); {RETRAIN}",
        )
        return record

    @property
    def task_name(self) -> str:
        """The task's class name without `DataModule`: `Reverse`, `Shakespeare`."""
        record = self.contents.get("task") or {}
        return str(record.get("class", "?")).rsplit(".", 1)[-1].removesuffix("DataModule")

    @property
    def label_rule(self) -> str | None:
        """How the explorer page works out the expected output of an input typed into it: the rule the
        task's record names (`TaskDataModule.label_rule`; a record from before it did: the task's)."""
        record = self.contents.get("task") or {}
        if "label_rule" in record:
            return record["label_rule"]
        return getattr(self.task, "label_rule", None) if record else None

    @cached_property
    def tokenizer(self) -> Tokenizer | BPETokenizer:
        """Text <-> ids as the checkpoint's task writes them (no data file needed): the tokenizer.json text
        its record holds (a text task's BPE: parsed as data, checked), else its vocabulary and separator."""
        from transformer_lab.data.tokenizer import tokenizer_from_record

        return tokenizer_from_record(self.record, self.config.tokens, str(self.location))

    @cached_property
    def task(self) -> TaskDataModule:
        """The task, rebuilt from the record (see the module docstring for what is imported and read)."""
        from transformer_lab.data.find import task_class

        name = self.record["class"]
        excluded = (
            [self.file.parent]
            if self.file is not None and not pretrained.is_pretrained(self.location)
            else []
        )
        cls = task_class(name, excluded=excluded)
        hparams = self._task_hyper_parameters(cls)
        try:
            task = cls(**hparams)
        except (TypeError, ValueError) as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"{self.location}: its task {name} cannot be rebuilt here ({message}); {RETRAIN}"
            ) from None
        task.use_tokenizer(self.tokenizer)  # the model's tokens: a text task's BPE is not trained again
        return task

    def _task_hyper_parameters(self, cls: type) -> dict:
        """The record's hyperparameters of the task, with every data file it names replaced by one that
        may be read (see the module docstring), or a one-line error saying to pass `data_path=`."""
        hparams = dict(self.contents.get("datamodule_hyper_parameters") or {})
        for key, checksum_key in getattr(cls, "data_files", {}).items():
            named = hparams.get(key)
            checksum = hparams.get(checksum_key) if checksum_key else None
            if self.data_path is not None:
                require(
                    cls.names_data(str(self.data_path)),
                    f"data_path={self.data_path} is not a file; point it at the task's data file",
                )
                hparams[key] = str(self.data_path)
                if checksum_key:
                    hparams[checksum_key] = None  # the user named the file: the vocabulary check decides
            elif checksum in getattr(cls, "shipped_files", {}):
                hparams[key] = cls.shipped_files[checksum]
            elif named is not None:
                require(
                    cls.vouches_for(str(named), checksum),
                    f"{self.location}'s task reads its data from {named}, which is not a file the checkpoint "
                    "can vouch for (a shipped copy, or a file with the sha256 it records); pass "
                    "data_path=<the data file> to use it",
                )
        return hparams

    def _checked_task(self) -> TaskDataModule:
        """The task, once its vocabulary is known to be the model's (a wrong data file is an error)."""
        task = self.task
        if not self._vocab_checked:
            require(
                list(task.vocab) == list(self.config.tokens),
                f"{self.location}: its task's vocabulary ({len(task.vocab)} tokens) is not the model's "
                f"({self.config.vocab_size}); the data file differs from the one it was trained on",
            )
            self._vocab_checked = True
        return task

    @property
    def output_names(self) -> list[str]:
        """The name of each output class: the task's `class_names` if it defines them, else the tokens
        where classes are tokens, else `0`, `1`, ..."""
        if self.config.num_classes is None:
            return self.tokenizer.names()  # the tokens (a BPE's with their spaces visible: `␣the`)
        names = getattr(self.task, "class_names", None)
        if names is not None and len(names) == self.config.num_classes:
            return [str(name) for name in names]
        return [str(i) for i in range(self.config.num_classes)]

    # ------------------------------------------------------------------------------- the examples
    def _on_device(self, inputs: tuple[Tensor, ...], labels: Tensor) -> Batch:
        return tuple(x.to(self.device) for x in inputs), labels.to(self.device)

    def example(self, index: int, split: str = "test") -> Batch:
        """Example `index` of a split (`val` or `test`): (model inputs, labels), a batch of one."""
        require(
            isinstance(index, int) and index >= 0, f"index={index!r} is not an example; use an integer >= 0"
        )
        return self._on_device(*self._checked_task().example(index, split=split))

    def examples(self, count: int, split: str = "test", exact: bool = True) -> Batch:
        """The first `count` examples of a split as one batch (with `exact=False`: fewer if it has fewer)."""
        return self._on_device(*self._checked_task().examples(count, split=split, exact=exact))

    def without_padding(self, inputs: tuple[Tensor, ...], labels: Tensor) -> Batch:
        """An example of one without its padding columns (the labels follow the model's last input)."""
        pad = self.config.pad_id
        if pad is None:
            return inputs, labels
        kept = [x[0] != pad for x in inputs]
        return tuple(x[:, keep] for x, keep in zip(inputs, kept, strict=True)), labels[:, kept[-1]]

    def encode(self, text: str, key: str = "text") -> Tensor:
        """Text written as the task writes it, as token ids [T]: every token in the vocabulary, at most as
        many as the model reads. `key` names the argument the text came from, in messages."""
        example = "3 1 3 9" if self.tokenizer.separator else "ROMEO:"
        require(len(text.strip()) > 0, f'{key}= is empty; pass some input, e.g. {key}="{example}"')
        ids = self.tokenizer.encode(text)
        require(
            len(ids) <= self.config.max_len,
            f"{key}= has {len(ids)} tokens, more than the model's {self.config.max_len} positions; "
            "shorten it",
        )
        return ids

    def decode(self, ids: Tensor | list[int]) -> str:
        """The text of token ids, without padding."""
        return self.tokenizer.decode(ids, skip={self.config.pad_id})

    def text_example(self, text: str, key: str = "text") -> Batch:
        """Your own input as an example of one: a language model's text (each label the next token), a
        sequence-to-sequence task's source (labels: the output the task says it has), or any task's input
        (labels of -100 where the task cannot say)."""
        example = self.task.text_example(self.encode(text, key))  # token ids only: no data file is read
        return self._on_device(*self.without_padding(*example))

    def prompt_pairs(
        self,
        clean: list[str],
        corrupted: list[str],
        answer: list[str | None] | None = None,
        wrong: list[str | None] | None = None,
    ) -> tuple[Batch, Batch]:
        """Clean and corrupted prompts of a language model, as activation patching's and a circuit's
        pairs (TransformerLens's clean and corrupted runs): each pair of texts of as many tokens, and the
        next tokens the metric compares at the last position, logit(answer) - logit(wrong): the tokens
        named (`answer`, `wrong`: each text one token), or else the model's own top prediction after the
        clean prompt and after the corrupted one. Batches whose labels are IGNORE_INDEX but at the last
        position: the answer in the clean batch's, the wrong one in the corrupted batch's."""
        require(
            self.model.language_model,
            f"clean= and corrupted= are prompts of a language model; {self.location} is not one: its "
            "task's own corrupted pairs are used without them",
        )
        require(
            len(clean) == len(corrupted) and clean,
            f"{len(clean)} clean and {len(corrupted)} corrupted prompts: give one corrupted prompt for each",
        )
        rows = [
            (self.encode(c, "clean"), self.encode(b, "corrupted"))
            for c, b in zip(clean, corrupted, strict=True)
        ]
        lengths = {len(c) for c, _ in rows} | {len(b) for _, b in rows}
        for (c, b), text in zip(rows, clean, strict=True):
            require(
                len(c) == len(b),
                f"clean={text!r} has {len(c)} tokens and its corrupted prompt {len(b)}; patching pastes "
                "position onto position: give prompts of as many tokens",
            )
        require(
            len(lengths) == 1,
            f"the prompts have {', '.join(map(str, sorted(lengths)))} tokens; give every pair as many",
        )
        clean_ids = torch.stack([c for c, _ in rows]).to(self.device)
        bad_ids = torch.stack([b for _, b in rows]).to(self.device)

        def token(text: str | None, key: str) -> int | None:
            if text is None:
                return None
            ids = self.tokenizer.encode(text)
            require(len(ids) == 1, f"{key}={text!r} is {len(ids)} tokens; name one token (its text)")
            return int(ids[0])

        with torch.no_grad():
            good_top = self.model(clean_ids)[:, -1].argmax(-1).tolist()
            bad_top = self.model(bad_ids)[:, -1].argmax(-1).tolist()
        answers, wrongs = answer or [None] * len(rows), wrong or [None] * len(rows)
        labels = torch.full_like(clean_ids, IGNORE_INDEX), torch.full_like(bad_ids, IGNORE_INDEX)
        for i in range(len(rows)):
            good = token(answers[i], "answer")
            bad = token(wrongs[i], "wrong")
            good, bad = good_top[i] if good is None else good, bad_top[i] if bad is None else bad
            require(
                good != bad,
                f"after clean={clean[i]!r} and corrupted={corrupted[i]!r} the model predicts the same next "
                f"token ({self.decode([good])!r}): nothing to tell apart; name answer= and wrong=",
            )
            labels[0][i, -1], labels[1][i, -1] = good, bad
        return ((clean_ids,), labels[0]), ((bad_ids,), labels[1])

    def patching_pairs(
        self, count: int, position: int = 0, prompts: dict | None = None
    ) -> tuple[Batch, Batch]:
        """The clean and corrupted runs of activation patching and of a circuit: the prompts given
        (`prompt_pairs`), else `count` of the task's own corrupted pairs (input token `position`
        changed)."""
        if prompts is not None:
            return self.prompt_pairs(**prompts)
        return self.corrupted_pairs(count, position=position)

    def corrupted_pairs(self, count: int, position: int = 0, split: str = "test") -> tuple[Batch, Batch]:
        """`count` examples and a copy of each with input token `position` changed so that the output
        changes (activation patching's clean and corrupted runs), where the task defines them."""
        clean, corrupted = self.task.corrupted_pairs(count, position=position, split=split)
        self._checked_task()  # the data the pairs came from is the model's
        return self._on_device(tuple(clean[:-1]), clean[-1]), self._on_device(
            tuple(corrupted[:-1]), corrupted[-1]
        )
