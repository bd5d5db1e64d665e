"""Exact patching: the reference the estimates are compared to.

    score(e) = M(only unit e patched) - M(clean)

one patched forward pass per unit (edge, or node), chunked: several units per pass, one copy of the batch
each (`replicas_for`). A model whose estimated time exceeds `max_seconds` is refused before it starts.
`effects` is the same for some units only: what `verify=K` checks an estimate's top units with.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from transformer_lab.analysis.circuits.methods import register
from transformer_lab.analysis.circuits.options import Options, Scores
from transformer_lab.analysis.circuits.patcher import Setup, replicas_for, require_time


def effects(setup: Setup, units: Sequence[int]) -> Tensor:
    """M(only unit e patched) - M(clean) for each of `units`, per example: [len(units), B], each row
    summing to the unit's exact score (the examples' shares of it)."""
    rows = torch.zeros(len(units), setup.graph.units)
    rows[torch.arange(len(units)), torch.as_tensor(list(units), dtype=torch.long)] = 1.0
    chunk = replicas_for(setup.model, setup.inputs, setup.graph)
    return setup.evaluate(rows, chunk=chunk, per_example=True) - setup.clean_values


@register(
    "patching",
    "M with the edge alone patched, minus M(clean): one patched forward pass per edge (several copies of "
    "the batch per pass), E passes, the slow reference",
    exact=True,
)
def score(setup: Setup, options: Options) -> Scores:
    """Exact: M(only unit e patched) - M(clean) for every edge (node), chunked over copies of the batch."""
    require_time(setup, "method=patching", "about", options.max_seconds)
    shares = effects(setup, range(setup.graph.units))
    shares = shares.cpu()
    return Scores(shares.sum(dim=1), per_example=shares.t())
