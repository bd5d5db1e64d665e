"""Transformer blocks: the position-wise MLP, the encoder block, the decoder block with cross-attention,
and a stack of encoder blocks.

A decoder-only (GPT-style) model uses the encoder block with `causal=True`: without cross-attention, a
decoder block is an encoder block whose attention only looks back. The encoder-decoder's decoder block
adds cross-attention over the encoder's output between the two.
"""

from torch import Tensor, nn

from transformer_lab.nn.attention import KVCache, MultiheadAttention
from transformer_lab.nn.hooks import HookedModule, HookPoint

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def make_dropout(p: float) -> nn.Module:
    """Dropout(p), or Identity when p == 0: the same function, cheaper to call (Dropout checks its
    arguments on every call, which adds up when generating one token at a time)."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


class MLP(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2, applied to every position on its own (Vaswani et al., eq. 2).

    Hook point `hook_post`: the hidden activation act(W_1 x + b_1), [B, T, dim_feedforward].
    """

    def __init__(self, dim: int, dim_feedforward: int, activation: str, dropout: float, bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"model.activation={activation!r} is unknown; use one of {sorted(ACTIVATIONS)}")
        self.fc_in = nn.Linear(dim, dim_feedforward, bias=bias)
        self.act = ACTIVATIONS[activation]()
        self.hook_post = HookPoint()
        self.dropout = make_dropout(dropout)
        self.fc_out = nn.Linear(dim_feedforward, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(self.dropout(self.hook_post(self.act(self.fc_in(x)))))


class EncoderBlock(HookedModule):
    """Self-attention then a position-wise MLP, each wrapped in a residual connection and LayerNorm.

    Post-norm (the original Transformer, `norm_first=False`):  x = LN(x + Attn(x)); x = LN(x + MLP(x)).
    Pre-norm (GPT-2 and later, `norm_first=True`):             x = x + Attn(LN(x)); x = x + MLP(LN(x)).
    Pre-norm keeps an identity path from input to output and trains deep stacks without careful warmup.
    `bias=False` drops the additive biases of every Linear and LayerNorm (nanoGPT's default); `mlp=False`
    leaves the MLP sub-layer out (an attention-only block, and its hook points with it).

    Hook points, in forward order: `hook_resid_pre` (the block's input), the attention's, `hook_attn_out`,
    `hook_resid_mid` (the stream between attention and MLP), the MLP's, `hook_mlp_out`, `hook_resid_post`.
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
        scale_attention: bool = True,
        mlp: bool = True,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.hook_resid_pre = HookPoint()
        self.norm1 = nn.LayerNorm(input_dim, bias=bias)
        self.attn = MultiheadAttention(input_dim, input_dim, num_heads, bias=bias, scale=scale_attention)
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        if mlp:  # without one: an attention-only block (the induction-head experiments' models)
            self.norm2 = nn.LayerNorm(input_dim, bias=bias)
            self.mlp = MLP(input_dim, dim_feedforward, activation, dropout, bias)
            self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()
        self.dropout = make_dropout(dropout)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, causal: bool = False, kv_cache: KVCache | None = None
    ) -> Tensor:
        """x: [B, T, D] -> [B, T, D]. `mask == 0` hides a key from a query; `causal` hides later keys."""
        x = self.hook_resid_pre(x)
        if self.norm_first:
            x = self.hook_resid_mid(x + self._attention(self.norm1(x), mask, causal, kv_cache))
            if hasattr(self, "mlp"):
                x = x + self.hook_mlp_out(self.dropout(self.mlp(self.norm2(x))))
        else:
            x = self.hook_resid_mid(self.norm1(x + self._attention(x, mask, causal, kv_cache)))
            if hasattr(self, "mlp"):
                x = self.norm2(x + self.hook_mlp_out(self.dropout(self.mlp(x))))
        return self.hook_resid_post(x)

    def _attention(self, x: Tensor, mask: Tensor | None, causal: bool, kv_cache: KVCache | None) -> Tensor:
        return self.hook_attn_out(self.dropout(self.attn(x, mask, causal=causal, kv_cache=kv_cache)))


class DecoderBlock(HookedModule):
    """Causal self-attention, cross-attention over the encoder's output, then the MLP (Vaswani et al.,
    section 3.1), each wrapped in a residual connection and LayerNorm (post-norm, or pre-norm with
    `norm_first`), as `torch.nn.TransformerDecoderLayer` (whose weights transfer: a test checks it).

    Hook points, in forward order: `hook_resid_pre`, the self-attention's (`attn.`), `hook_attn_out`,
    `hook_resid_mid`, the cross-attention's (`cross_attn.`: queries from here, keys and values from the
    encoder; `cross_attn.hook_pattern` is [B, H, T_target, T_source]), `hook_cross_attn_out`,
    `hook_resid_mid_cross`, the MLP's, `hook_mlp_out`, `hook_resid_post` (TransformerLens's names).
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
        scale_attention: bool = True,
        mlp: bool = True,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.hook_resid_pre = HookPoint()
        self.norm1 = nn.LayerNorm(input_dim, bias=bias)
        self.attn = MultiheadAttention(input_dim, input_dim, num_heads, bias=bias, scale=scale_attention)
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.norm2 = nn.LayerNorm(input_dim, bias=bias)
        self.cross_attn = MultiheadAttention(
            input_dim, input_dim, num_heads, bias=bias, scale=scale_attention
        )
        self.hook_cross_attn_out = HookPoint()
        self.hook_resid_mid_cross = HookPoint()
        if mlp:
            self.norm3 = nn.LayerNorm(input_dim, bias=bias)
            self.mlp = MLP(input_dim, dim_feedforward, activation, dropout, bias)
            self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()
        self.dropout = make_dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        kv_cache: KVCache | None = None,
        memory_kv_cache: KVCache | None = None,
    ) -> Tensor:
        """x: [B, T, D] (target so far), memory: [B, S, D] (encoder output) -> [B, T, D].

        `mask == 0` hides a target key from self-attention (padding; the causal mask is added here),
        `memory_mask == 0` a source position from cross-attention. `kv_cache` holds the self-attention's
        keys and values of earlier positions, `memory_kv_cache` the cross-attention's (computed once)."""
        x = self.hook_resid_pre(x)

        def attend(y: Tensor) -> Tensor:
            return self.hook_attn_out(self.dropout(self.attn(y, mask, causal=True, kv_cache=kv_cache)))

        def cross(y: Tensor) -> Tensor:
            out = self.cross_attn(y, memory_mask, kv_cache=memory_kv_cache, memory=memory)
            return self.hook_cross_attn_out(self.dropout(out))

        if self.norm_first:
            x = self.hook_resid_mid(x + attend(self.norm1(x)))
            x = self.hook_resid_mid_cross(x + cross(self.norm2(x)))
            if hasattr(self, "mlp"):
                x = x + self.hook_mlp_out(self.dropout(self.mlp(self.norm3(x))))
        else:
            x = self.hook_resid_mid(self.norm1(x + attend(x)))
            x = self.hook_resid_mid_cross(self.norm2(x + cross(x)))
            if hasattr(self, "mlp"):
                x = self.norm3(x + self.hook_mlp_out(self.dropout(self.mlp(x))))
        return self.hook_resid_post(x)


class TransformerEncoder(HookedModule):
    """`num_layers` EncoderBlocks in sequence, as in the course tutorial: embedded input [B, T, D] in,
    [B, T, D] out. The models of `transformer_lab.nn.models` add embeddings, a final norm and an output
    layer around the same blocks."""

    def __init__(self, num_layers: int, **block_args: object):
        super().__init__()
        self.blocks = nn.ModuleList([EncoderBlock(**block_args) for _ in range(num_layers)])

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        for block in self.blocks:
            x = block(x, mask=mask)
        return x
