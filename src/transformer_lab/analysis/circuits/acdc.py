"""Automatic circuit discovery (ACDC, Conmy et al. 2023): greedy pruning from the logits backwards.

Visit the readers from the logits back to the embeddings; patch each edge into a reader in turn, keeping
the ones removed so far patched, and leave it patched (removed) when M moves by less than

    threshold x |M(clean) - M(all patched)|

An edge's score is the change of M recorded when it was tested (0 for edges into a node nothing kept
reads: its inputs are not tested). At node level the nodes are tested from the last to the first. One
patched pass per unit tested; a model whose worst case (every unit) exceeds `max_seconds` is refused.
"""

from __future__ import annotations

import torch

from transformer_lab.analysis.circuits.methods import register
from transformer_lab.analysis.circuits.options import Options, Scores, require_threshold
from transformer_lab.analysis.circuits.patcher import Setup, require_time


@register(
    "acdc",
    "from the logits backwards, patch each edge in turn (the ones removed so far stay patched); remove it "
    "for good when M moves by less than `threshold` x |M(clean) - M(all patched)|; its score is the change "
    "recorded then: one pass per edge tried",
)
def score(setup: Setup, options: Options) -> Scores:
    """ACDC: greedy pruning from the logits backwards (see the module docstring). The scores (the change
    of M recorded when each unit was tested; 0 if never tested) and the units kept."""
    require_threshold(options.threshold)
    require_time(setup, "method=acdc", "up to", options.max_seconds)
    g = setup.graph
    tolerance = options.threshold * abs(setup.clean_metric - setup.ablated_metric)
    mask = torch.zeros(1, g.units)
    shares = torch.zeros(setup.inputs[0].size(0), g.units)  # each example's share of each score
    current = setup.clean_values

    def test(unit: int) -> None:
        nonlocal current
        mask[0, unit] = 1.0
        values = setup.evaluate(mask, chunk=1, per_example=True)[0]
        shares[:, unit] = (values - current).cpu()
        if abs(float(values.sum()) - float(current.sum())) < tolerance:
            current = values
        else:
            mask[0, unit] = 0.0

    if g.level == "node":
        for k in reversed(range(g.units)):
            test(k)
        return Scores(shares.sum(dim=0), mask[0] == 0, shares)
    alive = {len(g.nodes) - 1}  # the logits
    by_reader: dict[int, list[int]] = {}
    for e, (_, r) in enumerate(g.edges):
        by_reader.setdefault(r, []).append(e)
    for r in reversed(range(len(g.readers))):
        reader = g.readers[r]
        if alive.isdisjoint(reader.nodes):  # nothing kept reads these nodes: their inputs do not matter
            for e in by_reader[r]:
                mask[0, e] = 1.0
            continue
        for e in reversed(by_reader[r]):
            test(e)
            if mask[0, e] == 0:
                alive.add(g.edges[e][0])
    return Scores(shares.sum(dim=0), mask[0] == 0, shares)
