"""Phase changes: where a curve over training moved suddenly, and whether that is an event at all.

One rule, used by the `PhaseChange` callback (validation metrics) and by `analysis=dynamics` (every
measure over the snapshots). Steps are read on a log scale (a step of 0, the initial weights, as 1): a
phase change is a sudden move on that axis, as induction heads forming or grokking are drawn.

Every curve has a **scale** (`Scale`), the size a move of it means something against, and where it
sits by **chance** (a model that has learned nothing): a loss in nats, log V (V output classes: the loss
of a uniform guess), chance log V; a difference of losses in nats, log V, chance 0; an accuracy 1,
chance 1 / V; an attention score 1, chance its value under uniform attention (`analysis.measures`).

0. Spikes are left out: a snapshot at which the training loss is far above its neighbours' (`spikes`)
   is no point of any curve's timing.
1. The curve is smoothed by a running median of 3 (each value and its two neighbours), so that one
   stray snapshot moves nothing below; the noise is the typical size of a snapshot-to-snapshot change,
   a robust scale: sigma = 1.4826 x the median absolute deviation of the raw curve's differences.
2. The candidate is the largest move of the smoothed curve in the given direction within a window of at
   most one doubling of the step (steps s to 2s).
3. It is an event only if it passes every test (`TESTS`), each a ratio that must reach 1:
   * range: at least SHARE of the smoothed curve's whole range (max - min over the run);
   * scale: at least ON_SCALE of the curve's scale, so that a curve that barely moves has no "large"
     move: a loss dipping 0.15 nats of log 32 = 3.47, an in-context difference rising 0.07 nats, an
     induction score creeping from 0.06 to 0.11 is no phase change however sudden;
   * chance: it begins or ends more than CHANCE of the scale away from chance: a score that never
     leaves its chance region has no event;
   * noise: at least NOISE times sigma;
   * sudden: at least ABRUPT times the move over the window of the same width just before it (a slow
     drift moves about as much in each window as in the one before);
   * kept: the snapshots after it stay at least KEPT of the move away from where it started (a spike and
     its recovery are not progress).
4. Its step is the half-way point of the move, where the smoothed curve crossed the middle between the
   window's two ends, interpolated in log(step): finer than the snapshots' spacing.

Otherwise the answer is "no phase change", with the largest move, its share of the range and of the
scale, its size in noise units, and the test it failed. Each test's ratio is kept (`Change.ratios`): how
far a curve without an event was from one (its margin, `margins`). Graded on series whose answer is known
(tests/test_events.py): sigmoid steps with noise are found within one snapshot interval of their true
step; drifts, pure noise, single spikes and moves that are large on their range but tiny on their scale
give at most 5% false events over 200 random series; spikes injected into a training loss, alone or
side by side, are found and move no timing.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

DIRECTIONS = ("rise", "fall")
SHARE = 0.5  # of the curve's whole range
ON_SCALE = 0.1  # of the curve's scale
CHANCE = 0.1  # of the curve's scale: the half-width of its chance region
NOISE = 5.0  # times its snapshot-to-snapshot noise
ABRUPT = 3.0  # times the move over the window of the same width just before
KEPT = 0.5  # of the move that the rest of the run keeps
WINDOW = math.log(2)  # the widest window: one doubling of the step
ONSET = 0.1  # the share of its move by which a curve has started moving
TESTS = {  # each test of an event, what it asks; in the order they are tried
    "range": f"at least {SHARE:.0%} of its range",
    "scale": f"at least {ON_SCALE:.0%} of its scale",
    "chance": f"beginning or ending more than {CHANCE:.0%} of its scale from chance",
    "noise": f"at least {NOISE:g}x its noise",
    "sudden": f"at least {ABRUPT:g}x the move just before it",
    "kept": f"kept: at least {KEPT:.0%} of it held by the snapshots after it",
}
SPIKE_FACTOR = 2.0  # a spike's training loss is more than twice its neighbours' median ...
SPIKE_SCALE = 0.02  # ... and above it by more than this share of the loss's scale
SPIKE_NEIGHBOURS = 3  # snapshots on each side: up to three spikes side by side are found


@dataclass(frozen=True)
class Scale:
    """What a curve's moves are measured against: `size` (an event moves at least ON_SCALE of it) and
    `chance`, the curve's value for a model that has learned nothing (None: no chance region); `unit`
    says what the size is (`nats: log 32`), in the answers."""

    size: float
    chance: float | None = None
    unit: str = ""

    def describe(self) -> str:
        return f"{self.size:.3g}" + (f" {self.unit}" if self.unit else "")


def nats(outputs: int) -> Scale:
    """A loss: log V nats (V output classes), the loss of a uniform guess, which is its chance."""
    return Scale(math.log(max(outputs, 2)), math.log(max(outputs, 2)), f"nats: log {outputs}")


def loss_difference(outputs: int) -> Scale:
    """A difference of two losses: log V nats, chance 0 (the two alike)."""
    return Scale(math.log(max(outputs, 2)), 0.0, f"nats: log {outputs}")


def accuracy(outputs: int) -> Scale:
    """An accuracy: 1, chance 1 / V (a uniform guess)."""
    return Scale(1.0, 1.0 / max(outputs, 1), "")


def metric_scale(name: str, outputs: int) -> Scale | None:
    """The scale of a training metric by its name (`val/loss`, `test/acc`, ...): a loss (`bpc` in bits,
    `ppl` as a number of classes), an accuracy; None for any other (the curve's own size is used)."""
    kind = name.rsplit("/", 1)[-1]
    if kind.endswith("loss"):
        return nats(outputs)
    if kind == "bpc":
        bits = math.log2(max(outputs, 2))
        return Scale(bits, bits, f"bits: log2 {outputs}")
    if kind == "ppl":
        return Scale(float(outputs), float(outputs), "classes")
    if kind == "seq_acc":
        return Scale(1.0, 0.0, "")
    if kind.endswith("acc"):
        return accuracy(outputs)
    return None


@dataclass
class Change:
    """The largest move of a curve in a direction (`detect`): between steps `start` and `end`, from
    `before` to `after` (smoothed values), half way at step `halfway`; its share of the curve's range,
    its scale, its size in noise units; `ratios` each test's value over its threshold (1 or more passes,
    `TESTS`); `event` whether it passed every test, else `failed` names the first it did not pass."""

    name: str
    direction: str
    start: int
    end: int
    before: float
    after: float
    halfway: float
    share: float
    noise: float
    in_noise: float
    event: bool
    failed: str | None = None
    scale: Scale = field(default_factory=lambda: Scale(0.0))
    ratios: dict[str, float] = field(default_factory=dict)
    onset: float = 0.0  # the step by which it got ONSET of the way

    @property
    def step(self) -> int:
        """The event's step: its half-way point, rounded."""
        return round(self.halfway)

    @property
    def move(self) -> float:
        return abs(self.after - self.before)

    @property
    def margin(self) -> float:
        """The smallest of its tests' ratios: below 1, a curve without an event is that far from one."""
        return min(self.ratios.values(), default=0.0)

    def describe(self) -> str:
        """`loss fell 3.29 -> 1.28 between steps 790 and 1347 (68% of its range, 58% of its scale 3.47
        nats: log 32, 158x its noise); half way at step 1015`, or the largest move and the test it
        failed (with how far it got): no phase change."""
        verb = "fell" if self.direction == "fall" else "rose"
        noise = f"{self.in_noise:.3g}x its noise" if math.isfinite(self.in_noise) else "no noise"
        on_scale = self.move / self.scale.size if self.scale.size > 0 else math.inf
        move = (
            f"{self.before:.3g} -> {self.after:.3g} between steps {self.start} and {self.end} "
            f"({self.share:.0%} of its range, {on_scale:.0%} of its scale {self.scale.describe()}, {noise})"
        )
        if self.event:
            return f"{self.name} {verb} {move}; half way at step {self.halfway:.0f}"
        ratio = self.ratios[self.failed]
        return (
            f"no phase change in {self.name}: its largest move, {move}, fails the {self.failed} test "
            f"({TESTS[self.failed]}: {ratio:.2f} of it)"
        )


def _log(step: float) -> float:
    return math.log(max(step, 1))


def smoothed(values: Sequence[float]) -> list[float]:
    """The running median of 3: each value with its two neighbours (the ends with their one)."""
    n = len(values)
    return [statistics.median(values[max(0, i - 1) : min(n, i + 2)]) for i in range(n)]


def noise_scale(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation of the snapshot-to-snapshot differences (the standard
    deviation of the differences, for Gaussian noise; a few sudden moves do not change it)."""
    diffs = [b - a for a, b in itertools.pairwise(values)]
    if len(diffs) < 2:
        return 0.0
    middle = statistics.median(diffs)
    return 1.4826 * statistics.median(abs(d - middle) for d in diffs)


def spikes(steps: Sequence[int], loss: Sequence[float], scale: float) -> list[int]:
    """The steps at which the training loss spiked: more than SPIKE_FACTOR times the median of the
    loss at the SPIKE_NEIGHBOURS snapshots on each side (fewer at the ends), and above it by more than
    SPIKE_SCALE of the loss's `scale` (log V nats). A loss that only falls is never more than twice
    that median (it lies between the values before and after it), so a phase change is no spike; two or
    three spiking snapshots side by side are each found (their neighbours are mostly not spikes)."""
    values = [v if v is not None and math.isfinite(v) else None for v in loss]
    found = []
    for k, value in enumerate(values):
        if value is None:
            continue
        near = values[max(0, k - SPIKE_NEIGHBOURS) : k] + values[k + 1 : k + 1 + SPIKE_NEIGHBOURS]
        near = [v for v in near if v is not None]
        if len(near) < 2:
            continue
        baseline = statistics.median(near)
        if value > SPIKE_FACTOR * baseline and value - baseline > SPIKE_SCALE * scale:
            found.append(int(steps[k]))
    return found


def _points(
    steps: Sequence[int], values: Sequence[float], left_out: Collection[int]
) -> tuple[list[int], list[float]]:
    """The finite values and their steps, without the `left_out` steps (spikes)."""
    points = [
        (s, v)
        for s, v in zip(steps, values, strict=True)
        if v is not None and math.isfinite(v) and s not in left_out
    ]
    return [s for s, _ in points], [v for _, v in points]


def _crossing(
    steps: Sequence[int], curve: Sequence[float], i: int, j: int, sign: float, share: float = 0.5
) -> float:
    """The step where `curve` first got `share` of the way from curve[i] to curve[j] (log-interpolated)."""
    target = curve[i] + share * (curve[j] - curve[i])
    for k in range(i + 1, j + 1):
        if sign * (curve[k] - target) >= 0:
            lo, hi = sign * (curve[k - 1] - target), sign * (curve[k] - target)
            part = -lo / (hi - lo) if hi != lo else 1.0
            return math.exp(_log(steps[k - 1]) + part * (_log(steps[k]) - _log(steps[k - 1])))
    return float(steps[j])


def spacing(steps: Sequence[int], step: float) -> tuple[int, int]:
    """The two snapshots around `step` (the one at or before it and the next): where it was measured."""
    before = max((s for s in steps if s <= step), default=steps[0])
    after = min((s for s in steps if s > before), default=before)
    return before, after


def resolved(steps: Sequence[int], first: float, second: float) -> bool:
    """Whether two half-way points are ordered: further apart than the snapshots' spacing around each
    (interpolated steps inside one snapshot interval, or in two neighbouring ones less than an interval
    apart, say nothing about which came first)."""
    widest = max(b - a for a, b in (spacing(steps, first), spacing(steps, second)))
    return abs(second - first) > widest


def own_scale(values: Sequence[float]) -> Scale:
    """The scale of a curve nobody registered one for: its largest absolute value, no chance region."""
    return Scale(max((abs(v) for v in values), default=0.0), None, "(its largest value: no scale registered)")


def _ratio(value: float, threshold: float) -> float:
    if threshold <= 0:
        return math.inf if value > 0 else (1.0 if value == 0 else 0.0)
    return value / threshold


def detect(
    name: str,
    steps: Sequence[int],
    values: Sequence[float],
    direction: str,
    scale: Scale | None = None,
    left_out: Collection[int] = (),
) -> Change | None:
    """The largest move of `values` over `steps` in `direction` (`rise` or `fall`) and whether it is a
    phase change (see the module docstring); `scale`: the curve's (None: its largest value, `own_scale`);
    `left_out`: steps that are no point of the curve (the spikes). None for fewer than three values left
    or no move at all."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r}: use rise or fall")
    steps, values = _points(steps, values, left_out)
    if len(values) < 3:
        return None
    scale = scale or own_scale(values)
    sign = 1.0 if direction == "rise" else -1.0
    curve = smoothed(values)
    best = None
    for i in range(len(curve)):
        for j in range(i + 1, len(curve)):
            if (
                _log(steps[j]) - _log(steps[i]) > WINDOW + 1e-9 and j > i + 1
            ):  # 1e-9: 750 to 1500 is one doubling
                break
            move = sign * (curve[j] - curve[i])
            if best is None or move > best[0]:
                best = (move, i, j)
    move, i, j = best
    if move <= 0:
        return None
    whole = max(curve) - min(curve)
    sigma = noise_scale(values)
    width = _log(steps[j]) - _log(steps[i])
    earlier = [k for k in range(i) if _log(steps[i]) - _log(steps[k]) >= width]
    k = earlier[-1] if earlier else max(i - 1, 0)
    before = sign * (curve[i] - curve[k])
    kept = min(sign * (c - curve[i]) for c in curve[j:])
    away = (
        math.inf
        if scale.chance is None
        else _ratio(max(abs(curve[i] - scale.chance), abs(curve[j] - scale.chance)), CHANCE * scale.size)
    )
    ratios = {
        "range": _ratio(move, SHARE * whole),
        "scale": _ratio(move, ON_SCALE * scale.size),
        "chance": away,
        "noise": _ratio(move, NOISE * sigma),
        "sudden": _ratio(move, ABRUPT * max(before, 0.0)),
        "kept": _ratio(kept, KEPT * move),
    }
    failed = next((test for test, ratio in ratios.items() if ratio < 1), None)
    return Change(
        name,
        direction,
        int(steps[i]),
        int(steps[j]),
        curve[i],
        curve[j],
        _crossing(steps, curve, i, j, sign),
        move / whole if whole > 0 else 0.0,
        sigma,
        move / sigma if sigma > 0 else math.inf,
        failed is None,
        failed,
        scale,
        ratios,
        _crossing(steps, curve, i, j, sign, ONSET),
    )


@dataclass
class Margins:
    """How far the curves of a run without an event were from one: per test, the largest ratio any
    curve reached and which (`tests`); the curve nearest an event (`nearest`: the largest of the curves'
    smallest ratio, with its failed test); `events` the curves that had one."""

    tests: dict[str, tuple[float, str]]
    nearest: tuple[float, str, str] | None
    events: list[str]

    def describe(self) -> list[str]:
        """Lines: each test's closest curve, as its ratio to the threshold; the nearest curve."""
        lines = [
            f"  {test:<6} {ratio:6.2f}  ({curve}; {TESTS[test]})"
            for test, (ratio, curve) in self.tests.items()
        ]
        if self.nearest is not None:
            ratio, curve, test = self.nearest
            lines.append(
                f"  nearest to an event: {curve}, whose weakest test ({test}) reached {ratio:.2f} of its "
                "threshold"
            )
        return lines

    def to_dict(self) -> dict:
        return {
            "tests": {test: {"ratio": r, "curve": c} for test, (r, c) in self.tests.items()},
            "nearest": None
            if self.nearest is None
            else dict(zip(("ratio", "curve", "test"), self.nearest, strict=True)),
            "events": self.events,
        }


def margins(changes: Sequence[Change]) -> Margins:
    """Each test's largest ratio over `changes` (a run's curves) and the curve nearest an event: where a
    control passes, how close it came (1 is the threshold: a ratio of 0.94 on `range` is a curve whose
    largest move was 47% of its range against the 50% an event takes)."""
    tests = {}
    for test in TESTS:
        ranked = [(c.ratios[test], c.name) for c in changes if test in c.ratios]
        if ranked:
            tests[test] = max(ranked, key=lambda rc: (_finite(rc[0]), rc[1]))
    others = [c for c in changes if not c.event]
    nearest = max(others, key=lambda c: c.margin, default=None)
    weakest = None if nearest is None else min(nearest.ratios, key=nearest.ratios.get)
    return Margins(
        tests,
        None if nearest is None else (nearest.margin, nearest.name, weakest),
        [c.name for c in changes if c.event],
    )


def _finite(ratio: float) -> float:
    return ratio if math.isfinite(ratio) else 1e300
