"""GPT-Neo (`GPTNeoForCausalLM`: the TinyStories models): its config and its weights, both ways.

config.json                          this project's ModelConfig
hidden_size, num_heads, num_layers   model_dim, num_heads, num_layers
intermediate_size (null: 4 D)        dim_feedforward
max_position_embeddings, vocab_size  max_len, vocab_size; learned positions
attention_types / attention_layers   window_layers: the `local` layers
window_size                          attention_window (a key fewer than window_size positions back)
activation_function                  activation (gelu_new; gelu, relu)
layer_norm_epsilon                   norm_eps; LayerNorm, pre-norm
tie_word_embeddings                  tie_embeddings (true)
(always)                             scale_attention=false: GPT-Neo divides no score by sqrt(d_head);
                                     no biases on q, k, v, one on out_proj; MLP and norms with biases

transformer.wte, transformer.wpe     embed, pos_embed.embedding
transformer.h.i.ln_1, ln_2           blocks.i.norm1, norm2
transformer.h.i.attn.attention.q_proj, k_proj, v_proj   blocks.i.attn.qkv_proj rows [0, D), [D, 2D),
                                     [2D, 3D)
transformer.h.i.attn.attention.out_proj   blocks.i.attn.o_proj
transformer.h.i.mlp.c_fc, c_proj     blocks.i.mlp.fc_in, fc_out (Linear layers, not GPT-2's Conv1D)
transformer.ln_f                     ln_final.norm
lm_head                              unembed (tied: wte)
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
    register,
    sizes,
    special_ids,
    special_tokens,
)
from transformer_lab.nn import ModelConfig
from transformer_lab.nn.config import LIMITS

ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
SIZES = {
    "hidden_size": ("model_dim", True),
    "num_heads": ("num_heads", True),
    "num_layers": ("num_layers", True),
    "intermediate_size": ("dim_feedforward", False),
    "max_position_embeddings": ("max_len", True),
    "vocab_size": ("vocab_size", True),
}


def attention_layers(hf: dict, where: str, layers: int) -> list[str]:
    """Each layer's attention, global or local: attention_layers, or attention_types expanded
    ([[["global", "local"], 12]]: the pattern repeated 12 times)."""
    kinds = hf.get("attention_layers")
    if kinds is None:
        types = hf.get("attention_types", [[["global", "local"], layers // 2]])
        ok = isinstance(types, list) and all(
            isinstance(t, list) and len(t) == 2 and isinstance(t[0], list) and isinstance(t[1], int)
            and 0 <= t[1] <= LIMITS["num_layers"]
            for t in types
        )  # fmt: skip
        require(ok, f"{where}: attention_types={types!r} is not [[[kind, ...], repeats], ...]")
        kinds = [kind for pattern, repeats in types for _ in range(repeats) for kind in pattern]
    require(
        isinstance(kinds, list) and len(kinds) == layers,
        f"{where}: attention_layers names {len(kinds) if isinstance(kinds, list) else kinds!r} layers' "
        f"attention, and the model has num_layers={layers}",
    )
    unknown = sorted({k for k in kinds if k not in ("global", "local")}, key=str)
    if unknown:
        raise ConfigError(f"{where}: attention kind {unknown[0]!r} is not global or local")
    return kinds


def model_config(hf: dict, where: str) -> dict:
    """This project's ModelConfig settings of a GPT-Neo config.json (the module docstring's table)."""
    shape = sizes(hf, where, SIZES)
    shape.setdefault("dim_feedforward", 4 * shape["model_dim"])
    kinds = attention_layers(hf, where, shape["num_layers"])
    local = [i for i, kind in enumerate(kinds) if kind == "local"]
    window = sizes(hf, where, {"window_size": ("max_len", True)})["max_len"] if local else None
    return {
        "arch": "decoder",
        **shape,
        "positional_encoding": "learned",
        "norm_first": True,
        "norm": "layer",
        "norm_eps": number(hf, where, "layer_norm_epsilon", 1e-5, high=1.0),
        "activation": choice(hf, where, "activation_function", "gelu_new", ACTIVATIONS),
        "scale_attention": False,
        "bias": True,
        "qkv_bias": False,
        "unembed_bias": False,
        "attention_window": window,
        "window_layers": local if local else None,
        "tie_embeddings": flag(hf, where, "tie_word_embeddings", True),
        "output_mlp": False,
        **special_tokens(hf, shape["vocab_size"]),
    }


def lacks(config: ModelConfig) -> list[tuple[bool, str]]:
    """What GPT-Neo's block cannot hold."""
    names = (
        "shape",
        "rms",
        "gated",
        "grouped",
        "parallel",
        "attention_only",
        "bare_mlp_or_norm",
        "unembed_bias",
    )
    return [
        (config.positional_encoding != "learned", f"{config.positional_encoding} positions (it learns them)"),
        (config.attention_window is None, "need for its local attention (GPT-2 holds this model)"),
        *common_lacks(config, *names),
        (config.scale_attention, "scaled attention (it divides no score by sqrt(d_head))"),
        (config.has_bias("qkv") or not config.has_bias("out"), "biases but on out_proj in its attention"),
    ]


def hf_config(config: ModelConfig) -> dict:
    """GPTNeoConfig's arguments for a model of `config` (dropout 0)."""
    layers = config.window_layers if config.window_layers is not None else range(config.num_layers)
    kinds = ["local" if i in layers else "global" for i in range(config.num_layers)]
    return {
        "model_type": "gpt_neo",
        "architectures": list(FAMILY.architectures),
        "vocab_size": config.vocab_size,
        "hidden_size": config.model_dim,
        "num_layers": config.num_layers,
        "num_heads": config.num_heads,
        "intermediate_size": config.dim_feedforward,
        "max_position_embeddings": config.max_len,
        "attention_types": [[[kind], 1] for kind in kinds],
        "window_size": config.attention_window,
        "activation_function": config.activation,
        "layer_norm_epsilon": config.norm_eps,
        "tie_word_embeddings": config.tie_embeddings,
        "embed_dropout": 0.0,
        "attention_dropout": 0.0,
        "resid_dropout": 0.0,
        **special_ids(config),
    }


def weights(config: ModelConfig) -> list[Weight]:
    """Every tensor of GPTNeoForCausalLM but the output layer (`Family.mapping`) and its place in this
    project's state_dict."""
    dim = config.model_dim
    out = [
        Weight("transformer.wte.weight", "embed.weight"),
        Weight("transformer.wpe.weight", "pos_embed.embedding.weight"),
    ]
    for i in range(config.num_layers):
        theirs, ours = f"transformer.h.{i}.", f"blocks.{i}."
        for name, mine in (
            ("ln_1", "norm1"),
            ("ln_2", "norm2"),
            ("mlp.c_fc", "mlp.fc_in"),
            ("mlp.c_proj", "mlp.fc_out"),
        ):
            out += [Weight(f"{theirs}{name}.{p}", f"{ours}{mine}.{p}") for p in ("weight", "bias")]
        for j, part in enumerate("qkv"):
            rows = (j * dim, (j + 1) * dim)
            out.append(
                Weight(f"{theirs}attn.attention.{part}_proj.weight", f"{ours}attn.qkv_proj.weight", rows)
            )
        out += [
            Weight(f"{theirs}attn.attention.out_proj.{p}", f"{ours}attn.o_proj.{p}")
            for p in ("weight", "bias")
        ]
    out += [Weight(f"transformer.ln_f.{p}", f"ln_final.norm.{p}") for p in ("weight", "bias")]
    return out


FAMILY = register(
    Family(
        name="gpt_neo",
        title="GPT-Neo",
        architectures=("GPTNeoForCausalLM",),
        model_types=("gpt_neo",),
        model_config=model_config,
        lacks=lacks,
        hf_config=hf_config,
        weights=weights,
        config_keys={field: key for key, (field, _) in SIZES.items()},
        prefix="transformer.",  # a headless base model's file has its names without it
        ignored=(".attn.attention.bias", ".attn.attention.masked_bias"),  # the causal masks older files keep
    )
)
