"""The benchmark's phases: one module per phase, each registering itself here; `scripts/bench.py` runs them.

A phase is one function `(context: Context) -> dict` of figures under `@register(name, ...)`, with its
rows of the report's table (figure, format of the value, the keys it shows; the first key is checked
against the phase's targets in a full run), the figures it must reach, the phases whose results it needs
(`needs=`: generation times the model that training trained), and any table of its own printed after the
main one. A new phase is one module of this package named in `BUILT_IN`, in the order the report shows it:

    from bench_phases import Context, register
    from bench_phases.common import progress

    @register("mine", rows=[("my figure", "{:.2f} s", ["my_seconds"])], targets={"my_seconds": ("<", 1.0)})
    def bench_mine(context: Context) -> dict:
        progress("mine: ...")
        return {"my_seconds": ...}

    common.py           what the phases share: Mode (FULL, QUICK), progress, quartiles, timed
    training.py         1, 2, 5: training throughput against a bare loop and nanoGPT, MFU, peak memory
    generation.py       3: generation with and without the KV cache
    reverse.py          4: python train.py (the reverse task)
    encoder_decoder.py  6: the encoder-decoder's caches, and python train.py task=sort
    end_to_end.py       7: a whole run, measured from inside
    explorer.py         8: the attention explorer's pages in Chromium, and the live pages' parity
    threads.py          9: where a second thread pays, and a run on a busy machine
    circuits.py         10: circuit discovery and what its evidence costs
    startup.py          a tool's start-up without training
    text.py             11: python train.py on a text corpus of 20 MB and of 400 MB
    intervals.py        12: what ci=0.95 costs the printed tables
    defaults.py         13: a default analysis and page on a text model of 5 M parameters
    families.py         14: Pythia- and SmolLM-shaped models against transformers: forward, training step,
                        generation; the hook points' cost
    sae.py              15: training a sparse autoencoder, on the fly and from its cache; the cache's memory
    real_sizes.py       every tool with its defaults on Pythia-70M- and SmolLM-135M-shaped folders: time,
                        memory, and transformers' own load and forward for scale
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_phases.common import Mode

# The phases in the order they run and the report shows them: a module of this package each, of that name.
BUILT_IN = (
    "training",
    "generation",
    "reverse",
    "encoder_decoder",
    "end_to_end",
    "explorer",
    "threads",
    "circuits",
    "startup",
    "text",
    "intervals",
    "defaults",
    "families",
    "sae",
    "real_sizes",
)

Row = tuple[str, str, list[str]]  # (figure, format of the value, the results keys it shows)


@dataclass
class Context:
    """What a phase is given: how much to measure, a scratch directory (removed afterwards), the Hydra
    overrides and torch threads of the command line, and what earlier phases left for later ones."""

    mode: Mode
    workdir: Path
    overrides: list[str] = field(default_factory=list)
    threads: int | None = None
    shared: dict[str, Any] = field(default_factory=dict)  # e.g. "trained": the training phase's model


@dataclass(frozen=True)
class Phase:
    """A registered phase: its function, its rows of the report's table, its targets (key: (comparison,
    threshold), checked by the full benchmark only), the phases it needs, and tables of its own."""

    name: str
    run: Callable[[Context], dict]
    rows: tuple[Row, ...]
    targets: dict[str, tuple[str, float]]
    needs: tuple[str, ...]
    tables: tuple[Callable[[dict], str | None], ...]


_PHASES: dict[str, Phase] = {}


def register(
    name: str,
    *,
    rows: list[Row] | tuple[Row, ...] = (),
    targets: dict[str, tuple[str, float]] | None = None,
    needs: tuple[str, ...] = (),
    tables: tuple[Callable[[dict], str | None], ...] = (),
) -> Callable[[Callable[[Context], dict]], Callable[[Context], dict]]:
    """Register `function(context) -> figures` as the phase `name` (see the module docstring)."""

    def decorate(function: Callable[[Context], dict]) -> Callable[[Context], dict]:
        _PHASES[name] = Phase(name, function, tuple(rows), dict(targets or {}), needs, tables)
        return function

    return decorate


def phases() -> dict[str, Phase]:
    """Every phase, the built-in ones first in their order (their modules imported on first use)."""
    for name in BUILT_IN:
        importlib.import_module(f"{__name__}.{name}")
    return {name: _PHASES[name] for name in BUILT_IN} | _PHASES
