"""to=huggingface: a pre-norm decoder as a GPT-2 folder that `transformers` opens.

    AutoModelForCausalLM.from_pretrained(out)   GPT2LMHeadModel: config.json, model.safetensors
    AutoTokenizer.from_pretrained(out)          the vocabulary as a tokenizer: tokenizer.json

GPT-2's block is this project's pre-norm block (x + Attn(LN_1(x)), then x + MLP(LN_2(x))), its attention
the same fused [q | k | v] projection, so the weights go over one for one. GPT-2's Conv1D stores the
matrix x is multiplied by, [in, out], where nn.Linear stores [out, in]: every projection is transposed.

    transformer.wte.weight [V, D]          = embed.weight
    transformer.wpe.weight [max_len, D]    = the positions' table: learned, the sinusoids PE(pos) written
                                             into it, or zeros (none): GPT-2 adds wpe[pos] as each does
    transformer.h.i.ln_1, ln_2             = blocks.i.norm1, norm2 (zero biases for model.bias=false)
    transformer.h.i.attn.c_attn [D, 3D]    = qkv_proj.weight^T, qkv_proj.bias
    transformer.h.i.attn.c_proj [D, D]     = o_proj.weight^T, o_proj.bias
    transformer.h.i.mlp.c_fc [D, F]        = mlp.fc_in.weight^T;  mlp.c_proj [F, D] = mlp.fc_out.weight^T
                                             (an attention-only block: an MLP of width 1 with zero
                                             weights, which adds exactly 0)
    transformer.ln_f                       = ln_final.norm
    lm_head.weight [V, D]                  = unembed.weight (tied: wte itself, tie_word_embeddings)

GPT-2's output layer has no bias. The unembedding's bias b folds into ln_f's: the logits are
W (g * n + beta) + b = W (g * n + beta + delta) with W delta = b, which has an exact solution delta
(least squares, checked) when b lies in the span of W's columns, as it does whenever W [V, D] has rank V
(V <= D, e.g. a character vocabulary). Otherwise the export is refused in one line. Activations:
relu, gelu (exact: transformers' "gelu"), gelu_new; scale_attention=false is scale_attn_weights=false.

The tokenizer is the model's own where it has one (a byte-level BPE of task=text, or the tokenizer of a
model opened with hf:, kept in the record of its task); else a word-level `tokenizers` tokenizer over the
vocabulary, split as the task writes text: one token per character (separator "", decoded by joining)
or tokens apart (separator " ", split on whitespace, joined by spaces); the special tokens (<pad>, <bos>,
<eos>, <sep>) are matched whole.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from transformer_lab.errors import ConfigError, require
from transformer_lab.interop import require_gpt_style, require_package
from transformer_lab.interop.transformer_lens import positions_table
from transformer_lab.nn import DecoderLM, ModelConfig
from transformer_lab.nn.config import GATED

SNIPPET = """\
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{out}")
tokenizer = AutoTokenizer.from_pretrained("{out}")
ids = tokenizer("{prompt}", return_tensors="pt").input_ids
print(tokenizer.decode(model.generate(ids, max_new_tokens=20, do_sample=False)[0]))"""


def check(config: ModelConfig) -> None:
    """A one-line refusal for a model GPT-2 cannot express (the unembedding's bias: `output_bias_fold`)."""
    require_gpt_style(config, "huggingface")
    for lacks, what in gpt2_lacks(config):
        require(not lacks, f"to=huggingface: GPT-2 has no {what}; to=onnx exports it")


def gpt2_lacks(config: ModelConfig) -> list[tuple[bool, str]]:
    """(whether the model has it, what GPT-2 lacks) for each block GPT-2's architecture has no place for."""
    return [
        (config.positional_encoding == "rotary", "rotary positions (model.positional_encoding=rotary)"),
        (config.norm == "rms", "RMSNorm (model.norm=rms)"),
        (config.activation in GATED, f"gated MLP (model.activation={config.activation})"),
        (config.kv_heads < config.num_heads, "grouped-query attention (model.num_kv_heads)"),
        (config.parallel_residual, "parallel attention and MLP (model.parallel_residual=true)"),
        (config.attention_window is not None, "local attention windows (model.attention_window)"),
    ]


def gpt2_config(config: ModelConfig) -> dict:
    """GPT2Config's arguments (dropout 0: the same function in training mode too)."""
    return {
        "vocab_size": config.vocab_size,
        "n_positions": config.max_len,
        "n_embd": config.model_dim,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "n_inner": config.feedforward_dim if config.mlp else 1,
        "activation_function": config.activation,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": config.norm_eps,
        "scale_attn_weights": config.scale_attention,
        "tie_word_embeddings": config.tie_embeddings,
        "bos_token_id": config.bos_id,
        "eos_token_id": config.eos_id,
        "pad_token_id": config.pad_id,
        "architectures": ["GPT2LMHeadModel"],
    }


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


def _linear(weight: Tensor, bias: Tensor | None, out_features: int) -> tuple[Tensor, Tensor]:
    """nn.Linear (W [out, in], b) as GPT-2's Conv1D (W^T [in, out], b; zeros without a bias)."""
    return weight.detach().T, torch.zeros(out_features) if bias is None else bias.detach()


def _norm(norm: torch.nn.LayerNorm, dim: int) -> tuple[Tensor, Tensor]:
    return norm.weight.detach(), torch.zeros(dim) if norm.bias is None else norm.bias.detach()


def state_dict(model: DecoderLM) -> dict[str, Tensor]:
    """GPT2LMHeadModel's weights for the model (the module docstring's table)."""
    config = model.config
    dim, width = config.model_dim, config.feedforward_dim
    out = {
        "transformer.wte.weight": model.embed.weight.detach(),
        "transformer.wpe.weight": positions_table(model),
    }
    for i, block in enumerate(model.blocks):
        p = f"transformer.h.{i}."
        out[p + "ln_1.weight"], out[p + "ln_1.bias"] = _norm(block.norm1, dim)
        attn = block.attn
        out[p + "attn.c_attn.weight"], out[p + "attn.c_attn.bias"] = _linear(
            attn.qkv_proj.weight, attn.qkv_proj.bias, 3 * dim
        )
        out[p + "attn.c_proj.weight"], out[p + "attn.c_proj.bias"] = _linear(
            attn.o_proj.weight, attn.o_proj.bias, dim
        )
        if hasattr(block, "mlp"):
            out[p + "ln_2.weight"], out[p + "ln_2.bias"] = _norm(block.norm2, dim)
            mlp = block.mlp
            out[p + "mlp.c_fc.weight"], out[p + "mlp.c_fc.bias"] = _linear(
                mlp.fc_in.weight, mlp.fc_in.bias, width
            )
            out[p + "mlp.c_proj.weight"], out[p + "mlp.c_proj.bias"] = _linear(
                mlp.fc_out.weight, mlp.fc_out.bias, dim
            )
        else:  # an MLP that adds exactly 0: act(0 x + 0) = 0, then 0 weights and bias
            out[p + "ln_2.weight"], out[p + "ln_2.bias"] = torch.ones(dim), torch.zeros(dim)
            out[p + "mlp.c_fc.weight"], out[p + "mlp.c_fc.bias"] = torch.zeros(dim, 1), torch.zeros(1)
            out[p + "mlp.c_proj.weight"], out[p + "mlp.c_proj.bias"] = torch.zeros(1, dim), torch.zeros(dim)
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = _norm(model.ln_final.norm, dim)
    head = model.unembed
    if head.bias is not None and bool(head.bias.any()):
        out["transformer.ln_f.bias"] = out["transformer.ln_f.bias"] + output_bias_fold(head.weight, head.bias)
    out["lm_head.weight"] = (model.embed if config.tie_embeddings else head).weight.detach()
    return {k: v.to("cpu", torch.float32).contiguous() for k, v in out.items()}


def tokenizer(vocab: list[str], separator: str, specials: list[int]) -> object:
    """A `tokenizers.Tokenizer` of the vocabulary, splitting text as the task writes it (the module
    docstring); `specials`: the ids of the special tokens, matched whole and skipped on request."""
    tk = require_package("tokenizers", "to=huggingface")
    tok = tk.Tokenizer(tk.models.WordLevel({token: i for i, token in enumerate(vocab)}, unk_token=None))
    if separator == "":
        tok.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(r"[\s\S]"), behavior="isolated")
        tok.decoder = tk.decoders.Fuse()
    else:
        tok.pre_tokenizer = tk.pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([tk.AddedToken(vocab[i], special=True, normalized=False) for i in specials])
    return tok


def export(
    model: DecoderLM, out: Path, separator: str, prompt: str, tokenizer_json: str | None = None
) -> list[str]:
    """Write the GPT-2 folder (model and tokenizer) to `out`; the lines to print. `separator`: how the
    task writes text; `prompt`: the text the printed snippet continues; `tokenizer_json`: the model's own
    tokenizer (a BPE of task=text, or of a model opened with hf:), written as it is instead of a word-level
    one over the vocabulary."""
    config = model.config
    check(config)
    transformers = require_package("transformers", "to=huggingface")
    hf_config = transformers.GPT2Config(**gpt2_config(config))
    weights = state_dict(model)
    with torch.device("cpu"):
        gpt2 = transformers.GPT2LMHeadModel(hf_config)
    missing, unexpected = gpt2.load_state_dict(weights, strict=False)
    missing = [key for key in missing if not key.endswith(("attn.bias", "attn.masked_bias"))]  # GPT-2's masks
    if missing or unexpected:  # this version of transformers names GPT-2's weights otherwise
        raise RuntimeError(f"GPT2LMHeadModel does not take these weights: {missing or unexpected}")
    if config.tie_embeddings:
        gpt2.tie_weights()
    gpt2.generation_config.pad_token_id = config.pad_id
    bars = transformers.utils.logging
    shown = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()  # "Writing model shards" for one small file
    try:
        gpt2.save_pretrained(str(out))
    finally:
        if shown:
            bars.enable_progress_bar()
    ids = {"pad": config.pad_id, "bos": config.bos_id, "eos": config.eos_id, "sep": config.sep_id}
    specials = sorted({i for i in ids.values() if i is not None})
    names = {f"{name}_token": model.vocab[i] for name, i in ids.items() if i is not None and name != "sep"}
    if tokenizer_json is not None:
        own = require_package("tokenizers", "to=huggingface").Tokenizer.from_str(tokenizer_json)
        if "<|endoftext|>" in model.vocab:
            names.setdefault("eos_token", "<|endoftext|>")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=own if tokenizer_json is not None else tokenizer(model.vocab, separator, specials),
        clean_up_tokenization_spaces=False,
        model_max_length=config.max_len,
        **names,
    )
    fast.save_pretrained(str(out))
    files = sorted(p.name for p in out.iterdir())
    return [
        f"Wrote {out}: {', '.join(files)} (GPT2LMHeadModel, {config.num_layers} layers); load it with:",
        SNIPPET.format(out=out, prompt=prompt.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")),
    ]
