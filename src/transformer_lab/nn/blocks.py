"""Transformer blocks and stacks.

A decoder-only (GPT-style) model is the same stack with a causal mask: there is no cross-attention, so
`TransformerDecoder` is `TransformerEncoder(causal=True)`.
"""

from torch import Tensor, nn

from transformer_lab.nn.attention import KVCache, MultiheadAttention

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def make_dropout(p: float) -> nn.Module:
    """Dropout(p), or Identity when p == 0: the same function, cheaper to call (Dropout checks its
    arguments on every call, which adds up when generating one token at a time)."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


class EncoderBlock(nn.Module):
    """Self-attention then a position-wise MLP, each wrapped in a residual connection and LayerNorm.

    Post-norm (the original Transformer, `norm_first=False`):  x = LN(x + Attn(x)); x = LN(x + MLP(x)).
    Pre-norm (GPT-2 and later, `norm_first=True`):             x = x + Attn(LN(x)); x = x + MLP(LN(x)).
    Pre-norm keeps an identity path from input to output and trains deep stacks without careful warmup.
    `bias=False` drops the additive biases of every Linear and LayerNorm (nanoGPT's default).
    """

    def __init__(
        self,
        input_dim: int,
        num_heads: int,
        dim_feedforward: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        bias: bool = True,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"model.activation={activation!r} is unknown; use one of {sorted(ACTIVATIONS)}")
        self.norm_first = norm_first
        self.self_attn = MultiheadAttention(input_dim, input_dim, num_heads, bias=bias)
        self.linear_net = nn.Sequential(
            nn.Linear(input_dim, dim_feedforward, bias=bias),
            ACTIVATIONS[activation](),
            make_dropout(dropout),
            nn.Linear(dim_feedforward, input_dim, bias=bias),
        )
        self.norm1 = nn.LayerNorm(input_dim, bias=bias)
        self.norm2 = nn.LayerNorm(input_dim, bias=bias)
        self.dropout = make_dropout(dropout)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        kv_cache: KVCache | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """x: [B, T, D] -> [B, T, D] (and the attention weights [B, H, T, T] if `return_attention`)."""
        attn_input = self.norm1(x) if self.norm_first else x
        attn = self.self_attn(attn_input, mask, return_attention, causal, kv_cache)
        attn_out, attention = attn if return_attention else (attn, None)
        if self.norm_first:
            x = x + self.dropout(attn_out)
            x = x + self.dropout(self.linear_net(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout(attn_out))
            x = self.norm2(x + self.dropout(self.linear_net(x)))
        return (x, attention) if return_attention else x


class TransformerEncoder(nn.Module):
    """`num_layers` EncoderBlocks in sequence (plus a final LayerNorm when the blocks are pre-norm).

    `causal=True` makes every block attend only to earlier positions: a decoder-only language model.
    """

    def __init__(self, num_layers: int, causal: bool = False, **block_args):
        super().__init__()
        self.causal = causal
        self.layers = nn.ModuleList([EncoderBlock(**block_args) for _ in range(num_layers)])
        norm_first, bias = block_args.get("norm_first", False), block_args.get("bias", True)
        self.final_norm = nn.LayerNorm(block_args["input_dim"], bias=bias) if norm_first else nn.Identity()

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        kv_caches: list[KVCache] | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """x: [B, T, D] -> [B, T, D]; with `return_attention`, also every layer's attention weights
        [B, H, T, T], computed by the hand-written path in this same pass."""
        maps = []
        for i, layer in enumerate(self.layers):
            kv_cache = None if kv_caches is None else kv_caches[i]
            x = layer(x, mask=mask, causal=self.causal, kv_cache=kv_cache, return_attention=return_attention)
            if return_attention:
                x, attention = x
                maps.append(attention)
        x = self.final_norm(x)
        return (x, maps) if return_attention else x

    def get_attention_maps(self, x: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        """Attention weights of every layer, [B, H, T, T] each, from one forward pass with the mask.

        The weights are the softmax outputs that multiply V, still in the autograd graph, so gradients
        with respect to them can be taken (gradient-weighted attention).
        """
        return self(x, mask=mask, return_attention=True)[1]


class TransformerDecoder(TransformerEncoder):
    """Decoder-only stack (GPT): a `TransformerEncoder` whose blocks use a causal mask."""

    def __init__(self, num_layers: int, **block_args):
        super().__init__(num_layers, causal=True, **block_args)
