"""Scaled dot-product and multi-head attention.

Two code paths compute the same function:

* the hand-written path (`attention_pattern`, `scaled_dot_product`) materialises the attention matrix,
  so it can be read, replaced and differentiated through the `hook_pattern` hook point;
* the fused path (`torch.nn.functional.scaled_dot_product_attention`) never materialises it and is what
  training and generation use while nothing is hooked there.

Masks follow one convention everywhere: ``mask == 0`` (or ``False``) means "this query may not look at
this key".
"""

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lab.nn.hooks import HookPoint
from transformer_lab.nn.positional import rotate

if TYPE_CHECKING:
    from transformer_lab.nn.config import BlockSpec


def expand_mask(mask: Tensor) -> Tensor:
    """Broadcast a mask to 4 dimensions [batch, heads, queries, keys].

    2D [T, T] -> [1, 1, T, T] (one mask for every sequence and head), 3D [B, T, T] -> [B, 1, T, T]
    (one per sequence, shared by heads), 4D is returned unchanged.
    """
    if mask.ndim < 2:
        raise ValueError(
            f"mask must have at least 2 dimensions [queries, keys], got shape {tuple(mask.shape)}"
        )
    if mask.ndim == 2:
        return mask.unsqueeze(0).unsqueeze(0)
    if mask.ndim == 3:
        return mask.unsqueeze(1)
    return mask


def causal_mask(num_queries: int, num_keys: int, device: torch.device | None = None) -> Tensor:
    """Boolean [Tq, Tk] mask letting query i see keys 0 .. (Tk - Tq + i).

    With Tq == Tk this is the lower triangle; with a KV cache the queries are the last Tq positions of a
    sequence of length Tk, so the triangle is shifted right by Tk - Tq.
    """
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=num_keys - num_queries)


def window_mask(
    num_queries: int, num_keys: int, window: int, causal: bool, device: torch.device
) -> Tensor | None:
    """Boolean [Tq, Tk] mask of local attention (GPT-Neo's local layers): query i, at position
    Tk - Tq + i, sees the keys fewer than `window` positions away (and, `causal`, not after it). None when
    no query has a key that far (Tk <= window): the window hides nothing."""
    if num_keys <= window:
        return None
    query = torch.arange(num_keys - num_queries, num_keys, device=device)
    distance = query[:, None] - torch.arange(num_keys, device=device)[None, :]
    return (distance < window) & ((distance >= 0) if causal else (distance > -window))


def attention_pattern(q: Tensor, k: Tensor, mask: Tensor | None = None, scale: bool = True) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)): [..., Tq, d_k] x [..., Tk, d_k] -> [..., Tq, Tk].

    Each row is a probability distribution over the keys, exactly 0 where the mask is 0. Dividing by
    sqrt(d_k) keeps the scores' variance near 1 for unit-variance q and k, so the softmax does not
    saturate (`scale=False` leaves it out, to see why it is there).
    """
    scores = torch.matmul(q, k.transpose(-2, -1))
    if scale:
        scores = scores / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(expand_mask(mask) == 0, torch.finfo(scores.dtype).min)
    return F.softmax(scores, dim=-1)


def scaled_dot_product(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V  (Vaswani et al., 2017, eq. 1).

    q: [..., Tq, d_k], k: [..., Tk, d_k], v: [..., Tk, d_v]; mask broadcastable to [B, H, Tq, Tk] by
    `expand_mask`. Returns (values [..., Tq, d_v], attention [..., Tq, Tk]).
    """
    attention = attention_pattern(q, k, mask)
    return torch.matmul(attention, v), attention


def same_copies(x: Tensor) -> bool:
    """Whether per-head copies [B, T, H, D] are one tensor expanded along the heads (stride 0), and no
    gradient per copy is wanted: then one computation serves every head."""
    return x.stride(2) == 0 and not (x.requires_grad and torch.is_grad_enabled())


class KVCache:
    """Keys and values of the positions already seen by one attention layer, for fast decoding (one per
    key-value head; with rotary positions the keys are stored rotated, each by its own position).

    Preallocated to `max_len` positions; `update` writes the new keys/values after the cached ones and
    returns everything cached so far. Positions are absolute, so a full cache cannot slide: the caller
    (`DecoderLM.generate`) decides what to re-encode when it is full.
    """

    def __init__(self, batch: int, num_heads: int, max_len: int, head_dim: int, like: Tensor):
        shape = (batch, num_heads, max_len, head_dim)
        self.k = torch.empty(shape, dtype=like.dtype, device=like.device)
        self.v = torch.empty(shape, dtype=like.dtype, device=like.device)
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.k.size(2)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        new = k.size(2)
        end = self.length + new
        if end > self.max_len:
            raise RuntimeError(f"KV cache overflow: {end} positions > capacity {self.max_len}")
        self.k.narrow(2, self.length, new).copy_(k)  # narrow/copy_: cheaper to dispatch than slice-assign
        self.v.narrow(2, self.length, new).copy_(v)
        self.length = end
        return self.keys_values()

    def keys_values(self) -> tuple[Tensor, Tensor]:
        """Everything cached so far: keys and values [B, H, length, head_dim]."""
        return self.k.narrow(2, 0, self.length), self.v.narrow(2, 0, self.length)

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows `index` (beam search: each new beam continues an old one)."""
        self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)


class MultiheadAttention(nn.Module):
    """MultiHead(X) = Concat(head_1, ..., head_h) W^O with head_i = Attention(X W_i^Q, X W_i^K, X W_i^V).

    One fused linear layer computes Q, K and V for all heads. Its output is laid out [q | k | v], each
    [head_1 | ... | head_h], which is exactly `torch.nn.MultiheadAttention.in_proj_weight`, so weights
    transfer between the two (a test checks they agree). `bias=False` drops the Q, K, V biases,
    `out_bias` (default: `bias`) W^O's.

    Grouped-query attention (`num_kv_heads` < `num_heads`; Ainslie et al., 2023): K and V have
    `num_kv_heads` heads, each shared by num_heads / num_kv_heads consecutive query heads (query head h
    reads key-value head h // group); the layout is then [q (H heads) | k (KV heads) | v (KV heads)].
    With `rotary`, queries and keys are rotated by their positions (`positional.rotate`) after hook_q and
    hook_k. With `attention_window`, each query sees only the keys fewer than that many positions away
    (local attention, `window_mask`). A block builds its attention from its spec (`of`).

    Cross-attention (the decoder of an encoder-decoder) takes its queries from `x` and its keys and
    values from `memory` (the encoder's output), with the same weights: the rows of W^Q, and of W^K, W^V.

    Hook points: `hook_q` [B, T, H, d_head], `hook_k`, `hook_v` [B, T, KV, d_head] (one per key-value
    head), with rotary positions `hook_rot_q` and `hook_rot_k` (after the rotation, TransformerLens's
    names), `hook_pattern`, the softmax weights [B, H, T_query, T_key] (one per query head), and `hook_z`
    (the heads' outputs before W^O) [B, T, H, d_head]. Inside `model.per_head_hooks()` also
    `hook_result` [B, T, H, D]: each head's output in the residual stream, result_h = z_h W^O_h (the
    layer's output is sum_h result_h + b^O), computed only while it is hooked.
    """

    per_head = False  # True while the per-head hook points are attached (`HookedModule.per_head_hooks`)

    def per_head_hook_points(self) -> list[tuple[str, str]]:
        """The hook points `per_head_hooks` attaches: (name, the hook point it follows in forward order)."""
        return [("hook_result", "hook_z")]

    def __init__(
        self,
        input_dim: int,
        embed_dim: int,
        num_heads: int,
        bias: bool = True,
        scale: bool = True,
        num_kv_heads: int | None = None,
        out_bias: bool | None = None,
        rotary: bool = False,
        attention_window: int | None = None,
    ):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        num_kv_heads = num_kv_heads or num_heads
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.kv_dim = num_kv_heads * self.head_dim
        self.scale = scale
        self.attention_window = attention_window
        self.qkv_proj = nn.Linear(input_dim, embed_dim + 2 * self.kv_dim, bias=bias)
        self.o_proj = nn.Linear(embed_dim, embed_dim, bias=bias if out_bias is None else out_bias)
        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        if rotary:
            self.hook_rot_q = HookPoint()
            self.hook_rot_k = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()
        self._reset_parameters()

    @classmethod
    def of(cls, spec: "BlockSpec", own: bool = True) -> "MultiheadAttention":
        """A block's attention of `spec` (`nn.config.BlockSpec`): its self-attention (`own`: rotary
        positions and the layer's window), or its cross-attention (neither)."""
        return cls(
            spec.model_dim,
            spec.model_dim,
            spec.num_heads,
            bias=spec.qkv_bias,
            scale=spec.scale_attention,
            num_kv_heads=spec.num_kv_heads,
            out_bias=spec.out_bias,
            rotary=spec.rotary and own,
            attention_window=spec.attention_window if own else None,
        )

    @property
    def group(self) -> int:
        """Query heads per key-value head."""
        return self.num_heads // self.num_kv_heads

    def _reset_parameters(self) -> None:
        """Xavier-uniform weights and zero biases, as in the original Transformer implementation."""
        for proj in (self.qkv_proj, self.o_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    def _heads(self, x: Tensor, hook: HookPoint, heads: int) -> Tensor:
        """[B, T, heads * d_head] -> hooked as [B, T, heads, d_head]."""
        batch, seq_len, _ = x.shape
        return hook(x.view(batch, seq_len, heads, self.head_dim))

    def _positioned(
        self, q: Tensor | None, k: Tensor | None, rotary: tuple[Tensor, Tensor] | None
    ) -> tuple[Tensor | None, Tensor | None]:
        """Queries and keys [B, T, heads, d] rotated by their positions (`hook_rot_q`, `hook_rot_k`), then
        laid out [B, heads, T, d] for the matmuls."""
        if rotary is not None:
            q = None if q is None else self.hook_rot_q(rotate(q, *rotary))
            k = None if k is None else self.hook_rot_k(rotate(k, *rotary))
        return (None if q is None else q.transpose(1, 2)), (None if k is None else k.transpose(1, 2))

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        return_attention: bool = False,
        causal: bool = False,
        kv_cache: KVCache | None = None,
        memory: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """x: [B, T, input_dim] -> [B, T, embed_dim] (and attention [B, H, T, T_keys] if asked).

        `causal=True` adds the causal mask (position t attends to positions <= t). `kv_cache` prepends
        the cached keys/values of earlier positions. `rotary`: the (cos, sin) tables of x's positions
        [B, T, rotary_dim] (self-attention with rotary positions). With `memory` [B, T_keys, input_dim]
        this is cross-attention: keys and values come from `memory`, and a `kv_cache` holds them once
        computed (they do not change while a decoder generates). The attention weights are computed
        explicitly when they are asked for (`return_attention`, the course tutorial's way) or
        `hook_pattern` is hooked; otherwise the fused kernel runs.
        """
        q_size, kv_size = self.embed_dim, self.kv_dim
        if memory is None:
            # Split [q | k | v] along features, then heads: views whose backward is one concatenation.
            q, k, v = self.qkv_proj(x).split((q_size, kv_size, kv_size), dim=-1)
            q = self._heads(q, self.hook_q, self.num_heads)
            k = self._heads(k, self.hook_k, self.num_kv_heads)
            v = self._heads(v, self.hook_v, self.num_kv_heads).transpose(1, 2)
            q, k = self._positioned(q, k, rotary)
            if kv_cache is not None:
                k, v = kv_cache.update(k, v)
        else:
            weight, bias = self.qkv_proj.weight, self.qkv_proj.bias
            q = F.linear(x, weight[:q_size], None if bias is None else bias[:q_size])
            q = self._heads(q, self.hook_q, self.num_heads).transpose(1, 2)
            if kv_cache is not None and kv_cache.length > 0:
                k, v = kv_cache.keys_values()
            else:
                kv = F.linear(memory, weight[q_size:], None if bias is None else bias[q_size:])
                k, v = kv.split(kv_size, dim=-1)
                k = self._heads(k, self.hook_k, self.num_kv_heads).transpose(1, 2)
                v = self._heads(v, self.hook_v, self.num_kv_heads).transpose(1, 2)
                if kv_cache is not None:
                    k, v = kv_cache.update(k, v)
        return self._attend(q, k, v, mask, causal, return_attention)

    def forward_per_head(
        self,
        q_in: Tensor,
        k_in: Tensor,
        v_in: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        rotary: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """The same attention with a separate input per head (TransformerLens's split q/k/v inputs):
        q_in [B, T, H, input_dim], k_in and v_in [B, T_keys, KV, input_dim] (one per key-value head: x, or
        the encoder's output for cross-attention, after the block's norm). q_h = q_in[:, :, h] W^Q_h +
        b^Q_h, and likewise k_g and v_g: equal to `forward` when every copy is the same."""
        sizes = (self.num_heads, self.num_kv_heads, self.num_kv_heads)
        weights = self.qkv_proj.weight.split([n * self.head_dim for n in sizes])
        biases = self.qkv_proj.bias
        biases = [None] * 3 if biases is None else biases.split([n * self.head_dim for n in sizes])

        def project(x: Tensor, i: int) -> Tensor:
            weight = weights[i].view(sizes[i], self.head_dim, -1)
            bias = None if biases[i] is None else biases[i].view(sizes[i], self.head_dim)
            if same_copies(x):  # one input for every head: one matrix product, as in `forward`
                flat = None if bias is None else bias.flatten()
                return F.linear(x[:, :, 0], weight.flatten(0, 1), flat).unflatten(-1, weight.shape[:2])
            y = torch.einsum("bthd,hed->bthe", x, weight)
            return y if bias is None else y + bias

        q, k = self.hook_q(project(q_in, 0)), self.hook_k(project(k_in, 1))
        v = self.hook_v(project(v_in, 2)).transpose(1, 2)
        q, k = self._positioned(q, k, rotary)
        return self._attend(q, k, v, mask, causal, False)

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, return_attention: bool
    ) -> Tensor | tuple[Tensor, Tensor]:
        """softmax(q k^T / sqrt(d_head)) v per head (q [B, H, T, d_head], k and v [B, KV, T_keys, d_head]),
        then W^O."""
        batch, _, seq_len, _ = q.shape
        num_keys = k.size(2)
        device = q.device
        explicit = return_attention or self.hook_pattern.is_hooked
        scale = None if self.scale else 1.0  # the fused kernel's default is 1 / sqrt(d_head)
        window = self.attention_window
        local = None if window is None else window_mask(seq_len, num_keys, window, causal, device)

        # The fused kernel needs no mask tensor for plain causal attention: `is_causal` covers Tq == Tk,
        # and a single query (decoding with a KV cache) is the newest position, which sees every key.
        implicit_causal = (
            causal and mask is None and local is None and not explicit and seq_len in (1, num_keys)
        )
        if causal and not implicit_causal:
            causal_part = causal_mask(seq_len, num_keys, device=device)
            mask = causal_part if mask is None else expand_mask(mask).bool() & causal_part
        if local is not None:
            mask = local if mask is None else expand_mask(mask).bool() & local

        attention = None
        if explicit:
            if self.group > 1:  # each key-value head serves its group of query heads
                k, v = k.repeat_interleave(self.group, dim=1), v.repeat_interleave(self.group, dim=1)
            attention = self.hook_pattern(attention_pattern(q, k, mask, self.scale))
            values = torch.matmul(attention, v)
        else:
            gqa = {"enable_gqa": True} if self.group > 1 else {}
            if implicit_causal:
                values = F.scaled_dot_product_attention(q, k, v, is_causal=seq_len > 1, scale=scale, **gqa)
            elif mask is None:
                values = F.scaled_dot_product_attention(q, k, v, scale=scale, **gqa)
            else:
                masked = expand_mask(mask).bool()
                values = F.scaled_dot_product_attention(q, k, v, attn_mask=masked, scale=scale, **gqa)

        z = self.hook_z(values.transpose(1, 2))  # [B, T, H, d_head]
        if self.per_head and self.hook_result.is_hooked:  # each head's share of the output, then the sum
            weight = self.o_proj.weight.view(-1, self.num_heads, self.head_dim)
            result = self.hook_result(torch.einsum("bthe,dhe->bthd", z, weight))
            out = result.sum(dim=2)
            out = out if self.o_proj.bias is None else out + self.o_proj.bias
        else:
            out = self.o_proj(z.reshape(batch, seq_len, self.embed_dim))
        return (out, attention) if return_attention else out
