"""The `transformers` families this project opens (`hf:<folder>`) and writes (`to=huggingface`): one module
per family, each holding both directions of its config and of its weights, as TransformerLens keeps one
conversion file per family.

    gpt2.py       GPT2LMHeadModel: learned positions, LayerNorm, GELU MLP (Conv1D weights, transposed)
    gpt_neox.py   GPTNeoXForCausalLM (Pythia): rotary positions on a share of each head, parallel
                  attention and MLP, one fused [q, k, v] per head
    llama.py      LlamaForCausalLM, and the Llama-shaped Qwen2ForCausalLM and MistralForCausalLM (SmolLM,
                  TinyLlama, Qwen2): RMSNorm, rotary positions, SwiGLU, grouped-query attention
    gpt_neo.py    GPTNeoForCausalLM (the TinyStories models): learned positions, local attention on some
                  layers, unscaled attention scores

Each module builds one `Family` (a frozen dataclass: the one contract) and registers it with
`register(family)` when imported; `families()` imports the modules named in `BUILT_IN` first. A Family
holds its names (`name`, `title`, the transformers `architectures` and config.json `model_types` it
reads), how its files name tensors (`prefix` of the base model, `aliases`, `ignored` buffers), and four
functions: `model_config(hf, where)` (config.json -> ModelConfig settings, every value's type checked,
every setting this project's blocks lack refused by name; the model's structure is checked by
ModelConfig itself, its messages naming config.json's keys, `config_keys`), `lacks(config)` (what it
cannot hold of a ModelConfig, for export), `hf_config(config)` (ModelConfig -> config.json) and
`weights(config)` (each tensor's place, read both ways: `to_ours` fills this project's state_dict,
`to_theirs` the family's; `Family.mapping` adds the output layer where it is not tied). `complete(model)`,
where a family needs it (GPT-2), completes this project's state_dict for the mapping (a positions' table,
zero biases, ...). The config helpers below all take (hf, where, key, ...). A new family is one module
named in `BUILT_IN`.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from transformer_lab.errors import ConfigError, require
from transformer_lab.nn import ModelConfig
from transformer_lab.nn.config import GATED, LIMITS

BUILT_IN = ("gpt2", "gpt_neox", "llama", "gpt_neo")  # the order export tries them in


@dataclass(frozen=True)
class Weight:
    """One tensor of a family's state_dict and where it lives in this project's: `ours`, whole or the
    rows `rows` (a (start, stop) range, or a list: row r of theirs is row rows[r] of ours), transposed
    where the family stores the matrix x is multiplied by (GPT-2's Conv1D)."""

    theirs: str
    ours: str
    rows: tuple[int, int] | list[int] | None = None
    transposed: bool = False

    def index(self) -> slice | Tensor | None:
        if self.rows is None:
            return None
        if isinstance(self.rows, tuple):
            return slice(*self.rows)
        return torch.tensor(self.rows)


@dataclass(frozen=True)
class Family:
    """A `transformers` family this project opens (`hf:`) and writes (`to=huggingface`); the module
    docstring says what each field is."""

    name: str
    title: str
    architectures: tuple[str, ...]
    model_types: tuple[str, ...]
    model_config: Callable[[dict, str], dict]
    lacks: Callable[[ModelConfig], list[tuple[bool, str]]]
    hf_config: Callable[[ModelConfig], dict]
    weights: Callable[[ModelConfig], list[Weight]]
    prefix: str = ""
    config_keys: Mapping[str, str] = field(default_factory=dict)  # ModelConfig setting -> config.json key
    aliases: Mapping[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    complete: Callable[[torch.nn.Module], dict[str, Tensor]] | None = None
    output_layer: str = "lm_head.weight"  # its own tensor, unless tied to the embedding

    def mapping(self, config: ModelConfig) -> list[Weight]:
        """Every tensor of the family's model of `config` and its place in this project's state_dict:
        `weights`, and the output layer where it is not the embedding's."""
        tied = config.tie_embeddings
        return self.weights(config) + ([] if tied else [Weight(self.output_layer, "unembed.weight")])


FAMILIES: dict[str, Family] = {}  # every registered family by name: the registry


def register(family: Family) -> Family:
    """Register a family (see the module docstring): `hf:` and `to=huggingface` find it."""
    FAMILIES[family.name] = family
    return family


def families() -> dict[str, Family]:
    """Every family by name, the built-in ones first (their modules imported on first use)."""
    for name in BUILT_IN:
        importlib.import_module(f"{__name__}.{name}")
    return {name: FAMILIES[name] for name in BUILT_IN} | FAMILIES


def family_of(hf: dict, where: str) -> Family:
    """The family of a config.json: by its `architectures` (else its `model_type`); a one-line refusal
    naming the families this opens."""
    known = families()
    kind = setting(hf, where, "model_type", str, None)
    architectures = setting(hf, where, "architectures", list, None)
    require(
        architectures is None or all(isinstance(a, str) for a in architectures),
        f"{where}: architectures={json.dumps(architectures)[:80]} must be a list of class names",
    )
    for family in known.values():
        if architectures and any(a in family.architectures for a in architectures):
            require(
                kind is None or kind in family.model_types,
                f"{where} names the architecture {', '.join(architectures)} but model_type {kind!r} (a "
                f"{family.title} has model_type {' or '.join(family.model_types)}): the file contradicts "
                "itself",
            )
            return family
    for family in known.values():
        if not architectures and kind in family.model_types:
            return family
    names = ", ".join(a for family in known.values() for a in family.architectures)
    shown = ", ".join(architectures) if architectures else f"model_type {kind!r}"
    raise ConfigError(
        f"{where} is of a {shown} model; hf: opens causal language models of the families {names}"
    )


def family_for(config: ModelConfig, to: str = "huggingface") -> Family:
    """The first family that holds a model of `config` (export); a one-line refusal saying what each
    lacks."""
    reasons = []
    for family in families().values():
        lacking = [what for lacks, what in family.lacks(config) if lacks]
        if not lacking:
            return family
        reasons.append(f"{family.title} has no {lacking[0]}")
    raise ConfigError(
        f"to={to}: no transformers family holds this model ({'; '.join(reasons)}); to=onnx exports it"
    )


# ------------------------------------------------------------------------------ what a family lacks
COMMON_LACKS = {  # what several families' blocks have no place for: name -> (has it?, what it is)
    "shape": lambda c: (
        c.arch != "decoder" or not c.norm_first or c.output_mlp,
        "such a model (a pre-norm decoder with one Linear output layer)",
    ),
    "rms": lambda c: (c.norm == "rms", "RMSNorm"),
    "gated": lambda c: (c.activation in GATED, f"gated MLP ({c.activation})"),
    "grouped": lambda c: (c.num_kv_heads < c.num_heads, "grouped-query attention"),
    "parallel": lambda c: (c.parallel_residual, "parallel attention and MLP"),
    "window": lambda c: (c.attention_window is not None, "local attention windows"),
    "attention_only": lambda c: (not c.mlp, "attention-only blocks"),
    "unscaled": lambda c: (not c.scale_attention, "unscaled attention"),
    "bare_mlp_or_norm": lambda c: (
        not c.has_bias("mlp") or not c.has_bias("norm"),
        "MLP or LayerNorm without biases",
    ),
    "unembed_bias": lambda c: (c.has_bias("unembed"), "bias in its output layer"),
}


def common_lacks(config: ModelConfig, *names: str) -> list[tuple[bool, str]]:
    """(whether the model has it, what it is) for each of `names` of COMMON_LACKS."""
    return [COMMON_LACKS[name](config) for name in names]


# ------------------------------------------------------------------------------ the weights, both ways
def to_ours(state: dict[str, Tensor], mapping: list[Weight], shapes: dict[str, tuple[int, ...]]) -> dict:
    """This project's state_dict (float32) from a family's tensors: every tensor of `shapes` (the model's
    state_dict shapes) filled whole by the mapping (checked), nothing else."""
    out: dict[str, Tensor] = {}
    filled: dict[str, int] = {}
    for weight in mapping:
        tensor = state[weight.theirs].to(torch.float32)
        tensor = tensor.T if weight.transposed else tensor
        index = weight.index()
        if index is None:
            out[weight.ours] = tensor.contiguous()
            filled[weight.ours] = shapes[weight.ours][0] if shapes[weight.ours] else 1
            continue
        target = out.setdefault(weight.ours, torch.zeros(shapes[weight.ours]))
        target[index] = tensor
        filled[weight.ours] = filled.get(weight.ours, 0) + tensor.shape[0]
    for name, shape in shapes.items():
        rows = shape[0] if shape else 1
        if filled.get(name) != rows:
            raise RuntimeError(f"the mapping fills {filled.get(name, 0)} of {rows} rows of {name}")
    return out


def to_theirs(state: dict[str, Tensor], mapping: list[Weight]) -> dict[str, Tensor]:
    """A family's state_dict from this project's (float32, contiguous, one copy each)."""
    out = {}
    for weight in mapping:
        tensor = state[weight.ours].detach()
        index = weight.index()
        tensor = tensor if index is None else tensor[index]
        out[weight.theirs] = (
            (tensor.T if weight.transposed else tensor).to("cpu", torch.float32).contiguous().clone()
        )
    return out


def export_state(family: Family, model: torch.nn.Module) -> dict[str, Tensor]:
    """The family's state_dict of a model it holds: its mapping of this project's state_dict (completed
    by the family where it needs more, `Family.complete`)."""
    state = family.complete(model) if family.complete is not None else model.state_dict()
    return to_theirs(state, family.mapping(model.config))


def expected_shapes(mapping: list[Weight], shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The shape each of the family's tensors must have in a file, from this project's shapes."""
    out = {}
    for weight in mapping:
        shape = shapes[weight.ours]
        if weight.rows is not None:
            count = weight.rows[1] - weight.rows[0] if isinstance(weight.rows, tuple) else len(weight.rows)
            shape = (count, *shape[1:])
        out[weight.theirs] = tuple(reversed(shape)) if weight.transposed else tuple(shape)
    return out


# ------------------------------------------------------------------------------ reading config.json
KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list"}


def setting(hf: dict, where: str, key: str, kind: type, default: object) -> object:
    """config.json's `key`, of `kind` (bool, int, float, str or list) or null, else `default` where it is
    absent; a one-line ConfigError naming the key where its value is of another type (a list where a
    string is expected fails later as `unhashable type`, far from the file). An int is a float too; a
    bool is no int."""
    value = hf.get(key, default)
    if value is None:
        return default
    fits = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    fits = fits or (kind is float and isinstance(value, int) and not isinstance(value, bool))
    require(fits, f"{where}: {key}={json.dumps(value)[:60]} must be {KINDS[kind]}")
    return float(value) if kind is float else value


def sizes(hf: dict, where: str, table: dict[str, tuple[str, bool]]) -> dict[str, int]:
    """config.json key -> (ModelConfig field, required): each a positive integer within this package's
    limits (`ModelConfig.LIMITS`), checked before anything is built."""
    out = {}
    for key, (name, required) in table.items():
        value = setting(hf, where, key, int, None)
        if value is None and not required:
            continue
        require(value is not None and value > 0, f"{where}: {key}={value!r} must be a positive integer")
        bound = LIMITS.get(name)
        require(
            bound is None or value <= bound,
            f"{where}: {key}={value} is more than this package's limit of {bound} ({name}); it is not a "
            "model this can open",
        )
        out[name] = value
    return out


def flag(hf: dict, where: str, key: str, default: bool) -> bool:
    """A true/false setting (absent or null: `default`)."""
    return setting(hf, where, key, bool, default)


def number(hf: dict, where: str, key: str, default: float, low: float = 0.0, high: float = math.inf) -> float:
    """A number in (low, high) (absent or null: `default`)."""
    value = setting(hf, where, key, float, default)
    require(low < value < high, f"{where}: {key}={value!r} must be a number between {low:g} and {high:g}")
    return value


def choice(hf: dict, where: str, key: str, default: str, options: dict[str, str]) -> str:
    """A setting of a few names, mapped to this project's (a name it lacks refused with the ones it has)."""
    value = setting(hf, where, key, str, default)
    require(
        value in options,
        f"{where}: {key}={value!r} is not one this project's models have; they have {', '.join(options)}",
    )
    return options[value]


def refuse_present(hf: dict, where: str, keys: dict[str, str]) -> None:
    """Refuse, by name, a setting the family has and this project's blocks do not: key -> what it is
    (refused when present with a value other than null, false or 0)."""
    for key, what in keys.items():
        value = hf.get(key)
        require(
            value in (None, False, 0, []),
            f"{where}: {key}={value!r}: {what}, which this project's blocks do not have; it is not a model "
            "this can open",
        )


def rope(hf: dict, where: str, fraction_key: str | None, default_fraction: float) -> dict:
    """Rotary settings: rope_theta (rope_parameters, or the top-level rope_theta / rotary_emb_base of
    older files), the rotated share of a head (`fraction_key`, or partial_rotary_factor), and no scaling
    but the default (rope_type default; linear, dynamic, yarn, llama3, ... refused by name)."""
    parameters = hf.get("rope_parameters")
    scaling = hf.get("rope_scaling")
    for key, value in (("rope_parameters", parameters), ("rope_scaling", scaling)):
        require(
            value is None or isinstance(value, dict), f"{where}: {key}={value!r} must be an object or null"
        )
    merged = {**(scaling or {}), **(parameters or {})}
    for given in (scaling or {}, parameters or {}):
        kind = given.get("rope_type", given.get("type", "default"))
        require(
            kind in ("default", None),
            f"{where}: rope scaling of type {kind!r}: this project's rotary positions have only the default "
            "(unscaled) kind; it is not a model this can open",
        )
    theta = merged.get("rope_theta", hf.get("rope_theta", hf.get("rotary_emb_base", 10000.0)))
    theta = number({"rope_theta": theta}, where, "rope_theta", 10000.0, low=1.0)
    fraction = merged.get("partial_rotary_factor")
    key = "partial_rotary_factor"
    if fraction is None and fraction_key is not None and fraction_key in hf:
        fraction, key = hf[fraction_key], fraction_key
    fraction = default_fraction if fraction is None else fraction
    require(
        isinstance(fraction, int | float) and not isinstance(fraction, bool) and 0 < fraction <= 1,
        f"{where}: {key}={fraction!r} must be in (0, 1]: the share of each head's dimensions rotary "
        "positions rotate",
    )
    return {"rotary_base": theta, "rotary_fraction": float(fraction)}


def special_tokens(hf: dict, vocab_size: int) -> dict:
    """bos_id and eos_id from config.json's bos_token_id and eos_token_id (the first of a list, as
    transformers' generate ends at it), each None where it is absent or no token's id."""

    def first(key: str) -> int | None:
        value = hf.get(key)
        value = value[0] if isinstance(value, list) and value else value
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab_size
        return value if ok else None

    return {"bos_id": first("bos_token_id"), "eos_id": first("eos_token_id")}


def special_ids(config: ModelConfig) -> dict:
    """The special token ids of config.json (null where the model has none)."""
    return {"bos_token_id": config.bos_id, "eos_token_id": config.eos_id, "pad_token_id": config.pad_id}
