"""A test-only model with the hook names of the real ones whose every component is linear: attention
patterns frozen (fixed weights, whatever q and k are), no norms, an identity MLP. Its logits are a linear
function of every edge's input, so edge attribution patching is exact on it: the first-order estimate of
patching one edge is the change patching it makes."""

import torch
from torch import Tensor, nn

from transformer_lab.nn import HookPoint, ModelConfig, TokenModel


class LinearAttention(nn.Module):
    def __init__(self, dim: int, heads: int, length: int, generator: torch.Generator):
        super().__init__()
        self.num_heads, self.head_dim = heads, dim // heads
        shape = (heads, self.head_dim, dim)
        self.w_q = nn.Parameter(torch.randn(shape, generator=generator) / dim**0.5)
        self.w_k = nn.Parameter(torch.randn(shape, generator=generator) / dim**0.5)
        self.w_v = nn.Parameter(torch.randn(shape, generator=generator) / dim**0.5)
        self.w_o = nn.Parameter(torch.randn(dim, heads, self.head_dim, generator=generator) / dim**0.5)
        scores = torch.randn(heads, length, length, generator=generator)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        self.register_buffer("pattern", scores.masked_fill(~causal, float("-inf")).softmax(-1))  # frozen
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_z, self.hook_result = HookPoint(), HookPoint()

    def forward(self, q_in: Tensor, k_in: Tensor, v_in: Tensor) -> Tensor:
        self.hook_q(torch.einsum("bthd,hed->bthe", q_in, self.w_q))  # computed, read by nothing: frozen
        self.hook_k(torch.einsum("bthd,hed->bthe", k_in, self.w_k))
        v = self.hook_v(torch.einsum("bthd,hed->bthe", v_in, self.w_v))
        length = v.size(1)
        z = self.hook_z(torch.einsum("hts,bshe->bthe", self.pattern[:, :length, :length], v))
        return self.hook_result(torch.einsum("bthe,dhe->bthd", z, self.w_o)).sum(dim=2)


class LinearBlock(nn.Module):
    def __init__(self, dim: int, heads: int, length: int, generator: torch.Generator):
        super().__init__()
        self.hook_resid_pre = HookPoint()
        self.hook_q_input, self.hook_k_input, self.hook_v_input = HookPoint(), HookPoint(), HookPoint()
        self.attn = LinearAttention(dim, heads, length, generator)
        self.hook_attn_out, self.hook_resid_mid = HookPoint(), HookPoint()
        self.hook_mlp_in = HookPoint()
        self.mlp = nn.Identity()
        self.hook_mlp_out, self.hook_resid_post = HookPoint(), HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        x = self.hook_resid_pre(x)
        copies = x.unsqueeze(2).expand(-1, -1, self.attn.num_heads, -1)
        heads = (self.hook_q_input(copies), self.hook_k_input(copies), self.hook_v_input(copies))
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(*heads)))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.hook_mlp_in(x))))


class LinearModel(TokenModel):
    """tokens [B, T] -> logits [B, T, V], decoder-shaped (position t sees t' <= t), pre-norm hook names."""

    def __init__(self, vocab: int = 7, dim: int = 8, heads: int = 2, layers: int = 2, length: int = 6):
        super().__init__()
        self.config = ModelConfig(
            arch="decoder", vocab_size=vocab, model_dim=dim, num_heads=heads, num_layers=layers,
            norm_first=True, max_len=length, positional_encoding="learned",
        )  # fmt: skip
        generator = torch.Generator().manual_seed(0)
        self.embed = nn.Parameter(torch.randn(vocab, dim, generator=generator))
        self.pos = nn.Parameter(torch.randn(length, dim, generator=generator))
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()
        self.blocks = nn.ModuleList(LinearBlock(dim, heads, length, generator) for _ in range(layers))
        self.unembed = nn.Parameter(torch.randn(dim, vocab, generator=generator))

    def stacks(self) -> dict:
        return {"": self}

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.hook_embed(self.embed[tokens]) + self.hook_pos_embed(
            self.pos[: tokens.size(1)].expand(len(tokens), -1, -1)
        )
        for block in self.blocks:
            x = block(x)
        return x @ self.unembed
