"""Transformer blocks: the norms, the position-wise MLP (plain or gated), the encoder block, the decoder
block with cross-attention, and a stack of encoder blocks.

A decoder-only (GPT-style) model uses the encoder block with `causal=True`: without cross-attention, a
decoder block is an encoder block whose attention only looks back. The encoder-decoder's decoder block
adds cross-attention over the encoder's output between the two.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lab.nn.attention import KVCache, MultiheadAttention, same_copies
from transformer_lab.nn.hooks import HookedModule, HookPoint


class GELUNew(nn.GELU):
    """GPT-2's `gelu_new`: GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    (Hendrycks & Gimpel, 2016), which GPT-2 was trained with; `gelu` is the exact x Phi(x)."""

    def __init__(self) -> None:
        super().__init__(approximate="tanh")


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "gelu_new": GELUNew}
GATES = {"swiglu": F.silu, "geglu": F.gelu}  # the gated MLPs' activation of the gate: SiLU (Llama), GELU


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich, 2019): LayerNorm without the centring
    and without a bias (Llama's norm). Computed in float32 whatever the input's dtype, as `transformers`
    computes it, with plain operations (which every exporter knows)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}"


def make_norm(kind: str, dim: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """LayerNorm(x) = (x - mean) / sqrt(var + eps) * g + b (Ba et al., 2016), or `RMSNorm`: `layer` |
    `rms`."""
    if kind == "rms":
        return RMSNorm(dim, eps)
    return nn.LayerNorm(dim, eps=eps, bias=bias)


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


class GatedMLP(nn.Module):
    """FFN(x) = W_down (act(W_gate x) * W_up x): a gated linear unit (Shazeer, 2020), SwiGLU with act =
    SiLU (Llama, Qwen2, Mistral) or GeGLU with act = GELU. Three projections: `fc_gate` and `fc_in` (the
    up projection) [F, D], `fc_out` (the down projection) [D, F]. For as many parameters as a plain MLP of
    width 4 D, F = 8 D / 3.

    Hook points (TransformerLens's): `hook_pre` (W_gate x, before the activation), `hook_pre_linear`
    (W_up x), `hook_post` (act(W_gate x) * W_up x), each [B, T, dim_feedforward].
    """

    def __init__(self, dim: int, dim_feedforward: int, activation: str, dropout: float, bias: bool = True):
        super().__init__()
        if activation not in GATES:
            raise ValueError(f"model.activation={activation!r} is not gated; use one of {sorted(GATES)}")
        self.gate = GATES[activation]
        self.fc_gate = nn.Linear(dim, dim_feedforward, bias=bias)
        self.fc_in = nn.Linear(dim, dim_feedforward, bias=bias)
        self.hook_pre = HookPoint()
        self.hook_pre_linear = HookPoint()
        self.hook_post = HookPoint()
        self.dropout = make_dropout(dropout)
        self.fc_out = nn.Linear(dim_feedforward, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.gate(self.hook_pre(self.fc_gate(x))) * self.hook_pre_linear(self.fc_in(x))
        return self.fc_out(self.dropout(self.hook_post(hidden)))


def make_mlp(dim: int, dim_feedforward: int, activation: str, dropout: float, bias: bool = True) -> nn.Module:
    """The MLP of `activation`: gated (swiglu, geglu) or plain (relu, gelu, gelu_new)."""
    kind = GatedMLP if activation in GATES else MLP
    return kind(dim, dim_feedforward, activation, dropout, bias)


class Block(HookedModule):
    """What the encoder and decoder blocks share: their settings, and their sub-layers made in forward order
    (the order of their hook points): `hook_resid_pre`; each attention sub-layer of `SUBLAYERS` (its
    LayerNorm, the attention, the hook points of its output and of the stream after it); the MLP sub-layer
    with its LayerNorm `MLP_NORM` and `hook_mlp_out`; `hook_resid_post`. `mlp=False` leaves the MLP out (an
    attention-only block: the induction-head experiments' models); `bias=False` drops every Linear's and
    LayerNorm's additive bias (nanoGPT's default), `qkv_bias`, `out_bias`, `mlp_bias`, `norm_bias` set one
    part's (None: as `bias`); `scale_attention=False` drops the 1/sqrt(d_head). `norm`: `layer` or `rms`
    (`make_norm`, with `norm_eps`); `num_kv_heads`: grouped-query attention; `rotary`: the self-attention
    rotates queries and keys (the stack gives the angles); `window`: its local window;
    `parallel_residual`: attention and MLP read the same stream (no `hook_resid_mid` then, as in
    TransformerLens)."""

    SUBLAYERS: tuple[tuple[str, str, str, str], ...]  # (norm, attention, its output's hook, the stream's)
    MLP_NORM: str
    per_head = False  # True while the per-head hook points are attached (`HookedModule.per_head_hooks`)

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
        norm: str = "layer",
        norm_eps: float = 1e-5,
        num_kv_heads: int | None = None,
        rotary: bool = False,
        window: int | None = None,
        parallel_residual: bool = False,
        qkv_bias: bool | None = None,
        out_bias: bool | None = None,
        mlp_bias: bool | None = None,
        norm_bias: bool | None = None,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.parallel_residual = parallel_residual
        norm_bias = bias if norm_bias is None else norm_bias
        self.hook_resid_pre = HookPoint()
        for k, (norm_name, attn, out, resid) in enumerate(self.SUBLAYERS):
            setattr(self, norm_name, make_norm(norm, input_dim, norm_eps, norm_bias))
            own = k == 0  # the self-attention: rotary positions and a window (cross-attention has neither)
            layer = MultiheadAttention(
                input_dim,
                input_dim,
                num_heads,
                bias=bias if qkv_bias is None else qkv_bias,
                scale=scale_attention,
                num_kv_heads=num_kv_heads,
                out_bias=bias if out_bias is None else out_bias,
                rotary=rotary and own,
                window=window if own else None,
            )
            setattr(self, attn, layer)
            setattr(self, out, HookPoint())
            if not parallel_residual:
                setattr(self, resid, HookPoint())
        if mlp:
            setattr(self, self.MLP_NORM, make_norm(norm, input_dim, norm_eps, norm_bias))
            mlp_bias = bias if mlp_bias is None else mlp_bias
            self.mlp = make_mlp(input_dim, dim_feedforward, activation, dropout, mlp_bias)
            self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()
        self.dropout = make_dropout(dropout)


class EncoderBlock(Block):
    """Self-attention then a position-wise MLP, each wrapped in a residual connection and LayerNorm.

    Post-norm (the original Transformer, `norm_first=False`):  x = LN(x + Attn(x)); x = LN(x + MLP(x)).
    Pre-norm (GPT-2 and later, `norm_first=True`):             x = x + Attn(LN(x)); x = x + MLP(LN(x)).
    Parallel (GPT-NeoX, `parallel_residual=True`):             x = x + Attn(LN1(x)) + MLP(LN2(x)).
    Pre-norm keeps an identity path from input to output and trains deep stacks without careful warmup.
    Its settings (bias, mlp, norm, ...): `Block`.

    Hook points, in forward order: `hook_resid_pre` (the block's input), the attention's, `hook_attn_out`,
    `hook_resid_mid` (the stream between attention and MLP; none in a parallel block), the MLP's,
    `hook_mlp_out`, `hook_resid_post`. Inside `model.per_head_hooks()` also TransformerLens's
    `hook_q_input` ([B, T, H, D]), `hook_k_input`, `hook_v_input` ([B, T, KV, D], one per key-value head):
    the stream each head reads, one copy per head, before the block's norm; and `hook_mlp_in` (the MLP's
    input, before its norm): while one of them is hooked, the block runs each head on its own copy, so an
    edge into one head can be changed alone.
    """

    SUBLAYERS = (("norm1", "attn", "hook_attn_out", "hook_resid_mid"),)
    MLP_NORM = "norm2"

    def per_head_hook_points(self) -> list[tuple[str, str]]:
        """The hook points `per_head_hooks` attaches: (name, the hook point it follows in forward order)."""
        names = [("hook_q_input", "hook_resid_pre"), ("hook_k_input", "hook_q_input")]
        names.append(("hook_v_input", "hook_k_input"))
        mlp_after = "hook_attn_out" if self.parallel_residual else "hook_resid_mid"
        return names + ([("hook_mlp_in", mlp_after)] if hasattr(self, "mlp") else [])

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        kv_cache: KVCache | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """x: [B, T, D] -> [B, T, D]. `mask == 0` hides a key from a query; `causal` hides later keys;
        `rotary`: the angles of x's positions (rotary positions)."""
        x = self.hook_resid_pre(x)
        if self.per_head and kv_cache is None:
            return self._forward_per_head(x, mask, causal, rotary)
        if self.parallel_residual:
            attended = self._attention(self.norm1(x), mask, causal, kv_cache, rotary)
            if hasattr(self, "mlp"):
                attended = attended + self.hook_mlp_out(self.dropout(self.mlp(self.norm2(x))))
            x = x + attended
        elif self.norm_first:
            x = self.hook_resid_mid(x + self._attention(self.norm1(x), mask, causal, kv_cache, rotary))
            if hasattr(self, "mlp"):
                x = x + self.hook_mlp_out(self.dropout(self.mlp(self.norm2(x))))
        else:
            x = self.hook_resid_mid(self.norm1(x + self._attention(x, mask, causal, kv_cache, rotary)))
            if hasattr(self, "mlp"):
                x = self.norm2(x + self.hook_mlp_out(self.dropout(self.mlp(x))))
        return self.hook_resid_post(x)

    def _attention(
        self,
        x: Tensor,
        mask: Tensor | None,
        causal: bool,
        kv_cache: KVCache | None,
        rotary: tuple[Tensor, Tensor] | None,
    ) -> Tensor:
        out = self.attn(x, mask, causal=causal, kv_cache=kv_cache, rotary=rotary)
        return self.hook_attn_out(self.dropout(out))

    def _forward_per_head(
        self, x: Tensor, mask: Tensor | None, causal: bool, rotary: tuple[Tensor, Tensor] | None
    ) -> Tensor:
        """`forward` with the per-head hook points attached (analysis only: no KV cache)."""
        if self.hook_q_input.is_hooked or self.hook_k_input.is_hooked or self.hook_v_input.is_hooked:
            norm = self.norm1 if self.norm_first else nn.Identity()
            q_in, k_in, v_in = split_inputs(x, x, self.attn, self, "")
            q_in, k_in, v_in = (per_head_norm(norm, x) for x in (q_in, k_in, v_in))
            out = self.attn.forward_per_head(q_in, k_in, v_in, mask, causal=causal, rotary=rotary)
            attended = self.hook_attn_out(self.dropout(out))
        else:
            attended = self._attention(self.norm1(x) if self.norm_first else x, mask, causal, None, rotary)
        norm2 = self.norm2 if hasattr(self, "mlp") else None
        if self.parallel_residual:  # the MLP reads the block's input, as the attention does
            return self.hook_resid_post(mlp_sublayer(self, x, norm2, attended))
        if self.norm_first:
            x = self.hook_resid_mid(x + attended)
        else:
            x = self.hook_resid_mid(self.norm1(x + attended))
        return self.hook_resid_post(mlp_sublayer(self, x, norm2))


class DecoderBlock(Block):
    """Causal self-attention, cross-attention over the encoder's output, then the MLP (Vaswani et al.,
    section 3.1), each wrapped in a residual connection and LayerNorm (post-norm, or pre-norm with
    `norm_first`), as `torch.nn.TransformerDecoderLayer` (whose weights transfer: a test checks it).

    Hook points, in forward order: `hook_resid_pre`, the self-attention's (`attn.`), `hook_attn_out`,
    `hook_resid_mid`, the cross-attention's (`cross_attn.`: queries from here, keys and values from the
    encoder; `cross_attn.hook_pattern` is [B, H, T_target, T_source]), `hook_cross_attn_out`,
    `hook_resid_mid_cross`, the MLP's, `hook_mlp_out`, `hook_resid_post` (TransformerLens's names).
    Inside `model.per_head_hooks()` also the encoder block's per-head inputs and `hook_cross_q_input`
    ([B, T, H, D]: the decoder stream each cross-attention head reads its queries from, before the norm),
    `hook_cross_k_input` / `hook_cross_v_input` ([B, S, H, D]: the encoder's output, one copy per head).
    """

    SUBLAYERS = (
        ("norm1", "attn", "hook_attn_out", "hook_resid_mid"),
        ("norm2", "cross_attn", "hook_cross_attn_out", "hook_resid_mid_cross"),
    )
    MLP_NORM = "norm3"

    def per_head_hook_points(self) -> list[tuple[str, str]]:
        """The hook points `per_head_hooks` attaches: (name, the hook point it follows in forward order)."""
        names = [("hook_q_input", "hook_resid_pre"), ("hook_k_input", "hook_q_input")]
        names += [("hook_v_input", "hook_k_input"), ("hook_cross_q_input", "hook_resid_mid")]
        names += [("hook_cross_k_input", "hook_cross_q_input"), ("hook_cross_v_input", "hook_cross_k_input")]
        return names + ([("hook_mlp_in", "hook_resid_mid_cross")] if hasattr(self, "mlp") else [])

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        kv_cache: KVCache | None = None,
        memory_kv_cache: KVCache | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """x: [B, T, D] (target so far), memory: [B, S, D] (encoder output) -> [B, T, D].

        `mask == 0` hides a target key from self-attention (padding; the causal mask is added here),
        `memory_mask == 0` a source position from cross-attention. `kv_cache` holds the self-attention's
        keys and values of earlier positions, `memory_kv_cache` the cross-attention's (computed once).
        `rotary`: the angles of the target's positions (the self-attention's rotary positions)."""
        x = self.hook_resid_pre(x)
        if self.per_head and kv_cache is None and memory_kv_cache is None:
            return self._forward_per_head(x, memory, mask, memory_mask, rotary)

        def attend(y: Tensor) -> Tensor:
            out = self.attn(y, mask, causal=True, kv_cache=kv_cache, rotary=rotary)
            return self.hook_attn_out(self.dropout(out))

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

    def _forward_per_head(
        self,
        x: Tensor,
        memory: Tensor,
        mask: Tensor | None,
        memory_mask: Tensor | None,
        rotary: tuple[Tensor, Tensor] | None,
    ) -> Tensor:
        """`forward` with the per-head hook points attached (analysis only: no KV caches). The encoder's
        output is read as it is (already normalised), so only the queries' copies pass the norm."""
        pre = self.norm_first

        def sublayer(x: Tensor, attn: MultiheadAttention, norm: nn.Module, prefix: str, **kw) -> Tensor:
            names = [f"hook_{prefix}{part}_input" for part in "qkv"]
            if any(getattr(self, name).is_hooked for name in names):
                keys = x if attn is self.attn else memory
                q_in, k_in, v_in = split_inputs(x, keys, attn, self, prefix)
                if pre:
                    q_in = per_head_norm(norm, q_in)
                    if attn is self.attn:
                        k_in, v_in = per_head_norm(norm, k_in), per_head_norm(norm, v_in)
                return attn.forward_per_head(q_in, k_in, v_in, **kw)
            if attn is self.attn:
                return attn(norm(x) if pre else x, kw["mask"], causal=True, rotary=rotary)
            return attn(norm(x) if pre else x, kw["mask"], memory=memory)

        attended = self.hook_attn_out(
            self.dropout(sublayer(x, self.attn, self.norm1, "", mask=mask, causal=True, rotary=rotary))
        )
        x = self.hook_resid_mid(x + attended if pre else self.norm1(x + attended))
        crossed = self.dropout(sublayer(x, self.cross_attn, self.norm2, "cross_", mask=memory_mask))
        crossed = self.hook_cross_attn_out(crossed)
        x = self.hook_resid_mid_cross(x + crossed if pre else self.norm2(x + crossed))
        return self.hook_resid_post(mlp_sublayer(self, x, self.norm3 if hasattr(self, "mlp") else None))


def split_inputs(
    x: Tensor, keys: Tensor, attn: MultiheadAttention, block: nn.Module, prefix: str
) -> tuple[Tensor, Tensor, Tensor]:
    """One copy of the stream per head, through `hook_{prefix}q_input` (from `x`, [B, T, H, D]) and
    `hook_{prefix}k_input` / `hook_{prefix}v_input` (from `keys`: `x`, or the encoder's output; one per
    key-value head of `attn`, [B, T, KV, D])."""

    def copies(y: Tensor, heads: int) -> Tensor:
        return y.unsqueeze(2).expand(-1, -1, heads, -1)

    return (
        getattr(block, f"hook_{prefix}q_input")(copies(x, attn.num_heads)),
        getattr(block, f"hook_{prefix}k_input")(copies(keys, attn.num_kv_heads)),
        getattr(block, f"hook_{prefix}v_input")(copies(keys, attn.num_kv_heads)),
    )


def per_head_norm(norm: nn.Module, x: Tensor) -> Tensor:
    """A block's norm of per-head copies [B, T, H, D]: once, if they are one tensor expanded."""
    if same_copies(x):
        return norm(x[:, :, 0]).unsqueeze(2).expand_as(x)
    return norm(x)


def mlp_sublayer(
    block: nn.Module, x: Tensor, norm: nn.Module | None, attended: Tensor | None = None
) -> Tensor:
    """The MLP sub-layer of a block whose per-head hook points are attached, its input through
    `hook_mlp_in` (which only the MLP reads): x + MLP(LN(in)) pre-norm, LN(x + MLP(in)) post-norm; in a
    parallel block x + attended + MLP(LN(in)), `attended` the attention's output. `norm` None: a block
    without an MLP (x, plus `attended`)."""
    if norm is None:
        return x if attended is None else x + attended
    mlp_in = block.hook_mlp_in(x)
    if attended is not None:
        return x + (attended + block.hook_mlp_out(block.dropout(block.mlp(norm(mlp_in)))))
    if block.norm_first:
        return x + block.hook_mlp_out(block.dropout(block.mlp(norm(mlp_in))))
    return norm(x + block.hook_mlp_out(block.dropout(block.mlp(mlp_in))))


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
