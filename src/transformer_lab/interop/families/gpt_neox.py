"""GPT-NeoX (`GPTNeoXForCausalLM`: Pythia): its config and its weights, both ways.

config.json                          this project's ModelConfig
hidden_size, num_attention_heads     model_dim, num_heads
num_hidden_layers, intermediate_size num_layers, dim_feedforward
max_position_embeddings, vocab_size  max_len, vocab_size
rope_parameters.partial_rotary_factor (rotary_pct)   rotary_fraction (Pythia: 0.25)
rope_parameters.rope_theta (rotary_emb_base)        rotary_base; positional_encoding=rotary
use_parallel_residual                parallel_residual (Pythia: true)
hidden_act                           activation (gelu; gelu_new)
layer_norm_eps                       norm_eps; LayerNorm, pre-norm
attention_bias                       qkv_bias and out_bias; the MLP and the norms have biases, the
                                     output layer (embed_out, lm_head) none
tie_word_embeddings                  tie_embeddings (Pythia: false)

gpt_neox.embed_in                    embed
gpt_neox.layers.i.input_layernorm    blocks.i.norm1;  post_attention_layernorm: blocks.i.norm2
gpt_neox.layers.i.attention.query_key_value [3D, D]
                                     blocks.i.attn.qkv_proj, its rows regrouped: GPT-NeoX lays them
                                     out per head, [q_h | k_h | v_h] for h = 0 .. H-1, this project
                                     [q (every head) | k | v]
gpt_neox.layers.i.attention.dense    blocks.i.attn.o_proj
gpt_neox.layers.i.mlp.dense_h_to_4h, dense_4h_to_h   blocks.i.mlp.fc_in, fc_out
gpt_neox.final_layer_norm            ln_final.norm
lm_head (older files: embed_out)     unembed
"""

from __future__ import annotations

from transformer_lab.interop.families import (
    Family,
    Weight,
    choice,
    common_lacks,
    flag,
    number,
    register,
    rope,
    sizes,
    special_ids,
    special_tokens,
)
from transformer_lab.nn import ModelConfig

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "relu": "relu"}
ROTARY_KEY = "partial_rotary_factor"  # the share of each head rotary positions rotate
SIZES = {
    "hidden_size": ("model_dim", True),
    "num_attention_heads": ("num_heads", True),
    "num_hidden_layers": ("num_layers", True),
    "intermediate_size": ("dim_feedforward", True),
    "max_position_embeddings": ("max_len", True),
    "vocab_size": ("vocab_size", True),
}


def model_config(hf: dict, where: str) -> dict:
    """This project's ModelConfig settings of a GPT-NeoX config.json (the module docstring's table)."""
    shape = sizes(hf, where, SIZES)
    rotary = rope(hf, where, "rotary_pct", 0.25)
    attention_bias = flag(hf, where, "attention_bias", True)
    return {
        "arch": "decoder",
        **shape,
        **rotary,
        "positional_encoding": "rotary",
        "norm_first": True,
        "norm": "layer",
        "norm_eps": number(hf, where, "layer_norm_eps", 1e-5, high=1.0),
        "activation": choice(hf, where, "hidden_act", "gelu", ACTIVATIONS),
        "parallel_residual": flag(hf, where, "use_parallel_residual", True),
        "bias": True,
        "qkv_bias": attention_bias,
        "out_bias": attention_bias,
        "unembed_bias": False,
        "tie_embeddings": flag(hf, where, "tie_word_embeddings", False),
        "output_mlp": False,
        **special_tokens(hf, shape["vocab_size"]),
    }


def lacks(config: ModelConfig) -> list[tuple[bool, str]]:
    """What GPT-NeoX's block cannot hold."""
    rotary = (config.positional_encoding != "rotary", f"{config.positional_encoding} positions (it rotates)")
    biases = (config.has_bias("qkv") != config.has_bias("out"), "separate Q, K, V and output biases")
    names = ("shape", "rms", "gated", "grouped", "window", "attention_only", "unscaled", "bare_mlp_or_norm")
    return [rotary, *common_lacks(config, *names, "unembed_bias"), biases]


def hf_config(config: ModelConfig) -> dict:
    """GPTNeoXConfig's arguments for a model of `config` (dropout 0)."""
    return {
        "model_type": "gpt_neox",
        "architectures": list(FAMILY.architectures),
        "vocab_size": config.vocab_size,
        "hidden_size": config.model_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.dim_feedforward,
        "hidden_act": config.activation,
        "max_position_embeddings": config.max_len,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": config.rotary_base,
            "partial_rotary_factor": config.rotary_fraction,
        },
        "layer_norm_eps": config.norm_eps,
        "use_parallel_residual": config.parallel_residual,
        "attention_bias": config.has_bias("qkv"),
        "tie_word_embeddings": config.tie_embeddings,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        **special_ids(config),
    }


def qkv_rows(config: ModelConfig) -> list[int]:
    """Row r of GPT-NeoX's query_key_value (head h, part j of q/k/v, dimension e: r = (3 h + j) d + e)
    is row j D + h d + e of this project's qkv_proj."""
    d, dim = config.head_dim, config.model_dim
    return [j * dim + h * d + e for h in range(config.num_heads) for j in range(3) for e in range(d)]


def weights(config: ModelConfig) -> list[Weight]:
    """Every tensor of GPTNeoXForCausalLM but the output layer (`Family.mapping`) and its place in this
    project's state_dict."""
    out = [Weight("gpt_neox.embed_in.weight", "embed.weight")]
    rows = qkv_rows(config)
    for i in range(config.num_layers):
        theirs, ours = f"gpt_neox.layers.{i}.", f"blocks.{i}."
        for name, mine in (("input_layernorm", "norm1"), ("post_attention_layernorm", "norm2")):
            out += [Weight(f"{theirs}{name}.{p}", f"{ours}{mine}.{p}") for p in ("weight", "bias")]
        out.append(Weight(f"{theirs}attention.query_key_value.weight", f"{ours}attn.qkv_proj.weight", rows))
        out.append(Weight(f"{theirs}attention.dense.weight", f"{ours}attn.o_proj.weight"))
        if config.has_bias("qkv"):
            out.append(Weight(f"{theirs}attention.query_key_value.bias", f"{ours}attn.qkv_proj.bias", rows))
            out.append(Weight(f"{theirs}attention.dense.bias", f"{ours}attn.o_proj.bias"))
        for name, mine in (("dense_h_to_4h", "fc_in"), ("dense_4h_to_h", "fc_out")):
            out += [Weight(f"{theirs}mlp.{name}.{p}", f"{ours}mlp.{mine}.{p}") for p in ("weight", "bias")]
    out += [Weight(f"gpt_neox.final_layer_norm.{p}", f"ln_final.norm.{p}") for p in ("weight", "bias")]
    return out


FAMILY = register(
    Family(
        name="gpt_neox",
        title="GPT-NeoX",
        architectures=("GPTNeoXForCausalLM",),
        model_types=("gpt_neox",),
        model_config=model_config,
        lacks=lacks,
        hf_config=hf_config,
        weights=weights,
        config_keys={field: key for key, (field, _) in SIZES.items()}
        | {"rotary_fraction": "partial_rotary_factor"},
        prefix="gpt_neox.",  # a headless base model's file has its names without it
        aliases={"embed_out.weight": "lm_head.weight"},  # Pythia's files name the output layer embed_out
        ignored=(
            ".attention.bias",
            ".attention.masked_bias",
            ".attention.rotary_emb.inv_freq",
        ),  # old buffers
    )
)
