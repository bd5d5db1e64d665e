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
FEWEST = 4  # fewer examples than this say little whatever the budget (a text window is 128 predictions)


def seconds_per_example(model: TokenModel, inputs: tuple[Tensor, ...]) -> float:
    """One forward pass's seconds per example, timed on `inputs` (a few examples) after a warm-up pass."""
    with evaluating(model), torch.no_grad():
        model(*(x[:1] for x in inputs))
        started = time.perf_counter()
        model(*inputs)
    return (time.perf_counter() - started) / inputs[0].size(0)


def examples_within(
    model: TokenModel,
    inputs: tuple[Tensor, ...],
    passes: int,
    usual: int,
    what: str,
    seconds: float | None = None,
    sets: str = "num_examples= sets it",
) -> tuple[int, str]:
    """(how many examples `what` reads by default, the line that says why, or "" for `usual`): `usual`,
    or as many as `passes` forward passes each fit `seconds` (default `SECONDS`) at the speed measured on
    `inputs`:
    `analysis=heads: 48 examples, not 512 (about 52 passes of 5.9 ms per example on this machine fit 15 s;
    num_examples= sets it)`."""
    seconds = SECONDS if seconds is None else seconds
    each = seconds_per_example(model, inputs)
    count = max(FEWEST, min(usual, int(seconds / (each * passes))))
    if count == usual:
        return count, ""
    return count, (
        f"{what}: {count} examples, not {usual} (about {passes} passes of {each * 1e3:.1f} ms per example "
        f"on this machine fit {seconds:g} s; {sets})"
    )
