"""How many examples an analysis reads by default: as many as fit a time budget on this machine.

A fixed default (512 examples) takes a second on the lab's small models and minutes on a 10 M-parameter
text model. So the default is measured: one forward pass of the model over a few examples is timed, the
analysis's passes per example are counted (`passes`: head ablation runs the model once per head, and once
whole), and the default is as many examples as fit `SECONDS`, between `FEWEST` and the analysis's usual
number. The tool says so in one line; `num_examples=` sets it.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from transformer_lab.nn import TokenModel, evaluating

SECONDS = 15.0  # what a default analysis may take
FEWEST = 8  # fewer examples than this say little whatever the budget


def seconds_per_example(model: TokenModel, inputs: tuple[Tensor, ...]) -> float:
    """One forward pass's seconds per example, timed on `inputs` (a few examples) after a warm-up pass."""
    with evaluating(model), torch.no_grad():
        model(*(x[:1] for x in inputs))
        started = time.perf_counter()
        model(*inputs)
    return (time.perf_counter() - started) / inputs[0].size(0)


def examples_within(
    model: TokenModel, inputs: tuple[Tensor, ...], passes: int, usual: int, analysis: str
) -> tuple[int, str]:
    """(the number of examples `analysis` reads by default, the line that says why): `usual`, or as many
    as `passes` forward passes each fit `SECONDS` at the speed measured on `inputs`."""
    each = seconds_per_example(model, inputs) * passes
    count = max(FEWEST, min(usual, int(SECONDS / each)))
    if count == usual:
        return count, ""
    return count, (
        f"num_examples={count} (the default here: analysis={analysis} takes about {passes} passes of "
        f"{each / passes * 1e3:.1f} ms per example on this machine, so {count} fit {SECONDS:g} s; "
        f"num_examples= sets it)"
    )
