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

The weights, with D = model_dim, H heads of d = D / H, F = the MLP's width, V tokens (PyTorch's Linear
stores W [out, in] and computes x W^T; TransformerLens stores the matrix x is multiplied by, per head):

    embed.W_E [V, D]                  = embed.weight
    pos_embed.W_pos [max_len, D]      = the positions' table: learned, the sinusoids PE, or zeros (none)
    blocks.i.ln1.w, .b                = blocks.i.norm1.weight, .bias (zeros without biases)
    blocks.i.attn.W_Q [H, D, d]       = qkv_proj.weight[0:D] [H*d, D] viewed [H, d, D], transposed (1, 2)
    blocks.i.attn.W_K, W_V            = rows D:2D and 2D:3D alike;  b_Q, b_K, b_V [H, d]: qkv_proj.bias
    blocks.i.attn.W_O [H, d, D]       = o_proj.weight [D, H*d] viewed [D, H, d], permuted (1, 2, 0)
    blocks.i.attn.b_O [D]             = o_proj.bias
    blocks.i.ln2.w, .b                = blocks.i.norm2 (only with an MLP; attn_only otherwise)
    blocks.i.mlp.W_in [D, F], b_in    = fc_in.weight^T, fc_in.bias;  W_out [F, D], b_out = fc_out's
    ln_final.w, .b                    = ln_final.norm
    unembed.W_U [D, V], b_U [V]       = unembed.weight^T (embed.weight^T when tied), unembed.bias
    blocks.i.attn.mask, .IGNORE       the causal mask [max_len, max_len] and -inf, which HookedTransformer
                                      keeps as buffers (its load_state_dict asks for them)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from transformer_lab.errors import require
from transformer_lab.interop import require_gpt_style, require_package
from transformer_lab.nn import DecoderLM, ModelConfig

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


def tl_config(config: ModelConfig) -> dict:
    """HookedTransformerConfig's arguments for the model (plain values: config.json)."""
    return {
        "model_name": "transformer-lab",
        "d_model": config.model_dim,
        "d_head": config.model_dim // config.num_heads,
        "n_heads": config.num_heads,
        "n_layers": config.num_layers,
        "n_ctx": config.max_len,
        "d_vocab": config.vocab_size,
        "d_vocab_out": config.vocab_size,
        "d_mlp": config.feedforward_dim,
        "act_fn": config.activation,
        "attn_only": not config.mlp,
        "normalization_type": "LN",
        "eps": 1e-5,  # nn.LayerNorm's
        "positional_embedding_type": "standard",
        "default_prepend_bos": False,  # token ids go in as they are
    }


def positions_table(model: DecoderLM) -> Tensor:
    """P [max_len, D]: what the model adds at each position (learned, sinusoidal, or zeros for none)."""
    dim, length = model.config.model_dim, model.config.max_len
    kind = model.config.positional_encoding
    if kind == "learned":
        return model.pos_embed.embedding.weight.detach()
    if kind == "sinusoidal":
        return model.pos_embed.pe[0, :length].detach()
    return torch.zeros(length, dim)


def _or_zeros(bias: Tensor | None, size: int) -> Tensor:
    return torch.zeros(size) if bias is None else bias.detach()


def state_dict(model: DecoderLM) -> dict[str, Tensor]:
    """The model's weights under HookedTransformer's names and shapes (the module docstring's table)."""
    config = model.config
    dim, heads = config.model_dim, config.num_heads
    d_head, ctx = dim // heads, config.max_len
    out = {"embed.W_E": model.embed.weight.detach(), "pos_embed.W_pos": positions_table(model)}
    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}."
        attn = block.attn
        out[p + "ln1.w"], out[p + "ln1.b"] = block.norm1.weight.detach(), _or_zeros(block.norm1.bias, dim)
        weight = attn.qkv_proj.weight.detach().view(3, heads, d_head, dim)  # [q|k|v], heads, d, D
        bias = _or_zeros(attn.qkv_proj.bias, 3 * dim).view(3, heads, d_head)
        for j, name in enumerate("QKV"):
            out[p + f"attn.W_{name}"] = weight[j].transpose(1, 2)  # [H, D, d]
            out[p + f"attn.b_{name}"] = bias[j]
        out[p + "attn.W_O"] = attn.o_proj.weight.detach().view(dim, heads, d_head).permute(1, 2, 0)
        out[p + "attn.b_O"] = _or_zeros(attn.o_proj.bias, dim)
        out[p + "attn.mask"] = torch.tril(torch.ones(ctx, ctx, dtype=torch.bool))
        out[p + "attn.IGNORE"] = torch.tensor(float("-inf"))
        if hasattr(block, "mlp"):
            width = config.feedforward_dim
            out[p + "ln2.w"], out[p + "ln2.b"] = block.norm2.weight.detach(), _or_zeros(block.norm2.bias, dim)
            out[p + "mlp.W_in"] = block.mlp.fc_in.weight.detach().T
            out[p + "mlp.b_in"] = _or_zeros(block.mlp.fc_in.bias, width)
            out[p + "mlp.W_out"] = block.mlp.fc_out.weight.detach().T
            out[p + "mlp.b_out"] = _or_zeros(block.mlp.fc_out.bias, dim)
    norm = model.ln_final.norm
    out["ln_final.w"], out["ln_final.b"] = norm.weight.detach(), _or_zeros(norm.bias, dim)
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
