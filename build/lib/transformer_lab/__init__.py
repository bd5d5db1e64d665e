"""transformer-lab: learn, train and take apart Transformers.

    from transformer_lab import load_model         # a checkpoint's plain nn.Module (no Lightning needed)
    from transformer_lab import TransformerPredictor, CosineWarmupScheduler

Names are imported on first use, so `import transformer_lab.nn` (pure PyTorch) and the scripts' `--help`
do not pay for Lightning.
"""

import importlib

_NAMES = {
    "ConfigError": "transformer_lab.errors",
    "CosineWarmupScheduler": "transformer_lab.schedulers",
    "TransformerPredictor": "transformer_lab.predictor",
    "load_model": "transformer_lab.checkpoints",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> object:
    if name not in _NAMES:
        raise AttributeError(f"module 'transformer_lab' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)
