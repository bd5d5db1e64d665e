"""Reading checkpoints safely (tensors and plain Python values only, never code), without Lightning.

    model = load_model("saved_models/reverse/<run>/checkpoints/best.ckpt")   # a plain nn.Module, eval mode
    model = load_model("pretrained:reverse")   # shipped in the package: python -m transformer_lab.pretrained

A checkpoint holds the model's config (`hyper_parameters["net"]`) and weights (`state_dict`, under
`net.`), and a record of its task (`task`: its class and how its text is written, with Lightning's
`datamodule_hyper_parameters`), from which the tools rebuild the tokenizer and the task's examples.
"""

import importlib
from pathlib import Path

import torch

from transformer_lab import pretrained
from transformer_lab.errors import ConfigError, require
from transformer_lab.nn import ModelConfig, TokenModel, build_model

RETRAIN = "retrain it with this version: python train.py task=<its task> <its settings>"


def read_checkpoint(path: str | Path) -> dict:
    """torch.load(path, weights_only=True) with a one-line ConfigError for every way a file can be bad.
    `pretrained:<name>` reads the model of that name shipped in `transformer_lab.pretrained`."""
    if pretrained.is_pretrained(path):
        path = pretrained.resolve(path)  # an unknown name is a one-line error listing the valid ones
    path = Path(path)
    require(
        path.is_file(),
        f"checkpoint {path} does not exist; pass e.g. <run>/checkpoints/best.ckpt or pretrained:<name> "
        f"({pretrained.LIST_COMMAND} lists them)",
    )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types for a bad file; all mean "not loadable"
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        if "Weights only load failed" in str(exc):
            raise ConfigError(
                f"refusing to load {path}: it holds objects other than tensors and plain values, and "
                f"unpickling them could run code ({first_line})"
            ) from exc
        reason = f"{type(exc).__name__}: {first_line}"
        raise ConfigError(
            f"{path} is not a readable checkpoint (truncated, or not a torch file): {reason}"
        ) from exc
    require(
        isinstance(checkpoint, dict) and "state_dict" in checkpoint and "hyper_parameters" in checkpoint,
        f"{path} is not a transformer-lab checkpoint (no state_dict / hyper_parameters)",
    )
    return checkpoint


def model_from_checkpoint(
    checkpoint: dict, path: str | Path = "checkpoint", map_location: str | torch.device = "cpu"
) -> TokenModel:
    """The model a checkpoint holds, rebuilt from its config and weights, in eval mode."""
    net = checkpoint["hyper_parameters"].get("net")
    require(
        isinstance(net, dict),
        f"{path} was written by an older transformer-lab (no model config 'net' in its "
        f"hyperparameters) and cannot be read; {RETRAIN}",
    )
    try:
        model = build_model(ModelConfig(**net))
        weights = {
            k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")
        }
        model.load_state_dict(weights)
    except (TypeError, ValueError, RuntimeError) as exc:
        first_line = str(exc).strip().splitlines()[0]
        raise ConfigError(f"{path} does not match this version's models ({first_line}); {RETRAIN}") from exc
    return model.to(map_location).eval()


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> TokenModel:
    """The plain `nn.Module` of a checkpoint (EncoderClassifier, DecoderLM, ...), in eval mode, read with
    `weights_only=True`. A bad file is a one-line ConfigError."""
    return model_from_checkpoint(read_checkpoint(path), path, map_location)


def task_record(checkpoint: dict, path: str | Path = "checkpoint") -> dict:
    """The checkpoint's record of its task: {"class": module.Class, "separator": str}."""
    record = checkpoint.get("task")
    require(
        isinstance(record, dict) and "class" in record and "separator" in record,
        f"{path} has no record of its task (it was not trained by train.py); {RETRAIN}",
    )
    return record


def tokenizer_from_checkpoint(checkpoint: dict, path: str | Path = "checkpoint"):
    """Text <-> ids as the checkpoint's task writes them (no data file needed)."""
    from transformer_lab.data.tokenizer import Tokenizer

    vocab = ModelConfig(**checkpoint["hyper_parameters"]["net"]).tokens
    return Tokenizer(vocab, task_record(checkpoint, path)["separator"])


def task_from_checkpoint(checkpoint: dict, path: str | Path = "checkpoint"):
    """The checkpoint's task (its TaskDataModule, rebuilt from its class and hyperparameters), to draw
    its examples. Only a TaskDataModule subclass of this package's `data/` is ever imported and built."""
    from transformer_lab.data.task import TaskDataModule

    name = str(task_record(checkpoint, path)["class"])
    require(
        name.startswith("transformer_lab.data."),
        f"{path} names the task {name}; only tasks in transformer_lab.data are rebuilt from a checkpoint "
        "(use load_model and your task's own code)",
    )
    module_name, _, class_name = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{path} names the task {name}, which cannot be imported here ({exc})") from exc
    require(
        isinstance(cls, type) and issubclass(cls, TaskDataModule),
        f"{path} names the task {name}, which is not a TaskDataModule; refusing to build it",
    )
    try:
        return cls(**checkpoint.get("datamodule_hyper_parameters", {}))
    except TypeError as exc:
        raise ConfigError(f"{path}: its task {name} cannot be rebuilt here ({exc}); {RETRAIN}") from exc


def text_from_checkpoint(checkpoint: dict, path: str | Path, text: str, max_len: int):
    """`text=` (written as the checkpoint's task writes it) as token ids [T]; empty text, a character
    outside the vocabulary or more than `max_len` tokens is a one-line ConfigError."""
    require(len(text.strip()) > 0, 'text= is empty; pass some input, e.g. text="ROMEO:"')
    ids = tokenizer_from_checkpoint(checkpoint, path).encode(text)
    too_long = f"text has {len(ids)} tokens, more than the model's {max_len} positions; shorten it"
    require(len(ids) <= max_len, too_long)
    return ids


def example_from_checkpoint(checkpoint: dict, path: str | Path, index: str):
    """Test example `index=` of the checkpoint's task: (model inputs, labels), each a batch of one."""
    require(index.isdigit(), f"index={index} is not a test example; use an integer >= 0")
    return task_from_checkpoint(checkpoint, path).example(int(index), split="test")


def source_from_checkpoint(checkpoint: dict, path: str | Path, source: str, instead: str):
    """A sequence-to-sequence task's input (`source="3 1 3 9"`, written as the task writes it) for a
    checkpoint: (its task, its tokenizer, the source's token ids). A checkpoint of another task, or a source
    holding special tokens, is a one-line ConfigError; `instead` says what to use then."""
    from transformer_lab.data.seq2seq import SPECIALS, Seq2SeqDataModule

    task = task_from_checkpoint(checkpoint, path)
    require(
        isinstance(task, Seq2SeqDataModule),
        f"source= needs a sequence-to-sequence task (reverse, sort); {path} was trained on "
        f"{type(task).__name__}: {instead}",
    )
    tokenizer = tokenizer_from_checkpoint(checkpoint, path)
    source_ids = tokenizer.encode(source)
    specials = [token for token in tokenizer.split(source) if token in SPECIALS]
    require(
        not specials,
        f"source={source!r} holds {', '.join(specials)}; write only the task's symbols, e.g. 3 1 3 9",
    )
    return task, tokenizer, source_ids
