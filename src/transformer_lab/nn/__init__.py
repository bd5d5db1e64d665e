"""A hand-built Transformer in plain PyTorch (no Lightning, no Hydra): read it top to bottom.

attention.py   scaled dot-product and multi-head attention, masks, the KV cache
positional.py  sinusoidal, learned or no positional encoding
blocks.py      the MLP, the encoder block, a stack of blocks (the course tutorial's layers)
hooks.py       hook points: named places to read or replace activations
config.py      ModelConfig: every architecture setting, checked once
models.py      EncoderClassifier, DecoderLM: token ids in, logits out
sampling.py    greedy / temperature / top-k / top-p choice of the next token
"""

from transformer_lab.nn.attention import (
    KVCache,
    MultiheadAttention,
    attention_pattern,
    causal_mask,
    expand_mask,
    scaled_dot_product,
)
from transformer_lab.nn.blocks import MLP, DecoderBlock, EncoderBlock, TransformerEncoder, make_dropout
from transformer_lab.nn.config import ModelConfig
from transformer_lab.nn.hooks import HookedModule, HookPoint
from transformer_lab.nn.models import (
    Cache,
    DecoderLM,
    EncoderClassifier,
    EncoderDecoder,
    FinalNorm,
    TokenModel,
    TransformerStack,
    build_model,
)
from transformer_lab.nn.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    PositionalEncoding,
    make_positional_encoding,
)
from transformer_lab.nn.sampling import sample_next_token

__all__ = [
    "MLP",
    "Cache",
    "DecoderBlock",
    "DecoderLM",
    "EncoderBlock",
    "EncoderClassifier",
    "EncoderDecoder",
    "FinalNorm",
    "HookPoint",
    "HookedModule",
    "KVCache",
    "LearnedPositionalEncoding",
    "ModelConfig",
    "MultiheadAttention",
    "NoPositionalEncoding",
    "PositionalEncoding",
    "TokenModel",
    "TransformerEncoder",
    "TransformerStack",
    "attention_pattern",
    "build_model",
    "causal_mask",
    "expand_mask",
    "make_dropout",
    "make_positional_encoding",
    "sample_next_token",
    "scaled_dot_product",
]
