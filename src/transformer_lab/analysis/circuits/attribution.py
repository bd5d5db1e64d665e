"""What eap and eap_ig share: the gradient of M with respect to every input a unit's patch changes, and
the first-order change of M when a unit is patched,

    (out_u' - out_u) . dM/d input_d        (edge u -> d; at node level dM/d out_u)

every unit from one forward and one backward pass, with each example's share of it (the model runs each
example on its own, so the gradient of the batch's M at an example's activations is its term's alone).
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_lab.analysis.circuits.options import Scores
from transformer_lab.analysis.circuits.patcher import Setup
from transformer_lab.nn import evaluating


def gradients(setup: Setup, interpolate: float | None) -> dict[str, Tensor]:
    """dM/d(every reader activation) (edge level) or dM/d(every node output) (node level) on the clean
    batch; with `interpolate` = alpha, the embeddings are out' + alpha (out - out') (integrated gradients)."""
    p, g = setup.patcher, setup.graph
    p.replace = {}
    if interpolate is not None:
        for i, node in enumerate(g.nodes):
            if node.name.endswith("embed") and node.hook is not None:
                clean, alternative = setup.clean_outputs[i], p.alternative[i]
                mixed = alternative + interpolate * (clean - alternative)
                p.replace[i] = lambda activation, mixed=mixed: mixed.to(activation.dtype)
    kept: dict[str, Tensor] = {}
    p.keep = kept
    try:
        with evaluating(setup.model, autograd="on"):
            value = setup.metric(p.run()).sum()
            names = list(kept)
            grads = torch.autograd.grad(value, [kept[n] for n in names], allow_unused=True)
    finally:
        p.keep = None
        p.replace = {}
    return {n: torch.zeros_like(kept[n]) if d is None else d for n, d in zip(names, grads, strict=True)}


def attribution(setup: Setup, grads: dict[str, Tensor]) -> Scores:
    """(out_u' - out_u) . gradient, per edge (node): the first-order change of M when it is patched, and
    each example's share of it (the dot product over that example's positions only)."""
    g, p = setup.graph, setup.patcher
    batch = setup.inputs[0].size(0)
    shares = torch.zeros(batch, g.units, dtype=torch.float64)
    if g.level == "edge":
        delta = {  # per stack, out' - out of every node [U, B, T D]
            stack: (p.stacked[stack] - torch.stack([setup.clean_outputs[u] for u in us])).flatten(2)
            for stack, us in g.writers.items()
        }
        for hook in p.readers_by_hook:
            start, stop, stack = p.span(hook)
            gradient = grads[hook]  # [B, T, heads, D] or [B, T, D]
            gradient = (
                gradient.transpose(2, 3).reshape(batch, -1, gradient.size(2))
                if gradient.dim() == 4
                else gradient.reshape(batch, -1, 1)
            )
            values = delta[stack][start:stop].transpose(0, 1) @ gradient  # [B, n, heads]
            shares[:, p.unit_index[hook].flatten()] = values.flatten(1).double().cpu()
    else:
        for hook, nodes in p.outputs_by_hook.items():
            gradient = grads[hook]
            for k, n in enumerate(nodes):
                head = g.nodes[n].head
                grad = gradient if head is None else gradient[:, :, head]
                delta = p.alternative[n] - setup.clean_outputs[n]
                shares[:, p.unit_index[hook][k]] = (delta.double() * grad.double()).flatten(1).sum(1).cpu()
    return Scores(shares.sum(dim=0).float(), per_example=shares.float())
