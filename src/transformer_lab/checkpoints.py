"""Reading checkpoints, as functions of a checkpoint's contents (the names of earlier versions, kept for
code written against them). New code: `transformer_lab.load(path)` (`transformer_lab.checkpoint`).

    model = load_model("saved_models/reverse/<run>/checkpoints/best.ckpt")   # a plain nn.Module, eval mode
    model = load_model("pretrained:reverse")   # shipped in the package: python -m transformer_lab.pretrained
"""

from pathlib import Path

import torch

from transformer_lab.checkpoint import RETRAIN, Checkpoint, load, read, resolve
from transformer_lab.nn import TokenModel

__all__ = [
    "RETRAIN",
    "load_model",
    "model_from_checkpoint",
    "read_checkpoint",
    "task_from_checkpoint",
    "tokenizer_from_checkpoint",
]


def read_checkpoint(path: str | Path) -> dict:
    """A checkpoint's contents (tensors and plain values only, their structure checked); a bad file is a
    one-line ConfigError. `pretrained:<name>` reads the model of that name shipped in the package."""
    return read(resolve(path), path)


def model_from_checkpoint(
    checkpoint: dict, path: str | Path = "checkpoint", map_location: str | torch.device = "cpu"
) -> TokenModel:
    """The model a checkpoint's contents hold, its shapes checked, in eval mode."""
    return Checkpoint(checkpoint, path, device=map_location).model


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> TokenModel:
    """The plain `nn.Module` of a checkpoint (EncoderClassifier, DecoderLM, ...), in eval mode, read with
    `weights_only=True`. A bad file is a one-line ConfigError."""
    return load(path, device=map_location).model


def tokenizer_from_checkpoint(checkpoint: dict, path: str | Path = "checkpoint"):
    """Text <-> ids as the checkpoint's task writes them (no data file needed)."""
    return Checkpoint(checkpoint, path).tokenizer


def task_from_checkpoint(checkpoint: dict, path: str | Path = "checkpoint"):
    """The checkpoint's task (its TaskDataModule, rebuilt from its record): see `Checkpoint.task`."""
    return Checkpoint(checkpoint, path, file=None if str(path).startswith("pretrained:") else Path(path)).task
