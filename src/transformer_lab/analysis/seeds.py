"""A finding over seeds: does it hold in runs that differ only by their seed?

    python train.py -m experiment=induction_heads seed=0,1,2,3,4
    python -m transformer_lab.interpret ckpt_path=saved_models/multirun/<date>_<time> analysis=dynamics

Training from another seed gives other weights, and a chaotic run (grokking) its events at other steps.
`over_seeds` takes each run's `Dynamics` and says, for every curve that had a phase change in any of them,
in how many seeds it had one and at which step: the median and the range over those seeds. Numbers from
one run are one draw; these are the ones to quote.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from transformer_lab.analysis.dynamics import Dynamics, crossing_table
from transformer_lab.analysis.events import ONSET


@dataclass
class SeedEvent:
    """A curve's phase change over seeds: in `seeds` of `of` runs, half way at these steps."""

    curve: str
    seeds: int
    of: int
    steps: list[int]

    def describe(self) -> str:
        """`loss: in 5 of 5 seeds, half way at step 1015 [951..1210] (median [range])`."""
        middle = statistics.median(self.steps)
        return (
            f"{self.curve}: in {self.seeds} of {self.of} seeds, half way at step {middle:.0f} "
            f"[{min(self.steps)}..{max(self.steps)}] (median [range])"
        )

    def to_dict(self) -> dict:
        return {
            "curve": self.curve,
            "seeds": self.seeds,
            "of": self.of,
            "median": statistics.median(self.steps),
            "range": [min(self.steps), max(self.steps)],
            "steps": self.steps,
        }


@dataclass
class Seeds:
    """The runs of one setting (by name) and their events over seeds."""

    runs: dict[str, Dynamics]
    events: list[SeedEvent]

    def crossings(self, share: float) -> dict[str, list[int | None]]:
        """Each curve's step by which it got `share` of the way through its largest move
        (`Dynamics.crossings`) in each seed, in run order: the order of two curves holds in every seed,
        or it does not."""
        found: dict[str, list[int | None]] = {}
        for i, result in enumerate(self.runs.values()):
            for curve, step in result.crossings(share).items():
                found.setdefault(curve, [None] * len(self.runs))[i] = step
        return found

    def summary(self) -> list[str]:
        lines = [f"Events over {len(self.runs)} seeds ({', '.join(self.runs)}):"]
        lines += [f"  {event.describe()}" for event in self.events] or ["  none in any seed"]
        return lines + crossing_table(self.crossings(ONSET), self.crossings(0.5))

    def to_dict(self) -> dict:
        return {
            "runs": {name: result.to_dict() for name, result in self.runs.items()},
            "events": [event.to_dict() for event in self.events],
            "onset": self.crossings(ONSET),
            "halfway": self.crossings(0.5),
        }


def over_seeds(runs: dict[str, Dynamics]) -> Seeds:
    """The events of every curve over the runs, in order of their median step. One head's events are left
    out: which head of a layer takes a role differs from seed to seed (L1H0 in one, L1H1 in the next),
    the task's score of the best head says it for all of them."""
    found: dict[str, list[int]] = {}
    for result in runs.values():
        heads = {f"{name} {m} score" for row in result.head_names() for name in row for m in result.own_heads}
        for event in result.events:
            if event["curve"] not in heads:
                found.setdefault(event["curve"], []).append(event["halfway"])
    events = [SeedEvent(curve, len(steps), len(runs), sorted(steps)) for curve, steps in found.items()]
    return Seeds(runs, sorted(events, key=lambda e: statistics.median(e.steps)))
