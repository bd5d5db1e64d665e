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

* `relu`: f = ReLU(pre), trained with an L1 penalty l1 * sum_i f_i (Bricken et al. 2023);
* `topk`: keep each position's k largest pre-activations, ReLU, zero the rest (Gao et al. 2024);
* `batchtopk`: in training, keep the k * N largest of ReLU(pre) over the batch's N positions (k on
  average; Bussmann et al. 2024); in use, f = pre * [pre > theta], theta the running estimate of the
  smallest activation training kept (so it becomes a JumpReLU with one threshold, as SAELens saves it);
* `jumprelu`: f = pre * [pre > theta_i], theta_i = exp(log_threshold_i) learned through a straight-through
  estimator of the step's gradient, with an L0 penalty l1 * sum_i [pre_i > theta_i] (Rajamanoharan et al.
  2024; `l1` is the coefficient of the kind's sparsity penalty, whatever norm it takes).

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
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from transformer_lab.nn.hooks import HookedModule, HookPoint

KINDS = ("relu", "topk", "batchtopk", "jumprelu")
NEEDS_K = ("topk", "batchtopk")
MAX_WIDTH = 1 << 22  # features: far above what fits a laptop's memory at any d_in worth an SAE
MAX_D_IN = 1 << 17
# Hook points whose activation is not one vector per position (attention maps [B, H, T, T]).
NOT_PER_POSITION = ("hook_pattern", "hook_attn_scores")


@dataclass
class SAEConfig:
    """An SAE's shape and activation (see the module docstring).

    kind: relu | topk | batchtopk | jumprelu. d_in: the activation's size at the hook. width: the number
    of features. k: the active features per position (topk; batchtopk: on average), None otherwise.
    hook: the hook point it reads (its name in the source model), "" for activations of no model.
    bandwidth, threshold: jumprelu's straight-through estimator's width and its initial threshold.
    """

    kind: str = "relu"
    d_in: int = 1
    width: int = 8
    k: int | None = None
    hook: str = ""
    bandwidth: float = 0.05
    threshold: float = 0.01

    @classmethod
    def from_dict(cls, values: dict) -> SAEConfig:
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"the SAE config has an unknown key {unknown[0]!r} (it has {', '.join(known)})")
        return cls(**values)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ValueError naming the first impossible value and how to fix it."""
        _require(self.kind in KINDS, f"model.kind={self.kind!r} is unknown; use {' | '.join(KINDS)}")
        for key, bound in (("d_in", MAX_D_IN), ("width", MAX_WIDTH)):
            value = getattr(self, key)
            _require(_is_int(value) and value > 0, f"the SAE's {key}={value!r} must be a positive integer")
            _require(
                value <= bound,
                f"the SAE's {key}={value} is more than this package's limit of {bound}; "
                + ("lower model.expansion" if key == "width" else "it is not an activation an SAE can read"),
            )
        if self.kind in NEEDS_K:
            _require(
                _is_int(self.k) and self.k > 0,
                f"model.kind={self.kind} needs model.k, a positive integer (the active features per "
                "position)",
            )
            _require(
                self.k <= self.width,
                f"model.k={self.k} is more than the SAE's width of {self.width} features; lower model.k or "
                "raise model.expansion",
            )
        else:
            _require(self.k is None, f"model.k={self.k} is for kind=topk or batchtopk; leave it out (null)")
        for key in ("bandwidth", "threshold"):
            value = getattr(self, key)
            _require(
                isinstance(value, int | float) and not isinstance(value, bool) and value > 0,
                f"model.{key}={value!r} must be a positive number",
            )
        _require(isinstance(self.hook, str), f"the SAE's hook={self.hook!r} must be a hook point's name")

    def to_dict(self) -> dict:
        """Plain data, for checkpoints."""
        return asdict(self)


class SparseAutoencoder(HookedModule):
    """The SAE of `config` (see the module docstring): `encode`, `decode`, `forward` (x -> x_hat)."""

    def __init__(self, config: SAEConfig):
        super().__init__()
        config.check()
        self.config = config
        d, w = config.d_in, config.width
        # W_dec's rows: random unit directions; W_enc starts as W_dec's transpose (Conerly et al. 2024)
        decoder = torch.randn(w, d)
        decoder /= decoder.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(decoder)
        self.W_enc = nn.Parameter(decoder.t().clone())
        self.b_enc = nn.Parameter(torch.zeros(w))
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.register_buffer("input_scale", torch.ones(()))
        if config.kind == "jumprelu":
            self.log_threshold = nn.Parameter(torch.full((w,), math.log(config.threshold)))
        if config.kind == "batchtopk":
            self.register_buffer("batch_threshold", torch.zeros(()))
        self.hook_sae_input = HookPoint()
        self.hook_sae_acts_pre = HookPoint()
        self.hook_sae_acts_post = HookPoint()
        self.hook_sae_recons = HookPoint()
        self.hook_sae_error = HookPoint()
        self.hook_sae_output = HookPoint()

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def width(self) -> int:
        return self.config.width

    @property
    def threshold(self) -> Tensor | None:
        """Each feature's threshold theta [width] (jumprelu; batchtopk in use: one value), else None."""
        if self.kind == "jumprelu":
            return self.log_threshold.exp()
        if self.kind == "batchtopk":
            return self.batch_threshold.expand(self.width)
        return None

    def shape(self) -> str:
        """`topk k=16, 384 features of 48-dim activations at blocks.0.hook_attn_out`."""
        c = self.config
        kind = f"{c.kind} k={c.k}" if c.k is not None else c.kind
        where = f" at {c.hook}" if c.hook else ""
        return f"{kind}, {c.width} features of {c.d_in}-dim activations{where}"

    # ------------------------------------------------------------------------------- the forward pass
    def pre_activations(self, x: Tensor) -> Tensor:
        """pre = (s x - b_dec) W_enc + b_enc."""
        x = self.hook_sae_input(x)
        return self.hook_sae_acts_pre((x * self.input_scale - self.b_dec) @ self.W_enc + self.b_enc)

    def activate(self, pre: Tensor) -> Tensor:
        """The kind's activation f = act(pre) (before `hook_sae_acts_post`)."""
        kind = self.kind
        if kind == "relu":
            return torch.relu(pre)
        if kind == "topk":
            top = pre.topk(self.config.k, dim=-1)
            return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        if kind == "batchtopk" and self.training:
            flat = pre.relu().reshape(-1)
            keep = min(flat.numel(), self.config.k * (pre.numel() // self.width))
            top = flat.topk(keep)
            return torch.zeros_like(flat).scatter(0, top.indices, top.values).view_as(pre)
        threshold = self.threshold
        if kind == "jumprelu" and pre.requires_grad:
            flat = pre.reshape(-1, self.width)
            return JumpReLU.apply(flat, threshold, self.config.bandwidth).view_as(pre)
        return pre * (pre > threshold)

    def encode(self, x: Tensor) -> Tensor:
        """The features f of activations x [..., d_in] -> [..., width]."""
        return self.hook_sae_acts_post(self.activate(self.pre_activations(x)))

    def decode(self, f: Tensor) -> Tensor:
        """x_hat = (f W_dec + b_dec) / s."""
        return self.hook_sae_recons((f @ self.W_dec + self.b_dec) / self.input_scale)

    def forward(self, x: Tensor) -> Tensor:
        """The reconstruction x_hat of x [..., d_in]."""
        return self.hook_sae_output(self.decode(self.encode(x)))

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

    # ----------------------------------------------------------------------------------- training
    def training_losses(
        self, x: Tensor, l1: float, aux_k: float = 0.0, dead: Tensor | None = None
    ) -> dict[str, Tensor]:
        """The terms of the training loss on activations x [N, d_in], in the scaled space (s x):

            mse      = mean_n ||s x_n - s x_hat_n||^2                     (summed over dimensions)
            sparsity = l1 * mean_n sum_i f_ni (relu) | l1 * mean_n ||f_n||_0 (jumprelu, straight-through)
            aux      = aux_k * mean_n ||e_n - e_hat_n||^2 (topk, batchtopk: AuxK, Gao et al. 2024): the
                       d_in / 2 largest pre-activations of the `dead` features [width] (bool) alone
                       reconstruct the error e = s x - s x_hat, which gives dead features a gradient

        and `features` (f, detached) and `loss`, their sum."""
        pre = self.pre_activations(x)
        f = self.hook_sae_acts_post(self.activate(pre))
        scaled = x * self.input_scale
        recon = f @ self.W_dec + self.b_dec
        error = scaled - recon
        losses = {"mse": error.pow(2).sum(-1).mean()}
        if self.kind == "relu":
            losses["sparsity"] = l1 * f.sum(-1).mean()
        elif self.kind == "jumprelu":
            losses["sparsity"] = l1 * Step.apply(pre, self.threshold, self.config.bandwidth).sum(-1).mean()
        if self.kind in NEEDS_K and self.training:
            losses["aux"] = aux_k * self._aux_loss(pre, error.detach(), dead)
            if self.kind == "batchtopk":
                self._update_batch_threshold(f)
        losses["loss"] = sum(losses.values())
        losses["features"] = f.detach()
        return losses

    def _aux_loss(self, pre: Tensor, error: Tensor, dead: Tensor | None) -> Tensor:
        """AuxK: the top k_aux = d_in / 2 dead features reconstruct the error, scaled down while few are
        dead (SAELens's form of Gao et al.'s auxiliary loss)."""
        count = 0 if dead is None else int(dead.sum())
        if count == 0:
            return pre.new_zeros(())
        k_aux = min(max(self.config.d_in // 2, 1), count)
        scale = min(count / max(self.config.d_in // 2, 1), 1.0)
        masked = torch.where(dead, pre, torch.full_like(pre, -torch.inf))
        top = masked.topk(k_aux, dim=-1)
        f = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        return scale * (f @ self.W_dec - error).pow(2).sum(-1).mean()

    @torch.no_grad()
    def _update_batch_threshold(self, f: Tensor, rate: float = 0.01) -> None:
        """theta <- (1 - rate) theta + rate * (the smallest activation kept in this batch)."""
        kept = f[f > 0]
        if kept.numel():
            self.batch_threshold.mul_(1 - rate).add_(rate * kept.min())

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Every feature's direction (row of W_dec) back to unit norm."""
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp(min=1e-8))

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Remove from W_dec's gradient its component along each row: a step then turns the direction
        without changing its norm (to first order), so the L1 penalty cannot shrink it away."""
        grad = self.W_dec.grad
        if grad is not None:
            rows = self.W_dec / self.W_dec.norm(dim=1, keepdim=True).clamp(min=1e-8)
            grad -= (grad * rows).sum(dim=1, keepdim=True) * rows

    def directions(self) -> Tensor:
        """Each feature's unit direction in the activation space [width, d_in] (W_dec's rows normalised)."""
        return self.W_dec / self.W_dec.norm(dim=1, keepdim=True).clamp(min=1e-8)

    def state(self) -> dict[str, Any]:
        """The config as plain data and the weights: what a checkpoint holds."""
        return {"config": self.config.to_dict(), "state_dict": self.state_dict()}


class JumpReLU(torch.autograd.Function):
    """f = x [x > theta]: the gradient passes where the feature is on; theta's is the straight-through
    estimate -theta / eps K((x - theta) / eps) (K the rectangle on (-1/2, 1/2); Rajamanoharan et al.)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, threshold: Tensor, bandwidth: float) -> Tensor:
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return x * (x > threshold)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        x, threshold = ctx.saved_tensors
        eps = ctx.bandwidth
        window = ((x - threshold).abs() < eps / 2).to(x)
        return (x > threshold) * grad, (-(threshold / eps) * window * grad).sum(0), None


class Step(torch.autograd.Function):
    """H(x - theta) (the L0 of the features): no gradient to x; theta's is -1/eps K((x - theta) / eps)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, threshold: Tensor, bandwidth: float) -> Tensor:
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return (x > threshold).to(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, None]:
        x, threshold = ctx.saved_tensors
        eps = ctx.bandwidth
        window = ((x - threshold).abs() < eps / 2).to(x)
        return None, (-(1.0 / eps) * window * grad).reshape(-1, x.size(-1)).sum(0), None


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
        raise _Stop

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.hooks([(hook, keep)]):
            model(*inputs)
    except _Stop:
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


class _Stop(Exception):
    """Ends a forward pass at a hook point whose activation is all that is needed."""


def activations_at(model: HookedModule, hook: str, *inputs: Tensor) -> Tensor:
    """The activation at `hook` for `inputs`, [B, T, d] (per-head hooks flattened to [B, T, H D]); the
    forward pass stops there (nothing after the hook is computed). Under the caller's autograd mode."""
    found: list[Tensor] = []

    def keep(activation: Tensor, point: HookPoint) -> None:
        found.append(activation.flatten(2) if activation.dim() == 4 else activation)
        raise _Stop

    try:
        with model.hooks([(hook, keep)]):
            model(*inputs)
    except _Stop:
        pass
    return found[0]


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
