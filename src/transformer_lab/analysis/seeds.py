"""A finding over seeds: does it hold in runs that differ only by their seed?

    python train.py -m experiment=induction_heads seed=0,1,2,3,4
    python -m transformer_lab.interpret ckpt_path=saved_models/multirun/<date>_<time> analysis=dynamics

Training from another seed gives other weights, and a chaotic run (grokking) its events at other steps.
`over_seeds` takes each run's `Dynamics` and says, for every curve that had a phase change in any of them,
in how many seeds it had one (a run counts only if its curve passed every test of `analysis.events`),
the median and range of its half-way step over those seeds alone, and which seeds had none; and the
order of the events where it is resolved: two curves are ordered only in the seeds where both had an
event and their half-way points lie further apart than the snapshots' spacing there. Numbers from one
run are one draw; these are the ones to quote.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass, field

from transformer_lab.analysis import events
from transformer_lab.analysis.dynamics import Dynamics, timing_table


@dataclass
class SeedEvent:
    """A curve's phase change over seeds: in `seeds` of `of` runs, half way at these steps; `missing`:
    the seeds (their numbers) without it."""

    curve: str
    seeds: int
    of: int
    steps: list[int]
    missing: list[str] = field(default_factory=list)  # `seed 0`, ...

    def describe(self) -> str:
        """`loss: in 4 of 5 seeds, half way at step 1015 [951..1210] (median [range] of those); none in
        seed 0`."""
        middle = statistics.median(self.steps)
        none = f"; none in {', '.join(self.missing)}" if self.missing else ""
        return (
            f"{self.curve}: in {self.seeds} of {self.of} seeds, half way at step {middle:.0f} "
            f"[{min(self.steps)}..{max(self.steps)}] (median [range] of those){none}"
        )

    def to_dict(self) -> dict:
        return {
            "curve": self.curve,
            "seeds": self.seeds,
            "of": self.of,
            "median": statistics.median(self.steps),
            "range": [min(self.steps), max(self.steps)],
            "steps": self.steps,
            "missing": self.missing,
        }


@dataclass
class Order:
    """Two curves' order over the seeds where both had an event: `before` resolved first in `ahead`
    seeds, `after` first in `behind`, not resolved at the snapshots' spacing in `unresolved`."""

    before: str
    after: str
    ahead: int
    behind: int
    unresolved: int

    @property
    def both(self) -> int:
        return self.ahead + self.behind + self.unresolved

    @property
    def claimed(self) -> bool:
        """`before` first in every seed where both are events (and in at least one)."""
        return self.ahead == self.both > 0

    def describe(self) -> str:
        if self.claimed:
            return f"{self.before} before {self.after} in each of the {self.both} seeds where both are events"
        parts = [f"{self.before} first in {self.ahead}"] if self.ahead else []
        parts += [f"{self.after} first in {self.behind}"] if self.behind else []
        parts += [f"not resolved at the snapshot spacing in {self.unresolved}"] if self.unresolved else []
        return (
            f"{self.before} and {self.after}: no order (of the {self.both} seeds where both are events: "
            f"{', '.join(parts)})"
        )

    def to_dict(self) -> dict:
        return asdict(self) | {"claimed": self.claimed}


@dataclass
class Seeds:
    """The runs of one setting (by name: the run's directory) with their seeds, and their events over
    the seeds."""

    runs: dict[str, Dynamics]
    events: list[SeedEvent]
    seeds: dict[str, str] = field(default_factory=dict)  # run name -> its seed, where known

    def label(self, run: str) -> str:
        """`seed 1`, or `run 3` for a run whose seed is not known."""
        return f"seed {self.seeds[run]}" if run in self.seeds else f"run {run}"

    def timing(self) -> dict[str, list[tuple[int, int] | None]]:
        """Each curve's event onset and half way in each seed (None: no event there), in run order."""
        found: dict[str, list[tuple[int, int] | None]] = {}
        for i, result in enumerate(self.runs.values()):
            for curve, timing in result.timing().items():
                found.setdefault(curve, [None] * len(self.runs))[i] = timing
        return found

    def orders(self) -> list[Order]:
        """The order of each two neighbouring curves (by their median half way over the seeds), counted
        over the seeds where both are events."""
        ranked = [e.curve for e in self.events]
        found = []
        for before, after in itertools.pairwise(ranked):
            ahead = behind = unresolved = 0
            for result in self.runs.values():
                timing = result.timing()
                if timing.get(before) is None or timing.get(after) is None:
                    continue
                x, y = timing[before][1], timing[after][1]
                if not events.resolved(result.steps_kept(), x, y):
                    unresolved += 1
                elif x < y:
                    ahead += 1
                else:
                    behind += 1
            found.append(Order(before, after, ahead, behind, unresolved))
        return found

    def summary(self) -> list[str]:
        named = ", ".join(
            f"seed {self.seeds[run]} (run {run})" if run in self.seeds else f"run {run}" for run in self.runs
        )
        lines = [f"Events over {len(self.runs)} seeds ({named}):"]
        lines += [f"  {event.describe()}" for event in self.events] or ["  none in any seed"]
        lines += timing_table(self.timing(), [self.label(run) for run in self.runs])
        orders = self.orders()
        if orders:
            lines.append(
                "Order of the events (neighbours by median half way; counted over the seeds where both are "
                "events, ordered where further apart than the snapshots there):"
            )
            lines += [f"  {order.describe()}" for order in orders]
        return lines

    def to_dict(self) -> dict:
        timing = self.timing()
        return {
            "runs": {name: result.to_dict() for name, result in self.runs.items()},
            "seeds": self.seeds,
            "events": [event.to_dict() for event in self.events],
            "orders": [order.to_dict() for order in self.orders()],
            "onset": {curve: [None if t is None else t[0] for t in found] for curve, found in timing.items()},
            "halfway": {
                curve: [None if t is None else t[1] for t in found] for curve, found in timing.items()
            },
        }


def over_seeds(runs: dict[str, Dynamics], seeds: dict[str, str] | None = None) -> Seeds:
    """The events of every curve over the runs (`seeds`: each run's seed, to name them by), in order of
    their median step. One head's events are left out: which head of a layer takes a role differs from
    seed to seed (L1H0 in one, L1H1 in the next), the task's score of the best head says it for all of
    them."""
    seeds = seeds or {}
    label = Seeds(runs, [], seeds).label
    found: dict[str, dict[str, int]] = {}
    for run, result in runs.items():
        named = set(result.curves())
        for event in result.events:
            if event["curve"] in named:
                found.setdefault(event["curve"], {})[run] = event["halfway"]
    summed = [
        SeedEvent(
            curve,
            len(steps),
            len(runs),
            sorted(steps.values()),
            [label(run) for run in runs if run not in steps],
        )
        for curve, steps in found.items()
    ]
    return Seeds(runs, sorted(summed, key=lambda e: statistics.median(e.steps)), seeds)
