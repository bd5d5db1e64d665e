"""Transformer blocks: the norms, the position-wise MLP (plain or gated), the encoder block, the decoder
block with cross-attention, and a stack of encoder blocks.

A decoder-only (GPT-style) model uses the encoder block with `causal=True`: without cross-attention, a
decoder block is an encoder block whose attention only looks back. The encoder-decoder's decoder block
adds cross-attention over the encoder's output between the two.
"""

import torch
from torch import Tensor, nn

from transformer_lab.nn.activations import GATES, PLAIN
from transformer_lab.nn.attention import KVCache, MultiheadAttention, same_copies
from transformer_lab.nn.config import BlockSpec
from transformer_lab.nn.hooks import HookedModule, HookPoint


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

    Hook points: `hook_in`, what the MLP reads, [B, T, model_dim] (the normalised stream in a pre-norm
    block: TransformerLens's `ln2.hook_normalized`; what a transcoder reads); `hook_post`, the hidden
    activation act(W_1 x + b_1), [B, T, dim_feedforward].
    """

    def __init__(
        self, model_dim: int, dim_feedforward: int, activation: str, dropout: float, bias: bool = True
    ):
        super().__init__()
        if activation not in PLAIN:
            raise ValueError(f"model.activation={activation!r} is unknown; use one of {sorted(PLAIN)}")
        self.hook_in = HookPoint()
        self.fc_in = nn.Linear(model_dim, dim_feedforward, bias=bias)
        self.act = PLAIN[activation]()
        self.hook_post = HookPoint()
        self.dropout = make_dropout(dropout)
        self.fc_out = nn.Linear(dim_feedforward, model_dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.hook_in(x)
        return self.fc_out(self.dropout(self.hook_post(self.act(self.fc_in(x)))))


class GatedMLP(nn.Module):
    """FFN(x) = W_down (act(W_gate x) * W_up x): a gated linear unit (Shazeer, 2020), SwiGLU with act =
    SiLU (Llama, Qwen2, Mistral) or GeGLU with act = GELU. Three projections: `fc_gate` and `fc_in` (the
    up projection) [F, D], `fc_out` (the down projection) [D, F]. For as many parameters as a plain MLP of
    width 4 D, F = 8 D / 3.

    Hook points: `hook_in` (what it reads, as `MLP`'s), and TransformerLens's `hook_pre` (W_gate x, before
    the activation), `hook_pre_linear` (W_up x), `hook_post` (act(W_gate x) * W_up x), each
    [B, T, dim_feedforward].
    """

    def __init__(
        self, model_dim: int, dim_feedforward: int, activation: str, dropout: float, bias: bool = True
    ):
        super().__init__()
        if activation not in GATES:
            raise ValueError(f"model.activation={activation!r} is not gated; use one of {sorted(GATES)}")
        self.gate = GATES[activation]
        self.hook_in = HookPoint()
        self.fc_gate = nn.Linear(model_dim, dim_feedforward, bias=bias)
        self.fc_in = nn.Linear(model_dim, dim_feedforward, bias=bias)
        self.hook_pre = HookPoint()
        self.hook_pre_linear = HookPoint()
        self.hook_post = HookPoint()
        self.dropout = make_dropout(dropout)
        self.fc_out = nn.Linear(dim_feedforward, model_dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.hook_in(x)
        hidden = self.gate(self.hook_pre(self.fc_gate(x))) * self.hook_pre_linear(self.fc_in(x))
        return self.fc_out(self.dropout(self.hook_post(hidden)))


def make_mlp(spec: BlockSpec) -> nn.Module:
    """The MLP of a block: gated (swiglu, geglu) or plain (relu, gelu, gelu_new)."""
    kind = GatedMLP if spec.activation in GATES else MLP
    return kind(spec.model_dim, spec.dim_feedforward, spec.activation, spec.dropout, spec.mlp_bias)


class Block(HookedModule):
    """What the encoder and decoder blocks share: their settings (`spec`, a `BlockSpec`: what
    `ModelConfig.block(layer)` resolves, biases per part and the layer's window decided), their
    sub-layers made in forward order (the order of their hook points), and the residual wiring.

    `hook_resid_pre`; each attention sub-layer of `SUBLAYERS` (its norm, the attention, the hook points of
    its output and of the stream after it); the MLP sub-layer with its norm `MLP_NORM` and
    `hook_mlp_out` (`mlp` None in an attention-only block: the induction-head experiments' models);
    `hook_resid_post`. A parallel block has no `hook_resid_mid` (as in TransformerLens).

    The course tutorial's constructor works too: `EncoderBlock(input_dim, num_heads, dim_feedforward,
    dropout)`, with any other `ModelConfig` setting by keyword (`norm_first=True`, `bias=False`, ...).
    """

    SUBLAYERS: tuple[tuple[str, str, str, str], ...]  # (norm, attention, its output's hook, the stream's)
    MLP_NORM: str
    ARCH: str  # the architecture a tutorial-style block's settings are checked as
    per_head = False  # True while the per-head hook points are attached (`HookedModule.per_head_hooks`)

    def __init__(
        self,
        spec: BlockSpec | int | None = None,
        num_heads: int | None = None,
        dim_feedforward: int | None = None,
        dropout: float = 0.0,
        *,
        input_dim: int | None = None,
        **settings: object,
    ):
        super().__init__()
        if not isinstance(spec, BlockSpec):  # the tutorial's EncoderBlock(input_dim, num_heads, ...)
            settings |= {"dim_feedforward": dim_feedforward, "dropout": dropout}
            spec = BlockSpec.of_settings(
                self.ARCH, spec if spec is not None else input_dim, num_heads, **settings
            )
        self.spec = spec
        self.norm_first = spec.norm_first
        self.parallel_residual = spec.parallel_residual
        self.hook_resid_pre = HookPoint()
        for k, (norm_name, attn, out, resid) in enumerate(self.SUBLAYERS):
            setattr(self, norm_name, make_norm(spec.norm, spec.model_dim, spec.norm_eps, spec.norm_bias))
            setattr(self, attn, MultiheadAttention.of(spec, own=k == 0))
            setattr(self, out, HookPoint())
            if not spec.parallel_residual:
                setattr(self, resid, HookPoint())
        self.mlp = None
        if spec.mlp:
            setattr(self, self.MLP_NORM, make_norm(spec.norm, spec.model_dim, spec.norm_eps, spec.norm_bias))
            self.mlp = make_mlp(spec)
            self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()
        self.dropout = make_dropout(spec.dropout)

    # ------------------------------------------------------------------ the residual wiring, once
    def residual(self, x: Tensor, out: Tensor, norm: nn.Module) -> Tensor:
        """A sub-layer's output `out` added to the stream: x + out pre-norm (out read LN(x)), LN(x + out)
        post-norm (out read x)."""
        return x + out if self.norm_first else norm(x + out)

    def mlp_out(self, x: Tensor, per_head: bool) -> Tensor:
        """The MLP sub-layer's output for the stream x (`hook_mlp_out`): MLP(LN(x)) pre-norm, MLP(x)
        post-norm; x through `hook_mlp_in` first (which only the MLP reads) while the per-head hook
        points are attached."""
        mlp_in = self.hook_mlp_in(x) if per_head else x
        norm = getattr(self, self.MLP_NORM)
        return self.hook_mlp_out(self.dropout(self.mlp(norm(mlp_in) if self.norm_first else mlp_in)))

    def finish(self, x: Tensor, attended: Tensor, per_head: bool) -> Tensor:
        """The stream after the last attention sub-layer's output `attended` and the MLP: Attn and MLP
        both read x in a parallel block, x + Attn(LN1(x)) + MLP(LN2(x)); otherwise the attention's
        residual (`hook_resid_mid`) and then the MLP's."""
        if self.parallel_residual:
            if self.mlp is None:
                return self.hook_resid_post(x + attended)
            return self.hook_resid_post(x + (attended + self.mlp_out(x, per_head)))
        norm_name, _, _, resid = self.SUBLAYERS[-1]
        x = getattr(self, resid)(self.residual(x, attended, getattr(self, norm_name)))
        if self.mlp is not None:
            x = self.residual(x, self.mlp_out(x, per_head), getattr(self, self.MLP_NORM))
        return self.hook_resid_post(x)

    def attention_input(self, x: Tensor, norm: nn.Module) -> Tensor:
        """What an attention sub-layer reads of the stream: LN(x) pre-norm, x post-norm."""
        return norm(x) if self.norm_first else x


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
    ARCH = "encoder"

    def per_head_hook_points(self) -> list[tuple[str, str]]:
        """The hook points `per_head_hooks` attaches: (name, the hook point it follows in forward order)."""
        names = [("hook_q_input", "hook_resid_pre"), ("hook_k_input", "hook_q_input")]
        names.append(("hook_v_input", "hook_k_input"))
        mlp_after = "hook_attn_out" if self.parallel_residual else "hook_resid_mid"
        return names + ([("hook_mlp_in", mlp_after)] if self.mlp is not None else [])

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
        per_head = self.per_head and kv_cache is None
        if per_head and (
            self.hook_q_input.is_hooked or self.hook_k_input.is_hooked or self.hook_v_input.is_hooked
        ):
            norm = self.norm1 if self.norm_first else nn.Identity()
            q_in, k_in, v_in = (per_head_norm(norm, y) for y in split_inputs(x, x, self.attn, self, ""))
            out = self.attn.forward_per_head(q_in, k_in, v_in, mask, causal=causal, rotary=rotary)
        else:
            inputs = self.attention_input(x, self.norm1)
            out = self.attn(inputs, mask, causal=causal, kv_cache=kv_cache, rotary=rotary)
        return self.finish(x, self.hook_attn_out(self.dropout(out)), per_head)


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
    ARCH = "encoder_decoder"

    def per_head_hook_points(self) -> list[tuple[str, str]]:
        """The hook points `per_head_hooks` attaches: (name, the hook point it follows in forward order)."""
        names = [("hook_q_input", "hook_resid_pre"), ("hook_k_input", "hook_q_input")]
        names += [("hook_v_input", "hook_k_input"), ("hook_cross_q_input", "hook_resid_mid")]
        names += [("hook_cross_k_input", "hook_cross_q_input"), ("hook_cross_v_input", "hook_cross_k_input")]
        return names + ([("hook_mlp_in", "hook_resid_mid_cross")] if self.mlp is not None else [])

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
        `rotary`: the angles of the target's positions (the self-attention's rotary positions). The
        encoder's output is read as it is (already normalised): with the per-head hook points attached,
        only the copies of the decoder's stream pass the norm."""
        x = self.hook_resid_pre(x)
        per_head = self.per_head and kv_cache is None and memory_kv_cache is None

        def split(attn: MultiheadAttention, norm: nn.Module, prefix: str, keys: Tensor) -> tuple | None:
            """Per-head copies of the inputs of `attn` while one of them is hooked (else None)."""
            names = [f"hook_{prefix}{part}_input" for part in "qkv"]
            if not (per_head and any(getattr(self, name).is_hooked for name in names)):
                return None
            q_in, k_in, v_in = split_inputs(x, keys, attn, self, prefix)
            if self.norm_first:
                q_in = per_head_norm(norm, q_in)
                if attn is self.attn:
                    k_in, v_in = per_head_norm(norm, k_in), per_head_norm(norm, v_in)
            return q_in, k_in, v_in

        copies = split(self.attn, self.norm1, "", x)
        if copies is not None:
            out = self.attn.forward_per_head(*copies, mask=mask, causal=True, rotary=rotary)
        else:
            inputs = self.attention_input(x, self.norm1)
            out = self.attn(inputs, mask, causal=True, kv_cache=kv_cache, rotary=rotary)
        x = self.hook_resid_mid(self.residual(x, self.hook_attn_out(self.dropout(out)), self.norm1))
        copies = split(self.cross_attn, self.norm2, "cross_", memory)
        if copies is not None:
            out = self.cross_attn.forward_per_head(*copies, mask=memory_mask)
        else:
            inputs = self.attention_input(x, self.norm2)
            out = self.cross_attn(inputs, memory_mask, kv_cache=memory_kv_cache, memory=memory)
        return self.finish(x, self.hook_cross_attn_out(self.dropout(out)), per_head)


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
