"""Pure-PyTorch Transformer building blocks (no Lightning): the textbook layer."""

from transformer_lab.nn.attention import (
    KVCache,
    MultiheadAttention,
    causal_mask,
    expand_mask,
    scaled_dot_product,
)
from transformer_lab.nn.blocks import EncoderBlock, TransformerDecoder, TransformerEncoder, make_dropout
from transformer_lab.nn.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    PositionalEncoding,
    make_positional_encoding,
)

__all__ = [
    "EncoderBlock",
    "KVCache",
    "LearnedPositionalEncoding",
    "MultiheadAttention",
    "NoPositionalEncoding",
    "PositionalEncoding",
    "TransformerDecoder",
    "TransformerEncoder",
    "causal_mask",
    "expand_mask",
    "make_dropout",
    "make_positional_encoding",
    "scaled_dot_product",
]
