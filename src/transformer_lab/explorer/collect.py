"""Everything the explorer page shows, computed from a model through its hook points.

`explorer_data(model, inputs, labels)` runs the model on one input and returns an `ExplorerData`: plain
numbers (NumPy arrays, lists, strings), no tensors and no HTML:

* `kinds`: the attention weights of every layer and head, [L, H, T_query, T_key] per group of attention
  layers (`AttentionLayer.group`): `self` for an encoder or a decoder-only model; `encoder`, `decoder` and
  `cross` for an encoder-decoder;
* `overlays`: attention rollout and gradient-weighted relevance ([outputs, inputs], each row as shares of
  its output), computed by `transformer_lab.analysis.explain`, as the explain tool shows them;
* `ablation`: per attention layer and head, how much the mean log-probability of the model's own
  predictions drops when that head's output z is set to zero (`interventions.ablate_heads`);
* `predictions`: at every output position the top-3 tokens with their probabilities, and whether the
  top one is the label where a label is known.

The input is the model's inputs (a tensor of token ids, or an encoder-decoder's source and target). Given
only a source, an encoder-decoder is explained on the output it writes greedily from it.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from transformer_lab import nn
from transformer_lab.analysis import explain, interventions, measures
from transformer_lab.analysis.arguments import as_model
from transformer_lab.nn import IGNORE_INDEX, TokenModel, evaluating

TOP_K = 3
GROUP_TITLES = {**nn.GROUP_TITLES, "self": "Self-attention"}  # the page's headings: a single stack's
GROUP_AXES = {  # what a row (query) and a column (key) is
    "self": ("query: the token that reads", "key: the token it reads"),
    "encoder": ("query: source token that reads", "key: source token it reads"),
    "decoder": ("query: output position that reads", "key: an earlier output token"),
    "cross": ("query: output position (decoder)", "key: source token (encoder output)"),
}
ARCHITECTURES = {
    "encoder": "encoder",
    "decoder": "decoder-only (GPT-style)",
    "encoder_decoder": "encoder-decoder",
}


@dataclass
class AttentionKind:
    """One group of attention layers: `maps[l, h]` is layer l, head h's [rows, cols] weights."""

    name: str  # self | encoder | decoder | cross
    title: str
    rows: list[str]  # the query tokens
    cols: list[str]  # the key tokens
    row_axis: str
    col_axis: str
    maps: np.ndarray  # [L, H, rows, cols], float32, each row sums to 1
    causal: bool = False  # a query sees only itself and earlier keys (AttentionLayer.kind == "causal")


@dataclass
class Overlay:
    """An explanation matrix [outputs, inputs] with the colour scale's top (`vmax`; None: its max)."""

    name: str
    title: str
    matrix: np.ndarray
    vmax: float | None = None


@dataclass
class Prediction:
    """The output at one position: the token read there, the top-3 (token, probability), the label."""

    position: int
    reads: str
    top: list[tuple[str, float]]
    label: str | None = None
    correct: bool | None = None


@dataclass
class Ablation:
    """Drop of the mean log-probability of the model's own predictions with one head zero-ablated:
    `drops[i][h]` for attention layer `layers[i]` (an `interventions.attention_layers` name)."""

    layers: list[str]
    labels: list[str]  # short names per layer: L0, or E0 / D0 / X0 for an encoder-decoder
    kinds: list[str]  # the AttentionKind each layer's maps are in
    indices: list[int]  # each layer's index within its kind
    baseline: float  # mean log p of the predicted tokens, nothing ablated
    drops: list[list[float]]
    positions: int  # how many output positions the mean is over


@dataclass
class ExplorerData:
    """What the page shows about one input (see the module docstring)."""

    arch: str
    summary: dict
    kinds: list[AttentionKind]
    overlay_kind: str  # the kind whose rows and columns the overlays share (self, or cross)
    overlay_rows: list[str]
    overlay_cols: list[str]
    overlays: list[Overlay]
    predictions: list[Prediction]
    prediction_kinds: list[str]  # the kinds whose query rows the predictions are about
    ablation: Ablation | None = None
    notes: list[str] = field(default_factory=list)
    inputs: list[list[int]] = field(default_factory=list)  # the model inputs shown (token ids)
    labels: list[int] | None = None  # the expected output per output position (-100: none)
    measures: dict | None = None  # the per-head measures of the model on its task (`head_measures`)


MEASURE_EXAMPLES = 64  # the task's examples the page's per-head measures are taken on


def head_measures(model: TokenModel, inputs: tuple[Tensor, ...], labels: Tensor, task: object) -> dict:
    """Every registered per-head measure (`analysis.measures`) of the model on a batch of its task, as the
    page's heads view shows them: {"examples": B, "layers": [L0, ...], "items": [{"name", "direction",
    "description", "values": [layer][head]}]}."""
    chosen = measures.applicable(task)
    tables = measures.measure_heads(model, inputs, labels, task, chosen)
    return {
        "examples": int(inputs[0].size(0)),
        "layers": [layer.label for layer in model.attention_layers()],
        "items": [
            {"name": m.name, "direction": m.direction, "description": m.description, "values": tables[m.name]}
            for m in chosen
            if m.name in tables
        ],
    }


def _off_diagonal_max(matrix: Tensor) -> float:
    """Colour-scale top that ignores the diagonal (each token's own residual path saturates it)."""
    eye = torch.eye(matrix.size(-2), matrix.size(-1), dtype=torch.bool, device=matrix.device)
    return float(matrix.masked_fill(eye, 0).max())


def _as_inputs(model: TokenModel, inputs: Tensor | Sequence) -> tuple[Tensor, ...]:
    """Token ids as a batch of one per model input, checked against the vocabulary and the positions."""
    device = next(model.parameters()).device
    if isinstance(inputs, Tensor) or not inputs or not isinstance(inputs[0], Tensor | Sequence):
        inputs = (inputs,)  # one sequence of token ids
    batch = []
    for x in inputs:
        x = torch.as_tensor(x, dtype=torch.long).reshape(1, -1).to(device)
        if x.size(1) == 0:
            raise ValueError("tokens is empty; pass at least one token id")
        vocab_size = model.config.vocab_size
        if int(x.min()) < 0 or int(x.max()) >= vocab_size:
            bad = next(i for i in x[0].tolist() if not 0 <= i < vocab_size)
            raise ValueError(f"token id {bad} is not in the model's vocabulary (ids 0 to {vocab_size - 1})")
        if x.size(1) > model.max_len:
            raise ValueError(
                f"the input has {x.size(1)} tokens, more than the model's max_len={model.max_len}"
            )
        batch.append(x)
    return tuple(batch)


def _predictions(
    probs: Tensor, reads: list[str], names: list[str], labels: list[int] | None
) -> list[Prediction]:
    """Top-3 per position of probs [T, classes], next to the label where one is known (not -100)."""
    top_p, top_i = probs.topk(min(TOP_K, probs.size(-1)), dim=-1)
    out = []
    for t, (ps, ids) in enumerate(zip(top_p.tolist(), top_i.tolist(), strict=True)):
        label = labels[t] if labels is not None and t < len(labels) else IGNORE_INDEX
        known = label != IGNORE_INDEX
        out.append(
            Prediction(
                position=t,
                reads=reads[t],
                top=[(names[i], round(p, 4)) for p, i in zip(ps, ids, strict=True)],
                label=names[label] if known else None,
                correct=(ids[0] == label) if known else None,
            )
        )
    return out


def _ablation(
    model: TokenModel, inputs: tuple[Tensor, ...], predicted: Tensor, positions: Tensor
) -> Ablation:
    """Each head zero-ablated in turn: the drop of the mean log p(predicted token) over `positions`."""

    def mean_log_prob(logits: Tensor) -> float:
        log_probs = logits[0].float().log_softmax(dim=-1)
        return float(log_probs.gather(1, predicted[:, None])[:, 0][positions].mean())

    result = interventions.ablate_heads(model, inputs, score=mean_log_prob, metric="mean log p")
    layers = model.attention_layers()
    groups = [layer.group for layer in layers]
    return Ablation(
        layers=result.layers,
        labels=[layer.label for layer in layers],
        kinds=groups,
        indices=[groups[:i].count(group) for i, group in enumerate(groups)],
        baseline=result.baseline,
        drops=[[result.baseline - value for value in row] for row in result.ablated],
        positions=int(positions.sum()),
    )


def _notes(model: TokenModel) -> list[str]:
    kinds = {layer.kind for layer in model.attention_layers()}
    if "cross" in kinds:
        return [
            "Output position t reads <bos> and the outputs before it, and the whole source through "
            "cross-attention; the predictions are what it writes at each position."
        ]
    if "causal" in kinds:
        return ["Position t reads tokens 0..t and predicts token t + 1."]
    return ["Every position reads the whole input and predicts its own output."]


def explorer_data(
    model: TokenModel,
    inputs: Tensor | Sequence,
    labels: Sequence[int] | Tensor | None = None,
    ablation: bool = True,
    output_names: list[str] | None = None,
) -> ExplorerData:
    """The explorer's data for one input: token ids [T] or [1, T] (or a tuple of them, one per model
    input: an encoder-decoder's source and target). Given only a source, an encoder-decoder is explained
    on the output it writes greedily.

    `labels`: per output position the expected output (-100 where none). `ablation`: also the
    head-ablation table (one forward pass per head). `output_names`: the output classes' names (default:
    the tokens; `Checkpoint.output_names` knows a task's own).
    """
    model = as_model(model)
    inputs = _as_inputs(model, inputs)
    labels = None if labels is None else [int(v) for v in torch.as_tensor(labels).reshape(-1).tolist()]
    if len(inputs) < model.num_inputs:  # a source alone: explain the output the model writes from it
        output = model.answer(inputs[0])
        inputs = model.forced_inputs(inputs[0], output)
        if labels is not None:  # the expected output, against what the model wrote
            width = inputs[-1].size(1)
            labels = (labels + [IGNORE_INDEX] * width)[:width]
    if labels is not None and len(labels) != inputs[-1].size(1):
        raise ValueError(
            f"labels has {len(labels)} entries for {inputs[-1].size(1)} output positions; give one per "
            "position"
        )
    vocab, names = model.vocab, output_names or model.vocab
    tokens = [[vocab[i] for i in x[0].tolist()] for x in inputs]
    groups = explain.grouped_maps(model, *inputs)
    layers = {layer.group: layer for layer in model.attention_layers()}  # one layer of each group
    kinds = [
        AttentionKind(
            group,
            GROUP_TITLES[group] + (" (causal)" if layers[group].kind == "causal" else ""),
            tokens[layers[group].queries],
            tokens[layers[group].keys],
            *GROUP_AXES[group],
            torch.cat(maps).float().cpu().numpy(),
            layers[group].kind == "causal",
        )
        for group, maps in groups.items()
    ]
    rollout = explain.rollout(groups)[0]
    relevance = explain.relevance(model, *inputs)[0].clamp_min(0)
    with evaluating(model):
        logits = model(*inputs)
    probs = logits[0].float().softmax(dim=-1)
    predicted = probs.argmax(dim=-1)
    output_rows = [names[i] for i in predicted.tolist()]
    labelled = None if labels is None else torch.tensor([label != IGNORE_INDEX for label in labels])
    if labelled is not None and bool(labelled.any()):
        first = int(labelled.int().argmax())  # before the first label: a prompt, whose outputs mean nothing
        output_rows = [""] * first + output_rows[first:]
        positions = labelled
    else:
        positions = torch.ones(len(predicted), dtype=torch.bool)
    reading = "cross" if "cross" in groups else "self"  # the group that reads the input
    last_input = len(inputs) - 1
    return ExplorerData(
        arch=model.config.arch,
        summary={
            "arch": model.config.arch,
            "architecture": ARCHITECTURES.get(model.config.arch, model.config.arch),
            "shape": model.shape(),
            "join": "" if " " in vocab and all(len(t) == 1 for t in vocab) else " ",
            "layers": model.config.num_layers,
            "heads": model.config.num_heads,
            "model_dim": model.config.model_dim,
            "parameters": sum(p.numel() for p in model.parameters()),
            "input": tokens[0],
            "output": output_rows,
            "causal": model.generates,
        },
        kinds=kinds,
        overlay_kind=reading,
        overlay_rows=output_rows,
        overlay_cols=tokens[0],
        overlays=[
            Overlay(
                "rollout",
                "Attention rollout"
                + (" (through encoder, decoder and cross-attention)" if reading == "cross" else ""),
                rollout.float().cpu().numpy(),
                None if reading == "cross" else _off_diagonal_max(rollout),
            ),
            Overlay(
                "relevance",
                "Gradient-weighted relevance",
                relevance.float().cpu().numpy(),
                None if reading == "cross" else _off_diagonal_max(relevance),
            ),
        ],
        predictions=_predictions(probs.cpu(), tokens[last_input], names, labels),
        prediction_kinds=[group for group, layer in layers.items() if layer.queries == last_input],
        ablation=_ablation(model, inputs, predicted, positions.to(predicted.device)) if ablation else None,
        notes=_notes(model),
        inputs=[x[0].tolist() for x in inputs],
        labels=labels,
    )
