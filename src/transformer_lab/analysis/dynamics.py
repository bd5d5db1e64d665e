"""Training dynamics: every measure of a model, over the snapshots of its run.

    python -m transformer_lab.interpret ckpt_path=<run> analysis=dynamics

For each snapshot (`<run>/checkpoints/snapshots/step_*.ckpt`, see `transformer_lab.snapshots`) on the
same examples: the loss and the accuracy, each head's attention entropy and task alignment (as the
`heads/` callback logs them), the accuracy with each head ablated, the logit lens, and the task's own
scores (`induction`, `previous_token`, `repeat_gain` for task=induction; Nanda et al.'s progress
measures for task=modular_addition). Events: each curve's phase change, if it had one
(`analysis.events`: every curve measured on its own scale, spikes of the training loss left out); the
margins by which the others had none; the events' timing and the order the snapshots resolve.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
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
    name: str,
    steps: Sequence[int],
    values: Sequence[float],
    direction: str | None = None,
    scale: events.Scale | None = None,
    left_out: Sequence[int] = (),
) -> events.Change | None:
    """The largest move of a curve and whether it is a phase change (`analysis.events.detect`: one rule
    for the callback and this analysis); None for a curve too short to say."""
    return events.detect(name, steps, values, direction or direction_of(name), scale, left_out)


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
    scales  {"<curve>": events.Scale}: what each curve's moves are measured against (every head's
            measure as `L0H1 entropy`)
    spikes  the steps whose snapshot is a spike of the training loss (`events.spikes`): no point of any
            curve's timing
    changes every curve's largest move (`events.Change`): the loss, the accuracy, the task's scores (not
            the lens: it follows the accuracy) and every head's measures of formation (`head_curves`);
            `events` those that are
            phase changes (a dict each: the steps where it started and ended, its half way and onset,
            curve, what, ratios) in
            order of step, `no_events` the others' but the heads' (curve, what, ratios)
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
    scales: dict[str, events.Scale] = field(default_factory=dict)
    spikes: list[int] = field(default_factory=list)
    changes: list[events.Change] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The JSON record: steps, loss, metric, heads, scores, events, no_events, the spikes, each
        curve's scale, the margins of the curves without an event, each event's onset and half way."""
        timing = self.timing()
        return {
            "steps": self.steps,
            "loss": self.loss,
            "metric": self.metric,
            "heads": self.heads,
            "scores": self.scores,
            "events": self.events,
            "no_events": self.no_events,
            "spikes": self.spikes,
            "scales": {name: asdict(scale) for name, scale in self.scales.items()},
            "margins": self.margins().to_dict(),
            "onset": {name: None if t is None else t[0] for name, t in timing.items()},
            "halfway": {name: None if t is None else t[1] for name, t in timing.items()},
        }

    def curves(self) -> dict[str, tuple[list[float], str]]:
        """The loss, the accuracy and the task's scores (not the lens), each with its direction."""
        found = {"loss": (self.loss, "fall"), self.metric_name: (self.metric, "rise")}
        for name, values in self.scores.items():
            if not name.startswith("lens_"):
                found[name] = (values, self.directions.get(name) or direction_of(name))
        return found

    def head_curves(self) -> dict[str, tuple[list[float], str]]:
        """Every head's every measure of formation (`measures.Measure.formation`: a head taking a role)
        over the snapshots (`L1H0 induction`), with its direction."""
        found = {}
        names = self.head_names() if self.heads else []
        for measure, series in self.heads.items():
            known = measures.MEASURES.get(measure)
            if known is None or not known.formation:
                continue
            direction = known.direction
            for layer, row in enumerate(names):
                for head, name in enumerate(row):
                    values = [snapshot[layer][head] for snapshot in series]
                    if any(v is not None for v in values):
                        found[f"{name} {measure}"] = (values, direction)
        return found

    def timing(self) -> dict[str, tuple[int, int] | None]:
        """Per curve (not the heads'), its event's onset and half way (the steps by which it got 10% and
        half of its move), or None: a curve without an event has no timing."""
        found = {c.name: (round(c.onset), c.step) for c in self.changes if c.event}
        return {name: found.get(name) for name in self.curves()}

    def margins(self) -> events.Margins:
        """How near the curves without an event came to one (`events.margins`), over every curve."""
        return events.margins(self.changes)

    def summary(self) -> list[str]:
        """What the console shows: each measure at the first and last snapshot, the notes, the spikes,
        the events, the margins, each event's timing and the order they are resolved in."""
        first, last = self.steps[0], self.steps[-1]
        lines = [f"{len(self.steps)} snapshots, steps {first} to {last}:  (first -> last)"]
        rows = {"loss": self.loss, self.metric_name: self.metric, **self.scores}
        width = max(len(name) for name in rows)
        lines += [f"  {name:<{width}} {values[0]:8.3f} -> {values[-1]:8.3f}" for name, values in rows.items()]
        lines += self.notes
        lines.append(spike_line(self.spikes))
        lines.append(EVENTS_TITLE)
        lines += [f"  step {e['halfway']:>8}: {e['what']}" for e in self.events] or ["  none"]
        lines += [f"  {e['what']}" for e in self.no_events]
        lines.append(MARGINS_TITLE)
        lines += self.margins().describe()
        timing = self.timing()
        lines += timing_table({name: [t] for name, t in timing.items()})
        lines += order_lines(self.steps_kept(), {name: t[1] for name, t in timing.items() if t is not None})
        return lines

    def steps_kept(self) -> list[int]:
        """The snapshots' steps without the spikes: where the curves' timing is read."""
        return [s for s in self.steps if s not in set(self.spikes)]

    def head_names(self) -> list[list[str]]:
        """[[`L0H0`, `L0H1`, ...] per layer]."""
        any_measure = next(iter(self.heads.values()))
        return [
            [head_name(label, h) for h in range(len(row))]
            for label, row in zip(self.layers, any_measure[0], strict=True)
        ]


EVENTS_TITLE = (
    "Events (phase changes: large on its range and its scale, out of chance, beyond the noise, sudden and "
    "kept; analysis.events):"
)
MARGINS_TITLE = (
    "Margins (each test's largest ratio to its threshold over every curve, heads' included; an event "
    "needs 1 in every test):"
)


def spike_line(spikes: Sequence[int]) -> str:
    """The spikes, as the console says them."""
    said = ", ".join(map(str, spikes)) or "none"
    return (
        f"Spikes (training loss more than {events.SPIKE_FACTOR:g}x its neighbours': left out of every "
        f"curve's timing): {said}"
    )


class TaskScores:
    """What a task adds to the measures of every model over time: nothing (this base class), or its own
    scores (`TaskDataModule.task_scores` names them in `TASK_SCORES`). `prepare` sees the final snapshot
    first (e.g. to fix the key frequencies). `directions`: the scores whose phase change is not the
    default (a loss falls, any other score rises); `scales`: every score's scale and chance
    (`analysis.events.Scale`), which a phase change must move a tenth of and leave."""

    directions: dict[str, str] = {}  # noqa: RUF012  (read only)

    def __init__(self, count: int):
        self.count = count

    def prepare(self, final: Checkpoint, recent: dict[int, Checkpoint] | None = None) -> None:
        """Before the snapshots are measured: `final` the last snapshot, `recent` those of the run's last
        doubling of steps by their step (the final one included)."""

    def measure(self, heads: measures.Heads, tables: dict[str, measures.Table]) -> dict[str, float]:
        """The scores of one snapshot's model, from what its heads were measured with."""
        return {}

    def scales(
        self, outputs: int, heads: dict[str, list[list[events.Scale | None]]]
    ) -> dict[str, events.Scale]:
        """Each score's scale and chance; `outputs`: the model's output classes, `heads`: each per-head
        measure's scales (`measures.scales`), for a score made of them."""
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


def _best_of_heads(scales: list[list[events.Scale | None]]) -> events.Scale:
    """The scale of the largest score of any head: the heads' scale, and the largest chance of any."""
    known = [s for row in scales for s in row if s is not None]
    chances = [s.chance for s in known if s.chance is not None]
    return events.Scale(max(s.size for s in known), max(chances) if chances else None, known[0].unit)


@register_task_scores("induction")
class InductionTaskScores(TaskScores):
    """task=induction: the largest induction and previous-token score of any head, and the repeat gain
    (the loss on a token's first occurrence minus the loss on its repeat, `analysis.induction`), on the
    task's sequences with a repeat."""

    def measure(self, heads: measures.Heads, tables: dict[str, measures.Table]) -> dict[str, float]:
        from transformer_lab.analysis.induction import first_and_repeat_loss

        data, logits, _ = measures.repeats(heads)
        first, repeat = first_and_repeat_loss(logits, data)
        best = {name: max(v for row in tables[name] for v in row) for name in ("induction", "previous_token")}
        return {**best, "repeat_gain": first - repeat}

    def scales(
        self, outputs: int, heads: dict[str, list[list[events.Scale | None]]]
    ) -> dict[str, events.Scale]:
        best = {name: _best_of_heads(heads[name]) for name in ("induction", "previous_token")}
        return {**best, "repeat_gain": events.loss_difference(outputs)}


@register_task_scores("grokking")
class ModularAdditionTaskScores(TaskScores):
    """task=modular_addition: Nanda et al.'s progress measures over all p^2 pairs (`analysis.grokking`),
    with the key frequencies of the final snapshot's embedding. The excluded loss's phase change is its
    rise: the training pairs come to be fitted through the key frequencies."""

    directions = {"excluded_loss": "rise"}  # noqa: RUF012

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.task = None
        self.frequencies: list[int] = []  # the final embedding's: the progress measures keep them fixed
        self.held: list[int] = []  # key in every one of the last snapshots: the finding
        self.uncertain: list[int] = []  # key in some of them
        self.steps: list[int] = []
        self.width = 0

    def prepare(self, final: Checkpoint, recent: dict[int, Checkpoint] | None = None) -> None:
        from transformer_lab.analysis import grokking

        self.task = final.task
        embedding = grokking.token_embeddings(final.model, self.task.p)
        self.frequencies = grokking.key_frequencies(embedding)  # the progress measures', as the paper's
        self.steps = sorted(recent or {})
        embeddings = [grokking.token_embeddings(c.model, self.task.p) for c in (recent or {}).values()]
        self.held, self.uncertain = grokking.stable_key_frequencies(embeddings or [embedding])
        self.width = embedding.size(1)

    def measure(self, heads: measures.Heads, tables: dict[str, measures.Table]) -> dict[str, float]:
        from transformer_lab.analysis import grokking

        logits = grokking.answer_logits(heads.model, self.task)
        embedding = grokking.token_embeddings(heads.model, self.task.p)
        return grokking.progress_measures(logits, embedding, self.task, self.frequencies).scores()

    def scales(
        self, outputs: int, heads: dict[str, list[list[events.Scale | None]]]
    ) -> dict[str, events.Scale]:
        from transformer_lab.analysis import grokking

        p = self.task.p
        loss = events.nats(p)  # the answer is one of p numbers
        sparsity = events.Scale(1.0, grokking.chance_sparsity(p, self.width), "")
        losses = ("restricted_loss", "excluded_loss", "test_loss", "train_loss")
        return {**dict.fromkeys(losses, loss), "fourier_sparsity": sparsity, "train_acc": events.accuracy(p)}

    def notes(self) -> list[str]:
        """The key frequencies found: those of every snapshot of the run's last doubling (each at least
        0.2 of the largest's squared norm, in an embedding some frequencies stand out in), apart those of
        some of them only; and the final embedding's, which the progress measures use (as the paper)."""
        span = (
            "the final embedding"
            if len(self.steps) < 2
            else f"each embedding of steps {self.steps[0]} to {self.steps[-1]}"
        )
        key = ", ".join(map(str, self.held)) or "none (no frequency stands out in every one)"
        line = f"key frequencies ({span}): {key}"
        if self.uncertain:
            line += f"; uncertain (key in some of them only): {', '.join(map(str, self.uncertain))}"
        final = ", ".join(map(str, self.frequencies)) or "none"
        return [line, f"restricted and excluded losses over the final embedding's key frequencies: {final}"]


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
    `count` test examples of its task (the same for all), and the events (`find_events`)."""
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
    own.prepare(
        final, {s.step: c for s, c in zip(found, checkpoints, strict=True) if 2 * s.step >= found[-1].step}
    )
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
    measured = [m for m in chosen if m.name in result.heads]
    per_head = measures.scales(measures.Heads(final.model, inputs, labels, final.task), measured)
    result.scales = curve_scales(result, final.config.output_classes, per_head, own)
    find_events(result)
    return result


def curve_scales(
    result: Dynamics,
    outputs: int,
    per_head: dict[str, list[list[events.Scale | None]]],
    own: TaskScores,
) -> dict[str, events.Scale]:
    """Every judged curve's scale: the loss in nats (log of the `outputs`), the accuracy, the task's
    scores (`TaskScores.scales`, which must name every score) and each head's measures of formation
    (`measures.scales`)."""
    found = {"loss": events.nats(outputs), result.metric_name: events.accuracy(outputs)}
    task = own.scales(outputs, per_head)
    for name in result.curves():
        if name not in found:
            require(
                name in task,
                f"the task's score {name!r} has no scale: its TaskScores.scales must give every score's "
                "(analysis.events.Scale: 1 for an accuracy or an attention score, events.nats(V) for a loss)",
            )
            found[name] = task[name]
    names = result.head_names() if result.heads else []
    for measure, table in per_head.items():
        if not measures.MEASURES[measure].formation:
            continue  # drawn, not judged (`Dynamics.head_curves`)
        for layer, row in enumerate(names):
            for head, name in enumerate(row):
                if table[layer][head] is not None:
                    found[f"{name} {measure}"] = table[layer][head]
    return found


TRAINING_LOSS = "train_loss"  # the task's score that is the training loss, where it has one


def find_events(result: Dynamics) -> None:
    """The spikes (`events.spikes`, of the task's training loss where it has one, else of the loss on
    the examples) and every curve's largest move (`Dynamics.changes`) with the spikes left out; the
    events among them in order of step, the other curves' (not the heads') moves and why they are none.
    Every curve must have its scale (`Dynamics.scales`)."""
    reference = TRAINING_LOSS if TRAINING_LOSS in result.scores else "loss"
    values = result.scores.get(TRAINING_LOSS, result.loss)
    result.spikes = events.spikes(result.steps, values, result.scales[reference].size)
    curves = {**result.curves(), **result.head_curves()}
    changes = [
        event(name, result.steps, values, way, result.scales.get(name), result.spikes)
        for name, (values, way) in curves.items()
    ]
    result.changes = [c for c in changes if c is not None]
    found = sorted((c for c in result.changes if c.event), key=lambda c: c.halfway)
    result.events = [
        {"start": c.start, "step": c.end, "halfway": c.step, "onset": round(c.onset), "curve": c.name,
         "what": c.describe(), "ratios": c.ratios}
        for c in found
    ]  # fmt: skip
    named = set(result.curves())
    result.no_events = [
        {"curve": c.name, "what": c.describe(), "ratios": c.ratios}
        for c in result.changes
        if not c.event and c.name in named
    ]


def timing_table(timing: dict[str, list[tuple[int, int] | None]], seeds: Sequence[str] = ()) -> list[str]:
    """Lines: each curve's event, the step by which it got 10% (its onset) and half of its move, in one
    run or over seeds (the median [range] over the seeds with the event, and each seed's half way; the
    seeds without it named). A curve without an event has no timing: `no event`."""
    over = len(next(iter(timing.values()), [])) > 1

    def cell(steps: list[int]) -> str:
        if not steps:
            return "-"
        if not over:
            return str(steps[0])
        return f"{statistics.median(steps):.0f} [{min(steps)}..{max(steps)}]"

    title = "Each event's timing: the step by which it got 10% and half of its move"
    lines = [
        title + (" (median [range] over the seeds with the event, then each seed's half way)" if over else "")
    ]
    rows = []
    for name, found in timing.items():
        known = [t for t in found if t is not None]
        if not known:
            rows.append((name, "no event", "", ""))
            continue
        each = ""
        if over:
            each = ", ".join("-" if t is None else str(t[1]) for t in found)
            missing = [seed for seed, t in zip(seeds, found, strict=False) if t is None]
            each += f"  (no event in {', '.join(missing)})" if missing else ""
        rows.append((name, cell([t[0] for t in known]), cell([t[1] for t in known]), each))
    widths = [max((len(row[k]) for row in rows if row[1] != "no event"), default=0) for k in range(3)]
    widths[0] = max(len(row[0]) for row in rows) if rows else 0
    for name, start, half, each in rows:
        if start == "no event":
            lines.append(f"  {name:<{widths[0]}}  no event")
        else:
            line = f"  {name:<{widths[0]}}  10%: {start:<{widths[1]}}  half: {half:<{widths[2]}}  {each}"
            lines.append(line.rstrip())
    return lines


def order_lines(steps: Sequence[int], halfway: dict[str, float]) -> list[str]:
    """The events' order by their half-way points, each neighbouring pair either ordered (further apart
    than the snapshots' spacing around them, `events.resolved`) or not resolved at this spacing."""
    ordered = sorted(halfway.items(), key=lambda item: item[1])
    if len(ordered) < 2:
        return []
    lines = [
        "Order of the events (half way; two are ordered only where further apart than the snapshots there):"
    ]
    for (a, x), (b, y) in itertools.pairwise(ordered):
        if events.resolved(steps, x, y):
            lines.append(f"  {a} ({x:.0f}) before {b} ({y:.0f})")
        else:
            around = sorted({*events.spacing(steps, x), *events.spacing(steps, y)})
            lines.append(
                f"  {a} ({x:.0f}) and {b} ({y:.0f}): not resolved at this snapshot spacing (snapshots at "
                f"{', '.join(map(str, around))})"
            )
    return lines
