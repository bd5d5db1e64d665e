"""Everything the explorer page shows, computed from a model through its hook points.

`explorer_data(model, tokens, labels)` runs the model on one input and returns an `ExplorerData`: plain
numbers (NumPy arrays, lists, strings), no tensors and no HTML:

* `kinds`: the attention weights of every layer and head, [L, H, T_query, T_key] per kind of attention:
  `self` for an encoder or a decoder-only model; `encoder`, `decoder` and `cross` for an encoder-decoder;
* `overlays`: attention rollout and gradient-weighted relevance ([outputs, inputs], each row as shares of
  its output), computed by `transformer_lab.explain`, as scripts/explain.py shows them;
* `ablation`: per attention layer and head, how much the mean log-probability of the model's own
  predictions drops when that head's output z is set to zero (one forward pass per head);
* `predictions`: at every output position the top-3 tokens with their probabilities, and whether the
  top one is the label where a label is known.

An encoder-decoder is explained on the output it generates greedily from `tokens` (its source), as
scripts/explain.py does; its `labels`, if given, are the expected output (target tokens and <eos>).
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from transformer_lab import explain, interventions
from transformer_lab.data.task import IGNORE_INDEX
from transformer_lab.nn import EncoderClassifier, EncoderDecoder, TokenModel

TOP_K = 3


@dataclass
class AttentionKind:
    """One kind of attention: `maps[l, h]` is layer l, head h's [rows, cols] weights (row = query)."""

    name: str  # self | encoder | decoder | cross
    title: str
    rows: list[str]  # the query tokens
    cols: list[str]  # the key tokens
    row_axis: str
    col_axis: str
    maps: np.ndarray  # [L, H, rows, cols], float32, each row sums to 1


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
    prediction_kind: str  # the kind whose query rows the predictions are about
    ablation: Ablation | None = None
    notes: list[str] = field(default_factory=list)


@contextmanager
def _eval(model: TokenModel) -> Iterator[None]:
    """Eval mode without gradients for the call; the model's mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _off_diagonal_max(matrix: Tensor) -> float:
    """Colour-scale top that ignores the diagonal (each token's own residual path saturates it)."""
    eye = torch.eye(matrix.size(-2), matrix.size(-1), dtype=torch.bool, device=matrix.device)
    return float(matrix.masked_fill(eye, 0).max())


def _stacked(maps: list[Tensor]) -> np.ndarray:
    """A list of [1, H, R, C] maps (one per layer) as one float32 array [L, H, R, C]."""
    return torch.cat(maps).float().cpu().numpy()


def output_names(model: TokenModel) -> list[str]:
    """The names of the model's output classes: its tokens, or class numbers for a classifier with its
    own `num_classes`."""
    if isinstance(model, EncoderClassifier) and model.config.num_classes is not None:
        return [str(i) for i in range(model.config.num_classes)]
    return model.vocab


def _as_ids(values: Sequence[int] | Tensor | None) -> list[int] | None:
    if values is None:
        return None
    if isinstance(values, Tensor):
        values = values.reshape(-1).tolist()
    return [int(v) for v in values]


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


def head_ablation(
    model: TokenModel, inputs: tuple[Tensor, ...], predicted: Tensor, positions: Tensor
) -> tuple[float, list[list[float]]]:
    """Mean log p(predicted token) over `positions` (bool [T]) with nothing ablated, and its drop with
    each head's z set to zero, [attention layers][heads] (interventions.attention_layers order)."""
    layers = interventions.attention_layers(model)

    def mean_log_prob(logits: Tensor) -> float:
        log_probs = logits[0].float().log_softmax(dim=-1)
        chosen = log_probs.gather(1, predicted[:, None])[:, 0]
        return float(chosen[positions].mean())

    def ablated(head: tuple[int, int]) -> float:  # (layer index, head) zero-ablated
        hooks = interventions.ablation_hooks([head], layers, None)
        return mean_log_prob(model.run_with_hooks(*inputs, fwd_hooks=hooks))

    with _eval(model):
        baseline = mean_log_prob(model(*inputs))
        heads = range(model.config.num_heads)
        drops = [[baseline - ablated((i, h)) for h in heads] for i in range(len(layers))]
    return baseline, drops


def _layer_kind(layer: str, default: str) -> tuple[str, int]:
    """The AttentionKind an attention layer's maps are in, and its index there."""
    index = int(layer.split("blocks.")[1].split(".")[0])
    if layer.endswith("cross_attn"):
        return "cross", index
    return {"encoder": "encoder", "decoder": "decoder"}.get(layer.split(".")[0], default), index


def _ablation(
    model: TokenModel, inputs: tuple[Tensor, ...], predicted: Tensor, positions: Tensor, default_kind: str
) -> Ablation:
    layers = interventions.attention_layers(model)
    baseline, drops = head_ablation(model, inputs, predicted, positions)
    kinds = [_layer_kind(layer, default_kind) for layer in layers]
    return Ablation(
        layers=layers,
        labels=[interventions.head_label(layer, 0).removesuffix("H0") for layer in layers],
        kinds=[k for k, _ in kinds],
        indices=[i for _, i in kinds],
        baseline=baseline,
        drops=drops,
        positions=int(positions.sum()),
    )


def _summary(model: TokenModel, **more: object) -> dict:
    """The model's sizes, and how to write its tokens as text: one after the other for a character
    vocabulary (one with a space in it), apart otherwise."""
    config = model.config
    characters = " " in model.vocab and all(len(token) == 1 for token in model.vocab)
    return {
        "arch": config.arch,
        "join": "" if characters else " ",
        "layers": config.num_layers,
        "heads": config.num_heads,
        "model_dim": config.model_dim,
        "parameters": sum(p.numel() for p in model.parameters()),
    } | more


def explorer_data(
    model: TokenModel,
    tokens: Sequence[int] | Tensor,
    labels: Sequence[int] | Tensor | None = None,
    ablation: bool = True,
) -> ExplorerData:
    """The explorer's data for one input: token ids [T] or [1, T] (an encoder-decoder: the source).

    `labels`: per position the expected output (-100 where none), for an encoder or a decoder-only
    model; for an encoder-decoder the expected output sequence (target tokens and <eos>). `ablation`:
    also the head-ablation table (one forward pass per head).
    """
    ids = _as_ids(tokens)
    if not ids:
        raise ValueError("tokens is empty; pass at least one token id")
    vocab_size = model.config.vocab_size
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(f"token id {bad[0]} is not in the model's vocabulary (ids 0 to {vocab_size - 1})")
    if len(ids) > model.max_len:
        raise ValueError(f"the input has {len(ids)} tokens, more than the model's max_len={model.max_len}")
    device = next(model.parameters()).device
    x = torch.tensor([ids], dtype=torch.long, device=device)
    if isinstance(model, EncoderDecoder):
        return _collect_encoder_decoder(model, x, _as_ids(labels), ablation)
    return _collect_stack(model, x, _as_ids(labels), ablation)


def _collect_stack(model: TokenModel, x: Tensor, labels: list[int] | None, ablation: bool) -> ExplorerData:
    """An encoder (a class per position) or a decoder-only model (position t predicts token t + 1)."""
    if labels is not None and len(labels) != x.size(1):
        raise ValueError(f"labels has {len(labels)} entries for {x.size(1)} tokens; give one per token")
    causal = bool(getattr(model, "causal", False))
    with _eval(model):
        logits, cache = model.run_with_cache(x, names_filter=lambda name: name.endswith("hook_pattern"))
    maps = list(cache.values())
    rollout = explain.attention_rollout(maps)[0]
    relevance = explain.gradient_attention_all(model, x)[0]
    relevance = explain.attention_added(relevance).clamp_min(0)  # R - I, rows as shares of the output

    vocab, names = model.vocab, output_names(model)
    tokens = [vocab[i] for i in x[0].tolist()]
    probs = logits[0].float().softmax(dim=-1)
    predicted = probs.argmax(dim=-1)
    predictions = _predictions(probs.cpu(), tokens, names, labels)
    labelled = torch.tensor([label != IGNORE_INDEX for label in labels]) if labels else None
    positions = (
        labelled if labelled is not None and bool(labelled.any()) else torch.ones(x.size(1), dtype=torch.bool)
    )
    if causal:
        what = ("query: the token that reads", "key: an earlier token it reads")
        title = "Causal self-attention"
        note = "Position t reads tokens 0..t and predicts token t + 1."
    else:
        what = ("query: the token that reads", "key: the token it reads")
        title = "Self-attention"
        note = "Every position reads the whole input and predicts its own output."
    kind = AttentionKind("self", title, tokens, tokens, *what, _stacked(maps))
    output_rows = [names[i] for i in predicted.tolist()]
    return ExplorerData(
        arch=model.config.arch,
        summary=_summary(model, input=tokens, output=output_rows, causal=causal),
        kinds=[kind],
        overlay_kind="self",
        overlay_rows=output_rows,
        overlay_cols=tokens,
        overlays=[
            Overlay(
                "rollout", "Attention rollout", rollout.float().cpu().numpy(), _off_diagonal_max(rollout)
            ),
            Overlay(
                "relevance",
                "Gradient-weighted relevance",
                relevance.float().cpu().numpy(),
                _off_diagonal_max(relevance),
            ),
        ],
        predictions=predictions,
        prediction_kind="self",
        ablation=_ablation(model, (x,), predicted, positions.to(x.device), "self") if ablation else None,
        notes=[note],
    )


def _collect_encoder_decoder(
    model: EncoderDecoder, source: Tensor, labels: list[int] | None, ablation: bool
) -> ExplorerData:
    """The output an encoder-decoder generates greedily for `source`, and how each output reads it."""
    with _eval(model):
        output = model.generate(source)
    target = torch.cat([torch.full_like(output[:, :1], model.bos_id), output[:, :-1]], dim=1)
    maps = explain.encoder_decoder_maps(model, source, target)
    rollout = explain.row_shares(explain.encoder_decoder_rollout(maps)[0])
    relevance = explain.row_shares(explain.source_relevance(model, source, target)[0])
    with _eval(model):
        logits = model(source, target)
    vocab = model.vocab
    source_tokens = [vocab[i] for i in source[0].tolist()]
    target_tokens = [vocab[i] for i in target[0].tolist()]
    output_tokens = [vocab[i] for i in output[0].tolist()]
    probs = logits[0].float().softmax(dim=-1)
    predictions = _predictions(probs.cpu(), target_tokens, vocab, labels)
    kinds = [
        AttentionKind(
            "encoder",
            "Encoder self-attention",
            source_tokens,
            source_tokens,
            "query: source token that reads",
            "key: source token it reads",
            _stacked(maps["encoder"]),
        ),
        AttentionKind(
            "decoder",
            "Decoder self-attention (causal)",
            target_tokens,
            target_tokens,
            "query: output position that reads",
            "key: an earlier output token",
            _stacked(maps["decoder"]),
        ),
        AttentionKind(
            "cross",
            "Cross-attention",
            target_tokens,
            source_tokens,
            "query: output position (decoder)",
            "key: source token (encoder output)",
            _stacked(maps["cross"]),
        ),
    ]
    everywhere = torch.ones(target.size(1), dtype=torch.bool, device=source.device)
    return ExplorerData(
        arch=model.config.arch,
        summary=_summary(model, input=source_tokens, output=output_tokens, causal=False),
        kinds=kinds,
        overlay_kind="cross",
        overlay_rows=output_tokens,
        overlay_cols=source_tokens,
        overlays=[
            Overlay(
                "rollout",
                "Attention rollout (through encoder, decoder and cross-attention)",
                rollout.float().cpu().numpy(),
            ),
            Overlay("relevance", "Gradient-weighted relevance", relevance.float().cpu().numpy()),
        ],
        predictions=predictions,
        prediction_kind="decoder",
        ablation=_ablation(model, (source, target), output[0], everywhere, "cross") if ablation else None,
        notes=[
            "The output is generated greedily from the source; output position t reads <bos> and the "
            "outputs before it, and the whole source through cross-attention."
        ],
    )
