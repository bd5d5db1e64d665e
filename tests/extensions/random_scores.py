"""A circuit method written outside the package: one function, one registration (docs/circuits.md). A
baseline: random scores, what chance ranks. Importing this module is all it takes for `interpret
analysis=circuit method=random`, `circuits.discover` and the answer keys' grading to use it."""

import torch

from transformer_lab.analysis import circuits


@circuits.register("random", "random scores from a seeded generator: what chance ranks (a baseline)")
def random_scores(setup: circuits.Setup, options: circuits.Options) -> circuits.Scores:
    generator = torch.Generator().manual_seed(0)
    return circuits.Scores(torch.randn(setup.graph.units, generator=generator))
