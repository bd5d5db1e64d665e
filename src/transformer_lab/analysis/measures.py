"""Per-head measures: one function each, registered once; every tool reads the registry.

A measure says one thing about every attention head, as one number per head: how spread its attention is
(`entropy`), how much of it lands where the task says the information is (`alignment`), what the task's
accuracy is without it (`ablation`), or a task's own score (`induction`, `previous_token`). `interpret
analysis=heads`, `analysis=dynamics`, the `heads/` callback, the figures and the explorer's heads view
iterate `MEASURES`, so a new measure is one function and one registration:

    from transformer_lab.analysis import measures

    @measures.register("first_token", "rise", "attention mass on the first token",
                       scale=1.0, chance=measures.UNIFORM)
    def first_token(heads: measures.Heads) -> list[list[float | None]]:
        return heads.per_layer(lambda pattern, layer: pattern[..., 0].mean(dim=(0, 2)))

A measure gets a `Heads`: the model, the examples (inputs and labels), the task, and what is worth
computing once for all measures (every attention pattern from one forward pass, the task's alignment, the
ablation table), and returns [layer][head] values (None where it does not apply, e.g. the alignment of a
decoder's self-attention in an encoder-decoder). A task's own measures (`task=True`) are computed for
the tasks that name them (`TaskDataModule.measures`), every other one for every model.

A measure whose move in its direction says that a head took a role (`formation=True`: alignment, the
tasks' induction and previous-token scores) has its phase changes over training claimed by
`analysis=dynamics`; the others are drawn over time, not claimed: a head's attention can sharpen and
relax again without it taking any role (its entropy falls, as in the lr/10 and 600-step controls of
docs/dynamics.md), and the accuracy without a head follows the model's.

Each measure registers its **scale** and its **chance** (`analysis.events.Scale`: a move of a head's
measure over training is an event only if it moves a tenth of its scale and leaves its chance region):
a number (1 for an attention mass or an accuracy), `UNIFORM` (the measure itself under attention that
reads nothing: every head's queries zeroed, so that each query attends uniformly to the keys it may see;
an entropy's scale and chance, an attention score's chance) or a function of the `Heads` (a number or a
[layer][head] table: `chance_accuracy`, 1 / the output classes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from transformer_lab.analysis import events, explain, induction, intervals, interventions
from transformer_lab.errors import require
from transformer_lab.nn import AttentionLayer, TokenModel, evaluating

DIRECTIONS = ("rise", "fall")  # how a measure moves as a head forms: alignment rises, entropy falls
Table = list[list[float | None]]  # [layer][head]
UNIFORM = "uniform"  # a scale or chance: the measure under uniform attention (`uniform`)
Reference = float | str | Callable[["Heads"], float | Table] | None  # a scale or a chance


@dataclass(frozen=True)
class Measure:
    """A registered measure: its name, which way it moves as a head forms (`rise` or `fall`), a one-line
    description, the function, whether it takes a forward pass per head (`costly`: the callback logs it
    once, at the end of training), whether it is a task's own (computed where the task names it), its
    scale and its chance, and whether its move is a head taking a role (`formation`: its phase changes
    are claimed; see the module docstring; `scales` resolves the scale and chance for a model)."""

    name: str
    direction: str
    description: str
    function: Callable[[Heads], Table | Tensor | None]
    costly: bool = False
    task: bool = False
    scale: Reference = None
    chance: Reference = None
    formation: bool = False


MEASURES: dict[str, Measure] = {}


def register(
    name: str,
    direction: str,
    description: str,
    costly: bool = False,
    task: bool = False,
    *,
    scale: Reference,
    chance: Reference = None,
    formation: bool = False,
) -> Callable[[Callable], Callable]:
    """Register `function(heads) -> [layer][head] values` as the measure `name`, with its `scale` and
    `chance`, and whether its move is a head taking a role (`formation`; see the module docstring);
    registering a name again replaces it."""
    require(direction in DIRECTIONS, f"measure {name}: direction={direction!r} must be rise or fall")
    for key, value in (("scale", scale), ("chance", chance)):
        number = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        require(
            (value is None and key == "chance") or value == UNIFORM or callable(value) or number,
            f"measure {name}: {key}={value!r} must be a number >= 0 (1.0 for an attention mass or an "
            "accuracy), measures.UNIFORM or a function of the Heads",
        )

    def add(function: Callable) -> Callable:
        MEASURES[name] = Measure(
            name, direction, description, function, costly, task, scale, chance, formation
        )
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
    hooks: list = field(default_factory=list)  # forward hooks on in every pass (`uniform`)

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
            with evaluating(self.model), torch.no_grad(), self.model.hooks(self.hooks):
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
        """The task's accuracy with each head zero-ablated (`interventions.ablate_heads`), with the
        intervals over the examples of the tools' default level."""
        return self.once(
            "ablation",
            lambda: interventions.ablate_heads(
                self.model, self.inputs, self.labels, level=intervals.DEFAULT_LEVEL
            ),
        )

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


def uniform(heads: Heads) -> Heads:
    """The same model and examples with every attention head's queries zeroed: each score q.k is 0, so
    each query attends uniformly to the keys its masks let it see (causal, padding). A measure of these
    heads is its value for attention that reads nothing: its chance (`UNIFORM`)."""

    def zero(q: Tensor, hook: Any) -> Tensor:
        return torch.zeros_like(q)

    return Heads(heads.model, heads.inputs, heads.labels, heads.task, hooks=[(_is_query, zero)])


def _is_query(name: str) -> bool:
    return name.endswith(".hook_q")


def chance_accuracy(heads: Heads) -> float:
    """The accuracy of a uniform guess: 1 / the model's output classes."""
    return 1.0 / heads.model.config.output_classes


def scales(heads: Heads, chosen: Sequence[Measure]) -> dict[str, list[list[events.Scale | None]]]:
    """Each measure's scale and chance for each head of this model on these examples ([layer][head]
    `events.Scale`s; None where the measure does not apply): its registered numbers, `UNIFORM` read
    from `uniform(heads)`, functions called with `heads`."""
    reading = uniform(heads)

    def resolve(measure: Measure, value: Reference) -> Table | None:
        if value is None:
            return None
        if value == UNIFORM:
            table = measure.function(reading)
            if table is None:
                return None
        elif callable(value):
            table = value(heads)
        else:
            table = float(value)
        if table is None or isinstance(table, int | float):
            return [[table] * heads.model.config.num_heads for _ in heads.layers]
        return table.tolist() if isinstance(table, Tensor) else table

    found = {}
    for measure in chosen:
        size, chance = resolve(measure, measure.scale), resolve(measure, measure.chance)
        if size is None or (chance is None and measure.chance is not None):
            continue  # the measure does not apply here (no alignment where the task defines none)
        chance = chance or [[None] * len(row) for row in size]
        unit = "(uniform attention's)" if measure.scale == UNIFORM else ""
        found[measure.name] = [
            [
                None if s is None else events.Scale(float(s), c, unit)
                for s, c in zip(row, chances, strict=True)
            ]
            for row, chances in zip(size, chance, strict=True)
        ]
    return found


def entries(table: Table, model: TokenModel) -> Iterator[tuple[str, float]]:
    """(`L0H1`, value) for every head a [layer][head] table has a value for."""
    for layer, row in zip(model.attention_layers(), table, strict=True):
        for head, value in enumerate(row):
            if value is not None:
                yield layer.head(head), value


# ------------------------------------------------------------------------- the measures of every model
@register(
    "entropy",
    "fall",
    "mean entropy of its attention rows, in nats (log T: uniform, 0: one key)",
    scale=UNIFORM,
    chance=UNIFORM,
)
def entropy(heads: Heads) -> Table:
    return heads.per_layer(lambda pattern, layer: explain.attention_entropy(pattern, heads.query_mask(layer)))


@register(
    "alignment",
    "rise",
    "attention mass where the task says the information is (1: all of it)",
    scale=1.0,
    chance=UNIFORM,
    formation=True,
)
def alignment(heads: Heads) -> Table | None:
    expected = heads.expected
    if expected is None:
        return None

    def mass(pattern: Tensor, layer: AttentionLayer) -> Tensor | None:
        aligned = layer.reads_source and expected.shape[-1] == pattern.shape[-1]
        return explain.alignment_mass(pattern, expected) if aligned else None

    return heads.per_layer(mass)


@register(
    "ablation",
    "fall",
    "the task's accuracy with the head zero-ablated",
    costly=True,
    scale=1.0,
    chance=chance_accuracy,
)
def ablation(heads: Heads) -> Table:
    return heads.ablation().ablated


# --------------------------------------------- the tasks' own measures (`TaskDataModule.measures` names them)
def repeats(heads: Heads) -> tuple[induction.Repeats, Tensor, dict[str, Tensor]]:
    """The induction task's sequences with a repeated segment, as many as the examples (the same ones
    every time), and the model's logits and attention patterns on them: one forward pass, shared."""

    def run() -> tuple[induction.Repeats, Tensor, dict[str, Tensor]]:
        device = heads.inputs[0].device
        data = induction.task_repeats(heads.task, heads.inputs[0].size(0), split="test").to(device)
        with evaluating(heads.model), torch.no_grad(), heads.model.hooks(heads.hooks):
            logits, cache = heads.model.run_with_cache(
                data.tokens, names_filter=lambda name: name.endswith("hook_pattern")
            )
        return data, logits, cache

    return heads.once("repeats", run)


def _register_on_repeats(
    name: str, description: str, score: Callable[[Tensor, induction.Repeats], Tensor]
) -> Callable[[Heads], Table]:
    """Register the task measure `name`: `score(pattern, repeats)` of each head's attention pattern on the
    repeated sequences (`repeats`), an attention mass that rises as the head takes its role."""

    @register(name, "rise", description, task=True, scale=1.0, chance=UNIFORM, formation=True)
    def measure(heads: Heads) -> Table:
        data, _, cache = repeats(heads)
        return heads.per_layer(
            lambda pattern, layer: score(pattern, data), lambda layer: cache[f"{layer.name}.hook_pattern"]
        )

    return measure


induction_score = _register_on_repeats(
    "induction",
    "attention from a repeated token to the token after its first occurrence",
    induction.induction_scores,
)
previous_token = _register_on_repeats(
    "previous_token",
    "attention from each token to the one before it",
    lambda pattern, data: induction.previous_token_scores(pattern),
)
