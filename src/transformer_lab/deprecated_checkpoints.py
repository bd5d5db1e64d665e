"""The functions of `transformer_lab.checkpoints` (an earlier version's module), each a function of a
checkpoint file's contents; `transformer_lab.checkpoints.<name>` reaches them with a DeprecationWarning
naming the new way (`transformer_lab.deprecated.INSTEAD`): `transformer_lab.load(path)` and its fields."""

from pathlib import Path


def read_checkpoint(path: str | Path) -> dict:
    """A checkpoint's contents, checked: `transformer_lab.load(path).contents`."""
    from transformer_lab.checkpoint import read, resolve

    return read(resolve(path), path)


def model_from_checkpoint(checkpoint: dict, path: str | Path = "checkpoint", map_location: str = "cpu"):
    """The model of a checkpoint's contents: `transformer_lab.load(path).model`."""
    from transformer_lab.checkpoint import Checkpoint

    return Checkpoint(checkpoint, path, device=map_location).model


def tokenizer_from_checkpoint(checkpoint: dict, path: str | Path = "checkpoint"):
    """Text <-> ids of a checkpoint's contents: `transformer_lab.load(path).tokenizer`."""
    from transformer_lab.checkpoint import Checkpoint

    return Checkpoint(checkpoint, path).tokenizer


def task_from_checkpoint(checkpoint: dict, path: str | Path = "checkpoint"):
    """The task of a checkpoint's contents: `transformer_lab.load(path).task`."""
    from transformer_lab.checkpoint import Checkpoint

    file = None if str(path).startswith("pretrained:") else Path(path)
    return Checkpoint(checkpoint, path, file=file).task


def load_model(path: str | Path, map_location: str = "cpu"):
    """`transformer_lab.load_model` (its home: `transformer_lab.checkpoint`)."""
    from transformer_lab.checkpoint import load_model as load

    return load(path, map_location)
