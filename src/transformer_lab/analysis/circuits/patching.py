"""Exact patching: the reference the estimates are compared to.

    score(e) = M(only unit e patched) - M(clean)

one patched forward pass per unit (edge, or node), chunked: several units per pass, one copy of the batch
each (`replicas_for`). A model whose estimated time exceeds `max_seconds` is refused before it starts.
"""

from __future__ import annotations

import torch

from transformer_lab.analysis.circuits.methods import register
from transformer_lab.analysis.circuits.options import Options, Scores
from transformer_lab.analysis.circuits.patcher import Setup, replicas_for, require_time


@register(
    "patching",
    "M with the edge alone patched, minus M(clean): one patched forward pass per edge (several copies of "
    "the batch per pass), E passes, the slow reference",
    exact=True,
)
def score(setup: Setup, options: Options) -> Scores:
    """Exact: M(only unit e patched) - M(clean) for every edge (node), chunked over copies of the batch."""
    g = setup.graph
    chunk = replicas_for(setup.model, setup.inputs, g)
    require_time(setup, "method=patching", "about", options.max_seconds)
    eye = torch.eye(g.units)
    return Scores(setup.evaluate(eye, chunk=chunk) - setup.clean_metric)
