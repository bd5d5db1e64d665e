"""to=transformer_lens: a pre-norm decoder as TransformerLens's config and HookedTransformer's weights.

    out/config.json        HookedTransformerConfig's arguments (TransformerBridgeConfig takes the same)
    out/model.safetensors  the weights under HookedTransformer's names and shapes
    out/vocab.json         the token strings, by id

TransformerLens 2 and 3 load them with `HookedTransformer(HookedTransformerConfig(**config))` and
`load_state_dict`; TransformerLens 4, which removed HookedTransformer, with its native bridge on the same
weights converted (`convert_tl_checkpoint`): `SNIPPET` does either. The hook points of this project carry
TransformerLens's names, and every activation both models name equals this model's, but one: TransformerLens
reads `ln_final.hook_normalized` before the LayerNorm's weight and bias, this project after (the stream
the unembedding reads).

The weights, with D = model_dim, H heads of d = D / H, KV key-value heads, F = the MLP's width, V tokens
(PyTorch's Linear stores W [out, in] and computes x W^T; TransformerLens stores the matrix x is
multiplied by, per head):

    embed.W_E [V, D]                  = embed.weight
    pos_embed.W_pos [max_len, D]      = the positions' table: learned, the sinusoids PE, or zeros (none);
                                        none with rotary positions (positional_embedding_type "rotary",
                                        rotary_dim, rotary_base: TransformerLens rotates q and k itself;
                                        see `adjacent_pairs` for the order of their dimensions)
    blocks.i.ln1.w, .b                = blocks.i.norm1.weight, .bias (zeros without biases; RMSNorm: w
                                        only, normalization_type "RMS")
    blocks.i.attn.W_Q [H, D, d]       = qkv_proj.weight[0:D] [H*d, D] viewed [H, d, D], transposed (1, 2)
    blocks.i.attn.W_K, W_V            = the next rows alike;  b_Q, b_K, b_V [H, d]: qkv_proj.bias; with
                                        grouped-query attention _W_K, _W_V [KV, D, d] and _b_K, _b_V
                                        (n_key_value_heads)
    blocks.i.attn.W_O [H, d, D]       = o_proj.weight [D, H*d] viewed [D, H, d], permuted (1, 2, 0)
    blocks.i.attn.b_O [D]             = o_proj.bias
    blocks.i.ln2.w, .b                = blocks.i.norm2 (only with an MLP; attn_only otherwise)
    blocks.i.mlp.W_in [D, F], b_in    = fc_in.weight^T, fc_in.bias;  W_out [F, D], b_out = fc_out's;
                                        a gated MLP (gated_mlp, act_fn silu or gelu) also W_gate = fc_gate^T
    ln_final.w, .b                    = ln_final.norm
    unembed.W_U [D, V], b_U [V]       = unembed.weight^T (embed.weight^T when tied), unembed.bias
    blocks.i.attn.mask, .IGNORE       the causal mask [max_len, max_len] and -inf, which HookedTransformer
                                      keeps as buffers (its load_state_dict asks for them)

TransformerLens 4's native model (what the snippet loads where HookedTransformer is gone) has no parallel
attention and MLP, no local attention windows and no biases in a gated MLP: such models are refused in
one line, with the export that holds them (to=huggingface, opened by TransformerBridge.boot_transformers).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from transformer_lab.errors import require
from transformer_lab.interop import require_gpt_style, require_package
from transformer_lab.nn import DecoderLM, ModelConfig
from transformer_lab.nn.config import GATED

GATED_ACT = {
    "swiglu": "silu",
    "geglu": "gelu",
}  # a gated MLP's activation of its gate, by TransformerLens's name

SNIPPET = """\
import json
from safetensors.torch import load_file
config = json.load(open("{out}/config.json"))
weights = load_file("{out}/model.safetensors")
try:  # TransformerLens 2 and 3
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    model = HookedTransformer(HookedTransformerConfig(**config))
    model.load_state_dict(weights)
except ImportError:  # TransformerLens 4: the native bridge, on the same weights converted
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge.sources.native import boot
    from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint
    config = TransformerBridgeConfig(**config)
    model = boot(config)
    model.load_state_dict(convert_tl_checkpoint(weights, config))
logits, cache = model.run_with_cache(tokens)  # tokens: token ids [batch, positions]"""


def check(config: ModelConfig) -> None:
    """A one-line refusal for a model TransformerLens's decoder cannot express."""
    require_gpt_style(config, "transformer_lens")
    require(
        config.scale_attention,
        "to=transformer_lens needs attention scaled by 1/sqrt(d_head) (TransformerLens 4's models always "
        "scale it), and this model has model.scale_attention=false; to=huggingface or to=onnx export it",
    )
    fix = "to=huggingface (then TransformerBridge.boot_transformers) or to=onnx export it"
    for lacks, what in (
        (config.parallel_residual, "parallel attention and MLP (model.parallel_residual=true)"),
        (config.attention_window is not None, "local attention windows (model.attention_window)"),
        (config.activation in GATED and config.has_bias("mlp"), "biases in a gated MLP (model.mlp_bias)"),
    ):
        require(not lacks, f"to=transformer_lens: TransformerLens 4's native model has no {what}; {fix}")


def tl_config(config: ModelConfig) -> dict:
    """HookedTransformerConfig's arguments for the model (plain values: config.json)."""
    rotary = {"positional_embedding_type": "standard"}
    if config.positional_encoding == "rotary":
        rotary = {
            "positional_embedding_type": "rotary",
            "rotary_dim": config.rotary_dim,
            "rotary_base": config.rotary_base,
            "rotary_adjacent_pairs": True,  # the weights' order (`adjacent_pairs`)
        }
    return {
        "model_name": "transformer-lab",
        "d_model": config.model_dim,
        "d_head": config.model_dim // config.num_heads,
        "n_heads": config.num_heads,
        "n_layers": config.num_layers,
        "n_ctx": config.max_len,
        "d_vocab": config.vocab_size,
        "d_vocab_out": config.vocab_size,
        "d_mlp": config.dim_feedforward,
        "act_fn": GATED_ACT.get(config.activation, config.activation),
        "gated_mlp": config.activation in GATED,
        "attn_only": not config.mlp,
        "normalization_type": "RMS" if config.norm == "rms" else "LN",
        "eps": config.norm_eps,
        "n_key_value_heads": config.num_kv_heads if config.num_kv_heads < config.num_heads else None,
        **rotary,
        "default_prepend_bos": False,  # token ids go in as they are
    }


def adjacent_pairs(config: ModelConfig) -> Tensor:
    """The order of a head's dimensions in TransformerLens's rotary heads (`rotary_adjacent_pairs`, the
    only kind TransformerLens 4's native model has): it turns dimensions (2i, 2i + 1) together, this
    project (as GPT-NeoX and transformers' Llama) dimensions (i, i + rotary_dim / 2). Dimension j of a
    TransformerLens head is dimension order[j] of this project's; the rest of the head stays. Queries and
    keys permuted alike keep every score, so only hook_q, hook_k and the rotated ones read in this order."""
    half, d_head = config.rotary_dim // 2, config.head_dim
    paired = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
    return torch.cat([paired, torch.arange(2 * half, d_head)])


def _or_zeros(bias: Tensor | None, size: int) -> Tensor:
    return torch.zeros(size) if bias is None else bias.detach()


def state_dict(model: DecoderLM) -> dict[str, Tensor]:
    """The model's weights under HookedTransformer's names and shapes (the module docstring's table)."""
    config = model.config
    dim, heads, kv = config.model_dim, config.num_heads, config.num_kv_heads
    d_head, ctx = dim // heads, config.max_len
    grouped = "_" if kv < heads else ""  # HookedTransformer keeps grouped K and V as _W_K, _W_V
    order = adjacent_pairs(config) if config.positional_encoding == "rotary" else None
    out = {"embed.W_E": model.embed.weight.detach()}
    if config.positional_encoding != "rotary":
        out["pos_embed.W_pos"] = model.pos_embed.encoding(config.max_len)[0].detach()  # learned, sinusoids, 0

    def norm(name: str, module: torch.nn.Module) -> None:
        out[f"{name}.w"] = module.weight.detach()
        if config.norm != "rms":  # RMSNorm has a weight only
            out[f"{name}.b"] = _or_zeros(module.bias, dim)

    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}."
        attn = block.attn
        norm(p + "ln1", block.norm1)
        sizes = [heads * d_head, kv * d_head, kv * d_head]
        weights = attn.qkv_proj.weight.detach().split(sizes)
        biases = _or_zeros(attn.qkv_proj.bias, sum(sizes)).split(sizes)
        for name, weight, bias, n in zip("QKV", weights, biases, (heads, kv, kv), strict=True):
            under = grouped if name != "Q" else ""
            weight, bias = weight.view(n, d_head, dim), bias.view(n, d_head)
            if config.positional_encoding == "rotary" and name != "V":
                weight, bias = weight[:, order], bias[:, order]
            out[p + f"attn.{under}W_{name}"] = weight.transpose(1, 2)  # [n, D, d]
            out[p + f"attn.{under}b_{name}"] = bias
        out[p + "attn.W_O"] = attn.o_proj.weight.detach().view(dim, heads, d_head).permute(1, 2, 0)
        out[p + "attn.b_O"] = _or_zeros(attn.o_proj.bias, dim)
        out[p + "attn.mask"] = torch.tril(torch.ones(ctx, ctx, dtype=torch.bool))
        out[p + "attn.IGNORE"] = torch.tensor(float("-inf"))
        if block.mlp is not None:
            width, mlp = config.dim_feedforward, block.mlp
            norm(p + "ln2", block.norm2)
            if hasattr(mlp, "fc_gate"):
                out[p + "mlp.W_gate"] = mlp.fc_gate.weight.detach().T
            out[p + "mlp.W_in"] = mlp.fc_in.weight.detach().T
            out[p + "mlp.W_out"] = mlp.fc_out.weight.detach().T
            if not hasattr(mlp, "fc_gate"):  # TransformerLens 4's gated MLP has no biases (checked)
                out[p + "mlp.b_in"] = _or_zeros(mlp.fc_in.bias, width)
                out[p + "mlp.b_out"] = _or_zeros(mlp.fc_out.bias, dim)
    norm("ln_final", model.ln_final.norm)
    out["unembed.W_U"] = model.unembed.weight.detach().T
    out["unembed.b_U"] = _or_zeros(model.unembed.bias, config.vocab_size)
    # one contiguous float32 copy each (safetensors stores no views, and tied weights would share one)
    return {
        k: v.to("cpu", torch.float32 if v.is_floating_point() else v.dtype).contiguous().clone()
        for k, v in out.items()
    }


def export(model: DecoderLM, out: Path) -> list[str]:
    """Write config.json, model.safetensors and vocab.json to `out`; the lines to print (the files and the
    snippet that loads them)."""
    check(model.config)
    safetensors_torch = require_package("safetensors.torch", "to=transformer_lens")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(tl_config(model.config), indent=1) + "\n")
    safetensors_torch.save_file(state_dict(model), str(out / "model.safetensors"))
    (out / "vocab.json").write_text(json.dumps(model.vocab, ensure_ascii=False) + "\n")
    return [
        f"Wrote {out}/config.json, model.safetensors and vocab.json (TransformerLens's names); load them:",
        SNIPPET.format(out=out),
    ]
