"""Positional encodings: attention is permutation-equivariant, so order must be added to the input (or,
with rotary positions, put into the queries and keys)."""

import math

import torch
from torch import Tensor, nn


def _check_fits(seq_len: int, offset: int, max_len: int) -> None:
    if offset + seq_len > max_len:
        raise ValueError(
            f"sequence positions {offset}..{offset + seq_len - 1} exceed the positional encoding's "
            f"max_len={max_len}; raise model.max_len or use shorter sequences"
        )


def sinusoid_frequencies(d_model: int) -> Tensor:
    """1 / 10000^(2i / d_model) for i = 0 .. d_model/2 - 1, in float32 as the encoding uses them (the
    explorer page's forward pass builds the same table from these)."""
    return torch.exp(torch.arange(0, d_model, 2, dtype=torch.float) * (-math.log(10000.0) / d_model))


class PositionalEncoding(nn.Module):
    """Sinusoidal encoding (Vaswani et al., 2017, section 3.5), added to the token embeddings.

    PE(pos, 2i) = sin(pos / 10000^(2i / d_model)),  PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)).
    Each pair of dimensions is a rotation at its own frequency, so PE(pos + k) is a linear function of
    PE(pos): relative offsets are easy for attention to read. Stored as the buffer `pe` [1, max_len, d_model].
    """

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
        div_term = sinusoid_frequencies(d_model)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term[: d_model // 2])
        # persistent=False: a pure function of (max_len, d_model), rebuilt on load, not stored in checkpoints.
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def encoding(self, seq_len: int, offset: int = 0) -> Tensor:
        """PE of positions offset .. offset + seq_len - 1: [1, seq_len, d_model]."""
        _check_fits(seq_len, offset, self.pe.size(1))
        return self.pe[:, offset : offset + seq_len]

    def lookup(self, positions: Tensor) -> Tensor:
        """PE of any positions [B, T] (padding-aware positions): [B, T, d_model]."""
        return self.pe[0][positions]

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: [B, T, d_model], the tokens at absolute positions offset .. offset + T - 1."""
        return x + self.encoding(x.size(1), offset)


class LearnedPositionalEncoding(nn.Module):
    """A trained embedding per position (as in GPT-2): x + P[pos], P of shape [max_len, d_model]."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def encoding(self, seq_len: int, offset: int = 0) -> Tensor:
        """P[offset : offset + seq_len] as [1, seq_len, d_model]: a view of the table, no lookup."""
        _check_fits(seq_len, offset, self.embedding.num_embeddings)
        return self.embedding.weight[offset : offset + seq_len].unsqueeze(0)

    def lookup(self, positions: Tensor) -> Tensor:
        """P[positions] for any positions [B, T]: [B, T, d_model]."""
        return self.embedding(positions)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self.encoding(x.size(1), offset)


class NoPositionalEncoding(nn.Module):
    """No positions at all: the model sees a bag of tokens (useful to show why positions matter)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.register_buffer("zero", torch.zeros(1, 1, d_model), persistent=False)  # follows .to(device)

    def encoding(self, seq_len: int, offset: int = 0) -> Tensor:
        """Zeros [1, seq_len, d_model]."""
        return self.zero.expand(1, seq_len, -1)

    def lookup(self, positions: Tensor) -> Tensor:
        """Zeros [B, T, d_model]."""
        return self.zero.expand(*positions.shape, -1)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return x


class RotaryPositionalEncoding(NoPositionalEncoding):
    """Rotary positions (RoPE; Su et al., 2021): nothing is added to the stream (its `encoding` is zeros,
    so `hook_pos_embed` holds zeros); instead attention rotates each query and key by its position.

    The first `rotary_dim` dimensions of a head are split into two halves x1, x2 (GPT-NeoX's and Llama's
    layout), and pair i = (x1_i, x2_i) is turned by the angle pos * theta_i, with
    theta_i = base^(-2i / rotary_dim):

        rot(x) = x * cos(pos theta) + rotate_half(x) * sin(pos theta),   rotate_half(x) = (-x2, x1)

    (the cos and sin tables repeat theta over both halves). Then q_m . k_n depends on the positions only
    through m - n: attention sees relative offsets. The rest of the head (Pythia rotates a quarter) passes
    unchanged. `angles(positions)` gives (cos, sin) [B, T, rotary_dim] for any positions [B, T] (absolute,
    or counting real tokens with padding), computed in float32 as `transformers` computes them.
    """

    def __init__(self, d_model: int, rotary_dim: int, base: float):
        super().__init__(d_model)
        self.rotary_dim = rotary_dim
        inverse = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
        self.register_buffer("inv_freq", inverse, persistent=False)  # theta_i: a function of the config

    def angles(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of pos * theta for positions [B, T]: each [B, T, rotary_dim]."""
        freqs = positions[..., None].float() * self.inv_freq
        angle = torch.cat((freqs, freqs), dim=-1)
        return angle.cos(), angle.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, T, H, d] with its first cos.size(-1) dimensions rotated (cos, sin [B, T, rotary_dim]):
    x * cos + rotate_half(x) * sin on them, the rest unchanged (see RotaryPositionalEncoding)."""
    width = cos.size(-1)
    cos, sin = cos[:, :, None].to(x.dtype), sin[:, :, None].to(x.dtype)
    turned, kept = x[..., :width], x[..., width:]
    first, second = turned.chunk(2, dim=-1)
    turned = turned * cos + torch.cat((-second, first), dim=-1) * sin
    return turned if kept.size(-1) == 0 else torch.cat((turned, kept), dim=-1)


def make_positional_encoding(
    kind: str, d_model: int, max_len: int, rotary_dim: int = 0, rotary_base: float = 10000.0
) -> nn.Module:
    """`sinusoidal` | `learned` | `none` | `rotary` (of `rotary_dim` dimensions per head)."""
    if kind == "sinusoidal":
        return PositionalEncoding(d_model, max_len)
    if kind == "learned":
        return LearnedPositionalEncoding(d_model, max_len)
    if kind == "none":
        return NoPositionalEncoding(d_model)
    if kind == "rotary":
        return RotaryPositionalEncoding(d_model, rotary_dim, rotary_base)
    raise ValueError(
        f"model.positional_encoding={kind!r} is unknown; use sinusoidal, learned, none or rotary"
    )
