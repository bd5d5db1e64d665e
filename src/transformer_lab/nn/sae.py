"""Sparse autoencoders (SAEs): a wide, sparse dictionary of the activations at one hook point.

An SAE writes each activation x (a vector of `d_in` numbers at one position) as a sparse, non-negative
combination of `width` learned directions, its *features* (Bricken et al. 2023, Cunningham et al. 2023):

    pre   = (s x - b_dec) W_enc + b_enc              [..., width]   pre-activations
    f     = act(pre)                                 [..., width]   feature activations, mostly 0
    x_hat = (f W_dec + b_dec) / s                    [..., d_in]    the reconstruction

Row i of W_dec [width, d_in] is feature i's direction, kept at unit norm during training (a column of
the decoder matrix D in x_hat = D f + b); `s` (`input_scale`) rescales the activations so that their
mean norm is sqrt(d_in), which makes one sparsity coefficient fit every hook (Anthropic's normalisation);
b_dec is subtracted before encoding (SAELens's `apply_b_dec_to_input`). `act` is the kind's:


* relu, topk, batchtopk, jumprelu: `nn.sae_kinds`, one class each (its activation, its sparsity penalty,
  its SAELens form).

The hook points have SAELens's names: `hook_sae_input`, `hook_sae_acts_pre`, `hook_sae_acts_post` (the
features), `hook_sae_recons`, `hook_sae_error`, `hook_sae_output`.

Splicing (`splice`, `spliced`) puts an SAE into a model at its hook point: the activation x there becomes

    out = decode(f') + (x - decode(f))        f: the features of x, f': the same after any hook on them

the reconstruction plus its error, so the model's output is unchanged unless a feature is changed (a
hook on `hook_sae_acts_post` sets f' != f and moves the output by (f' - f) W_dec / s); zeroing
`hook_sae_error` replaces the activation by the reconstruction alone. As in SAELens, the error term is
computed without gradient: gradients reach the activation through the features only.
"""

from __future__ import annotations

import difflib
import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor, nn

from transformer_lab.nn import sae_kinds
from transformer_lab.nn.config import from_plain, is_int, is_number, require
from transformer_lab.nn.dictionary import Dictionary
from transformer_lab.nn.hooks import HookedModule, HookPoint, StopForward

MAX_WIDTH = 1 << 22  # features: far above what fits a laptop's memory at any d_in worth an SAE
MAX_D_IN = 1 << 17
# Hook points whose activation is not one vector per position (attention maps [B, H, T, T]).
NOT_PER_POSITION = ("hook_pattern", "hook_attn_scores")


@dataclass
class SAEConfig:
    """An SAE's shape and activation (see the module docstring).

    d_in: the activation's size at the hook. width: the number of features. kind: one of
    `sae_kinds.names()` (default `sae_kinds.DEFAULT`). hook: the hook point it reads (its name in the
    source model), "" for activations of no model. The kinds' own settings (k null: the kind's
    default): k, the active features per position (topk; batchtopk: on average); bandwidth and
    threshold, jumprelu's straight-through estimator's width and its initial threshold.
    """

    d_in: int
    width: int
    kind: str = sae_kinds.DEFAULT
    k: int | None = None
    hook: str = ""
    bandwidth: float = field(default=sae_kinds.JumpReLUKind.settings["bandwidth"])
    threshold: float = field(default=sae_kinds.JumpReLUKind.settings["threshold"])

    @classmethod
    def from_dict(cls, values: dict) -> SAEConfig:
        def unknown(key: str, known: str) -> Exception:
            return ValueError(f"the SAE config has an unknown key {key!r} (it has {known})")

        return from_plain(cls, values, unknown)

    def __post_init__(self) -> None:
        if self.kind in sae_kinds.names() and self.k is None:
            self.k = sae_kinds.get(self.kind).settings.get("k")
        self.check()

    @property
    def rule(self) -> sae_kinds.Kind:
        """The kind's rule: its activation, penalty and SAELens form (`nn.sae_kinds`)."""
        return sae_kinds.get(self.kind)

    def check(self) -> None:
        """Raise ValueError naming the first impossible value and how to fix it."""
        require(isinstance(self.kind, str), f"model.kind={self.kind!r} must be a kind's name")
        rule = self.rule
        for key, bound in (("d_in", MAX_D_IN), ("width", MAX_WIDTH)):
            value = getattr(self, key)
            require(is_int(value) and value > 0, f"the SAE's {key}={value!r} must be a positive integer")
            require(
                value <= bound,
                f"the SAE's {key}={value} is more than this package's limit of {bound}; "
                + ("lower model.expansion" if key == "width" else "it is not an activation an SAE can read"),
            )
        rule.check(self)
        for key in ("bandwidth", "threshold"):
            value = getattr(self, key)
            require(
                is_number(value) and 0 < value < math.inf,
                f"model.{key}={value!r} must be a positive, finite number",
            )
        require(isinstance(self.hook, str), f"the SAE's hook={self.hook!r} must be a hook point's name")

    def to_dict(self) -> dict:
        """Plain data, for checkpoints."""
        return asdict(self)


class SparseAutoencoder(Dictionary):
    """The SAE of `config` (see the module docstring): `encode`, `decode`, `forward` (x -> x_hat); the
    weights, the kind and the training terms are the `Dictionary`'s, reading and writing the same
    activation."""

    def __init__(self, config: SAEConfig):
        super().__init__(config, config.d_in)

    def shape(self) -> str:
        """`topk k=16, 384 features of 48-dim activations at blocks.0.hook_attn_out`."""
        c = self.config
        where = f" at {c.hook}" if c.hook else ""
        return f"{self.kind.describe(c)}, {c.width} features of {c.d_in}-dim activations{where}"

    def encoder_input(self, x: Tensor) -> Tensor:
        """s x - b_dec (SAELens's apply_b_dec_to_input)."""
        return x * self.input_scale - self.b_dec

    def spliced(self, x: Tensor) -> Tensor:
        """What a model reads where this SAE is spliced in: decode(f') + e', f' the features and e' the
        error e = x - decode(f) after any hooks on them (the module docstring). Computed as

            x + (decode(f') - decode(f)) + (e' - e)

        which is the same sum, but exactly x, bit for bit, when no hook changes anything (the two decodes
        are one computation on equal features), where decode(f) + (x - decode(f)) is x only to float
        rounding. x and decode(f) enter without gradient: it reaches x through the features alone."""
        pre = self.pre_activations(x)
        clean = self.activate(pre)
        f = self.hook_sae_acts_post(clean)
        with torch.no_grad():
            x_hat = (clean @ self.W_dec + self.b_dec) / self.input_scale
            error = x - x_hat
        hooked_error = self.hook_sae_error(error)
        return self.hook_sae_output(x.detach() + (self.decode(f) - x_hat) + (hooked_error - error))


# ------------------------------------------------------------------------------ into a model, and back
class SplicedHookPoint(HookPoint):
    """A model's hook point with an SAE spliced in (`splice`): it passes on `sae.spliced(x)`. Hooks on
    this point see what it passes on; the SAE's own are `<hook>.sae.hook_sae_acts_post` etc."""

    def __init__(self, sae: SparseAutoencoder, original: HookPoint):
        super().__init__()
        self.sae = sae
        self.original = [original]  # not a child module: restored by `unsplice`

    def forward(self, x: Tensor) -> Tensor:
        flat = x.flatten(2) if x.dim() == 4 else x  # per head [B, T, H, D] -> [B, T, H D]
        return self.sae.spliced(flat).view_as(x)

    def __call__(self, x: Tensor) -> Tensor:
        return nn.Module.__call__(self, x)


def hook_dim(model: HookedModule, hook: str) -> int:
    """The size of one position's activation at `hook` (per-head hooks [B, T, H, D]: H D), from a forward
    pass of one token (`check_hook` first)."""
    inputs = _one_token(model)
    dims: list[int] = []

    def keep(activation: Tensor, point: HookPoint) -> None:
        dims.append(math.prod(activation.shape[2:]))
        raise StopForward

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.hooks([(hook, keep)]):
            model(*inputs)
    except StopForward:
        pass
    finally:
        model.train(was_training)
    return dims[0]


def check_hook(model: HookedModule, hook: str, where: str = "the model") -> None:
    """A ValueError naming the nearest hook points unless `hook` is one an SAE can read: a hook point of
    the model with one vector per position (not an attention map)."""
    names = [n for n in model.hook_names() if ".sae." not in n]
    if hook not in names:
        close = difflib.get_close_matches(hook, names, n=5, cutoff=0.0)
        raise ValueError(
            f"hook={hook} is not a hook point of {where}; the nearest are {', '.join(close)} "
            f"(model.hook_names() lists all {len(names)})"
        )
    if hook.endswith(NOT_PER_POSITION):
        raise ValueError(
            f"hook={hook} holds attention maps [B, H, T, T], not a vector per position, which an SAE "
            "reads; use e.g. a residual stream (hook_resid_post) or an output (hook_attn_out, hook_mlp_out)"
        )


def splice(model: HookedModule, sae: SparseAutoencoder, hook: str | None = None) -> SplicedHookPoint:
    """Put `sae` into `model` at `hook` (default: the one it was trained on), checked: the hook exists,
    it is the SAE's own (if it records one), and its activations have the SAE's size."""
    hook = hook or sae.config.hook
    check_hook(model, hook)
    if sae.config.hook and sae.config.hook != hook:
        raise ValueError(
            f"this SAE was trained on {sae.config.hook}, not {hook}; splice it at {sae.config.hook}"
        )
    size = hook_dim(model, hook)
    if size != sae.config.d_in:
        raise ValueError(
            f"this SAE reads activations of size {sae.config.d_in} but {hook} has {size} here: it was "
            "trained on another model; splice it into its own source model"
        )
    parent_name, _, name = hook.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    point = SplicedHookPoint(sae, getattr(parent, name)).to(_device(model))
    setattr(parent, name, point)
    return point


def unsplice(model: HookedModule) -> None:
    """Take every spliced SAE out of `model`, its hook points as they were."""
    for name, module in list(model.named_modules()):
        if isinstance(module, SplicedHookPoint):
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, module.original[0])


@contextmanager
def spliced(model: HookedModule, sae: SparseAutoencoder, hook: str | None = None) -> Iterator[HookedModule]:
    """`splice` for the duration of a `with` block."""
    splice(model, sae, hook)
    try:
        yield model
    finally:
        unsplice(model)


def activations_at(model: HookedModule, hook: str, *inputs: Tensor) -> Tensor:
    """The activation at `hook` for `inputs`, [B, T, d] (per-head hooks flattened to [B, T, H D]); the
    forward pass stops there (nothing after the hook is computed). Under the caller's autograd mode."""
    return activations_at_hooks(model, [hook], *inputs)[0]


def activations_at_hooks(model: HookedModule, hooks: list[str], *inputs: Tensor) -> list[Tensor]:
    """The activations at each of `hooks` (as `activations_at`), in their order; the forward pass stops
    at the last of them to run."""
    found: dict[str, Tensor] = {}

    def keep(activation: Tensor, point: HookPoint) -> None:
        found[point.name] = activation.flatten(2) if activation.dim() == 4 else activation
        if len(found) == len(set(hooks)):
            raise StopForward

    try:
        with model.hooks([(hook, keep) for hook in dict.fromkeys(hooks)]):
            model(*inputs)
    except StopForward:
        pass
    return [found[hook] for hook in hooks]


def real_positions(model: nn.Module, hook: str, inputs: tuple[Tensor, ...]) -> Tensor:
    """Bool [B, T]: the positions of the stack `hook` is in (an encoder-decoder's `decoder.` hooks: the
    target's) that hold a token, not padding."""
    tokens = inputs[1] if hook.startswith("decoder.") else inputs[0]
    pad = getattr(getattr(model, "config", None), "pad_id", None)
    return torch.ones_like(tokens, dtype=torch.bool) if pad is None else tokens != pad


def fingerprint(model: nn.Module) -> str:
    """The sha256 of a model's weights (every tensor of its state dict by name, as float32 bytes): which
    model an SAE was trained on, whatever file or format it came in."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def _one_token(model: nn.Module) -> tuple[Tensor, ...]:
    """The smallest input a model takes: one token (not padding) per input."""
    config = getattr(model, "config", None)
    pad = getattr(config, "pad_id", None)
    token = 1 if pad == 0 else 0
    device = _device(model)
    count = getattr(model, "num_inputs", 1)
    return tuple(torch.full((1, 1), token, dtype=torch.long, device=device) for _ in range(count))


def _device(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
