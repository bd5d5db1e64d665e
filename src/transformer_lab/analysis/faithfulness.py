"""How faithful is an explanation? Deletion curves (Samek et al., 2017; the "deletion" metric of Petsiuk
et al., 2018, as used for Transformers by Chefer et al., 2021).

An explanation ranks the input tokens by how much an output relies on them. If the ranking is right,
removing the top-ranked tokens first destroys the output fastest. For every labelled output, delete the
input tokens from most to least relevant, one more at each step, and record the probability of the
correct output; the curve's area over the fraction deleted (0 to 1) is small for a faithful explanation
and about the same as a random order's for an unfaithful one. A long input is deleted in at most
`STEPS` steps (a context of 64 tokens four at a time), the area taken over the steps measured.

Deleting a token replaces its embedding by the mean embedding of the vocabulary's symbols (a neutral
token: the same for every position, about nothing in particular) and keeps its position, so the model
still sees a sequence of the same length. Which tokens can be deleted: the source (an encoder's input,
the part before <sep> of a decoder-only model's, an encoder-decoder's encoder input); for a language
model the whole context of its last prediction.

The explanations compared (`METHODS`):
* `attention`: the last attention layer that reads the input, mean over heads (raw attention);
* `rollout`: attention rollout (Abnar & Zuidema, 2020; Chefer et al.'s propagation for
  encoder-decoders);
* `gradient`: gradient-weighted attention (Chefer et al., 2021), without its identity start R = I;
* `ablation`: how much deleting each token alone lowers the correct output's probability (occlusion);
* `random`: a random order, the baseline.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from transformer_lab.analysis import explain, intervals, interventions
from transformer_lab.analysis.arguments import as_inputs, as_model
from transformer_lab.nn import IGNORE_INDEX, HookPoint, Specials, TokenModel, evaluating

METHODS = ("attention", "rollout", "gradient", "ablation", "random")
FRACTIONS = np.linspace(0.0, 1.0, 11)  # the curves' x axis: the fraction of deletable tokens deleted
STEPS = 16  # most deletion steps per curve: a longer input loses several tokens a step
CHUNK = 2048  # most sequences per forward pass while deleting
MEMORY = 2**28  # bytes of activations a forward pass of deleted variants holds at once


@dataclass
class Faithfulness:
    """Deletion curves: mean probability of the correct output at each fraction of the input deleted,
    per method, and the area under each curve (lower: the explanation found what the output uses)."""

    fractions: list[float]
    curves: dict[str, list[float]]
    auc: dict[str, float]
    outputs: int  # how many (example, output) pairs were averaged
    level: float = 0.0
    intervals: dict[str, list[float]] | None = None  # each AUC's [low, high] over the outputs
    ties: list[str] | None = None  # the methods whose AUC is within noise of the lowest (a paired interval)

    def to_dict(self) -> dict:
        ci = {"ci": {"level": self.level, "auc": self.intervals}} if self.intervals is not None else {}
        return {
            "auc": self.auc,
            "fractions": self.fractions,
            "curves": self.curves,
            "outputs": self.outputs,
            **ci,
        }

    def table(self) -> str:
        """The areas, lowest first; with intervals, each one's and a `~` where it is within noise of the
        lowest (their paired difference's interval holds 0)."""
        best = min(self.auc, key=self.auc.get)
        level = f"; [{self.level:.0%} interval], ~: within noise of the lowest" if self.intervals else ""
        lines = [f"Deletion AUC over {self.outputs} outputs (lower = more faithful{level}):"]
        for method, area in sorted(self.auc.items(), key=lambda item: item[1]):
            low, high = (self.intervals or {}).get(method, (0.0, 0.0))
            interval = f" [{low:.3f}, {high:.3f}]" if self.intervals else ""
            mark = " ~" if method in (self.ties or []) else "   <- most faithful" if method == best else ""
            lines.append(f"  {method:<10} {area:.3f}{interval}{mark}")
        return "\n".join(lines)


def _deletable(model: TokenModel, inputs: tuple[Tensor, ...]) -> Tensor:
    """Bool [B, S]: the input positions an explanation ranks and the deletion removes (the source)."""
    tokens = inputs[0]
    if model.pad_id is None:
        return torch.ones_like(tokens, dtype=torch.bool)
    config = model.config
    sep = -1 if config.sep_id is None else config.sep_id  # a model without <sep> reads only its source
    specials = Specials(config.pad_id, config.bos_id, config.eos_id, sep)
    return type(model).sources(inputs, specials) != model.pad_id


def _outputs(model: TokenModel, labels: Tensor) -> Tensor:
    """Bool [B, T]: the outputs explained. A language model: its last labelled prediction only."""
    labelled = labels != IGNORE_INDEX
    if not model.language_model:
        return labelled
    last = labelled.int().cumsum(dim=1).argmax(dim=1)
    return torch.zeros_like(labelled).scatter_(1, last[:, None], True) & labelled


def _neutral_embedding(model: TokenModel) -> Tensor:
    """The mean embedding of the vocabulary's symbols (tokens not written <like this>)."""
    embed = model.source_stack[1].embed
    symbols = [
        i for i, token in enumerate(model.vocab) if not (token.startswith("<") and token.endswith(">"))
    ]
    return embed.weight[symbols].mean(dim=0).detach()


def _probabilities(
    model: TokenModel,
    inputs: tuple[Tensor, ...],
    deleted: Tensor,
    rows: Tensor,
    positions: Tensor,
    labels: Tensor,
) -> Tensor:
    """p(label) at `positions` for each variant: variant v is example rows[v] with the input positions
    deleted[v] (bool [V, S]) replaced by the neutral embedding. Returns [V]. The variants run in chunks
    whose activations fit `MEMORY`, and only each variant's position is read out
    (`interventions.answer_logits`: a 50 K vocabulary's logits at every position cost more than the model)."""
    neutral = _neutral_embedding(model)
    hook_name = f"{model.source_stack[0]}hook_embed"
    config = model.config
    length = sum(x.size(1) for x in inputs)  # a variant's bytes: its widest activations, attention scores
    per_variant = 4 * length * (4 * config.model_dim + config.dim_feedforward + config.num_heads * length)
    size = max(1, min(CHUNK, MEMORY // per_variant))
    out = []
    for start in range(0, len(rows), size):
        part = slice(start, start + size)
        mask = deleted[part]

        def delete(embedding: Tensor, hook: HookPoint, mask: Tensor = mask) -> Tensor:
            return torch.where(mask[..., None], neutral.to(embedding.dtype), embedding)

        batch = tuple(x[rows[part]] for x in inputs)
        logits = interventions.answer_logits(model, batch, positions[part], [(hook_name, delete)])
        out.append(logits.float().softmax(dim=-1).gather(1, labels[part, None])[:, 0])
    return torch.cat(out)


def _occlusion(
    model: TokenModel, inputs: tuple[Tensor, ...], labels: Tensor, deletable: Tensor, outputs: Tensor
) -> Tensor:
    """[B, T, S]: for each output (b, t) of `outputs` (bool [B, T]), p(correct output) minus p(correct
    output) with input s deleted alone; 0 at the other outputs (a language model's: all but its last)."""
    batch, source_len = deletable.shape
    pairs = outputs.nonzero()  # [O, 2]: (example, output position)
    variants = source_len + 1  # variant 0: nothing deleted
    deleted = torch.zeros(variants, source_len, dtype=torch.bool)
    deleted[1:] = torch.eye(source_len, dtype=torch.bool)
    deleted = deleted.repeat(len(pairs), 1).to(deletable.device)
    rows, positions = (pairs[:, i].repeat_interleave(variants) for i in (0, 1))
    answers = labels.clamp(min=0)[rows, positions]
    p = _probabilities(model, inputs, deleted, rows, positions, answers).view(len(pairs), variants)
    out = torch.zeros(batch, labels.size(1), source_len, device=p.device)
    out[pairs[:, 0], pairs[:, 1]] = p[:, :1] - p[:, 1:]
    return out


def passes(model: TokenModel, inputs: tuple[Tensor, ...], labels: Tensor) -> int:
    """Forward passes per example of `deletion_curves` with every method: for each output explained,
    one per input token deleted alone (`ablation`) and one per deletion step of each curve; a few more
    for the attention maps and the gradient."""
    deletable = int(_deletable(model, inputs).sum(dim=1).max())
    outputs = float(_outputs(model, labels).sum(dim=1).float().mean())
    per_output = deletable + 1 + len(METHODS) * (min(deletable, STEPS) + 1)
    return int(outputs * per_output) + 4


def relevances(
    model: TokenModel,
    inputs: tuple[Tensor, ...],
    labels: Tensor,
    methods: tuple[str, ...] = METHODS,
    seed: int = 0,
    outputs: Tensor | None = None,
) -> dict[str, Tensor]:
    """Each method's relevance of input position s for output t, [B, T, S] (see the module docstring);
    `ablation` only at `outputs` (bool [B, T]; default the outputs `deletion_curves` explains)."""
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown explanation method {unknown[0]!r}; use {', '.join(METHODS)}")
    out: dict[str, Tensor] = {}
    deletable = _deletable(model, inputs)
    groups = explain.grouped_maps(model, *inputs)
    reading = "cross" if "cross" in groups else "self"  # the attention whose keys are the input
    if "attention" in methods:
        out["attention"] = groups[reading][-1].mean(dim=1)
    if "rollout" in methods:
        if reading == "cross":
            out["rollout"] = explain.encoder_decoder_rollout(groups)
        else:
            out["rollout"] = explain.attention_rollout(groups["self"])
    if "gradient" in methods:
        if reading == "cross":
            out["gradient"] = explain.source_relevance(model, *inputs)
        else:
            if model.language_model:  # one output per sequence: one backward pass
                last = int(_outputs(model, labels).int().argmax(dim=1).max())
                relevance = explain.gradient_attention(model, inputs[0], last)
            else:
                relevance = explain.gradient_attention_all(model, inputs[0])
            # Chefer et al.'s R starts as the identity (each token relevant to itself, before any layer):
            # rank by what the attention layers added, R - I, as their reference code does
            out["gradient"] = relevance - torch.eye(relevance.size(-1), device=relevance.device)
    if "ablation" in methods:
        with evaluating(model):
            chosen = _outputs(model, labels) if outputs is None else outputs
            out["ablation"] = _occlusion(model, inputs, labels, deletable, chosen)
    if "random" in methods:
        generator = torch.Generator().manual_seed(seed)
        shape = (labels.size(0), labels.size(1), deletable.size(1))
        out["random"] = torch.rand(shape, generator=generator).to(deletable.device)
    return {method: out[method].detach().float() for method in methods}


def deletion_curves(
    model: TokenModel,
    inputs: tuple[Tensor, ...],
    labels: Tensor,
    methods: tuple[str, ...] = METHODS,
    seed: int = 0,
    level: float = 0.0,
) -> Faithfulness:
    """Deletion curves and their areas for each method, averaged over every labelled output of the batch
    (a language model: each sequence's last prediction). `inputs` and `labels` as the task lays them out.
    With `level`, each area's bootstrap interval over the outputs (`analysis.intervals`)."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    with evaluating(model):
        scores = relevances(model, inputs, labels, methods, seed)
        deletable = _deletable(model, inputs)
        outputs = (_outputs(model, labels) & deletable.any(dim=1, keepdim=True)).nonzero().tolist()
        if not outputs:
            raise ValueError("no labelled output to explain in these examples")
        curves: dict[str, list[np.ndarray]] = {method: [] for method in methods}
        areas: dict[str, list[float]] = {method: [] for method in methods}
        with torch.no_grad():
            for method in methods:
                rows, positions, answers, deleted, sizes, xs = [], [], [], [], [], []
                for b, t in outputs:
                    columns = deletable[b].nonzero()[:, 0]
                    order = columns[scores[method][b, t, columns].argsort(descending=True, stable=True)]
                    rank = torch.full((deletable.size(1),), len(order), device=order.device)
                    rank[order] = torch.arange(len(order), device=order.device)
                    counts = torch.linspace(0, len(order), min(len(order), STEPS) + 1).round().long().unique()
                    steps = counts.to(order.device)[:, None] > rank  # the step deleting k: the top k
                    deleted.append(steps)
                    xs.append((counts / len(order)).numpy())
                    rows += [b] * len(steps)
                    positions += [t] * len(steps)
                    answers += [int(labels[b, t])] * len(steps)
                    sizes.append(len(steps))
                device = labels.device
                p = _probabilities(
                    model,
                    inputs,
                    torch.cat(deleted).to(device),
                    torch.tensor(rows, device=device),
                    torch.tensor(positions, device=device),
                    torch.tensor(answers, device=device),
                ).cpu()
                for curve, x in zip(p.split(sizes), xs, strict=True):
                    curves[method].append(np.interp(FRACTIONS, x, curve.numpy()))
                    areas[method].append(float(np.trapezoid(curve.numpy(), x)))
    result = Faithfulness(
        fractions=FRACTIONS.tolist(),
        curves={method: np.mean(c, axis=0).tolist() for method, c in curves.items()},
        auc={method: float(np.mean(a)) for method, a in areas.items()},
        outputs=len(outputs),
    )
    if level and len(outputs) > 1:
        table = torch.tensor([areas[method] for method in methods]).T  # [outputs, methods]
        low, high = intervals.bootstrap({"auc": table}, lambda s: s["auc"] / len(outputs), level)
        result.level = level
        result.intervals = {m: [float(lo), float(hi)] for m, lo, hi in zip(methods, low, high, strict=True)}
        best = methods.index(min(result.auc, key=result.auc.get))
        low, high = intervals.bootstrap(
            {"auc": table}, lambda s: (s["auc"] - s["auc"][:, best : best + 1]) / len(outputs), level
        )
        result.ties = [
            m for i, m in enumerate(methods) if i != best and intervals.within(float(low[i]), float(high[i]))
        ]
    return result


def alignment_auc(
    model: TokenModel,
    inputs: tuple[Tensor, ...],
    labels: Tensor,
    alignment: Tensor,
    methods: tuple[str, ...] = ("attention", "rollout", "gradient", "ablation", "random"),
) -> dict[str, float]:
    """How well each explanation finds the input positions a model is known to read (an answer key's,
    `alignment` bool [B, T, S] as the task's `alignment` gives it): for every output with a known
    position, the ROC AUC of the method's relevance over the deletable inputs (true positions above the
    others; ties count a half), averaged over those outputs. 1: always ranked first; 0.5: chance."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    with evaluating(model):
        labelled = labels != IGNORE_INDEX  # every labelled output, not only a language model's last
        scores = relevances(model, inputs, labels, methods, outputs=labelled)
        if "gradient" in methods and model.language_model:  # every output's own row, not the last's
            relevance = explain.gradient_attention_all(model, inputs[0])
            scores["gradient"] = relevance - torch.eye(relevance.size(-1), device=relevance.device)
    deletable = _deletable(model, inputs)
    outputs = (alignment.any(dim=-1) & (labels != IGNORE_INDEX)).nonzero().tolist()
    if not outputs:
        raise ValueError("no output of these examples has a known input position")
    result = {}
    for method in methods:
        areas = []
        for b, t in outputs:
            columns = deletable[b]
            values, truth = scores[method][b, t][columns].double(), alignment[b, t][columns]
            positive, negative = values[truth], values[~truth]
            if len(positive) and len(negative):
                greater = (positive[:, None] > negative[None, :]).double().mean()
                equal = (positive[:, None] == negative[None, :]).double().mean()
                areas.append(float(greater + 0.5 * equal))
        result[method] = float(np.mean(areas))
    return result
