"""The page's features view (explore sae=<run>): an SAE packed for the page, which runs it on its model's
activation at the SAE's hook (`sae.js`), with what a student hovers over to read a feature.

`features_payload(run, inputs, ...)` returns the page's `features`: the SAE's kind, k, hook and sizes;
its encoder as one float32 buffer with a manifest (`W_enc_t` [width, d_in]: W_enc transposed, the page's
Linear layout; b_enc, b_dec, input_scale, threshold), deflated and base64-encoded as the model's weights
are; where the page's forward pass finds the hook's activation (`where`: the stack, the block and which
activation: the block's input stream `resid_pre`, or the output of its `attn`, `cross_attn` or `mlp`
sub-layer; None for a hook the page does not record, whose page then shows the precomputed features of
its first input only); each feature's density and its top examples on the task's test examples (with
their context, `analysis.features`); and the features active at each position of the page's first input,
computed here with the SAE spliced in (what the page shows before its model runs, and what a test
compares the page's own computation with).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from transformer_lab.analysis.features import analyse_features
from transformer_lab.explorer.live import _encode
from transformer_lab.nn import parse_hook_name
from transformer_lab.nn.sae import activations_at, spliced

SHOWN = 8  # features listed per position (the most active)
EXAMPLES = 3  # top examples per feature in its tooltip
MAX_WIDTH = 8192  # features a page carries their examples for


def page_where(model: object, hook: str) -> dict | None:
    """Where the page's forward pass (model.js `record`) holds the activation at `hook`, or None."""
    name = parse_hook_name(hook)
    stacks = list(model.stacks())
    prefix = f"{name.stack}." if name.stack else ""
    if name.block is None or prefix not in stacks or name.module:
        return None
    blocks = len(model.stacks()[prefix].blocks)
    at = {
        "hook_resid_pre": ("resid_pre", name.block),
        "hook_resid_post": ("resid_pre", name.block + 1),  # the next block's input (or the last's output)
        "hook_attn_out": ("attn", name.block),
        "hook_cross_attn_out": ("cross_attn", name.block),
        "hook_mlp_out": ("mlp", name.block),
    }.get(name.hook)
    if at is None or at[1] > blocks:
        return None
    return {"stack": stacks.index(prefix), "at": at[0], "block": at[1]}


def pack_sae(sae) -> dict:
    """The encoder's tensors as one little-endian float32 buffer (deflated, base64) and a manifest."""
    tensors = {
        "W_enc_t": sae.W_enc.detach().t().contiguous(),
        "b_enc": sae.b_enc.detach(),
        "b_dec": sae.b_dec.detach(),
        "input_scale": sae.input_scale.detach().reshape(1),
    }
    if sae.threshold is not None:
        tensors["threshold"] = sae.threshold.detach()
    parts, manifest, offset = [], [], 0
    for name, tensor in tensors.items():
        values = tensor.float().cpu().numpy().reshape(-1)
        parts.append(values)
        manifest.append([name, offset, list(tensor.shape)])
        offset += values.size
    flat = np.concatenate(parts).astype("<f4")
    return {"dtype": "float32", "data": _encode(flat), "manifest": manifest}


def current_features(run, inputs: tuple[Tensor, ...]) -> list[list[list[float]]]:
    """Per position of `inputs` (one example), the active features [index, activation], largest first."""
    model = run.source.model
    with torch.no_grad():
        x = activations_at(model, run.hook, *inputs)[0]
        f = run.sae.encode(x)
    rows = []
    for values in f:
        top = values.topk(min(SHOWN, values.numel()))
        rows.append(
            [[int(i), round(float(v), 4)] for v, i in zip(top.values, top.indices, strict=True) if v > 0]
        )
    return rows


def features_payload(run, inputs: tuple[Tensor, ...], num_examples: int = 256) -> dict:
    """The page's `features` (the module docstring) for an SAE run and the page's first input."""
    sae, source = run.sae, run.source
    examples, labels = source.examples(num_examples, exact=False)
    with spliced(source.model, sae):  # taken out again: the page packs the model as it is
        report = analyse_features(
            source.model, sae, examples, labels, source.task.display_tokens, source.output_names,
            separator=source.tokenizer.separator, chosen=list(range(min(sae.width, MAX_WIDTH))),
            top=EXAMPLES, ablate=False,
        )  # fmt: skip
    tips = {r.index: [e["context"] for e in r.examples] for r in report.reports}
    return {
        "hook": run.hook,
        "kind": sae.config.kind,
        "activation": sae.kind.in_use,  # what the page computes: relu, topk or threshold
        "k": sae.config.k,
        "d_in": sae.config.d_in,
        "width": sae.width,
        "where": page_where(source.model, run.hook),
        "weights": pack_sae(sae),
        "density": [round(d, 6) for d in report.density],
        "examples": [tips.get(i, []) for i in range(min(sae.width, MAX_WIDTH))],
        "examples_of": f"{report.positions} positions of {examples[0].size(0)} test examples",
        "current": current_features(run, inputs),
        "shown": SHOWN,
    }
