"""Loading checkpoints safely: tensors and plain Python values only, never arbitrary pickled code."""

import pickle
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
    except pickle.UnpicklingError as exc:
        raise ConfigError(
            f"refusing to load {path}: it holds objects other than tensors and plain values "
            f"(weights_only=True rejected it: {str(exc).splitlines()[0]})"
        ) from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise ConfigError(
            f"{path} is not a readable checkpoint (truncated or not a torch file): {exc}"
        ) from exc
    require(
        isinstance(checkpoint, dict) and "state_dict" in checkpoint and "hyper_parameters" in checkpoint,
        f"{path} is not a transformer-lab checkpoint (no state_dict / hyper_parameters)",
    )
    return checkpoint


def load_predictor(path: str | Path, map_location: str | torch.device = "cpu") -> TransformerPredictor:
    """Rebuild a TransformerPredictor from its saved hyperparameters and weights, in eval mode."""
    checkpoint = read_checkpoint(path)
    try:
        model = TransformerPredictor(**checkpoint["hyper_parameters"])
        model.load_state_dict(checkpoint["state_dict"])
    except (TypeError, RuntimeError) as exc:
        raise ConfigError(f"{path} does not match this version's TransformerPredictor: {exc}") from exc
    return model.to(map_location).eval()
