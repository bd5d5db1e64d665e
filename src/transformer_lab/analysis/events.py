"""Phase changes: where a curve over training moved suddenly, and whether that is an event at all.

One rule, used by the `PhaseChange` callback (validation metrics) and by `analysis=dynamics` (every
measure over the snapshots). Steps are read on a log scale (a step of 0, the initial weights, as 1): a
phase change is a sudden move on that axis, as induction heads forming or grokking are drawn.

1. The curve is smoothed by a running median of 3 (each value and its two neighbours), so that one
   spiking snapshot moves nothing below; the noise is the typical size of a snapshot-to-snapshot change,
   a robust scale: sigma = 1.4826 x the median absolute deviation of the raw curve's differences.
2. The candidate is the largest move of the smoothed curve in the given direction within a window of at
   most one doubling of the step (steps s to 2s).
3. It is an event only if it is
   * large: at least SHARE of the smoothed curve's whole range (max - min over the run), at least SCALE
     of its size (its largest absolute value, or its full scale if larger: 1 for an accuracy or an
     attention score), so that a loss dipping from 3.46 to 3.29 nats or an induction score creeping
     from 0.06 to 0.11 is no phase change however sudden, and more than MIN_CHANGE;
   * beyond the noise: at least NOISE times sigma;
   * sudden: at least ABRUPT times the move over the window of the same width just before it (a slow drift
     moves about as much in each window as in the one before);
   * kept: the snapshots after it stay at least half of the move away from where it started (a spike and
     its recovery are not progress).
4. Its step is the half-way point of the move, where the smoothed curve crossed the middle between the
   window's two ends, interpolated in log(step): finer than the snapshots' spacing.

Otherwise the answer is "no phase change", with the largest move, its share of the range, its size in
noise units, and the test it failed. Graded on series whose answer is known (tests/test_events.py):
sigmoid steps with noise are found within one snapshot interval of their true step; drifts, pure noise and
single spikes give at most 5% false events over 200 random series.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

DIRECTIONS = ("rise", "fall")
SHARE = 0.5  # of the curve's whole range
NOISE = 5.0  # times its snapshot-to-snapshot noise
ABRUPT = 3.0  # times the move over the window of the same width just before
KEPT = 0.5  # of the move that the rest of the run keeps
SCALE = 0.1  # of the curve's largest absolute value
MIN_CHANGE = 0.02  # a score (or a loss, in nats) moves by more than this in a phase change
WINDOW = math.log(2)  # the widest window: one doubling of the step


@dataclass
class Change:
    """The largest move of a curve in a direction (`detect`): between steps `start` and `end`, from
    `before` to `after` (smoothed values), half way at step `halfway`; its share of the curve's range and
    its size in noise units; `event` whether it passed every test, else `failed` names the first it did
    not pass."""

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

    @property
    def step(self) -> int:
        """The event's step: its half-way point, rounded."""
        return round(self.halfway)

    def describe(self) -> str:
        """`loss fell 3.29 -> 1.28 between steps 790 and 1347 (68% of its range, 158x its noise); half way at
        step 1015`, or the largest move and the test it failed: no phase change."""
        verb = "fell" if self.direction == "fall" else "rose"
        noise = f"{self.in_noise:.3g}x its noise" if math.isfinite(self.in_noise) else "no noise"
        move = (
            f"{self.before:.3g} -> {self.after:.3g} between steps {self.start} and {self.end} "
            f"({self.share:.0%} of its range, {noise})"
        )
        if self.event:
            return f"{self.name} {verb} {move}; half way at step {self.halfway:.0f}"
        return f"no phase change in {self.name}: its largest move, {move}, is {self.failed}"


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


ONSET = 0.1  # the share of its largest move by which a curve has started moving


def crossing(
    steps: Sequence[int], values: Sequence[float], direction: str, share: float = 0.5
) -> float | None:
    """The step at which a curve, smoothed by the running median of 3 (one spiking snapshot cannot move
    it), first got `share` of the way through its largest move in `direction` (for a rise: from its
    lowest value to the highest after it), interpolated in log(step). `share=0.5`: half way, which orders
    two curves whether or not either was a phase change; `share=ONSET`: where it started (a loss that
    first falls, then rises, starts its rise at its lowest point). None for a curve that never moves
    that way."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r}: use rise or fall")
    points = [(s, v) for s, v in zip(steps, values, strict=True) if v is not None and math.isfinite(v)]
    if len(points) < 2:
        return None
    steps, curve = [s for s, _ in points], smoothed([v for _, v in points])
    sign = 1.0 if direction == "rise" else -1.0
    move, start, lowest = 0.0, 0, 0
    for j, value in enumerate(curve):
        if sign * (value - curve[lowest]) < 0:
            lowest = j
        elif sign * (value - curve[lowest]) > move:
            move, start, end = sign * (value - curve[lowest]), lowest, j
    return _crossing(steps, curve, start, end, sign, share) if move > 0 else None


def detect(
    name: str, steps: Sequence[int], values: Sequence[float], direction: str, scale: float = 0.0
) -> Change | None:
    """The largest move of `values` over `steps` in `direction` (`rise` or `fall`) and whether it is a
    phase change (see the module docstring); `scale`: the curve's full scale where it has one (1 for an
    accuracy). None for fewer than three finite values or no move at all."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r}: use rise or fall")
    points = [(s, v) for s, v in zip(steps, values, strict=True) if v is not None and math.isfinite(v)]
    if len(points) < 3:
        return None
    steps, values = [s for s, _ in points], [v for _, v in points]
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
    size = max(scale, *(abs(v) for v in curve))
    sigma = noise_scale(values)
    width = _log(steps[j]) - _log(steps[i])
    earlier = [k for k in range(i) if _log(steps[i]) - _log(steps[k]) >= width]
    k = earlier[-1] if earlier else max(i - 1, 0)
    before = sign * (curve[i] - curve[k])
    kept = min(sign * (c - curve[i]) for c in curve[j:])
    tests = (
        (move >= SHARE * whole, f"less than the {SHARE:.0%} of its range an event takes"),
        (move >= SCALE * size, f"less than {SCALE:.0%} of the curve's size ({size:.3g}) an event takes"),
        (move > MIN_CHANGE, f"no more than the {MIN_CHANGE} an event moves"),
        (move >= NOISE * sigma, f"less than the {NOISE:g}x its noise an event takes"),
        (move >= ABRUPT * max(before, 0.0), f"less than {ABRUPT:g}x the move just before it (a drift)"),
        (kept >= KEPT * move, "undone by the snapshots after it"),
    )
    failed = next((why for passed, why in tests if not passed), None)
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
    )
