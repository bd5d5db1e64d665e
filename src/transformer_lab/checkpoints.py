"""Loading checkpoints safely: tensors and plain Python values only, never arbitrary pickled code."""

from pathlib import Path

import torch

from transformer_lab.errors import ConfigError, require
from transformer_lab.predictor import TransformerPredictor


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
