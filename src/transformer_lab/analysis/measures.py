"""Per-head measures: one function each, registered once; every tool reads the registry.

A measure says one thing about every attention head, as one number per head: how spread its attention is
(`entropy`), how much of it lands where the task says the information is (`alignment`), what the task's
accuracy is without it (`ablation`), or a task's own score (`induction`, `previous_token`). `interpret
analysis=heads`, `analysis=dynamics`, the `heads/` callback, the figures and the explorer's heads view
iterate `MEASURES`, so a new measure is one function and one registration:

    from transformer_lab.analysis import measures

    @measures.register("first_token", "rise", "attention mass on the first token")
    def first_token(heads: measures.Heads) -> list[list[float | None]]:
        return heads.per_layer(lambda pattern, layer: pattern[..., 0].mean(dim=(0, 2)))

A measure gets a `Heads`: the model, the examples (inputs and labels), the task, and what is worth
computing once for all measures (every attention pattern from one forward pass, the task's alignment, the
ablation table), and returns [layer][head] values (None where it does not apply, e.g. the alignment of a
decoder's self-attention in an encoder-decoder). A task's own measures (`task=True`) are computed for
the tasks that name them (`TaskDataModule.measures`), every other one for every model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from transformer_lab.analysis import explain, induction, interventions
from transformer_lab.errors import require
from transformer_lab.nn import AttentionLayer, TokenModel, evaluating

DIRECTIONS = ("rise", "fall")  # how a measure moves as a head forms: alignment rises, entropy falls
Table = list[list[float | None]]  # [layer][head]


@dataclass(frozen=True)
class Measure:
    """A registered measure: its name, which way it moves as a head forms (`rise` or `fall`), a one-line
    description, the function, whether it takes a forward pass per head (`costly`: the callback logs it
    once, at the end of training), whether it is a task's own (computed where the task names it) and its
    full scale where it has one (1 for an attention mass or an accuracy: a phase change of a head's
    measure must move by a tenth of it, `analysis.events`)."""

    name: str
    direction: str
    description: str
    function: Callable[[Heads], Table | Tensor | None]
    costly: bool = False
    task: bool = False
    scale: float = 0.0


MEASURES: dict[str, Measure] = {}


def register(
    name: str, direction: str, description: str, costly: bool = False, task: bool = False, scale: float = 0.0
) -> Callable[[Callable], Callable]:
    """Register `function(heads) -> [layer][head] values` as the measure `name` (see the module
    docstring); registering a name again replaces it."""
    require(direction in DIRECTIONS, f"measure {name}: direction={direction!r} must be rise or fall")

    def add(function: Callable) -> Callable:
        MEASURES[name] = Measure(name, direction, description, function, costly, task, scale)
        return function

    return add


@dataclass
class Heads:
    """What a measure reads: the model and its examples, and what is computed once for all measures."""

    model: TokenModel
    inputs: tuple[Tensor, ...]
    labels: Tensor
    task: Any = None  # the TaskDataModule of the examples, where there is one
    cache: dict[str, Any] = field(default_factory=dict)  # anything else a measure computes once

    @property
    def layers(self) -> list[AttentionLayer]:
        return self.model.attention_layers()

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        """`compute()` the first time `key` is asked for, its result after that."""
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def _run(self) -> tuple[Tensor, dict[str, Tensor]]:
        """The logits and every attention pattern on the examples: one forward pass, the first time."""

        def run() -> tuple[Tensor, dict[str, Tensor]]:
            with evaluating(self.model), torch.no_grad():
                return self.model.run_with_cache(
                    *self.inputs, names_filter=lambda name: name.endswith("hook_pattern")
                )

        return self.once("run", run)

    @property
    def logits(self) -> Tensor:
        """The model's logits on the examples (from the pass that keeps the patterns)."""
        return self._run()[0]

    def pattern(self, layer: AttentionLayer) -> Tensor:
        """The layer's attention weights on the examples, [B, H, T_query, T_key]."""
        return self._run()[1][f"{layer.name}.hook_pattern"]

    def query_mask(self, layer: AttentionLayer) -> Tensor | None:
        """False at the padding queries of the layer (None: the model has no padding)."""
        pad = self.model.pad_id
        return None if pad is None else self.inputs[layer.queries] != pad

    @property
    def expected(self) -> Tensor | None:
        """Where the task says attention that reads the input should look (`TaskDataModule.alignment`)."""
        alignment = getattr(self.task, "alignment", None)
        return self.once("expected", lambda: alignment(self.inputs, self.labels) if alignment else None)

    def ablation(self) -> interventions.HeadAblation:
        """The task's accuracy with each head zero-ablated (`interventions.ablate_heads`)."""
        return self.once("ablation", lambda: interventions.ablate_heads(self.model, self.inputs, self.labels))

    def measure(self, chosen: Sequence[Measure] | None = None) -> dict[str, Table]:
        """Every applicable measure (or `chosen`): {name: [layer][head]}; one that does not apply at all
        (no alignment where the task defines none) is left out."""
        values = {}
        for measure in applicable(self.task) if chosen is None else chosen:
            table = measure.function(self)
            if table is not None:
                values[measure.name] = table.tolist() if isinstance(table, Tensor) else table
        return values

    def per_layer(
        self,
        value: Callable[[Tensor, AttentionLayer], Tensor | None],
        patterns: Callable[[AttentionLayer], Tensor] | None = None,
    ) -> Table:
        """The per-head loop, written once: `value(pattern, layer) -> [H]` (None: not for this layer) for
        every attention layer, as [layer][head] floats (None where it does not apply). `patterns`: where
        the patterns come from (default: the examples', `pattern`)."""
        results = [value((patterns or self.pattern)(layer), layer) for layer in self.layers]
        found = [r for r in results if r is not None]
        numbers = iter(torch.stack(found).tolist() if found else [])  # one read from the device
        none = [None] * self.model.config.num_heads
        return [none if r is None else next(numbers) for r in results]


def applicable(task: Any = None, names: Sequence[str] | None = None) -> list[Measure]:
    """The measures for a task (every general one, and the task's own that it names), in registration
    order; `names` picks some of them (an unknown name is a one-line error listing the known ones)."""
    own = set(getattr(task, "measures", ()) or ())
    chosen = [m for m in MEASURES.values() if not m.task or m.name in own]
    if names is not None:
        known = [m.name for m in chosen]
        unknown = [n for n in names if n not in known]
        require(not unknown, f"measure {unknown[:1]} is unknown here; the measures are {', '.join(known)}")
        chosen = [m for m in chosen if m.name in names]
    return chosen


def measure_heads(
    model: TokenModel,
    inputs: tuple[Tensor, ...],
    labels: Tensor,
    task: Any = None,
    chosen: Sequence[Measure] | None = None,
) -> dict[str, Table]:
    """Every applicable measure (or `chosen`) of every head on the examples (`Heads.measure`)."""
    return Heads(model, inputs, labels, task).measure(chosen)


def entries(table: Table, model: TokenModel) -> Iterator[tuple[str, float]]:
    """(`L0H1`, value) for every head a [layer][head] table has a value for."""
    for layer, row in zip(model.attention_layers(), table, strict=True):
        for head, value in enumerate(row):
            if value is not None:
                yield layer.head(head), value


# ------------------------------------------------------------------------- the measures of every model
@register("entropy", "fall", "mean entropy of its attention rows, in nats (log T: uniform, 0: one key)")
def entropy(heads: Heads) -> Table:
    return heads.per_layer(lambda pattern, layer: explain.attention_entropy(pattern, heads.query_mask(layer)))


@register(
    "alignment", "rise", "attention mass where the task says the information is (1: all of it)", scale=1.0
)
def alignment(heads: Heads) -> Table | None:
    expected = heads.expected
    if expected is None:
        return None

    def mass(pattern: Tensor, layer: AttentionLayer) -> Tensor | None:
        aligned = layer.reads_source and expected.shape[-1] == pattern.shape[-1]
        return explain.alignment_mass(pattern, expected) if aligned else None

    return heads.per_layer(mass)


@register("ablation", "fall", "the task's accuracy with the head zero-ablated", costly=True, scale=1.0)
def ablation(heads: Heads) -> Table:
    return heads.ablation().ablated


# --------------------------------------------- the tasks' own measures (`TaskDataModule.measures` names them)
def repeats(heads: Heads) -> tuple[induction.Repeats, Tensor, dict[str, Tensor]]:
    """The induction task's sequences with a repeated segment, as many as the examples (the same ones
    every time), and the model's logits and attention patterns on them: one forward pass, shared."""

    def run() -> tuple[induction.Repeats, Tensor, dict[str, Tensor]]:
        device = heads.inputs[0].device
        data = induction.task_repeats(heads.task, heads.inputs[0].size(0), split="test").to(device)
        with evaluating(heads.model), torch.no_grad():
            logits, cache = heads.model.run_with_cache(
                data.tokens, names_filter=lambda name: name.endswith("hook_pattern")
            )
        return data, logits, cache

    return heads.once("repeats", run)


def _on_repeats(heads: Heads, score: Callable[[Tensor, induction.Repeats], Tensor]) -> Table:
    data, _, cache = repeats(heads)
    return heads.per_layer(
        lambda pattern, layer: score(pattern, data), lambda layer: cache[f"{layer.name}.hook_pattern"]
    )


@register(
    "induction",
    "rise",
    "attention from a repeated token to the token after its first occurrence",
    task=True,
    scale=1.0,
)
def induction_score(heads: Heads) -> Table:
    return _on_repeats(heads, induction.induction_scores)


@register("previous_token", "rise", "attention from each token to the one before it", task=True, scale=1.0)
def previous_token(heads: Heads) -> Table:
    return _on_repeats(heads, lambda pattern, data: induction.previous_token_scores(pattern))
