"""Checkpoint files: written atomically, read safely (tensors and plain Python values only, never code)."""

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from transformer_lab.errors import ConfigError, require
from transformer_lab.predictor import TransformerPredictor


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to a temporary file in its own directory, fsync it, then rename it into place.

    A rename within one directory is atomic, so a run killed in the middle of a save leaves the previous
    `last.ckpt` intact (Lightning's own save stages the file in the system temp directory, and a move from
    there to another filesystem is a copy that can be cut short).
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def read_checkpoint(path: str | Path) -> dict:
    """torch.load(path, weights_only=True) with a one-line ConfigError for every way a file can be bad."""
    path = Path(path)
    require(path.is_file(), f"checkpoint {path} does not exist; pass e.g. <run>/checkpoints/best.ckpt")
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


def predictor_from_checkpoint(
    checkpoint: dict, path: str | Path = "checkpoint", map_location: str | torch.device = "cpu"
) -> TransformerPredictor:
    """Rebuild a TransformerPredictor from a checkpoint dict's hyperparameters and weights, in eval mode."""
    try:
        model = TransformerPredictor(**checkpoint["hyper_parameters"])
        model.load_state_dict(checkpoint["state_dict"])
    except (TypeError, RuntimeError) as exc:
        raise ConfigError(f"{path} does not match this version's TransformerPredictor: {exc}") from exc
    return model.to(map_location).eval()


def load_predictor(path: str | Path, map_location: str | torch.device = "cpu") -> TransformerPredictor:
    """read_checkpoint + predictor_from_checkpoint."""
    return predictor_from_checkpoint(read_checkpoint(path), path, map_location)
