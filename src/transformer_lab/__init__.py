"""transformer-lab: learn, train and take apart Transformers."""

from transformer_lab.errors import ConfigError
from transformer_lab.predictor import TransformerPredictor
from transformer_lab.schedulers import CosineWarmupScheduler

__all__ = ["ConfigError", "CosineWarmupScheduler", "TransformerPredictor"]
