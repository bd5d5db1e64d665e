"""Intervals over examples: how much a score would move on other examples of the same task.

A score here is a statistic of sums over examples: an accuracy (correct outputs / labelled outputs), a
mean logit difference, a share restored (a difference of means over another). The bootstrap resamples the
N examples with replacement R times, recomputes the statistic from the resampled sums, and reports the
middle `level` of the R values (the percentile interval, Efron's simplest):

    low, high = intervals.bootstrap({"correct": correct, "labelled": labelled},
                                    lambda s: s["correct"] / s["labelled"])

Every statistic of one call sees the same resamples, so the interval of a difference (a head's accuracy
drop: baseline minus ablated) accounts for the two being measured on the same examples. Resamples come
from a fixed seed: the same interval every time for the same numbers.
"""

from collections.abc import Callable

import torch
from torch import Tensor

from transformer_lab.errors import require

RESAMPLES = 1000
CHUNK = 100  # resamples at a time: [CHUNK, N, ...] values in memory


DEFAULT_LEVEL = 0.95  # the tools' `ci=` when none is given
FEWEST_EXAMPLES = 8  # fewer examples give no interval: 4 have 35 distinct resamples, 8 have 6,435


def check_level(level: float | str | None) -> float:
    """`ci=` (a number, or a tool's text; None: DEFAULT_LEVEL) as a level in (0, 1), or 0: no interval."""
    if level is None:
        return DEFAULT_LEVEL
    try:
        number = float(level)
    except (TypeError, ValueError):
        number = float("nan")
    require(
        not isinstance(level, bool) and (number == 0 or 0 < number < 1),
        f"ci={level} must be a level between 0 and 1 such as 0.95 (or 0: no intervals)",
    )
    return number


def level_for(level: float | str | None, examples: int) -> tuple[float, str]:
    """(`ci=` as a level, a line that says why there is none, or "") for a score over `examples`
    examples: below FEWEST_EXAMPLES the bootstrap has too few distinct resamples (C(2N-1, N)) for an
    interval to mean anything, so the default gives none and says so, and an explicit level is refused
    rather than printed as [x, x]."""
    number = check_level(level)
    if number == 0 or examples >= FEWEST_EXAMPLES:
        return number, ""
    many = f"{examples} example{'s' * (examples != 1)}"
    require(
        level is None,
        f"ci={level} needs at least {FEWEST_EXAMPLES} examples for an interval, and this analysis reads "
        f"{many}; give num_examples={FEWEST_EXAMPLES} or more (or more pairs), or ci=0",
    )
    if examples == 1:  # one input, or one prompt pair: plainly nothing to resample
        return 0.0, ""
    return 0.0, f"(no intervals: {many} are too few for one; {FEWEST_EXAMPLES} or more give them)"


def bootstrap(
    columns: dict[str, Tensor],
    statistic: Callable[[dict[str, Tensor]], Tensor],
    level: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """(low, high) of `statistic(sums)` over bootstrap resamples of the examples: every column is
    per example (its first dimension, N rows), and `statistic` maps the columns' sums over a resample
    ([R, ...] each) to its values [R, ...]."""
    n = next(iter(columns.values())).size(0)
    generator = torch.Generator().manual_seed(seed)
    values = []
    for start in range(0, resamples, CHUNK):
        rows = torch.randint(n, (min(CHUNK, resamples - start), n), generator=generator)
        sums = {name: column.detach().double().cpu()[rows].sum(dim=1) for name, column in columns.items()}
        values.append(statistic(sums))
    values = torch.cat(values)
    quantiles = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=values.dtype)
    low, high = torch.quantile(values, quantiles, dim=0)
    return low, high


def within(low: float, high: float, value: float = 0.0) -> bool:
    """Whether `value` (a difference of 0, by default) lies in the interval: a difference within noise."""
    return low <= value <= high
