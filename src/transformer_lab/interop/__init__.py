"""Open a model of this project in the tools people already use, and a GPT-2-style model from elsewhere here.

    python -m transformer_lab.export ckpt_path=pretrained:shakespeare to=huggingface out=shakespeare-hf
    transformer_lab.load("hf:shakespeare-hf")       # or any GPT2LMHeadModel saved with save_pretrained

One module per direction and format (docs/interop.md), imports and exports named as pairs:
    transformer_lens.py   to=transformer_lens: TransformerLens's config and its HookedTransformer weights
    hf_export.py          to=huggingface: a folder of the family that holds the model, for `transformers`
    hf_import.py          hf:<folder>: a model saved by `transformers` (config.json, safetensors,
                          tokenizer) as a DecoderLM
    families/             the transformers families, one `Family` each (GPT-2, GPT-NeoX, Llama, GPT-Neo):
                          their config and weights, both ways
    onnx.py               to=onnx: any of the three models as an ONNX graph (dynamic batch and sequence)
    sae_lens_export.py    to=sae_lens: an SAE run as the folder SAELens saves (cfg.json, safetensors)
    sae_lens_import.py    sae=saelens:<folder>: an SAE saved by SAELens as this project's SAE

The libraries are optional (`pip install "transformer-lab[interop]"`): each is imported when a format
needs it, and a missing one is a one-line ConfigError naming the install command (`require_package`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from transformer_lab.errors import ConfigError, require
from transformer_lab.nn import ModelConfig

FORMATS = ("transformer_lens", "huggingface", "onnx", "sae_lens")
INSTALL = 'pip install "transformer-lab[interop]"'


def require_package(name: str, purpose: str) -> ModuleType:
    """The module `name`, or a one-line ConfigError saying which package `purpose` needs and how to
    install it (the interop extra)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        package = name.split(".")[0].replace("_", "-")
        raise ConfigError(
            f"{purpose} needs the package {package}, which is not installed ({str(exc).splitlines()[0]}); "
            f"{INSTALL} (or pip install {package})"
        ) from None


def require_gpt_style(config: ModelConfig, to: str) -> None:
    """A one-line refusal unless the model is what GPT-2 and TransformerLens's decoder can express: a
    decoder (causal, one stream) with pre-norm blocks and a single Linear output layer. Says why, and
    what would work (to=onnx exports any model)."""
    fix = "to=onnx exports any model of this project"
    require(
        config.arch == "decoder",
        f"to={to} takes a decoder-only language model, and this is an {config.arch.replace('_', '-')} "
        f"model ({'it reads every position at once' if config.arch == 'encoder' else 'two stacks'}); {fix}",
    )
    require(
        config.norm_first,
        f"to={to} takes pre-norm blocks (x + f(LN(x)), model.norm_first=true), and this model is post-norm "
        f"(LN(x + f(x))); {fix}",
    )
    require(
        not config.output_mlp,
        f"to={to} takes a single Linear output layer, and this model has the tutorial's output MLP "
        f"(model.output_mlp=true); {fix}",
    )


def check_format(to: str) -> None:
    """`to=` names a format of `FORMATS`."""
    require(to in FORMATS, f"to={to} is not a format; use to={' | '.join(FORMATS)}")
