"""A hand-built Transformer in plain PyTorch (no Lightning, no Hydra): read it top to bottom.

attention.py   scaled dot-product and multi-head attention, masks, the KV cache
positional.py  sinusoidal, learned or no positional encoding
blocks.py      the MLP, the encoder block, a stack of blocks (the course tutorial's layers)
activations.py the MLPs' activations by name (plain and gated)
hooks.py       hook points: named places to read or replace activations; evaluating(model)
config.py      ModelConfig: every architecture setting, checked once
models.py      EncoderClassifier, DecoderLM, EncoderDecoder: token ids in, logits out; what they share
               (TokenModel: attention layers and their kind, batch layout, greedy answers)
sampling.py    greedy / temperature / top-k / top-p choice of the next token
schedules.py   learning-rate schedules: linear warmup, then cosine decay or a constant rate
dictionary.py  what sparse dictionaries share; sae_kinds.py their kinds; sae.py sparse autoencoders
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
from transformer_lab.nn.hooks import HookedModule, HookName, HookPoint, evaluating, parse_hook_name
from transformer_lab.nn.models import (
    GROUP_TITLES,
    IGNORE_INDEX,
    AttentionLayer,
    Cache,
    DecoderLM,
    EncoderClassifier,
    EncoderDecoder,
    FinalNorm,
    Specials,
    TokenModel,
    TransformerStack,
    build_model,
    head_name,
)
from transformer_lab.nn.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    PositionalEncoding,
    make_positional_encoding,
)
from transformer_lab.nn.sampling import sample_next_token

__all__ = [
    "GROUP_TITLES",
    "IGNORE_INDEX",
    "MLP",
    "AttentionLayer",
    "Cache",
    "DecoderBlock",
    "DecoderLM",
    "EncoderBlock",
    "EncoderClassifier",
    "EncoderDecoder",
    "FinalNorm",
    "HookName",
    "HookPoint",
    "HookedModule",
    "KVCache",
    "LearnedPositionalEncoding",
    "ModelConfig",
    "MultiheadAttention",
    "NoPositionalEncoding",
    "PositionalEncoding",
    "Specials",
    "TokenModel",
    "TransformerEncoder",
    "TransformerStack",
    "attention_pattern",
    "build_model",
    "causal_mask",
    "evaluating",
    "expand_mask",
    "head_name",
    "make_dropout",
    "make_positional_encoding",
    "parse_hook_name",
    "sample_next_token",
    "scaled_dot_product",
]
