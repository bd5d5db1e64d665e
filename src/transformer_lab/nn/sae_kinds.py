"""The kinds of sparse dictionary: how features are switched on, what keeps them sparse, and how SAELens
names and stores each. One class per kind, registered by name (as SAELens registers its architectures);
a dictionary (`nn.sae`), its training (`training.sae_module`) and the SAELens files
(`interop.sae_lens_export`, `sae_lens_import`) ask the kind and never test its name.

    relu       f = ReLU(pre); penalty l1_coefficient * sum_i f_i (Bricken et al. 2023); dead features
               resampled                                                     SAELens: standard
    topk       each position's k largest pre-activations, ReLU, the rest 0 (Gao et al. 2024); dead
               features trained through AuxK                                 SAELens: topk
    batchtopk  in training the k * N largest of ReLU(pre) over the batch's N positions (k on average;
               Bussmann et al. 2024); in use f = pre [pre > theta], theta the running estimate of the
               smallest activation training kept; AuxK                       SAELens: jumprelu (saved so)
    jumprelu   f = pre [pre > theta_i], theta_i = exp(log_threshold_i) learned through a
               straight-through estimator; penalty l0_coefficient * sum_i [pre_i > theta_i]
               (Rajamanoharan et al. 2024)                                   SAELens: jumprelu

A new kind is a subclass of `Kind` under `@register`: its activation, its penalty and its coefficient's
name, the settings of `SAEConfig` it uses (with their defaults), and its SAELens form both ways. Its
methods take the dictionary (`nn.dictionary.Dictionary`, an nn.Module with `config`, `width`, the weights)
and its config (`nn.sae.SAEConfig`), typed loosely since both modules import this one.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

DEFAULT = "topk"  # the kind of `SAEConfig()` and of `train.py experiment=sae`
KINDS: dict[str, Kind] = {}  # every kind by name: the registry


def register(cls: type[Kind]) -> type[Kind]:
    """Register a kind under its `name`: `model.kind=<name>` trains it, every tool reads it."""
    KINDS[cls.name] = cls()
    return cls


def names() -> tuple[str, ...]:
    """Every kind's name, in registration order."""
    return tuple(KINDS)


def get(name: str) -> Kind:
    """The kind named `name`; a ValueError listing the kinds otherwise."""
    if name not in KINDS:
        raise ValueError(f"model.kind={name!r} is unknown; use {' | '.join(KINDS)}")
    return KINDS[name]


def reading_saelens(architecture: str) -> Kind | None:
    """The kind that reads SAELens's `architecture` (None: no kind here does)."""
    return next((kind for kind in KINDS.values() if kind.saelens_reads == architecture), None)


class Kind:
    """One kind of dictionary (the module docstring). Class attributes say what it is; methods compute.

    name: `model.kind`. settings: the SAEConfig fields it uses beyond the shape, with their defaults
    (`k`; `bandwidth`, `threshold`). coefficient: the name of its sparsity penalty's coefficient
    (SAELens's: l1_coefficient, l0_coefficient), None for none, with `default_coefficient` (in the
    scaled space, where activations have mean norm sqrt(d_in)). penalty_sum: which of the measures'
    sums (`analysis.sae_measures`) is its penalty per position: `l1` or `l0`. aux: dead features learn
    through AuxK. resamples: dead features are resampled. saelens: the architecture SAELens saves it as;
    saelens_reads: the SAELens architecture read as this kind (None: none is).
    """

    name: str = ""
    settings: ClassVar[dict[str, Any]] = {}
    coefficient: str | None = None
    default_coefficient: float = 0.0
    penalty_sum: str | None = None
    aux: bool = False
    resamples: bool = False
    saelens: str = ""
    saelens_reads: str | None = None
    saelens_tensors: tuple[str, ...] = ()  # tensors of its SAELens file beyond W_enc, b_enc, W_dec, b_dec
    in_use: str = "threshold"

    def describe(self, config: Any) -> str:
        """`topk k=16`, or the name."""
        return f"{self.name} k={config.k}" if "k" in self.settings else self.name

    def check(self, config: Any) -> None:
        """A ValueError naming the first setting of `config` this kind cannot use."""
        if "k" not in self.settings and config.k is not None:
            raise ValueError(f"model.k={config.k} is for kind=topk or batchtopk; leave it out (null)")

    def add_parameters(self, sae: nn.Module) -> None:
        """The parameters and buffers of its own (a threshold), beside the encoder and decoder."""

    def activate(self, sae: nn.Module, pre: Tensor) -> Tensor:
        """f = act(pre)."""
        raise NotImplementedError

    def threshold(self, sae: nn.Module) -> Tensor | None:
        """Each feature's threshold theta [width] in use, else None."""
        return None

    def penalty(self, sae: nn.Module, pre: Tensor, f: Tensor) -> Tensor | None:
        """Its sparsity penalty per position, averaged (before the coefficient), else None."""
        return None

    def after_loss(self, sae: nn.Module, f: Tensor) -> None:
        """What a training step's features update besides the gradient (batchtopk's threshold)."""

    # ---------------------------------------------------------------------------------- SAELens
    def saelens_config(self, config: Any) -> dict:
        """The keys of SAELens's cfg.json of its own."""
        return {}

    def from_saelens(self, cfg: dict) -> tuple[dict, bool]:
        """SAEConfig settings of its own from SAELens's cfg.json, and whether the activations are rescaled
        by the decoder's norms (rescale_acts_by_decoder_norm)."""
        return {}, False

    def saelens_state(self, tensors: dict[str, Tensor], location: str) -> dict[str, Tensor]:
        """This project's tensors of its own from SAELens's (`saelens_tensors`)."""
        return {}


def _check_k(config: Any) -> None:
    k = config.k
    if not (isinstance(k, int) and not isinstance(k, bool) and k > 0):
        raise ValueError(
            f"model.kind={config.kind} needs model.k, a positive integer (the active features per position)"
        )
    if k > config.width:
        raise ValueError(
            f"model.k={k} is more than the SAE's width of {config.width} features; lower model.k or raise "
            "model.expansion"
        )


def _gated(pre: Tensor, threshold: Tensor) -> Tensor:
    """pre [pre > theta]: a JumpReLU at inference."""
    return pre * (pre > threshold)


@register
class ReLUKind(Kind):
    name = "relu"
    coefficient = "l1_coefficient"
    default_coefficient = 3.0
    penalty_sum = "l1"
    resamples = True
    saelens = saelens_reads = "standard"
    in_use = "relu"

    def activate(self, sae: nn.Module, pre: Tensor) -> Tensor:
        return torch.relu(pre)

    def penalty(self, sae: nn.Module, pre: Tensor, f: Tensor) -> Tensor:
        """mean_n sum_i f_ni."""
        return f.sum(-1).mean()


@register
class TopKKind(Kind):
    name = "topk"
    settings: ClassVar[dict[str, Any]] = {"k": 16}
    aux = True
    saelens = saelens_reads = "topk"
    in_use = "topk"

    def check(self, config: Any) -> None:
        _check_k(config)

    def activate(self, sae: nn.Module, pre: Tensor) -> Tensor:
        top = pre.topk(sae.config.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())

    def saelens_config(self, config: Any) -> dict:
        return {"k": config.k, "rescale_acts_by_decoder_norm": False}  # the decoder as it is

    def from_saelens(self, cfg: dict) -> tuple[dict, bool]:
        if cfg.get("k") is None:
            raise ValueError("a topk SAE's cfg.json needs k, the active features per position")
        return {"k": cfg["k"]}, cfg.get("rescale_acts_by_decoder_norm", False)


@register
class BatchTopKKind(TopKKind):
    name = "batchtopk"
    saelens = "jumprelu"  # with its one threshold for every feature, as SAELens saves a BatchTopK SAE
    saelens_reads = None
    saelens_tensors = ("threshold",)
    in_use = "threshold"

    def add_parameters(self, sae: nn.Module) -> None:
        sae.register_buffer("batch_threshold", torch.zeros(()))

    def activate(self, sae: nn.Module, pre: Tensor) -> Tensor:
        if not sae.training:
            return _gated(pre, self.threshold(sae))
        flat = pre.relu().reshape(-1)
        keep = min(flat.numel(), sae.config.k * (pre.numel() // sae.width))
        top = flat.topk(keep)
        return torch.zeros_like(flat).scatter(0, top.indices, top.values).view_as(pre)

    def threshold(self, sae: nn.Module) -> Tensor:
        return sae.batch_threshold.expand(sae.width)

    @torch.no_grad()
    def after_loss(self, sae: nn.Module, f: Tensor, rate: float = 0.01) -> None:
        """theta <- (1 - rate) theta + rate * (the smallest activation kept in this batch)."""
        kept = f[f > 0]
        if kept.numel():
            sae.batch_threshold.mul_(1 - rate).add_(rate * kept.min())

    def saelens_config(self, config: Any) -> dict:
        return {}


@register
class JumpReLUKind(Kind):
    name = "jumprelu"
    settings: ClassVar[dict[str, Any]] = {"bandwidth": 0.05, "threshold": 0.01}
    coefficient = "l0_coefficient"
    default_coefficient = 2.0
    penalty_sum = "l0"
    saelens = saelens_reads = "jumprelu"
    saelens_tensors = ("threshold",)

    def add_parameters(self, sae: nn.Module) -> None:
        sae.log_threshold = nn.Parameter(torch.full((sae.width,), math.log(sae.config.threshold)))

    def activate(self, sae: nn.Module, pre: Tensor) -> Tensor:
        threshold = self.threshold(sae)
        if not pre.requires_grad:
            return _gated(pre, threshold)
        flat = pre.reshape(-1, sae.width)
        return JumpReLU.apply(flat, threshold, sae.config.bandwidth).view_as(pre)

    def threshold(self, sae: nn.Module) -> Tensor:
        return sae.log_threshold.exp()

    def penalty(self, sae: nn.Module, pre: Tensor, f: Tensor) -> Tensor:
        """mean_n ||f_n||_0, with the straight-through gradient of its thresholds."""
        return Step.apply(pre, self.threshold(sae), sae.config.bandwidth).sum(-1).mean()

    def saelens_state(self, tensors: dict[str, Tensor], location: str) -> dict[str, Tensor]:
        threshold = tensors["threshold"]
        if not bool((threshold > 0).all()):
            raise ValueError(
                f"{location}: a jumprelu threshold is <= 0, which this project's log-threshold cannot hold"
            )
        return {"log_threshold": threshold.log()}


# ---------------------------------------------------------------------- the straight-through estimators
def _window(x: Tensor, threshold: Tensor, bandwidth: float) -> Tensor:
    """K((x - theta) / eps), K the rectangle on (-1/2, 1/2): where the straight-through estimators give
    theta a gradient (Rajamanoharan et al. 2024; 1/eps K(.) stands for the step's derivative at theta)."""
    return ((x - threshold).abs() < bandwidth / 2).to(x)


class JumpReLU(torch.autograd.Function):
    """f = x [x > theta]: the gradient passes where the feature is on; theta's is the straight-through
    estimate -theta / eps K((x - theta) / eps)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, threshold: Tensor, bandwidth: float) -> Tensor:
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return x * (x > threshold)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        x, threshold = ctx.saved_tensors
        window = _window(x, threshold, ctx.bandwidth)
        return (x > threshold) * grad, (-(threshold / ctx.bandwidth) * window * grad).sum(0), None


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
        window = _window(x, threshold, ctx.bandwidth)
        return None, (-(1.0 / ctx.bandwidth) * window * grad).reshape(-1, x.size(-1)).sum(0), None
