"""Negative controls: runs in which no phase change can appear, and how near each came to one.

A phase change that `analysis=dynamics` claims is a finding only if the rule finds none where nothing
formed (`analysis.events`). These runs, at the lab's sizes and one seed each, are where nothing does:

    one_layer        the induction model with one layer: it cannot compose two heads (Olsson et al.)
    lr_tenth         the induction model at a tenth of its learning rate: its heads do not form in 3000 steps
    steps_600        the induction run stopped at step 600, before its heads form (~step 950)
    reverse          the reverse task: learned gradually from the start, no sudden step
    no_decay         grokking without weight decay: it memorises, never generalises in 6000 steps
    shuffled_labels  grokking with the training answers shuffled among the pairs: nothing to generalise

    python -m transformer_lab.interpret ckpt_path=<folder of such runs> analysis=controls

prints, for each run of the folder, its events (none, or those its control expects) and its margins:
each test's largest ratio to its threshold over every curve the analysis judges (the loss, the accuracy,
the task's scores, each head's measures of formation), and the curve nearest an event (the largest of
the curves' weakest ratio: an event needs 1 in every test). A control passing by 3% of its range shows
as 0.94 in the range column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from transformer_lab.analysis.dynamics import Dynamics
from transformer_lab.analysis.events import TESTS


@dataclass(frozen=True)
class Control:
    """A run in which no phase change can appear: its name (the run's folder), the training command's
    overrides, why nothing can form in it, and the events it is expected to have all the same (`expected`:
    curve -> the step by which it is half way, with why: the memorisation every grokking run also has)."""

    name: str
    overrides: str
    why: str
    expected: Mapping[str, tuple[int, str]] | None = None

    def unexpected(self, result: Dynamics) -> list[dict]:
        """The run's events that its control does not expect: there must be none."""
        expected = self.expected or {}
        return [
            e
            for e in result.events
            if not (e["curve"] in expected and e["halfway"] <= expected[e["curve"]][0])
        ]


MEMORISED = (
    "the held-out accuracy rising with memorisation to the share of held-out pairs whose mirror (b, a) is a "
    "training pair (about 0.29), as in every grokking run, where the later phase change is larger"
)
CONTROLS = (
    Control(
        "one_layer", "experiment=induction_heads model.num_layers=1", "one layer cannot compose two heads"
    ),
    Control(
        "lr_tenth",
        "experiment=induction_heads model.lr=3e-4",
        "at lr 3e-4 the heads do not form by step 3000",
    ),
    Control("steps_600", "experiment=induction_heads trainer.max_steps=600", "stopped before the heads form"),
    Control("reverse", "experiment=reverse", "learned gradually from the first steps"),
    Control(
        "no_decay",
        "experiment=grokking model.weight_decay=0",
        "without weight decay it memorises and never generalises",
        {"acc": (100, MEMORISED)},
    ),
    Control(
        "shuffled_labels",
        "experiment=grokking data=shuffled_modular_addition",
        "shuffled answers: nothing to generalise",
    ),
)
BY_NAME = {control.name: control for control in CONTROLS}


def table(results: Mapping[str, Dynamics]) -> list[str]:
    """Lines: one row per run (a control's name, or the run's folder), its events and each test's
    largest ratio over its curves, then the curve nearest an event; the events, with whether the control
    expects them, below."""
    header = ["run", "events", *TESTS, "nearest to an event (its weakest test: ratio)"]
    rows = []
    for name, result in results.items():
        margins = result.margins()
        cells = [name, str(len(result.events)) if result.events else "none"]
        cells += [_ratio(margins.tests[t][0]) if t in margins.tests else "-" for t in TESTS]
        if margins.nearest is None:
            cells.append("-")
        else:
            ratio, curve, test = margins.nearest
            cells.append(f"{curve}: {test} {ratio:.2f}")
        rows.append(cells)
    widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header))]

    def line(cells: list[str]) -> str:
        text = (c.ljust(w) if k in (0, 1, len(header) - 1) else c.rjust(w) for k, (c, w) in
                enumerate(zip(cells, widths, strict=True)))  # fmt: skip
        return "  ".join(text).rstrip()

    lines = [
        "Controls: each test's largest ratio to its threshold over every curve (1 passes; an event passes "
        "every test), and the curve nearest an event",
        line(header),
        *(line(row) for row in rows),
    ]
    for name, result in results.items():
        control = BY_NAME.get(name)
        for event in result.events:
            expected = control is not None and event not in control.unexpected(result)
            why = f" (expected: {control.expected[event['curve']][1]})" if expected else ""
            lines.append(f"  {name}: step {event['halfway']}: {event['what']}{why}")
    return lines


def _ratio(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.2f}"


def to_dict(results: Mapping[str, Dynamics]) -> dict:
    """controls.json: per run, the curves judged, its events (and those its control does not expect) and
    its margins."""
    out = {}
    for name, result in results.items():
        control = BY_NAME.get(name)
        unexpected = result.events if control is None else control.unexpected(result)
        out[name] = {
            "overrides": None if control is None else control.overrides,
            "curves": [*result.curves(), *result.head_curves()],
            "events": result.events,
            "unexpected": unexpected,
            "margins": result.margins().to_dict(),
        }
    return out
