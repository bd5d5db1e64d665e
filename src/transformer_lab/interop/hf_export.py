"""to=huggingface: a pre-norm decoder as a folder of its `transformers` family, which `transformers` opens.

    AutoModelForCausalLM.from_pretrained(out)   GPT2LMHeadModel, GPTNeoXForCausalLM, LlamaForCausalLM (or
                                                Qwen2ForCausalLM, MistralForCausalLM), GPTNeoForCausalLM:
                                                config.json, model.safetensors
    AutoTokenizer.from_pretrained(out)          the vocabulary as a tokenizer: tokenizer.json

The family is the first of `interop.families` whose block holds the model (`families.family_for`): GPT-2
for learned, sinusoidal or no positions with LayerNorm and a plain MLP (its export carries any positions'
table and folds an output bias, `families.gpt2`), GPT-NeoX for rotary positions with LayerNorm (parallel
or not), Llama for RMSNorm, rotary positions and a gated MLP (Qwen2 with Q, K, V biases, Mistral with a
window on every layer), GPT-Neo for local attention with unscaled scores. A model none of them holds is
refused in one line saying what each lacks. Each family's module maps the config and every tensor.

The tokenizer is the model's own where it has one (a byte-level BPE of task=text, or the tokenizer of a
model opened with hf:, kept in the record of its task); else a word-level `tokenizers` tokenizer over the
vocabulary, split as the task writes text: one token per character (separator "", decoded by joining)
or tokens apart (separator " ", split on whitespace, joined by spaces); the special tokens (<pad>, <bos>,
<eos>, <sep>) are matched whole.
"""

from __future__ import annotations

from pathlib import Path

import torch

from transformer_lab.interop import families, require_gpt_style, require_package
from transformer_lab.nn import DecoderLM, ModelConfig

SNIPPET = """\
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{out}")
tokenizer = AutoTokenizer.from_pretrained("{out}")
ids = tokenizer("{prompt}", return_tensors="pt").input_ids
print(tokenizer.decode(model.generate(ids, max_new_tokens=20, do_sample=False)[0]))"""


def check(config: ModelConfig) -> families.Family:
    """The family that holds a model of `config`, or a one-line refusal (a model no family's block
    holds; an output bias GPT-2 cannot fold is refused by its export)."""
    require_gpt_style(config, "huggingface")
    return families.family_for(config)


def state_dict(net: DecoderLM) -> dict[str, torch.Tensor]:
    """The tensors to=huggingface writes for the model, under its family's names (`families.export_state`;
    GPT-2's with the output bias folded, or a one-line refusal where it cannot be)."""
    return families.export_state(check(net.config), net)


def transformers_model(config: ModelConfig, state: dict) -> torch.nn.Module:
    """The transformers model of the family that holds `config`, with the family's tensors `state`."""
    family = check(config)
    transformers = require_package("transformers", "to=huggingface")
    arguments = dict(family.hf_config(config))
    kind, architectures = arguments.pop("model_type"), arguments["architectures"]
    with torch.device("cpu"):
        built = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(kind, **arguments)
        )
    missing, unexpected = built.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if config.tie_embeddings else set()
    missing = [key for key in missing if key not in tied and not key.endswith(family.ignored)]
    if missing or unexpected:  # this version of transformers names the family's weights otherwise
        raise RuntimeError(f"{architectures[0]} does not take these weights: {missing or unexpected}")
    if config.tie_embeddings:
        built.tie_weights()
    return built.eval()


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
    net: DecoderLM, out: Path, separator: str, prompt: str, tokenizer_json: str | None = None
) -> list[str]:
    """Write the family's folder (model and tokenizer) to `out`; the lines to print. `separator`: how the
    task writes text; `prompt`: the text the printed snippet continues; `tokenizer_json`: the model's own
    tokenizer (a BPE of task=text, or of a model opened with hf:), written as it is instead of a word-level
    one over the vocabulary."""
    config = net.config
    family = check(config)
    transformers = require_package("transformers", "to=huggingface")
    built = transformers_model(config, state_dict(net))
    built.generation_config.pad_token_id = config.pad_id
    bars = transformers.utils.logging
    shown = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()  # "Writing model shards" for one small file
    try:
        built.save_pretrained(str(out))
    finally:
        if shown:
            bars.enable_progress_bar()
    ids = {"pad": config.pad_id, "bos": config.bos_id, "eos": config.eos_id, "sep": config.sep_id}
    specials = sorted({i for i in ids.values() if i is not None})
    names = {f"{name}_token": net.vocab[i] for name, i in ids.items() if i is not None and name != "sep"}
    if tokenizer_json is not None:
        own = require_package("tokenizers", "to=huggingface").Tokenizer.from_str(tokenizer_json)
        if "<|endoftext|>" in net.vocab:
            names.setdefault("eos_token", "<|endoftext|>")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=own if tokenizer_json is not None else tokenizer(net.vocab, separator, specials),
        clean_up_tokenization_spaces=False,
        model_max_length=config.max_len,
        **names,
    )
    fast.save_pretrained(str(out))
    files = sorted(p.name for p in out.iterdir())
    architecture = family.hf_config(config)["architectures"][0]
    return [
        f"Wrote {out}: {', '.join(files)} ({architecture}, {config.num_layers} layers); load it with:",
        SNIPPET.format(out=out, prompt=prompt.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")),
    ]
