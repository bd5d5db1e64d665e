"""What the page's JavaScript forward pass can run, said once, in Python.

* `CAPABILITIES`: every model setting that changes the forward pass, with the values `model.js` implements
  (its `CAPABILITIES` mirrors this table; a test holds the two equal). `check_runnable(config)` refuses,
  before any HTML is made, a live page of a model with another value (a `ConfigError` naming the setting,
  its value and what the page runs); `live=false` pages need no JavaScript model and are never refused.
* `LABEL_RULES`: the rules by which the page works out the expected output of an edited input, by the
  name a task's record gives (`TaskDataModule.label_rule`); `input.js` implements exactly these.
* `ROLES` and `weight_layout(model)`: what every weight tensor is (its state_dict name, shape and role:
  `attn.qkv.weight` of block 1 of stack 0, the output layer's `unembed.weight`, ...). The layout is
  shipped in the page (`spec.layout`) and `model.js` finds each weight by its role there, never by a name
  or an index of its own.
"""

from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields

from torch import nn

from transformer_lab.errors import ConfigError
from transformer_lab.nn import ModelConfig, TokenModel
from transformer_lab.nn.blocks import RMSNorm

# setting -> the values model.js runs (model.js: CAPABILITIES)
CAPABILITIES: dict[str, tuple] = {
    "arch": ("encoder", "decoder", "encoder_decoder"),
    "positional_encoding": ("sinusoidal", "learned", "none", "rotary"),
    "activation": ("relu", "gelu", "gelu_new", "swiglu", "geglu"),
    "norm": ("layer", "rms"),
    "parallel_residual": (False, True),
    "norm_first": (False, True),
    "bias": (False, True),
    "output_mlp": (False, True),
    "tie_embeddings": (False, True),
    "scale_attention": (False, True),
    "mlp": (False, True),
}
# settings the page reads as sizes, token ids and numbers (any value runs), that the layout carries (a
# part's biases: there or not), or that do nothing in eval mode
SIZES = (
    "norm_eps",
    "rotary_fraction",
    "rotary_base",
    "num_kv_heads",
    "attention_window",
    "window_layers",
    "qkv_bias",
    "out_bias",
    "mlp_bias",
    "norm_bias",
    "unembed_bias",
    "vocab_size",
    "vocab",
    "unused_rows",
    "num_classes",
    "pad_id",
    "bos_id",
    "eos_id",
    "sep_id",
    "model_dim",
    "num_heads",
    "num_layers",
    "dim_feedforward",
    "mlp_ratio",
    "max_len",
    "dropout",
    "input_dropout",
)
# the label rules of the tasks' records the page knows (input.js: LABEL_RULES)
LABEL_RULES = ("next", "induction", "reverse", "sort_unique")
LAYER_NORM_EPS = 1e-5  # model.js's LN_EPS: nn.LayerNorm's default (the output MLP's; the blocks': norm_eps)


def _shown(value: object, quoted: bool = True) -> str:
    """A setting's value as the training config writes it: true/false, 'text' (text bare: `quoted`)."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if quoted or not isinstance(value, str) else value


def check_runnable(config: ModelConfig) -> None:
    """Raise ConfigError unless the page's forward pass runs a model of `config`: a value of a setting
    in CAPABILITIES that model.js does not implement, or a setting the page does not know (one added to
    ModelConfig after this table) at other than its default."""
    values = config.to_dict()
    for key, allowed in CAPABILITIES.items():
        if values.get(key) not in allowed:
            runs = ", ".join(_shown(v, quoted=False) for v in allowed)
            raise ConfigError(
                f"{key}={_shown(values.get(key))} cannot run in the page (it runs {runs}); "
                "explore with live=false for the precomputed views"
            )
    defaults = {f.name: f.default for f in fields(ModelConfig) if f.default is not MISSING}
    for key, value in values.items():
        if key in CAPABILITIES or key in SIZES or (key in defaults and value == defaults[key]):
            continue
        known = f"only at its default, {_shown(defaults[key])}" if key in defaults else "nothing of it"
        raise ConfigError(
            f"{key}={_shown(value)} cannot run in the page (it knows {known}); explore with live=false for "
            "the precomputed views"
        )


# ------------------------------------------------------------------------------------ the weights
def _vector(c: ModelConfig) -> tuple[int, ...]:
    return (c.model_dim,)


def _qkv(c: ModelConfig) -> int:
    """The rows of W^Q, W^K, W^V stacked: H query heads and KV key and value heads of d_head each."""
    return (c.num_heads + 2 * c.num_kv_heads) * c.head_dim


# role -> (what it is, its shape from the config). ATTN stands for an attention sub-layer's module name
# (`attn`, `cross_attn`): the role of block i's `cross_attn.qkv_proj.weight` is `cross_attn.qkv.weight`.
ROLES: dict[str, tuple[str, Callable[[ModelConfig], tuple[int, ...]]]] = {
    # one per stack
    "embed": ("token embedding E [vocab, D]", lambda c: (c.vocab_size, c.model_dim)),
    "pos_embed": ("learned positions P [max_len, D]", lambda c: (c.max_len, c.model_dim)),
    "final_norm.weight": ("the stack's final LayerNorm (pre-norm): gain", _vector),
    "final_norm.bias": ("the stack's final LayerNorm: bias", _vector),
    # one per block
    "ATTN.norm.weight": ("the attention sub-layer's norm (LayerNorm or RMSNorm): gain", _vector),
    "ATTN.norm.bias": ("the attention sub-layer's LayerNorm: bias", _vector),
    "ATTN.qkv.weight": ("W^Q, W^K, W^V stacked [q | k | v]", lambda c: (_qkv(c), c.model_dim)),
    "ATTN.qkv.bias": ("the biases of Q, K, V", lambda c: (_qkv(c),)),
    "ATTN.out.weight": ("W^O, the heads' output projection", lambda c: (c.model_dim, c.model_dim)),
    "ATTN.out.bias": ("W^O's bias", _vector),
    "mlp.norm.weight": ("the MLP sub-layer's norm: gain", _vector),
    "mlp.norm.bias": ("the MLP sub-layer's LayerNorm: bias", _vector),
    "mlp.gate.weight": ("a gated MLP's W_gate [F, D]", lambda c: (c.dim_feedforward, c.model_dim)),
    "mlp.gate.bias": ("b_gate", lambda c: (c.dim_feedforward,)),
    "mlp.in.weight": ("W_1 [F, D] (a gated MLP's up projection)", lambda c: (c.dim_feedforward, c.model_dim)),
    "mlp.in.bias": ("b_1", lambda c: (c.dim_feedforward,)),
    "mlp.out.weight": ("W_2 [D, F]", lambda c: (c.model_dim, c.dim_feedforward)),
    "mlp.out.bias": ("b_2", _vector),
    # the output layer: one Linear, or the tutorial's Linear-LayerNorm-ReLU-Linear (hidden, norm, then it)
    "unembed.hidden.weight": ("the output MLP's first Linear", lambda c: (c.model_dim, c.model_dim)),
    "unembed.hidden.bias": ("its bias", _vector),
    "unembed.norm.weight": ("the output MLP's LayerNorm: gain", _vector),
    "unembed.norm.bias": ("its bias", _vector),
    "unembed.weight": ("the output Linear [classes, D]", lambda c: (c.output_classes, c.model_dim)),
    "unembed.bias": ("its bias", lambda c: (c.output_classes,)),
}
PARAMS = ("weight", "bias")


@dataclass(frozen=True)
class Weight:
    """One tensor of the state_dict as the page reads it: `role` in stack `stack`, block `block` (None:
    the stack's own, or the model's output layer)."""

    name: str
    shape: tuple[int, ...]
    role: str
    stack: int | None
    block: int | None


def _roles(model: TokenModel) -> dict[str, tuple[str, int | None, int | None]]:
    """state_dict name -> (role, stack, block) for every tensor the page's forward pass reads, from the
    models' shared interface (`stacks()`, the blocks' declared sub-layers) and the output layer's parts."""
    roles: dict[str, tuple[str, int | None, int | None]] = {}
    for s, (prefix, stack) in enumerate(model.stacks().items()):
        roles[f"{prefix}embed.weight"] = ("embed", s, None)
        roles[f"{prefix}pos_embed.embedding.weight"] = ("pos_embed", s, None)
        for p in PARAMS:
            roles[f"{prefix}ln_final.norm.{p}"] = (f"final_norm.{p}", s, None)
        for i, block in enumerate(stack.blocks):
            name = f"{prefix}blocks.{i}"
            for norm, attn, *_ in block.SUBLAYERS:  # (norm, attention module, hook points)
                for p in PARAMS:
                    roles[f"{name}.{norm}.{p}"] = (f"{attn}.norm.{p}", s, i)
                    roles[f"{name}.{attn}.qkv_proj.{p}"] = (f"{attn}.qkv.{p}", s, i)
                    roles[f"{name}.{attn}.o_proj.{p}"] = (f"{attn}.out.{p}", s, i)
            for p in PARAMS:
                roles[f"{name}.{block.MLP_NORM}.{p}"] = (f"mlp.norm.{p}", s, i)
                roles[f"{name}.mlp.fc_gate.{p}"] = (f"mlp.gate.{p}", s, i)
                roles[f"{name}.mlp.fc_in.{p}"] = (f"mlp.in.{p}", s, i)
                roles[f"{name}.mlp.fc_out.{p}"] = (f"mlp.out.{p}", s, i)
    unembed = getattr(model, "unembed", None)
    parts: list[tuple[str, str]] = []  # (module name under unembed., role prefix)
    if isinstance(unembed, nn.Linear):
        parts = [("", "unembed")]
    elif isinstance(unembed, nn.Sequential):
        named = [(n, m) for n, m in unembed.named_children() if not isinstance(m, nn.Dropout | nn.Identity)]
        if [type(m) for _, m in named] == [nn.Linear, nn.LayerNorm, nn.ReLU, nn.Linear]:
            parts = [(named[0][0], "unembed.hidden"), (named[1][0], "unembed.norm"), (named[3][0], "unembed")]
    for module, role in parts:
        for p in PARAMS:
            roles[f"unembed.{module + '.' if module else ''}{p}"] = (f"{role}.{p}", None, None)
    return roles


def _generic(role: str, model: TokenModel) -> str:
    """The ROLES key of a role: an attention module's name replaced by ATTN."""
    for layer in model.attention_layers():
        module = layer.name.rpartition(".")[2]
        if role.startswith(module + "."):
            return "ATTN" + role[len(module) :]
    return role


def weight_layout(model: TokenModel) -> tuple[list[Weight], str | None]:
    """Every state_dict tensor with its role, or (what there is, why the page cannot run it): a tensor
    the page's forward pass does not know, a shape other than the role's, or a norm whose eps is not the
    page's (the config's norm_eps in the blocks, LayerNorm's default in the output MLP)."""
    roles = _roles(model)
    config = model.config
    layout = []
    for name, tensor in model.state_dict().items():
        if name not in roles:
            return layout, f"the model has a weight the page's forward pass does not know ({name})"
        role, stack, block = roles[name]
        expected = ROLES[_generic(role, model)][1](config)
        if tuple(tensor.shape) != expected:
            return layout, (
                f"the weight {name} ({role}) has shape {list(tensor.shape)}; the page's forward pass "
                f"expects {list(expected)}"
            )
        layout.append(Weight(name, tuple(tensor.shape), role, stack, block))
    output = getattr(model, "unembed", None)
    for name, module in model.named_modules():
        if isinstance(module, nn.LayerNorm | RMSNorm):
            inside = isinstance(output, nn.Sequential) and name.startswith("unembed.")
            expected = LAYER_NORM_EPS if inside else config.norm_eps
            if module.eps != expected:
                return layout, (
                    f"the model's norm {name} has eps={module.eps:g}; the page's forward pass uses "
                    f"{expected:g}"
                )
    return layout, None


LAYOUT_COLUMNS = ["name", "role", "stack", "block", "shape"]


def shipped_layout(layout: list[Weight]) -> dict:
    """The layout as the page's JSON: one row per tensor, in LAYOUT_COLUMNS order."""
    return {
        "columns": LAYOUT_COLUMNS,
        "rows": [[w.name, w.role, w.stack, w.block, list(w.shape)] for w in layout],
    }
