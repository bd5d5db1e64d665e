"""Training dynamics: every measure of a model, over the snapshots of its run.

    python -m transformer_lab.interpret ckpt_path=<run> analysis=dynamics

For each snapshot (`<run>/checkpoints/snapshots/step_*.ckpt`, see `transformer_lab.snapshots`) on the
same examples: the loss and the accuracy, each head's attention entropy and task alignment (as the
`heads/` callback logs them), the accuracy with each head ablated, the logit lens, and the task's own
scores (`induction`, `previous_token`, `in_context` for task=induction; Nanda et al.'s progress measures
for task=modular_addition). Events: where each score changed fastest (its phase change).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from transformer_lab.analysis import events, interventions, lens, measures
from transformer_lab.errors import require
from transformer_lab.nn import IGNORE_INDEX, head_name

if TYPE_CHECKING:
    from transformer_lab.checkpoint import Checkpoint


def direction_of(name: str) -> str:
    """`fall` for a loss (its phase change is where it drops), `rise` for any other score."""
    return "fall" if name.endswith("loss") else "rise"


def event(
    name: str, steps: Sequence[int], values: Sequence[float], direction: str | None = None, scale: float = 0.0
) -> events.Change | None:
    """The largest move of a curve and whether it is a phase change (`analysis.events.detect`: one rule
    for the callback and this analysis); None for a curve too short to say."""
    return events.detect(name, steps, values, direction or direction_of(name), scale)


@dataclass
class Dynamics:
    """The measures of every snapshot, as `dynamics.json` holds them:

    steps   the snapshots' optimisation steps
    loss    the mean cross-entropy on the examples' labelled positions
    metric  the accuracy there (`metric_name`)
    heads   {"<measure>": [[[value per head] per layer] per snapshot]}: entropy, alignment (where the task
            defines it), ablation (the accuracy with that head zero-ablated), and the task's per-head scores
    scores  {"<name>": [value per snapshot]}: the task's scores and the logit lens (`lens_<reading>`: the
            accuracy read from the stream after the embedding, after each block)
    events  [{"step": int, "halfway": int, "curve": str, "what": str}]: the phase changes
            (`analysis.events`), the snapshot where each ended and the step it was half way
    no_events  [{"curve": str, "what": str}]: the largest move of each other curve, and the test it failed
    onset, halfway {"<curve>": step}: where the loss, the accuracy and each task score got 10% and half
            of the way through its largest move (`analysis.events.crossing`), events or not
    """

    steps: list[int]
    loss: list[float]
    metric: list[float]
    heads: dict[str, list] = field(default_factory=dict)
    scores: dict[str, list[float]] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    no_events: list[dict] = field(default_factory=list)  # each other curve's largest move, and why not
    directions: dict[str, str] = field(default_factory=dict)  # the task's scores that move otherwise
    layers: list[str] = field(default_factory=list)  # the attention layers' labels (L0, L1, ...)
    metric_name: str = "acc"
    own_heads: list[str] = field(default_factory=list)  # the task's own per-head measures (induction, ...)
    notes: list[str] = field(
        default_factory=list
    )  # what the task's scores found (printed, and in the figure)

    def to_dict(self) -> dict:
        """The JSON record: steps, loss, metric, heads, scores, events, no_events."""
        return {
            "steps": self.steps,
            "loss": self.loss,
            "metric": self.metric,
            "heads": self.heads,
            "scores": self.scores,
            "events": self.events,
            "no_events": self.no_events,
            "onset": self.crossings(events.ONSET),
            "halfway": self.crossings(0.5),
        }

    def curves(self) -> dict[str, tuple[list[float], str]]:
        """The loss, the accuracy and the task's scores (not the lens), each with its direction."""
        found = {"loss": (self.loss, "fall"), self.metric_name: (self.metric, "rise")}
        for name, values in self.scores.items():
            if not name.startswith("lens_"):
                found[name] = (values, self.directions.get(name) or direction_of(name))
        return found

    def crossings(self, share: float) -> dict[str, int | None]:
        """Where each curve got `share` of the way through its largest move (`events.crossing`)."""
        return {
            name: (None if (h := events.crossing(self.steps, values, way, share)) is None else round(h))
            for name, (values, way) in self.curves().items()
        }

    def summary(self) -> list[str]:
        """What the console shows: each measure at the first and last snapshot, the notes, the events."""
        first, last = self.steps[0], self.steps[-1]
        lines = [f"{len(self.steps)} snapshots, steps {first} to {last}:  (first -> last)"]
        rows = {"loss": self.loss, self.metric_name: self.metric, **self.scores}
        width = max(len(name) for name in rows)
        lines += [f"  {name:<{width}} {values[0]:8.3f} -> {values[-1]:8.3f}" for name, values in rows.items()]
        lines += self.notes
        lines.append("Events (phase changes: large, beyond the noise, sudden and kept; analysis.events):")
        lines += [f"  step {e['halfway']:>8}: {e['what']}" for e in self.events] or ["  none"]
        lines += [f"  {e['what']}" for e in self.no_events]
        lines += crossing_table(
            {name: [step] for name, step in self.crossings(events.ONSET).items()},
            {name: [step] for name, step in self.crossings(0.5).items()},
        )
        return lines

    def head_names(self) -> list[list[str]]:
        """[[`L0H0`, `L0H1`, ...] per layer]."""
        any_measure = next(iter(self.heads.values()))
        return [
            [head_name(label, h) for h in range(len(row))]
            for label, row in zip(self.layers, any_measure[0], strict=True)
        ]


class TaskScores:
    """What a task adds to the measures of every model over time: nothing (this base class), or its own
    scores (`TaskDataModule.task_scores` names them in `TASK_SCORES`). `prepare` sees the final snapshot
    first (e.g. to fix the key frequencies). `directions`: the scores whose phase change is not the
    default (a loss falls, any other score rises); `scales`: the scores with a full scale (1 for an
    accuracy or an attention score), against which a phase change must be large."""

    directions: dict[str, str] = {}  # noqa: RUF012  (read only)
    scales: dict[str, float] = {}  # noqa: RUF012  (read only)

    def __init__(self, count: int):
        self.count = count

    def prepare(self, final: Checkpoint) -> None:
        pass

    def measure(self, heads: measures.Heads, tables: dict[str, measures.Table]) -> dict[str, float]:
        """The scores of one snapshot's model, from what its heads were measured with."""
        return {}

    def notes(self) -> list[str]:
        return []


TASK_SCORES: dict[str, type[TaskScores]] = {}


def register_task_scores(name: str) -> Callable[[type[TaskScores]], type[TaskScores]]:
    """Register a `TaskScores` class as the scores a task names (`task_scores = name`)."""

    def add(cls: type[TaskScores]) -> type[TaskScores]:
        TASK_SCORES[name] = cls
        return cls

    return add


@register_task_scores("induction")
class InductionTaskScores(TaskScores):
    """task=induction: the largest induction and previous-token score of any head, and the in-context
    loss difference (`analysis.induction`), on the task's sequences with a repeat."""

    scales = {"induction": 1.0, "previous_token": 1.0}  # noqa: RUF012  (attention: at most 1)

    def measure(self, heads: measures.Heads, tables: dict[str, measures.Table]) -> dict[str, float]:
        from transformer_lab.analysis.induction import in_context_loss

        data, logits, _ = measures.repeats(heads)
        first, repeat = in_context_loss(logits, data)
        best = {name: max(v for row in tables[name] for v in row) for name in ("induction", "previous_token")}
        return {**best, "in_context": first - repeat}


@register_task_scores("grokking")
class ModularAdditionTaskScores(TaskScores):
    """task=modular_addition: Nanda et al.'s progress measures over all p^2 pairs (`analysis.grokking`),
    with the key frequencies of the final snapshot's embedding. The excluded loss's phase change is its
    rise: the training pairs come to be fitted through the key frequencies."""

    directions = {"excluded_loss": "rise"}  # noqa: RUF012
    scales = {"fourier_sparsity": 1.0, "train_acc": 1.0}  # noqa: RUF012  (a Gini coefficient, an accuracy)

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.task = None
        self.frequencies: list[int] = []

    def prepare(self, final: Checkpoint) -> None:
        from transformer_lab.analysis import grokking

        self.task = final.task
        self.frequencies = grokking.key_frequencies(grokking.token_embeddings(final.model, self.task.p))

    def measure(self, heads: measures.Heads, tables: dict[str, measures.Table]) -> dict[str, float]:
        from transformer_lab.analysis import grokking

        logits = grokking.answer_logits(heads.model, self.task)
        embedding = grokking.token_embeddings(heads.model, self.task.p)
        return grokking.progress_measures(logits, embedding, self.task, self.frequencies).scores()

    def notes(self) -> list[str]:
        return [f"key frequencies (final embedding): {', '.join(map(str, self.frequencies))}"]


def task_scores(checkpoint: Checkpoint, count: int) -> TaskScores:
    """The scores the checkpoint's task names (`TaskDataModule.task_scores`), or none."""
    name = getattr(checkpoint.task, "task_scores", None)
    require(
        name is None or name in TASK_SCORES,
        f"the task {checkpoint.task_name} names task_scores={name!r}, which is not registered; the "
        f"registered ones are {', '.join(TASK_SCORES)} (analysis.dynamics.register_task_scores)",
    )
    return TASK_SCORES[name](count) if name else TaskScores(count)


def generic_measures(
    heads: measures.Heads, chosen: Sequence[measures.Measure]
) -> tuple[float, float, dict[str, measures.Table], list[float]]:
    """(loss, accuracy, per-head measures, lens accuracies) of one model on its examples: one forward
    pass for the loss and accuracy, the registry's measures (`analysis.measures`), one for the lens."""
    model, inputs, labels, logits = heads.model, heads.inputs, heads.labels, heads.logits
    with torch.no_grad():
        readings = lens.lens_accuracy(model, inputs, labels).layers
    loss = float(F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX))
    tables = heads.measure(chosen)
    return loss, interventions.accuracy(logits, labels), tables, readings


def lens_names(layers: int) -> list[str]:
    """`lens_embed`, `lens_L0`, ...: the logit lens read after the embedding and after each block."""
    return ["lens_embed", *(f"lens_L{i}" for i in range(layers))]


def over_snapshots(
    location: str,
    count: int = 256,
    device: str | torch.device = "cpu",
    data_path: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Dynamics:
    """Every measure of every snapshot of a run (a run directory or `pretrained:<name>`), on the first
    `count` test examples of its task (the same for all), and the events (`event`)."""
    from transformer_lab import snapshots
    from transformer_lab.checkpoint import load

    found = snapshots.find(location)
    checkpoints = [load(s.path, device=device, data_path=data_path) for s in found]  # weights: mmapped
    final = checkpoints[-1]
    for snapshot, checkpoint in zip(found, checkpoints, strict=True):
        require(
            checkpoint.config.architecture() == final.config.architecture()
            and checkpoint.record == final.record,
            f"{snapshot.path} is a snapshot of another model than the run's last ({found[-1].path.name}); "
            "every snapshot of a series must be of one model and task: remove it from the folder",
        )
    inputs, labels = final.examples(count, exact=False)
    own = task_scores(final, count)
    own.prepare(final)
    chosen = measures.applicable(final.task)
    layers = final.model.attention_layers()
    result = Dynamics([], [], [], layers=[layer.label for layer in layers])
    for number, (snapshot, checkpoint) in enumerate(zip(found, checkpoints, strict=True), 1):
        heads = measures.Heads(checkpoint.model, inputs, labels, final.task)
        loss, metric, tables, readings = generic_measures(heads, chosen)
        scores = own.measure(heads, tables)
        result.steps.append(snapshot.step)
        result.loss.append(loss)
        result.metric.append(metric)
        for name, value in tables.items():
            result.heads.setdefault(name, []).append(value)
        for name, value in {
            **scores,
            **dict(zip(lens_names(len(readings) - 1), readings, strict=True)),
        }.items():
            result.scores.setdefault(name, []).append(value)
        if progress is not None:
            progress(f"step {snapshot.step:>8}: loss {loss:.3f}  acc {metric:.3f} ({number}/{len(found)})")
        if checkpoint is not final:
            del checkpoint.model  # one snapshot's model in memory at a time (the final one is kept)
    result.notes = own.notes()
    result.own_heads = [m.name for m in chosen if m.task and m.name in result.heads]
    result.directions = dict(own.directions)
    result.events, result.no_events = find_events(
        result, result.own_heads, directions=own.directions, scales=own.scales
    )
    return result


def find_events(
    result: Dynamics,
    task_heads: Sequence[str] = (),
    formed: float = 0.3,
    directions: dict[str, str] | None = None,
    scales: dict[str, float] | None = None,
) -> tuple[list[dict], list[dict]]:
    """The phase changes (`analysis.events`) of the loss, the accuracy, each of the task's scores (a loss
    falling, any other score rising, unless `directions` says otherwise; not the lens readings: they
    follow the accuracy) and each head whose task score reaches `formed` (which head formed first), in
    order of step; and, for every curve but the heads' without one, its largest move and why it is none.
    The accuracy has the full scale 1, each head's measure its registered `scale`, the task's scores
    `scales`."""
    steps, scales = result.steps, {result.metric_name: 1.0, **(scales or {})}
    curves = [("loss", result.loss, "fall"), (result.metric_name, result.metric, "rise")]
    for name, values in result.scores.items():
        if not name.startswith("lens_") and values not in (result.loss, result.metric):
            curves.append((name, values, (directions or {}).get(name) or direction_of(name)))
    heads = []
    for measure in task_heads:
        series = result.heads[measure]  # [snapshot][layer][head]
        for layer, label in enumerate(result.layers):
            for head in range(len(series[0][layer])):
                values = [snapshot[layer][head] for snapshot in series]
                if max(values) >= formed:
                    heads.append((f"{head_name(label, head)} {measure} score", values, "rise"))
                    scales[heads[-1][0]] = measures.MEASURES[measure].scale
    changes = [
        (event(name, steps, values, way, scales.get(name, 0.0)), name)
        for name, values, way in [*curves, *heads]
    ]
    found = sorted((c for c, _ in changes if c is not None and c.event), key=lambda c: c.halfway)
    claimed = [{"step": c.end, "halfway": c.step, "curve": c.name, "what": c.describe()} for c in found]
    none = [c for c, name in changes if c is not None and not c.event and name in {n for n, _, _ in curves}]
    return claimed, [{"curve": c.name, "what": c.describe()} for c in none]


def crossing_table(onset: dict[str, list[int | None]], halfway: dict[str, list[int | None]]) -> list[str]:
    """Lines: each curve's largest move, where it got 10% (its onset) and half of the way, in one run or
    over seeds (then the median [range] and each seed's step)."""

    def cell(steps: list[int | None]) -> str:
        known = [s for s in steps if s is not None]
        if len(steps) == 1 or not known:
            return "-" if not known else str(known[0])
        return f"{statistics.median(known):.0f} [{min(known)}..{max(known)}]"

    over = len(next(iter(halfway.values()), [])) > 1
    title = "Each curve's largest move: the step by which it got 10% and half of the way"
    lines = [title + (" (median [range] over seeds," if over else "")]
    if over:
        lines.append("then each seed's half way)")
    rows = [(name, cell(onset[name]), cell(halfway[name])) for name in halfway]
    widths = [max((len(row[k]) for row in rows), default=0) for k in range(3)]
    for name, start, half in rows:
        each = "  " + ", ".join("-" if s is None else str(s) for s in halfway[name]) if over else ""
        line = f"  {name:<{widths[0]}}  10%: {start:<{widths[1]}}  half: {half:<{widths[2]}}{each}"
        lines.append(line.rstrip())
    return lines
