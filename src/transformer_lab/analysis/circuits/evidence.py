"""Every answer with its evidence: an estimate's top units checked by exact patching (`verify=K`), and
intervals over the examples for the scores, the exact effects and the faithfulness, with each unit's
stability (`ci=`).

**Verification.** The K units an approximate method ranks first (by |score|) are patched one at a time,
as method=patching patches every unit (`patching.effects`): their exact effect, M(only that unit
patched) - M(clean). The circuit is then built from each unit's *effect*, the best number known for it:
the exact one where verified, the estimate elsewhere (so a verified unit whose exact effect is small falls
below the others, and one the estimate underrated rises). A verified unit's estimate and exact effect
disagree, and the analysis warns, when

- their signs differ, both being at least 1% of |M(clean) - M(all patched)| (`NOISE`: below that a sign
  is noise), or
- their ranks do: r by the estimate and r' by the effect (among every unit's effect: the ranking the
  circuit is built from), with max(r, r') > 2 min(r, r') and |r - r'| >= 5 (3rd against 10th disagree;
  1st against 3rd, or 10th against 14th, do not), one of the two numbers being at least that 1%.

**Intervals.** The package's methods keep each example's share of each score (`Scores.per_example`); the
exact effects and the M of every circuit evaluated are measured per example too; and M is a mean of
per-example terms (metrics.py). So the bootstrap (`analysis.intervals`: the same resamples for every
number) recomputes them all from resampled sums, with no new forward pass.

**Stability.** In each resample the units are re-ranked by their resampled effects; the circuit's size is
the smallest size whose resampled faithfulness reaches 0.9, among the sizes the curve and the search
for the smallest circuit evaluated (the top-k of the full ranking: no new pass; a size between two of
them counts as the next one); the units ranked below that size, their dangling edges pruned
(`connected`), are that resample's circuit. A unit's stability is the share of the resamples whose
circuit holds it: 1 for a unit every resample keeps, 0 for one none does. A circuit's member is held
across its interval when its stability is at least the level (95%: `held`); the others of the circuit,
and the units outside it that more than 5% of the resamples' circuits hold, are uncertain.

**Connected circuits.** A circuit is the top-k units with the edges that lie on no path from the
inputs to the logits within it pruned (`connected`): an edge into a head whose output no kept edge
carries on changes nothing the metric sees.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_lab.analysis import intervals
from transformer_lab.analysis.circuits.graph import Graph
from transformer_lab.analysis.circuits.patcher import Setup

NOISE = 0.01  # share of |M(clean) - M(all patched)|: a smaller number's sign and rank are noise
RANK_FACTOR = 2  # ranks disagree when the larger is more than twice the smaller ...
RANK_GAP = 5  # ... and they are at least this many places apart
FAITHFUL = 0.9  # the smallest circuit reaching this faithfulness is "the" circuit


def ranking(scores: Tensor) -> Tensor:
    """Units by |score|, largest first (ties: forward order)."""
    return torch.argsort(-scores.abs(), stable=True)


def ranks(scores: Tensor) -> Tensor:
    """Each unit's place in `ranking` (1: the first)."""
    places = torch.empty(scores.numel(), dtype=torch.long)
    places[ranking(scores)] = torch.arange(1, scores.numel() + 1)
    return places


def connected(g: Graph, kept: Tensor) -> Tensor:
    """The units of `kept` ([..., units] bool, any leading shape) that lie on a path from the inputs to
    the logits within the circuit: an edge u -> d stays when u is reached from an input node (one that
    reads nothing: the embeddings) through kept edges, and the logits are reached from d's node through
    kept edges. The others dangle (an edge into a head no kept edge leaves, an edge out of a head no kept
    edge enters) and are pruned. At node level, where the residual stream joins every node to every later
    one, a circuit is connected as it is. One pass each way: edges come in forward order of the reader."""
    if g.level != "edge":
        return kept
    read = {r.node for r in g.readers}
    reached = torch.zeros(*kept.shape[:-1], len(g.nodes), dtype=torch.bool)
    reached[..., [i for i in range(len(g.nodes)) if i not in read]] = True
    ends = [g.readers[r].node for _, r in g.edges]
    for e, (u, _) in enumerate(g.edges):
        reached[..., ends[e]] |= kept[..., e] & reached[..., u]
    alive = torch.zeros_like(reached)
    alive[..., g.index("logits")] = True
    for e in range(len(g.edges) - 1, -1, -1):
        alive[..., g.edges[e][0]] |= kept[..., e] & alive[..., ends[e]]
    sources = torch.tensor([u for u, _ in g.edges], dtype=torch.long)
    return kept & reached[..., sources] & alive[..., torch.tensor(ends, dtype=torch.long)]


@dataclass
class Check:
    """The exact effects of an estimate's top units: `units` in the estimate's order, `shares` [K, B]
    each example's share of each effect, and the time it took."""

    units: list[int]
    shares: Tensor
    seconds: float

    @property
    def exact(self) -> Tensor:
        return self.shares.sum(dim=1)


def verify(setup: Setup, estimate: Tensor, count: int) -> Check:
    """Exact patching of the `count` units `estimate` ranks first (see the module docstring)."""
    from transformer_lab.analysis.circuits.patching import effects  # (it registers a method)

    started = time.perf_counter()
    units = ranking(estimate)[:count].tolist()
    shares = effects(setup, units).cpu() if units else torch.zeros(0, setup.inputs[0].size(0))
    return Check(units, shares, time.perf_counter() - started)


@dataclass
class Disagreement:
    """A verified unit whose estimate and exact effect disagree: the sign, or the ranks (by the estimate,
    by the effect)."""

    unit: int
    estimate: float
    exact: float
    sign: bool
    ranks: tuple[int, int] | None

    def text(self, name: str, method: str) -> str:
        said = f"{name}: {method} {self.estimate:+.4f}, exact patching {self.exact:+.4f}"
        problems = ["the signs differ"] if self.sign else []
        if self.ranks is not None:
            problems.append(
                f"{method} ranks it {_ordinal(self.ranks[0])}, its exact effect {_ordinal(self.ranks[1])}"
            )
        return f"{said} ({'; '.join(problems)})"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def disagreements(setup: Setup, estimate: Tensor, effects: Tensor, units: list[int]) -> list[Disagreement]:
    """The verified `units` whose estimate and exact effect disagree (the rule: the module docstring)."""
    floor = NOISE * abs(setup.clean_metric - setup.ablated_metric)
    by_estimate, by_effect = ranks(estimate), ranks(effects)
    found = []
    for u in units:
        said, exact = float(estimate[u]), float(effects[u])
        sign = said * exact < 0 and min(abs(said), abs(exact)) >= floor
        r, r_exact = int(by_estimate[u]), int(by_effect[u])
        apart = max(r, r_exact) > RANK_FACTOR * min(r, r_exact) and abs(r - r_exact) >= RANK_GAP
        moved = apart and max(abs(said), abs(exact)) >= floor
        if sign or moved:
            found.append(Disagreement(u, said, exact, sign, (r, r_exact) if moved else None))
    return found


@dataclass
class Intervals:
    """Bootstrap intervals over the examples ([lo, hi] rows): of the method's scores (None when the
    method gives no per-example shares), of the exact effects (the `Check`'s order), of the
    faithfulness of each circuit size evaluated; each unit's stability (None without per-example
    scores)."""

    level: float
    scores: Tensor | None
    exact: Tensor
    faithfulness: dict[int, list[float]]
    stability: Tensor | None
    seconds: float
    resamples: int = intervals.RESAMPLES


def resample(
    setup: Setup,
    level: float,
    per_example: Tensor | None,
    check: Check | None,
    kept: dict[int, Tensor],
) -> Intervals | None:
    """The intervals and stabilities of the module docstring: `per_example` [B, units] the examples'
    shares of the method's scores, `check` the exact effects, `kept` each evaluated circuit size's
    per-example shares of M(circuit). None with `level` 0 or a single example."""
    batch = setup.inputs[0].size(0)
    if not level or batch < 2:
        return None
    started = time.perf_counter()
    check = check or Check([], torch.zeros(0, batch), 0.0)
    total = setup.metric.total
    sizes = sorted(kept)
    columns = {  # per example: sums of the metric's terms, and how many terms
        "count": setup.metric.counts.double().cpu(),
        "exact": check.shares.t().double() * total,
        "kept": torch.stack([kept[k] for k in sizes], dim=1).double().cpu() * total,
        "clean": setup.clean_values.double().cpu() * total,
        "ablated": setup.ablated_values.double().cpu() * total,
    }
    if per_example is not None:
        columns["scores"] = per_example.double() * total
    held = torch.zeros(setup.graph.units, dtype=torch.float64)
    limits = torch.tensor(sizes, dtype=torch.float64)
    verified = torch.tensor(check.units, dtype=torch.long)

    def statistic(sums: dict[str, Tensor]) -> Tensor:
        count = sums["count"][:, None]
        exact = sums["exact"] / count
        faithful = (sums["kept"] - sums["ablated"][:, None]) / (sums["clean"] - sums["ablated"])[:, None]
        parts = [exact, faithful]
        if per_example is not None:
            scores = sums["scores"] / count
            parts.insert(0, scores)
            effects = scores.clone()
            effects[:, verified] = exact
            place = torch.argsort(torch.argsort(-effects.abs(), dim=1, stable=True), dim=1)  # 0: first
            size = torch.where(faithful >= FAITHFUL, limits, torch.inf).min(dim=1).values  # inf: none
            held.add_(connected(setup.graph, place < size[:, None]).double().sum(dim=0))
        return torch.cat(parts, dim=1)

    low, high = intervals.bootstrap(*_compact(columns, statistic), level)
    bounds = torch.stack([low, high], dim=-1).float()
    units = setup.graph.units if per_example is not None else 0
    scores, exact, faithful = bounds.split([units, len(check.units), len(sizes)])
    return Intervals(
        level,
        scores if per_example is not None else None,
        exact,
        dict(zip(sizes, faithful.tolist(), strict=True)),
        (held / intervals.RESAMPLES).float() if per_example is not None else None,
        time.perf_counter() - started,
    )


Statistic = Callable[[dict[str, Tensor]], Tensor]


def _compact(columns: dict[str, Tensor], statistic: Statistic) -> tuple[dict[str, Tensor], Statistic]:
    """The columns the bootstrap resamples, and the statistic on their sums: where there are fewer
    examples than numbers per example, each resample's draws of every example ([R, B], the sums of an
    identity's rows) times the columns give the same sums in less memory ([R, B, B] at a time rather
    than [R, B, numbers])."""
    examples = next(iter(columns.values())).size(0)
    width = sum(c[0].numel() for c in columns.values())
    if examples >= width:
        return columns, statistic
    draws = {"draws": torch.eye(examples, dtype=torch.float64)}
    return draws, lambda sums: statistic({name: sums["draws"] @ c for name, c in columns.items()})
