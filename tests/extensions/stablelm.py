"""A transformers family written outside the package: one module, one registration (docs/development.md).
StableLM (`StableLmForCausalLM`): LayerNorm with biases, rotary positions on a quarter of each head,
grouped-query attention and a SwiGLU MLP, the blocks of this project in one more combination. Importing
this module is all it takes for `hf:<folder>` to open such a folder and `to=huggingface` to write one."""

from transformer_lab.interop.families import (
    Family,
    Weight,
    choice,
    common_lacks,
    flag,
    number,
    refuse_present,
    register,
    rope,
    sizes,
    special_ids,
    special_tokens,
)

SIZES = {
    "hidden_size": ("model_dim", True),
    "num_attention_heads": ("num_heads", True),
    "num_key_value_heads": ("num_kv_heads", False),
    "num_hidden_layers": ("num_layers", True),
    "intermediate_size": ("dim_feedforward", True),
    "max_position_embeddings": ("max_len", True),
    "vocab_size": ("vocab_size", True),
}


def model_config(hf: dict, where: str) -> dict:
    refuse_present(hf, where, {"qk_layernorm": "norms of the queries and keys", "use_parallel_residual": "a "
                               "parallel residual with one norm"})  # fmt: skip
    shape = sizes(hf, where, SIZES)
    return {
        "arch": "decoder", **shape, **rope(hf, where, None, 0.25), "positional_encoding": "rotary",
        "norm_first": True, "norm": "layer", "norm_eps": number(hf, where, "layer_norm_eps", 1e-5, high=1.0),
        "activation": choice(hf, where, "hidden_act", "silu", {"silu": "swiglu"}),
        "bias": False, "norm_bias": True, "qkv_bias": flag(hf, where, "use_qkv_bias", False),
        "tie_embeddings": flag(hf, where, "tie_word_embeddings", False), "output_mlp": False,
        **special_tokens(hf, shape["vocab_size"]),
    }  # fmt: skip


def lacks(config) -> list[tuple[bool, str]]:
    return [
        *common_lacks(config, "shape", "rms", "parallel", "window", "attention_only", "unscaled"),
        *common_lacks(config, "unembed_bias"),
        (config.positional_encoding != "rotary", "positions but rotary ones"),
        (config.activation != "swiglu", f"{config.activation} MLP (it has SwiGLU)"),
        (config.has_bias("out") or config.has_bias("mlp") or not config.has_bias("norm"), "these biases"),
    ]


def hf_config(config) -> dict:
    return {
        "model_type": "stablelm", "architectures": ["StableLmForCausalLM"], "vocab_size": config.vocab_size,
        "hidden_size": config.model_dim, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "intermediate_size": config.dim_feedforward, "hidden_act": "silu",
        "max_position_embeddings": config.max_len, "layer_norm_eps": config.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rotary_base,
                            "partial_rotary_factor": config.rotary_fraction},
        "use_qkv_bias": config.has_bias("qkv"), "tie_word_embeddings": config.tie_embeddings,
        **special_ids(config),
    }  # fmt: skip


def weights(config) -> list[Weight]:
    q, kv = config.model_dim, config.num_kv_heads * config.head_dim
    rows = {"q_proj": (0, q), "k_proj": (q, q + kv), "v_proj": (q + kv, q + 2 * kv)}
    out = [Weight("model.embed_tokens.weight", "embed.weight")]
    for i in range(config.num_layers):
        theirs, ours = f"model.layers.{i}.", f"blocks.{i}."
        for name, mine in (("input_layernorm", "norm1"), ("post_attention_layernorm", "norm2")):
            out += [Weight(f"{theirs}{name}.{p}", f"{ours}{mine}.{p}") for p in ("weight", "bias")]
        for name, part in rows.items():
            out.append(Weight(f"{theirs}self_attn.{name}.weight", f"{ours}attn.qkv_proj.weight", part))
            if config.has_bias("qkv"):
                out.append(Weight(f"{theirs}self_attn.{name}.bias", f"{ours}attn.qkv_proj.bias", part))
        out.append(Weight(f"{theirs}self_attn.o_proj.weight", f"{ours}attn.o_proj.weight"))
        for name, mine in (("gate_proj", "fc_gate"), ("up_proj", "fc_in"), ("down_proj", "fc_out")):
            out.append(Weight(f"{theirs}mlp.{name}.weight", f"{ours}mlp.{mine}.weight"))
    out += [Weight(f"model.norm.{p}", f"ln_final.norm.{p}") for p in ("weight", "bias")]
    return out


FAMILY = register(
    Family(
        name="stablelm", title="StableLM", architectures=("StableLmForCausalLM",), model_types=("stablelm",),
        model_config=model_config, lacks=lacks, hf_config=hf_config, weights=weights, prefix="model.",
        config_keys={field: key for key, (field, _) in SIZES.items()},
    )
)  # fmt: skip
