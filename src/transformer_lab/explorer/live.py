"""The live page's model: what the page's JavaScript forward pass (`model.js`) needs to run the model itself.

`live_model(model, reference)` returns a `LiveModel`: the model's structure read through its shared
interface (`stacks()`, `attention_layers()`, `num_inputs`, `generates` and the predicates that say what
kind of model it is, which the page reads instead of working them out; no question of which class it
is), its config, the role of every weight (`layout.weight_layout`: the page's forward pass finds each
weight by its role), its weights as one float32 buffer (deflated, base64; tied weights stored once) with a
manifest of state_dict names, and for mean ablation each attention layer's `hook_z` averaged over a
reference batch per position (as `interventions` computes it). A model whose weights would take more
than `WEIGHT_BUDGET` characters, or that has a weight the page's forward pass does not know, is not
made live: `LiveModel.refusal` says why, and the page keeps its precomputed views. A model setting the
page cannot run is refused before anything is made (`layout.check_runnable`: a ConfigError).

Weights are float32 (float16 moves the logits by about 1e-3 of their scale); `dtype="float16"` halves
the page for a model that would not fit otherwise, and is then exact only for the model with the same
rounded weights (`rounded_model`).
"""

import base64
import copy
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from transformer_lab.explorer.layout import LABEL_RULES, check_runnable, shipped_layout, weight_layout
from transformer_lab.nn import TokenModel, evaluating
from transformer_lab.nn.positional import sinusoid_frequencies

# Characters of weights (base64 of the deflated buffer, every snapshot and the means included) a page may
# hold on top of its precomputed part (< 5 MB): a 20 MB page opens in a second from disk.
WEIGHT_BUDGET = 20_000_000
DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass
class LiveModel:
    """One model for the page: `spec` (structure and config), `weights` and `means` (packed), the
    characters they take, and `refusal` (why it cannot be live) when it cannot."""

    spec: dict
    weights: dict | None = None
    means: dict | None = None
    chars: int = 0
    refusal: str | None = None
    notes: list[str] = field(default_factory=list)


def _encode(values: np.ndarray) -> str:
    return base64.b64encode(zlib.compress(values.tobytes(), 6)).decode("ascii")


def model_spec(model: TokenModel) -> dict:
    """The structure, config and weight layout the page's forward pass runs, from the models' shared
    interface (`layout.weight_layout`: what each weight is)."""
    config = model.config
    stacks = model.stacks()
    prefixes = list(stacks)
    layers = []
    for layer in model.attention_layers():
        prefix, _, rest = layer.name.rpartition("blocks.")
        prefix = prefix if prefix in stacks else ""
        block, _, module = rest.partition(".")
        layers.append(
            {
                "name": layer.name,
                "kind": layer.kind,
                "group": layer.group,
                "label": layer.label,
                "queries": layer.queries,
                "keys": layer.keys,
                "stack": prefixes.index(prefix),
                "block": int(block),
                "module": module,
            }
        )
    div_term = sinusoid_frequencies(config.model_dim)  # exactly as nn.PositionalEncoding's, in float32
    return {
        "config": config.to_dict() | {"output_classes": config.output_classes},
        "stacks": [
            {
                "prefix": prefix,
                "causal": bool(stack.causal),
                "cross": any(hasattr(block, "cross_attn") for block in stack.blocks),
                "blocks": len(stack.blocks),
                "input": index,
            }
            for index, (prefix, stack) in enumerate(stacks.items())
        ],
        "layers": layers,
        "numInputs": model.num_inputs,
        "generates": bool(model.generates),
        # what kind of model it is, each said once (TokenModel's predicates): the page reads these
        "decoderOnly": model.decoder_only,
        "languageModel": model.language_model,
        "readsSource": model.reads_source,
        "crossAttention": model.has_cross_attention,
        "sinusoid": [float(v) for v in div_term.tolist()],
        # rotary positions: theta_i exactly as nn.RotaryPositionalEncoding's, in float32 (null: none)
        "rotary": [float(v) for v in model.source_stack[1].pos_embed.inv_freq.tolist()]
        if config.positional_encoding == "rotary"
        else None,
        "vocab": list(model.vocab),
        "layout": shipped_layout(weight_layout(model)[0]),
    }


def pack_weights(model: TokenModel, dtype: str = "float32") -> dict:
    """The state_dict as one little-endian buffer of `dtype` (deflated, base64) and a manifest of
    [name, offset in values, shape]; a tensor shared by several names (tied weights) is stored once."""
    values, manifest, seen, offset = [], [], {}, 0
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in seen:
            seen[key] = offset
            values.append(tensor.detach().cpu().float().reshape(-1).numpy())
            offset += tensor.numel()
        manifest.append([name, seen[key], list(tensor.shape)])
    flat = np.concatenate(values).astype(np.dtype(DTYPES[dtype]).newbyteorder("<"))
    return {"dtype": dtype, "data": _encode(flat), "manifest": manifest, "values": int(offset)}


def rounded_model(model: TokenModel, dtype: str) -> TokenModel:
    """A copy of the model with its weights rounded to `dtype` and back: the model a float16 page runs."""
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for tensor in rounded.state_dict().values():
            tensor.copy_(tensor.to(getattr(torch, dtype)).float())
    return rounded


def reference_means(model: TokenModel, reference: tuple[Tensor, ...]) -> dict:
    """For mean ablation: each attention layer's z averaged over the reference batch, per position
    ([T_ref, H, d_head] float32, as `interventions` averages it), packed with a manifest by layer index."""
    names = [f"{layer.name}.hook_z" for layer in model.attention_layers()]
    wanted = set(names)
    with evaluating(model):
        _, cache = model.run_with_cache(*reference, names_filter=lambda name: name in wanted)
    parts, manifest, offset = [], [], 0
    for index, name in enumerate(names):
        mean = cache[name].float().mean(dim=0).cpu().numpy()  # [T, H, d_head]
        parts.append(mean.reshape(-1))
        manifest.append([str(index), offset, list(mean.shape)])
        offset += mean.size
    flat = np.concatenate(parts).astype("<f4")
    return {
        "dtype": "float32",
        "data": _encode(flat),
        "manifest": manifest,
        "batch": int(reference[0].size(0)),
    }


def live_model(
    model: TokenModel,
    reference: tuple[Tensor, ...] | None = None,
    dtype: str = "float32",
    budget: int = WEIGHT_BUDGET,
) -> LiveModel:
    """The model packed for the page, or a `LiveModel` whose `refusal` says why it cannot be (over the
    weight budget, or a weight the page's forward pass does not know)."""
    if dtype not in DTYPES:
        raise ValueError(f"weights={dtype!r} is unknown; use float32 (default) or float16")
    spec = model_spec(model)
    state = model.state_dict()
    refusal = weight_layout(model)[1]
    if refusal:
        return LiveModel(spec, refusal=refusal)
    # a first estimate before packing: deflate gains little on trained float32 weights
    estimate = sum(t.numel() for t in {t.untyped_storage().data_ptr(): t for t in state.values()}.values())
    estimate = estimate * np.dtype(DTYPES[dtype]).itemsize * 4 // 3
    if estimate > 2 * budget:
        return LiveModel(spec, refusal=_over_budget(estimate, budget, dtype))
    weights = pack_weights(model, dtype)
    means = reference_means(model, reference) if reference is not None else None
    chars = len(weights["data"]) + (len(means["data"]) if means else 0)
    if chars > budget:
        return LiveModel(spec, refusal=_over_budget(chars, budget, dtype))
    return LiveModel(spec, weights, means, chars)


def same_or_tied(
    model: TokenModel, expected: list[int], got: list[int], source: Tensor | None = None
) -> bool:
    """Whether the page's greedy output `got` is PyTorch's `expected`, or first parts from it where
    PyTorch's own logits tie (their two largest within 1e-5 of their scale: hand-set models, such as the
    answer-key ones, tie exactly, and float rounding then picks a winner no two implementations need
    agree on). `source`: an encoder-decoder's source, whose output starts after <bos>."""
    if got == expected:
        return True
    first = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
    if first is None:
        return False  # one stopped before the other
    with evaluating(model):
        if source is None:
            logits = model(torch.tensor([expected[:first]]))[0, -1]
        else:
            logits = model(source, torch.tensor([[model.bos_id, *expected[:first]]]))[0, -1]
    top = logits.topk(2).values
    return float(top[0] - top[1]) <= 1e-5 * float(logits.abs().max())


def _over_budget(chars: int, budget: int, dtype: str) -> str:
    halves = " (weights=float16 halves them)" if dtype == "float32" else ""
    return (
        f"its weights take {chars / 1e6:.1f} MB in the page, more than the {budget / 1e6:g} MB a page may "
        f"hold{halves}"
    )


@dataclass
class Snapshot:
    """A model of the same architecture at another training step (the explorer's step slider)."""

    step: int
    label: str
    model: TokenModel


def _pack_logits(logits: Tensor) -> dict:
    values = logits.detach().float().cpu().numpy()
    return {"data": _encode(values.astype("<f4")), "shape": list(values.shape)}


def _thin(sizes: list[int], keep: int, budget: int) -> list[int]:
    """The indices of the snapshots to keep: evenly spread over the run, always `keep` (the model the
    page opens on), as many as fit in `budget` characters together."""
    for count in range(len(sizes), 0, -1):
        chosen = sorted({round(i * (len(sizes) - 1) / max(count - 1, 1)) for i in range(count)} | {keep})
        if sum(sizes[i] for i in chosen) <= budget:
            return chosen
    return [keep]


def live_payload(
    model: TokenModel,
    inputs: tuple[Tensor, ...],
    *,
    labels: list[int] | None = None,
    reference: tuple[Tensor, ...] | None = None,
    snapshots: list[Snapshot] | None = None,
    dtype: str = "float32",
    budget: int = WEIGHT_BUDGET,
    separator: str | None = None,
    label_rule: str | None = None,
    output_names: list[str] | None = None,
    trained_lengths: tuple[int, int] | None = None,
    tokenizer: dict | None = None,
    decode: Callable[[list[int]], str] | None = None,
    token_names: list[str] | None = None,
) -> tuple[dict | None, str | None]:
    """The page's `live` section for the model and the inputs its precomputed views show, or (None, why
    the page cannot run it). `snapshots`: the same model at other steps (one of them may be `model`
    itself); as many as fit in the budget are kept, spread over the run. `tokenizer`: a byte-level BPE
    the page encodes typed text with (`data.tokenizer.page_tokenizer`), with its `decode` and the
    tokens' `token_names` as tools show them (`␣the`). A setting the page cannot run is a ConfigError
    (`layout.check_runnable`), raised before anything is packed."""
    check_runnable(model.config)
    live = live_model(model, reference, dtype, budget)
    if live.refusal:
        return None, live.refusal
    notes = []
    series = None
    if snapshots:
        packed, sizes = [], []
        for snapshot in snapshots:
            part = live if snapshot.model is model else None
            if part is None and snapshot.model.config.to_dict() == model.config.to_dict():
                part = live_model(snapshot.model, reference, dtype, budget)
            if part is None or part.refusal:
                notes.append(f"the snapshot at step {snapshot.step} is left out (another architecture)")
                continue
            packed.append((snapshot, part))
            sizes.append(part.chars)
        own = next((i for i, (s, _) in enumerate(packed) if s.model is model), None)
        if own is None:  # the model the page opens on is not a snapshot: it joins the series at its end
            packed.append((Snapshot(-1, "this checkpoint", model), live))
            sizes.append(live.chars)
            own = len(packed) - 1
        chosen = _thin(sizes, own, budget)
        if len(chosen) < len(packed):
            room = f"{budget / 1e6:g} MB"
            notes.append(f"{len(chosen)} of {len(packed)} snapshots fit in the page's {room} for weights")
        series = {
            "steps": [packed[i][0].step for i in chosen],
            "labels": [packed[i][0].label for i in chosen],
            "weights": [None if i == own else packed[i][1].weights for i in chosen],
            "means": [None if i == own else packed[i][1].means for i in chosen],
            "current": chosen.index(own),
        }
    config = model.config
    mode = "tokens"
    if model.reads_source or (
        model.decoder_only and config.sep_id is not None and config.sep_id in inputs[0][0].tolist()
    ):
        mode = "source"
    tokens = inputs[0][0].tolist()
    box = tokens[: tokens.index(config.sep_id)] if mode == "source" and model.decoder_only else tokens
    if separator is None:  # as the task would write it: characters, or tokens apart
        vocab = model.vocab
        separator = "" if " " in vocab and all(len(t) == 1 for t in vocab) else " "
    if label_rule is None and mode == "tokens" and model.decoder_only:
        label_rule = "next"  # a bare decoder-only model: each position's label is the next token
    if label_rule is not None and label_rule not in LABEL_RULES:
        known = ", ".join(LABEL_RULES)
        notes.append(f"the page knows no label rule {label_rule!r} (it knows {known}): no ✓/✗ when edited")
        label_rule = None
    specials = [i for i in (config.pad_id, config.bos_id, config.eos_id, config.sep_id) if i is not None]
    with evaluating(model):
        logits = model(*inputs)
    payload = {
        "spec": live.spec,
        "weights": live.weights,
        "means": live.means,
        "chars": live.chars,
        "series": series,
        "notes": notes,
        "check": _pack_logits(logits[0]),
        "input": {
            "mode": mode,
            "text": decode(box) if decode is not None else separator.join(model.vocab[i] for i in box),
            "tokens": box,
            "inputs": [x[0].tolist() for x in inputs],
            "labels": labels,
            "separator": separator,
            "specials": sorted(set(specials)),
            "label_rule": label_rule,
            "names": output_names or list(model.vocab),
            "trained_lengths": list(trained_lengths) if trained_lengths else None,
            "tokenizer": tokenizer,
            "token_names": token_names,
        },
    }
    return payload, None


def unpack_values(packed: dict) -> np.ndarray:
    """The values of a packed buffer (weights, means or logits) as the page reads them, as float32."""
    raw = zlib.decompress(base64.b64decode(packed["data"]))
    dtype = np.dtype("<f2") if packed.get("dtype") == "float16" else np.dtype("<f4")
    return np.frombuffer(raw, dtype=dtype).astype(np.float32)
