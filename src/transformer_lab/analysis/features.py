"""What an SAE's features are: `interpret analysis=features sae=<run>`.

On a batch of the source task's examples, with the SAE spliced into its model (`nn.sae.splice`: the
model's output unchanged), for each feature shown (the `count` most active, by their summed activation,
or those asked for):

* its density: the share of (real) positions it fires at, and its largest activation;
* its top-activating examples: the positions where it is largest, each with the tokens before it (its
  context) and the token itself;
* the tokens it promotes and suppresses through the unembedding: its direction in the residual stream,
  W_dec[i] / s, times the output layer's weights (the direct effect on the logits, the final norm left
  out, as in SAELens' and Neuronpedia's dashboards); only where the hook's activation is the residual
  stream the output layer reads (a residual stream, or an attention or MLP output added to it);
* the effect of ablating it: the model's loss on the examples with this feature set to 0 (the spliced
  model's output then moves by -f_i W_dec[i] / s), minus the loss as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lab.errors import require
from transformer_lab.nn import IGNORE_INDEX, TokenModel, evaluating, parse_hook_name
from transformer_lab.nn.sae import SparseAutoencoder, real_positions

SHOWN = 10  # features reported by default: the most active
MEMORY = 2**28  # bytes of logits a forward pass holds at once: the examples go in chunks of it
# Hook points whose activation lives in the residual stream (what the output layer reads, up to the norm).
RESIDUAL = (
    "hook_resid_pre",
    "hook_resid_mid",
    "hook_resid_post",
    "hook_attn_out",
    "hook_mlp_out",
    "hook_embed",
)


@dataclass
class FeatureReport:
    """One feature: see the module docstring."""

    index: int
    density: float
    max_activation: float
    examples: list[dict] = field(default_factory=list)  # {"example", "position", "activation", "context"}
    promoted: list[tuple[str, float]] | None = None
    suppressed: list[tuple[str, float]] | None = None
    ablation: float | None = None  # the loss's change when it is zeroed


@dataclass
class Features:
    """The features shown, and what every feature's density looks like."""

    hook: str
    width: int
    positions: int
    loss: float | None
    density: list[float]
    reports: list[FeatureReport]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["dead"] = sum(d == 0 for d in self.density)
        return out

    def table(self) -> list[str]:
        dead = sum(d == 0 for d in self.density)
        loss = f"; the model's loss {self.loss:.4f}" if self.loss is not None else ""
        lines = [
            f"{self.width} features at {self.hook}, on {self.positions} positions: {dead} never fire{loss}",
            *self.notes,
        ]
        for r in self.reports:
            ablation = f", ablated: loss {r.ablation:+.4f}" if r.ablation is not None else ""
            fires = f"fires at {r.density:.2%} of positions, max {r.max_activation:.3g}"
            lines.append(f"feature {r.index}: {fires}{ablation}")
            for e in r.examples:
                lines.append(f"    {e['activation']:8.3f}  {e['context']}")
            if r.promoted is not None:
                lines.append("    promotes   " + ", ".join(f"{t!r} {v:+.2f}" for t, v in r.promoted))
                lines.append("    suppresses " + ", ".join(f"{t!r} {v:+.2f}" for t, v in r.suppressed))
        return lines


def _loss(model: TokenModel, inputs: tuple[Tensor, ...], labels: Tensor, hooks: list) -> float | None:
    """The model's mean cross-entropy on the labelled outputs with `hooks` attached (None: no labels),
    the examples in chunks whose logits take at most `MEMORY` bytes (a 50 K vocabulary's logits of every
    example at once are gigabytes)."""
    labelled = int((labels != IGNORE_INDEX).sum())
    size = max(1, MEMORY // (4 * labels.size(1) * model.config.output_classes))
    total = 0.0
    for start in range(0, labels.size(0), size):
        part = slice(start, start + size)
        with evaluating(model):
            logits = model.run_with_hooks(*(x[part] for x in inputs), fwd_hooks=hooks)
        if labelled:
            y = labels[part].flatten()
            total += float(F.cross_entropy(logits.flatten(0, 1).float(), y, ignore_index=IGNORE_INDEX,
                                           reduction="sum"))  # fmt: skip
    return total / labelled if labelled else None


def direct_logit_effects(
    model: TokenModel, sae: SparseAutoencoder, features: Sequence[int] | None = None
) -> Tensor | None:
    """[features, classes] (default: every feature): each feature's direction W_dec[i] / s through the
    output layer's weights, where the hook's activation is the residual stream the output layer reads
    (else None)."""
    hook = sae.config.hook
    name = parse_hook_name(hook)
    prefix, _ = model.readout
    unembed = getattr(model, "unembed", None)
    if (
        not isinstance(unembed, nn.Linear)
        or name.hook not in RESIDUAL
        or not hook.startswith(prefix)
        or sae.config.d_in != model.config.model_dim
    ):
        return None
    rows = sae.W_dec if features is None else sae.W_dec[list(features)]
    return (rows / sae.input_scale) @ unembed.weight.t()


def analyse_features(
    model: TokenModel,
    sae: SparseAutoencoder,
    inputs: tuple[Tensor, ...],
    labels: Tensor,
    display: Callable[[list[int]], list[str]],
    output_names: Sequence[str],
    *,
    separator: str = " ",
    chosen: Sequence[int] | None = None,
    count: int = SHOWN,
    top: int = 5,
    context: int = 8,
    ablate: bool = True,
) -> Features:
    """The features' report (the module docstring) for a model with `sae` spliced in, on a batch;
    `display` shows token ids as text (the task's `display_tokens`), joined by `separator`; `ablate`:
    measure each feature's ablation (a forward pass each)."""
    hook = sae.config.hook
    point = f"{hook}.sae.hook_sae_acts_post"
    require(point in model.hook_names(), f"the SAE is not spliced into this model at {hook}")
    if chosen is not None:
        bad = [i for i in chosen if not 0 <= i < sae.width]
        require(not bad, f"features={bad[0] if bad else ''} is not a feature: use 0 to {sae.width - 1}")
    seen: list[Tensor] = []
    loss = _loss(model, inputs, labels, [(point, lambda activation, p: seen.append(activation))])
    f = torch.cat(seen).flatten(2)  # [B, T, W]
    real = real_positions(model, hook, inputs)
    on = f[real] > 0  # [N, W]
    density = on.double().mean(0)
    if chosen is None:
        chosen = f[real].sum(0).topk(min(count, sae.width)).indices.tolist()
    tokens = inputs[1] if hook.startswith("decoder.") else inputs[0]
    effects = direct_logit_effects(model, sae, chosen)  # [chosen, classes]: a 50 K vocabulary's row each
    notes = []
    if effects is None:
        notes.append(
            f"(no promoted or suppressed tokens: {hook}'s activation is not the residual stream the output "
            "layer reads)"
        )
    reports = []
    for shown_at, i in enumerate(chosen):
        values = f[..., i].masked_fill(~real, 0)
        best = values.flatten().topk(min(top, values.numel()))
        examples = []
        for value, flat in zip(best.values.tolist(), best.indices.tolist(), strict=True):
            if value <= 0:
                break
            row, position = divmod(flat, values.size(1))
            start = max(0, position - context)
            ids = tokens[row, start : position + 1].tolist()
            shown = display(ids)
            text = separator.join([*shown[:-1], f"[{shown[-1]}]"])
            examples.append({"example": row, "position": position, "activation": value, "context": text})
        report = FeatureReport(i, float(density[i]), float(values.max()), examples)
        if effects is not None:
            column = effects[shown_at].detach()
            up, down = column.topk(min(5, len(column))), (-column).topk(min(5, len(column)))
            report.promoted = [
                (output_names[t], float(v)) for v, t in zip(up.values, up.indices, strict=True)
            ]
            report.suppressed = [
                (output_names[t], -float(v)) for v, t in zip(down.values, down.indices, strict=True)
            ]
        if loss is not None and ablate:
            report.ablation = _ablated_loss(model, point, inputs, labels, i) - loss
        reports.append(report)
    return Features(hook, sae.width, int(real.sum()), loss, density.tolist(), reports, notes)


def _ablated_loss(
    model: TokenModel, point: str, inputs: tuple[Tensor, ...], labels: Tensor, feature: int
) -> float:
    def ablate(activation: Tensor, p: object) -> Tensor:
        activation = activation.clone()
        activation[..., feature] = 0
        return activation

    return _loss(model, inputs, labels, [(point, ablate)])
