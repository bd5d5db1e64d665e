"""GPT-2 (`GPT2LMHeadModel`): its config and its weights, both ways.

GPT-2's block is this project's pre-norm block (x + Attn(LN_1(x)), then x + MLP(LN_2(x))), its attention
the same fused [q | k | v] projection, so the weights go over one for one. GPT-2's Conv1D stores the
matrix x is multiplied by, [in, out], where nn.Linear stores [out, in]: every projection is transposed.

    config.json                          this project's ModelConfig
    n_embd, n_head, n_layer              model_dim, num_heads, num_layers
    n_positions, vocab_size              max_len, vocab_size; learned positions
    n_inner (null: 4 n_embd)             dim_feedforward
    activation_function                  activation (gelu_new, gelu_pytorch_tanh: gelu_new; gelu; relu)
    layer_norm_epsilon                   norm_eps; LayerNorm, pre-norm
    scale_attn_weights                   scale_attention
    tie_word_embeddings                  tie_embeddings; biases everywhere but the output layer

    transformer.wte.weight [V, D]        embed.weight
    transformer.wpe.weight [max_len, D]  pos_embed.embedding.weight (written from any positions' table:
                                         the sinusoids PE(pos), or zeros for none, as GPT-2 adds wpe[pos])
    transformer.h.i.ln_1, ln_2           blocks.i.norm1, norm2 (zero biases for a model without them)
    transformer.h.i.attn.c_attn [D, 3D]  qkv_proj.weight^T, qkv_proj.bias
    transformer.h.i.attn.c_proj [D, D]   o_proj.weight^T, o_proj.bias
    transformer.h.i.mlp.c_fc [D, F]      mlp.fc_in.weight^T;  mlp.c_proj [F, D] = mlp.fc_out.weight^T (an
                                         attention-only block exports an MLP of width 1 with zero weights,
                                         which adds exactly 0)
    transformer.ln_f                     ln_final.norm
    lm_head.weight [V, D]                unembed.weight (tied: wte itself, tie_word_embeddings)

GPT-2's output layer has no bias. Exporting a model whose output layer has one, its bias b folds into
ln_f's: the logits are W (g * n + beta) + b = W (g * n + beta + delta) with W delta = b, which has an
exact solution delta (least squares, checked) when b lies in the span of W's columns, as it does
whenever W [V, D] has rank V (V <= D, e.g. a character vocabulary). Otherwise the export is refused in
one line. Settings GPT-2 has and this project's decoder does not (scale_attn_by_inverse_layer_idx,
cross-attention) are refused by name on import.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_lab.errors import ConfigError, require
from transformer_lab.interop.families import (
    Family,
    Weight,
    choice,
    common_lacks,
    flag,
    number,
    register,
    setting,
    sizes,
    special_ids,
    special_tokens,
)
from transformer_lab.nn import DecoderLM, ModelConfig

ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
SIZES = {  # config.json key -> (ModelConfig field, required)
    "n_embd": ("model_dim", True),
    "n_head": ("num_heads", True),
    "n_layer": ("num_layers", True),
    "n_positions": ("max_len", True),
    "vocab_size": ("vocab_size", True),
    "n_inner": ("dim_feedforward", False),
}


def model_config(hf: dict, where: str) -> dict:
    """This project's ModelConfig settings of a GPT-2 config.json (the module docstring's table)."""
    shape = sizes(hf, where, SIZES)
    shape.setdefault("dim_feedforward", 4 * shape["model_dim"])  # GPT-2's n_inner=None
    for key in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        value = setting(hf, where, key, bool, False)
        require(not value, f"{where}: {key}={value!r}: this project's decoder has no such setting")
    # no pad_id: positions count every token, as GPT-2's do (a pad_id would make them skip padding)
    return {
        "arch": "decoder",
        **shape,
        "scale_attention": flag(hf, where, "scale_attn_weights", True),
        "tie_embeddings": flag(hf, where, "tie_word_embeddings", True),
        **special_tokens(hf, shape["vocab_size"]),
        "activation": choice(hf, where, "activation_function", "gelu_new", ACTIVATIONS),
        "norm_eps": number(hf, where, "layer_norm_epsilon", 1e-5, high=1.0),
        "norm_first": True,
        "bias": True,
        "unembed_bias": False,
        "positional_encoding": "learned",
        "output_mlp": False,
        "mlp": True,
    }


def lacks(config: ModelConfig) -> list[tuple[bool, str]]:
    """What GPT-2's block cannot hold (an output bias is folded, or refused by `state_dict`)."""
    return [
        *common_lacks(config, "shape"),
        (config.positional_encoding == "rotary", "rotary positions (model.positional_encoding=rotary)"),
        (config.norm == "rms", "RMSNorm (model.norm=rms)"),
        *common_lacks(config, "gated", "grouped", "parallel", "window"),
    ]


def hf_config(config: ModelConfig) -> dict:
    """GPT2Config's arguments (dropout 0: the same function in training mode too)."""
    return {
        "model_type": "gpt2",
        "architectures": list(FAMILY.architectures),
        "vocab_size": config.vocab_size,
        "n_positions": config.max_len,
        "n_embd": config.model_dim,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "n_inner": config.dim_feedforward if config.mlp else 1,
        "activation_function": config.activation,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": config.norm_eps,
        "scale_attn_weights": config.scale_attention,
        "tie_word_embeddings": config.tie_embeddings,
        **special_ids(config),
    }


def weights(config: ModelConfig) -> list[Weight]:
    """Every tensor of GPT2LMHeadModel (as a GPT-2 config.json makes it) but the output layer (added by
    `Family.mapping`) and its place in this project's state_dict."""
    out = [
        Weight("transformer.wte.weight", "embed.weight"),
        Weight("transformer.wpe.weight", "pos_embed.embedding.weight"),
    ]
    block = {"ln_1": "norm1", "ln_2": "norm2", "attn.c_attn": "attn.qkv_proj", "attn.c_proj": "attn.o_proj"}
    block |= {"mlp.c_fc": "mlp.fc_in", "mlp.c_proj": "mlp.fc_out"}
    for i in range(config.num_layers):
        for theirs, ours in block.items():
            conv = theirs.split(".")[-1].startswith("c_")  # Conv1D: [in, out]
            out.append(
                Weight(f"transformer.h.{i}.{theirs}.weight", f"blocks.{i}.{ours}.weight", transposed=conv)
            )
            out.append(Weight(f"transformer.h.{i}.{theirs}.bias", f"blocks.{i}.{ours}.bias"))
    out += [Weight(f"transformer.ln_f.{p}", f"ln_final.norm.{p}") for p in ("weight", "bias")]
    return out


# ------------------------------------------------------------------------------ export: any GPT-style model
def output_bias_fold(weight: Tensor, bias: Tensor) -> Tensor:
    """delta [D] with weight @ delta = bias (weight [V, D]): the shift of ln_f's bias that carries the
    unembedding's bias (see the module docstring); a one-line ConfigError when none exists."""
    w, b = weight.detach().double(), bias.detach().double()
    delta = torch.linalg.lstsq(w, b[:, None], driver="gelsd").solution[:, 0]
    error = float((w @ delta - b).abs().max())
    if error > 1e-6 * (1 + float(b.abs().max())):
        raise ConfigError(
            f"to=huggingface: the output layer's bias (model.bias=true) has no place in GPT-2, whose output "
            f"layer has none, and it cannot be folded into ln_f's bias here ({weight.size(0)} tokens, more "
            f"than the model's width {weight.size(1)}: off by {error:.2g}); to=transformer_lens or to=onnx "
            "export it"
        )
    return delta.float()


def complete(model: DecoderLM) -> dict[str, Tensor]:
    """This project's state_dict completed for GPT-2's mapping (`weights`; the module docstring's table):
    the positions as a table (learned, the sinusoids, or zeros), zero biases where the model has none, an
    attention-only block's zero MLP (act(0 x + 0) = 0 through zero weights: it adds exactly 0), the
    output bias folded into ln_f's."""
    config = model.config
    dim, width = config.model_dim, config.dim_feedforward
    state = {k: v.detach() for k, v in model.state_dict().items()}
    state["pos_embed.embedding.weight"] = model.pos_embed.encoding(config.max_len)[0].detach()
    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}."
        if block.mlp is None:
            state[p + "norm2.weight"], state[p + "norm2.bias"] = torch.ones(dim), torch.zeros(dim)
            state[p + "mlp.fc_in.weight"], state[p + "mlp.fc_in.bias"] = torch.zeros(1, dim), torch.zeros(1)
            state[p + "mlp.fc_out.weight"] = torch.zeros(dim, 1)
        sizes = {"norm1": dim, "attn.qkv_proj": 3 * dim, "attn.o_proj": dim, "norm2": dim}
        sizes |= {"mlp.fc_in": width if block.mlp is not None else 1, "mlp.fc_out": dim}
        for name, size in sizes.items():
            state.setdefault(f"{p}{name}.bias", torch.zeros(size))
    state.setdefault("ln_final.norm.bias", torch.zeros(dim))
    head = model.unembed
    if head.bias is not None and bool(head.bias.any()):
        state["ln_final.norm.bias"] = state["ln_final.norm.bias"] + output_bias_fold(head.weight, head.bias)
    return state


FAMILY = register(
    Family(
        name="gpt2",
        title="GPT-2",
        architectures=("GPT2LMHeadModel",),
        model_types=("gpt2",),
        model_config=model_config,
        lacks=lacks,
        hf_config=hf_config,
        weights=weights,
        config_keys={field: key for key, (field, _) in SIZES.items()},
        prefix="transformer.",  # a GPT2Model's file (no output layer) has its names without it
        ignored=(".attn.bias", ".attn.masked_bias"),  # GPT-2's causal-mask buffers, in older files
        complete=complete,
    )
)
