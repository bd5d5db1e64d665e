"""How many examples an analysis reads by default: as many as fit a time budget on a laptop CPU.

A fixed default (512 examples) takes a second on the lab's small models and minutes on a 100 M-parameter
model. So the default follows the model's size: a forward pass's cost per example is estimated from it,
FLOPs = 2 P T + 4 L T^2 D (P parameters, T positions, L layers of width D: every weight multiplies every
position once, attention compares every pair of positions; an embedding table is looked up, not
multiplied, so P leaves it out unless the output layer shares it), at `LAPTOP_FLOPS` and `OVERHEAD` seconds of
Python and dispatch per example; the analysis's passes per example are counted (`passes`: head ablation
runs the model once per head, and once whole); the default is as many examples as fit `SECONDS`, between
`FEWEST` and the analysis's usual number. An estimate, not a timing: the same model gets the same
default on every machine and under any load, so a number printed in the docs is the number a user gets.
The tool says so in one line; `num_examples=` sets it.
"""

from __future__ import annotations

from torch import Tensor, nn

from transformer_lab.analysis.intervals import FEWEST_EXAMPLES
from transformer_lab.nn import TokenModel

SECONDS = 15.0  # what a default analysis may take
FEWEST = FEWEST_EXAMPLES  # whatever the budget: fewer give no interval (a text window is 128 predictions)
LAPTOP_FLOPS = 2e10  # float32 FLOP/s two laptop cores sustain here (this project's AVX2 machine: ~8e10)
OVERHEAD = 3e-4  # seconds per example of a forward pass's Python and kernel launches, on small models


def flops_per_example(model: TokenModel, inputs: tuple[Tensor, ...]) -> float:
    """A forward pass's floating-point operations per example: 2 P T + 4 L T^2 D (the module docstring),
    T the positions of the model's inputs (an encoder-decoder's source and target together)."""
    config = model.config
    multiplied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    looked_up = {  # embedding tables not shared with a linear layer (the output layer, when tied)
        id(m.weight): m.weight.numel()
        for m in model.modules()
        if isinstance(m, nn.Embedding) and id(m.weight) not in multiplied
    }
    parameters = sum(p.numel() for p in model.parameters()) - sum(looked_up.values())
    positions = sum(x.size(1) for x in inputs)
    layers = sum(len(stack.blocks) for stack in model.stacks().values())
    return 2 * parameters * positions + 4 * layers * positions**2 * config.model_dim


def seconds_per_example(model: TokenModel, inputs: tuple[Tensor, ...]) -> float:
    """The estimated seconds of one forward pass per example on a laptop CPU (the module docstring)."""
    return OVERHEAD + flops_per_example(model, inputs) / LAPTOP_FLOPS


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
    or as many as `passes` forward passes each fit `seconds` (default `SECONDS`) at the cost estimated
    from the model's size on `inputs` (a few examples):
    `analysis=heads: 48 examples, not 512 (about 52 passes of an estimated 5.9 ms per example, 96 MFLOP
    each, fit 15 s on a laptop CPU; num_examples= sets it)`."""
    seconds = SECONDS if seconds is None else seconds
    each = seconds_per_example(model, inputs)
    count = max(FEWEST, min(usual, int(seconds / (each * passes))))
    if count == usual:
        return count, ""
    flops = flops_per_example(model, inputs) / 1e6
    return count, (
        f"{what}: {count} examples, not {usual} (about {passes} passes of an estimated {each * 1e3:.1f} ms "
        f"per example, {flops:.0f} MFLOP each, fit {seconds:g} s on a laptop CPU; {sets})"
    )
