"""Llama (`LlamaForCausalLM`: SmolLM, TinyLlama) and the Llama-shaped `Qwen2ForCausalLM` and
`MistralForCausalLM`: their config and their weights, both ways.

    config.json                          this project's ModelConfig
    hidden_size, num_attention_heads     model_dim, num_heads (head_dim, where given, must be their ratio)
    num_key_value_heads                  num_kv_heads (grouped-query attention)
    num_hidden_layers, intermediate_size num_layers, dim_feedforward (the gate's and up projection's width)
    max_position_embeddings, vocab_size  max_len, vocab_size
    rope_parameters.rope_theta           rotary_base; positional_encoding=rotary on whole heads
    hidden_act                           activation: silu -> swiglu, gelu -> geglu
    rms_norm_eps                         norm_eps; norm=rms, pre-norm
    attention_bias (Llama)               qkv_bias and out_bias (Qwen2: q, k, v biases, none on o_proj;
                                         Mistral: none)
    mlp_bias (Llama)                     mlp_bias; no other biases, none in the output layer
    tie_word_embeddings                  tie_embeddings (SmolLM: true, TinyLlama: false)
    sliding_window (Mistral; Qwen2 with use_sliding_window, on its layer_types' sliding_attention
    layers)                              attention_window and window_layers, where the window is shorter
                                         than max_position_embeddings (a longer one hides nothing)

    model.embed_tokens                   embed
    model.layers.i.input_layernorm       blocks.i.norm1;  post_attention_layernorm: blocks.i.norm2
    model.layers.i.self_attn.q_proj, k_proj, v_proj
                                         blocks.i.attn.qkv_proj: rows [0, H d), [H d, (H + KV) d),
                                         [(H + KV) d, (H + 2 KV) d)
    model.layers.i.self_attn.o_proj      blocks.i.attn.o_proj
    model.layers.i.mlp.gate_proj, up_proj, down_proj   blocks.i.mlp.fc_gate, fc_in, fc_out
    model.norm                           ln_final.norm
    lm_head                              unembed (tied: embed's)

Rope scaling other than the default kind, mixture-of-experts layers and a head_dim other than
hidden_size / num_attention_heads are refused by name.
"""

from __future__ import annotations

from transformer_lab.errors import ConfigError, require
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
from transformer_lab.nn import ModelConfig

ACTIVATIONS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu"}
ROTARY_KEY = "partial_rotary_factor"  # the share of each head rotary positions rotate
SIZES = {
    "hidden_size": ("model_dim", True),
    "num_attention_heads": ("num_heads", True),
    "num_key_value_heads": ("num_kv_heads", False),
    "num_hidden_layers": ("num_layers", True),
    "intermediate_size": ("dim_feedforward", True),
    "max_position_embeddings": ("max_len", True),
    "vocab_size": ("vocab_size", True),
}
MIXTURES = {  # mixture-of-experts settings (Mixtral, Qwen2-MoE): refused by name
    "num_local_experts": "a mixture of experts",
    "num_experts": "a mixture of experts",
    "num_experts_per_tok": "a mixture of experts",
    "moe_intermediate_size": "a mixture of experts",
}


def _kind(hf: dict) -> str:
    """llama, qwen2 or mistral: by the architecture named, else the model_type."""
    for name, kind in zip(FAMILY.architectures, FAMILY.model_types, strict=True):
        if name in (hf.get("architectures") or []):
            return kind
    return hf.get("model_type") if hf.get("model_type") in FAMILY.model_types else "llama"


def model_config(hf: dict, where: str) -> dict:
    """This project's ModelConfig settings of a Llama, Qwen2 or Mistral config.json (the module
    docstring's table)."""
    refuse_present(hf, where, MIXTURES)
    shape = sizes(hf, where, SIZES)
    heads = shape["num_heads"]
    head_dim = hf.get("head_dim")
    require(
        head_dim is None or (isinstance(head_dim, int) and head_dim * heads == shape["model_dim"]),
        f"{where}: head_dim={head_dim!r} is not hidden_size / num_attention_heads = "
        f"{shape['model_dim'] / heads:g}: this project's heads split the stream evenly",
    )
    kind = _kind(hf)
    bias = flag(hf, where, "attention_bias", False) if kind == "llama" else False
    window, layers = _window(hf, where, kind, shape)
    return {
        "arch": "decoder",
        **shape,
        **rope(hf, where, None, 1.0),
        "positional_encoding": "rotary",
        "norm_first": True,
        "norm": "rms",
        "norm_eps": number(hf, where, "rms_norm_eps", 1e-6, high=1.0),
        "activation": choice(hf, where, "hidden_act", "silu", ACTIVATIONS),
        "bias": False,
        "qkv_bias": True if kind == "qwen2" else bias,
        "out_bias": bias,
        "mlp_bias": flag(hf, where, "mlp_bias", False) if kind == "llama" else False,
        "tie_embeddings": flag(hf, where, "tie_word_embeddings", False),
        "attention_window": window,
        "window_layers": layers,
        "output_mlp": False,
        **special_tokens(hf, shape["vocab_size"]),
    }


def _window(hf: dict, where: str, kind: str, shape: dict) -> tuple[int | None, list[int] | None]:
    """The sliding window (Mistral: every layer; Qwen2: the `sliding_attention` layers of layer_types,
    where use_sliding_window is true) as attention_window and window_layers; none where it is at least
    the model's length (it then hides nothing)."""
    if kind == "llama":
        refuse_present(hf, where, {"sliding_window": "a sliding attention window (Llama has none)"})
        return None, None
    window = hf.get("sliding_window")
    if kind == "qwen2" and not flag(hf, where, "use_sliding_window", False):
        return None, None
    if window is None:
        return None, None
    require(
        isinstance(window, int) and not isinstance(window, bool) and window > 0,
        f"{where}: sliding_window={window!r} must be a positive integer or null",
    )
    if window >= shape["max_len"]:
        return None, None
    layers = None
    if kind == "qwen2":
        types = hf.get("layer_types")
        require(
            isinstance(types, list) and len(types) == shape["num_layers"],
            f"{where}: layer_types must list each of the {shape['num_layers']} layers' attention",
        )
        unknown = sorted({t for t in types if t not in ("full_attention", "sliding_attention")}, key=str)
        if unknown:
            raise ConfigError(f"{where}: layer_types has {unknown[0]!r}, an attention this project lacks")
        layers = [i for i, t in enumerate(types) if t == "sliding_attention"]
        if not layers:
            return None, None
    return window, layers


def lacks(config: ModelConfig) -> list[tuple[bool, str]]:
    """What the Llama family (Llama, Qwen2, Mistral) cannot hold."""
    qkv, out, mlp = config.has_bias("qkv"), config.has_bias("out"), config.has_bias("mlp")
    qwen2 = qkv and not out and not mlp  # Qwen2: biases on Q, K, V only
    every_layer = config.window_layers is None or len(config.window_layers) == config.num_layers
    mistral = not (qkv or out or mlp) and every_layer  # Mistral: no biases, a window on every layer
    return [
        *common_lacks(config, "shape"),
        (config.positional_encoding != "rotary" or config.rotary_fraction != 1.0, "positions but rotary "
         "ones on whole heads"),
        (config.norm != "rms", "LayerNorm (it has RMSNorm)"),
        (config.activation not in ACTIVATIONS.values(), f"{config.activation} MLP (it gates one)"),
        *common_lacks(config, "parallel", "attention_only", "unscaled", "unembed_bias"),
        (qkv != out and not qwen2, "bias on W^O without biases on Q, K, V"),
        (config.attention_window is not None and not (qwen2 or mistral), "local attention on some layers "
         "only (Mistral's covers every layer; Qwen2's, on any, comes with Q, K, V biases)"),
    ]  # fmt: skip


def hf_config(config: ModelConfig) -> dict:
    """The config of a LlamaForCausalLM; a Qwen2ForCausalLM where the model has q, k, v biases and none
    on W^O; a MistralForCausalLM where it has a sliding window on every layer."""
    qkv, out = config.has_bias("qkv"), config.has_bias("out")
    common = {
        "vocab_size": config.vocab_size,
        "hidden_size": config.model_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "intermediate_size": config.dim_feedforward,
        "hidden_act": {"swiglu": "silu", "geglu": "gelu"}[config.activation],
        "max_position_embeddings": config.max_len,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rotary_base},
        "rms_norm_eps": config.norm_eps,
        "tie_word_embeddings": config.tie_embeddings,
        "attention_dropout": 0.0,
        **special_ids(config),
    }
    if qkv and not out:
        layers = config.window_layers if config.window_layers is not None else range(config.num_layers)
        sliding = config.attention_window is not None
        types = [
            "sliding_attention" if sliding and i in layers else "full_attention"
            for i in range(config.num_layers)
        ]
        return {
            "model_type": "qwen2",
            "architectures": ["Qwen2ForCausalLM"],
            **common,
            "use_sliding_window": sliding,
            "sliding_window": config.attention_window,
            "max_window_layers": config.num_layers,
            "layer_types": types,
        }
    if config.attention_window is not None:
        return {
            "model_type": "mistral",
            "architectures": ["MistralForCausalLM"],
            **common,
            "sliding_window": config.attention_window,
        }
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        **common,
        "attention_bias": qkv,
        "mlp_bias": config.has_bias("mlp"),
    }


def weights(config: ModelConfig) -> list[Weight]:
    """Every tensor of the model but the output layer (`Family.mapping`) and its place in this project's
    state_dict."""
    q, kv = config.model_dim, config.num_kv_heads * config.head_dim
    ranges = {"q_proj": (0, q), "k_proj": (q, q + kv), "v_proj": (q + kv, q + 2 * kv)}
    out = [Weight("model.embed_tokens.weight", "embed.weight")]
    for i in range(config.num_layers):
        theirs, ours = f"model.layers.{i}.", f"blocks.{i}."
        out.append(Weight(f"{theirs}input_layernorm.weight", f"{ours}norm1.weight"))
        out.append(Weight(f"{theirs}post_attention_layernorm.weight", f"{ours}norm2.weight"))
        for name, rows in ranges.items():
            out.append(Weight(f"{theirs}self_attn.{name}.weight", f"{ours}attn.qkv_proj.weight", rows))
            if config.has_bias("qkv"):
                out.append(Weight(f"{theirs}self_attn.{name}.bias", f"{ours}attn.qkv_proj.bias", rows))
        out.append(Weight(f"{theirs}self_attn.o_proj.weight", f"{ours}attn.o_proj.weight"))
        if config.has_bias("out"):
            out.append(Weight(f"{theirs}self_attn.o_proj.bias", f"{ours}attn.o_proj.bias"))
        for name, mine in (("gate_proj", "fc_gate"), ("up_proj", "fc_in"), ("down_proj", "fc_out")):
            out.append(Weight(f"{theirs}mlp.{name}.weight", f"{ours}mlp.{mine}.weight"))
            if config.has_bias("mlp"):
                out.append(Weight(f"{theirs}mlp.{name}.bias", f"{ours}mlp.{mine}.bias"))
    out.append(Weight("model.norm.weight", "ln_final.norm.weight"))
    return out


FAMILY = register(
    Family(
        name="llama",
        title="Llama",
        architectures=("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"),
        model_types=("llama", "qwen2", "mistral"),
        model_config=model_config,
        lacks=lacks,
        hf_config=hf_config,
        weights=weights,
        config_keys={field: key for key, (field, _) in SIZES.items()}
        | {"rotary_fraction": "partial_rotary_factor"},
        prefix="model.",  # a headless base model's file has its names without it
        ignored=(".self_attn.rotary_emb.inv_freq",),  # a buffer older files hold
    )
)
