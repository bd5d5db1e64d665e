"""A circuit is evaluated, not just drawn: `discover` scores every unit with a registered method, checks
an approximate method's top units by exact patching (`verify`, evidence.py), keeps the top-k units (by
|effect|: the exact effect where verified, the score elsewhere), patches every other one, and measures

    faithfulness(k) = (M(circuit) - M(all patched)) / (M(clean) - M(all patched))

over k on a log scale: the curve, its area (over log k from one unit to all), and the smallest circuit
reaching 0.9; with `ci`, the intervals over the examples of every number and each unit's stability
(evidence.py). Every circuit is connected: of the top-k units, the edges on no path from the inputs to
the logits within them are pruned (`evidence.connected`), and the circuit says which. With an answer key
(a circuit known because the model was built by hand), also the ROC AUC of the method's scores against
it: 1 when every true unit ranks above every other, 0.5 by chance. Where the method's top units were
checked (`verify`), the circuit its own ranking alone would have chosen is kept beside (`Circuit.alone`),
so that methods can still be compared.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from transformer_lab.analysis.circuits import acdc, eap_ig, evidence, patching
from transformer_lab.analysis.circuits.attribution import attribution, gradients
from transformer_lab.analysis.circuits.evidence import (
    FAITHFUL,
    Check,
    Disagreement,
    Intervals,
    connected,
    ranking,
)
from transformer_lab.analysis.circuits.graph import Graph
from transformer_lab.analysis.circuits.methods import METHODS, require_method
from transformer_lab.analysis.circuits.options import VERIFY, Options, Scores, require_verify
from transformer_lab.analysis.circuits.patcher import Batch, Setup, prepare, require_time
from transformer_lab.analysis.intervals import check_level
from transformer_lab.errors import require
from transformer_lab.nn import TokenModel


def sizes_for(units: int, points: int = 12) -> list[int]:
    """Circuit sizes on a log scale from 1 to `units`."""
    grid = np.unique(np.round(np.logspace(0, math.log10(max(units, 1)), points)).astype(int))
    return [int(k) for k in grid if 1 <= k <= units] or [units]


def top(setup: Setup, order: Tensor, k: int) -> Tensor:
    """The circuit of the first k units of `order`: bool [units], its dangling edges pruned
    (`evidence.connected`)."""
    kept = torch.zeros(setup.graph.units, dtype=torch.bool)
    kept[order[:k]] = True
    return connected(setup.graph, kept)


def _kept_shares(setup: Setup, order: Tensor, sizes: Sequence[int], chunk: int | None = None) -> Tensor:
    """Each example's share of M with the circuit of the first k units of `order` kept (`top`) and every
    other unit patched, for each k of `sizes`: [len(sizes), B]."""
    mask = torch.stack([~top(setup, order, k) for k in sizes]).float()
    return setup.evaluate(mask, chunk=chunk, per_example=True)


def _faithfulness_of(setup: Setup, shares: Tensor) -> Tensor:
    """faithfulness per row of examples' shares of M(circuit) [K, B] -> [K]."""
    ablated = setup.ablated_metric
    return (shares.sum(dim=-1) - ablated) / (setup.clean_metric - ablated)


def faithfulness(setup: Setup, scores: Tensor, sizes: Sequence[int]) -> list[float]:
    """faithfulness(k) for each k: the circuit of the top-k units (`top`) kept, every other unit patched."""
    return _faithfulness_of(setup, _kept_shares(setup, ranking(scores), sizes)).tolist()


def circuit_faithfulness(setup: Setup, kept: Sequence[int]) -> float:
    """The faithfulness of one circuit: these units kept, every other one patched."""
    mask = torch.ones(1, setup.graph.units)
    mask[0, list(kept)] = 0.0
    return float(_faithfulness_of(setup, setup.evaluate(mask, chunk=1, per_example=True))[0])


def smallest_circuit(
    setup: Setup, scores: Tensor, curve: dict[int, float], shares: dict[int, Tensor] | None = None
) -> int | None:
    """The fewest top units whose circuit (`top`) reaches FAITHFUL, searched between the grid points of
    `curve` (k -> faithfulness) around the first that reaches it; None if none does. `shares`: where to
    keep each size's per-example shares of M(circuit) it evaluates (size -> [B])."""
    reached = [k for k, f in sorted(curve.items()) if f >= FAITHFUL]
    if not reached:
        return None
    high = reached[0]
    low = max([k for k in curve if k < high], default=0)  # the grid point below fails
    order = ranking(scores)
    while high - low > 1:
        middle = (low + high) // 2
        kept = _kept_shares(setup, order, [middle], chunk=1)
        if shares is not None:
            shares[middle] = kept[0]
        if float(_faithfulness_of(setup, kept)[0]) >= FAITHFUL:
            high = middle
        else:
            low = middle
    return high


def area(sizes: Sequence[int], values: Sequence[float], units: int) -> float:
    """The area under faithfulness over log k / log(units), from one unit to all (0 to 1)."""
    if units <= 1 or len(sizes) < 2:
        return float(values[-1]) if len(values) else 0.0
    x = np.log(np.asarray(sizes, dtype=float)) / math.log(units)
    return float(np.trapezoid(np.asarray(values, dtype=float), x))


def roc_auc(scores: Tensor, truth: Tensor) -> float:
    """P(|score| of a true unit > |score| of another), ties counting a half: ROC AUC of the ranking."""
    values = scores.abs().double()
    positive, negative = values[truth], values[~truth]
    require(len(positive) > 0 and len(negative) > 0, "the answer key must mark some units true and some not")
    greater = (positive[:, None] > negative[None, :]).double().mean()
    equal = (positive[:, None] == negative[None, :]).double().mean()
    return float(greater + 0.5 * equal)


@dataclass
class Circuit:
    """What `discover` found (circuit.json is `to_dict()`). `scores`: the method's; `check`: the exact
    effects of its top units (verify=); `effects`: what the circuit is built from (the exact effect where
    verified, the score elsewhere); `intervals`: over the examples (ci=); `defaults`: which of method and
    metric were not given; `corrupted_answers`: with logit_diff, the answers the corrupted run chose
    where the corruption keeps the clean one (None where it changes every answer)."""

    method: str
    metric: str
    level: str
    num_examples: int
    seconds: float
    graph: Graph
    scores: Tensor
    sizes: list[int]
    curve: list[float]
    circuit: list[int] | None
    clean_metric: float
    ablated_metric: float
    ablation: str
    answer_key_auc: float | None = None
    kept: Tensor | None = None  # acdc: the units it kept
    check: Check | None = None
    disagreements: list[Disagreement] = field(default_factory=list)
    intervals: Intervals | None = None
    defaults: tuple[str, ...] = ()
    corrupted_answers: Tensor | None = None
    smallest: int | None = None  # the number of top units the circuit was chosen from
    pruned: list[int] = field(default_factory=list)  # of those, the dangling ones pruned
    alone: Choice | None = None  # with verify=: what the method's own ranking would have chosen

    @property
    def area(self) -> float:
        return area(self.sizes, self.curve, self.graph.units)

    @property
    def effects(self) -> Tensor:
        """Per unit, the exact effect where verified, the method's score elsewhere: the circuit's ranking."""
        if self.check is None or not self.check.units:
            return self.scores
        effects = self.scores.clone()
        effects[self.check.units] = self.check.exact.to(effects)
        return effects

    def circuit_units(self) -> list[int]:
        """The units of the circuit: indices into edges, or into `graph.nodes` at node level."""
        if self.circuit is None:
            return []
        return self.circuit

    def circuit_faithfulness(self) -> float | None:
        """The faithfulness of the circuit (a point of the curve: the top `smallest` units, pruned)."""
        return None if self.smallest is None else self.curve[self.sizes.index(self.smallest)]

    def node_totals(self) -> list[tuple[int, float, float]]:
        """Edge level: per node with edges, the effects of the edges into it and out of it, summed
        (node index, into, out of)."""
        g, effects = self.graph, self.effects.tolist()
        into: dict[int, float] = {}
        out: dict[int, float] = {}
        for (u, r), value in zip(g.edges, effects, strict=True):
            out[u] = out.get(u, 0.0) + value
            node = g.readers[r].node
            into[node] = into.get(node, 0.0) + value
        return [(n, into.get(n, 0.0), out.get(n, 0.0)) for n in range(len(g.nodes)) if n in into or n in out]

    def _unit_records(self) -> list[dict]:
        """Per unit: its score and, where known, its exact effect, intervals and stability."""
        records = [{"score": float(s)} for s in self.scores.tolist()]
        if self.check is not None:
            for k, (u, value) in enumerate(zip(self.check.units, self.check.exact.tolist(), strict=True)):
                records[u]["exact"] = value
                if self.intervals is not None:
                    records[u]["exact_ci"] = self.intervals.exact[k].tolist()
        if self.intervals is not None and self.intervals.scores is not None:
            for record, bounds, share in zip(
                records, self.intervals.scores.tolist(), self.intervals.stability.tolist(), strict=True
            ):
                record["ci"], record["stability"] = bounds, share
        return records

    def to_dict(self) -> dict:
        g = self.graph
        records = self._unit_records()
        edges, node_scores = [], []
        if g.level == "edge":
            edges = [
                {"src": src, "dst": dst} | r for (src, dst), r in zip(g.edge_names(), records, strict=True)
            ]
        else:
            node_scores = [{"node": g.nodes[n].name} | r for n, r in zip(g.scored, records, strict=True)]
        bounds = self.intervals.faithfulness if self.intervals is not None else {}
        out = {
            "method": self.method,
            "metric": self.metric,
            "level": g.level,
            "num_examples": self.num_examples,
            "seconds": self.seconds,
            "nodes": [n.name for n in g.nodes],
            "edges": edges,
            "node_scores": node_scores,
            "faithfulness": [
                {"size": k, "faithfulness": f} | ({"ci": bounds[k]} if k in bounds else {})
                for k, f in zip(self.sizes, self.curve, strict=True)
            ],
            "circuit": self.circuit,
            "pruned": [g.unit_names()[u] for u in self.pruned],
            "verified": 0 if self.check is None else len(self.check.units),
            "warnings": [d.text(g.unit_names()[d.unit], self.method) for d in self.disagreements],
        }
        if g.level == "edge":
            out["node_totals"] = [
                {"node": g.nodes[n].name, "in": into, "out": out_of} for n, into, out_of in self.node_totals()
            ]
        if self.check is not None:
            out["verify_seconds"] = self.check.seconds
        if self.alone is not None:
            out["method_alone"] = self.alone.to_dict(g)
        if self.intervals is not None:
            out["ci"] = {"level": self.intervals.level, "resamples": self.intervals.resamples,
                         "seconds": self.intervals.seconds}  # fmt: skip
        if self.answer_key_auc is not None:
            out["answer_key_auc"] = self.answer_key_auc
        return out


@dataclass
class Choice:
    """A ranking's circuits: faithfulness `curve` over the top-k `sizes`, the `smallest` k whose circuit
    reaches FAITHFUL (None: none), that `circuit` (units, or scored nodes at node level) and the top-k
    units `pruned` from it as dangling (`evidence.connected`); `shares`: each size's per-example shares of
    M(circuit), for the intervals."""

    sizes: list[int]
    curve: list[float]
    smallest: int | None
    circuit: list[int] | None
    pruned: list[int]
    shares: dict[int, Tensor]

    @property
    def faithfulness(self) -> float | None:
        return None if self.smallest is None else self.curve[self.sizes.index(self.smallest)]

    def to_dict(self, g: Graph) -> dict:
        names = g.unit_names()
        return {
            "faithfulness": [
                {"size": k, "faithfulness": f} for k, f in zip(self.sizes, self.curve, strict=True)
            ],
            "smallest": self.smallest,
            "circuit": self.circuit,
            "circuit_faithfulness": self.faithfulness,
            "pruned": [names[u] for u in self.pruned],
        }


def choose(setup: Setup, effects: Tensor) -> Choice:
    """The circuits of a ranking by |effects|: the faithfulness of the top-k circuits on a log grid of k,
    the smallest reaching FAITHFUL (`smallest_circuit`, its point added to the curve), that circuit with
    its dangling units pruned."""
    g = setup.graph
    order = ranking(effects)
    sizes = sizes_for(g.units)
    shares = dict(zip(sizes, _kept_shares(setup, order, sizes), strict=True))
    values = _faithfulness_of(setup, torch.stack([shares[k] for k in sizes])).tolist()
    smallest = smallest_circuit(setup, effects, dict(zip(sizes, values, strict=True)), shares)
    if smallest is not None and smallest not in sizes:  # the curve shows the circuit's own point too
        at = sum(k < smallest for k in sizes)
        sizes.insert(at, smallest)
        values.insert(at, float(_faithfulness_of(setup, shares[smallest][None])[0]))
    circuit, pruned = None, []
    if smallest is not None:
        kept = top(setup, order, smallest)
        circuit = kept.nonzero()[:, 0].tolist()
        pruned = sorted(set(order[:smallest].tolist()) - set(circuit))
        circuit = circuit if g.level == "edge" else [g.scored[k] for k in circuit]
    return Choice(sizes, values, smallest, circuit, pruned, shares)


def run_method(setup: Setup, method: str, options: Options) -> Scores:
    """The `Scores` of the registered `method`, checked to be one per unit."""
    require_method(method)
    result = METHODS[method].function(setup, options)
    require(
        tuple(result.scores.shape) == (setup.graph.units,),
        f"method={method} gave scores of shape {tuple(result.scores.shape)}; a method scores each of the "
        f"{setup.graph.units} units once",
    )
    return result


def score(
    setup: Setup, method: str, steps: int = 5, threshold: float = 0.01, max_seconds: float | None = 600.0
) -> tuple[Tensor, Tensor | None]:
    """The scores of the registered `method` (and, for one that prunes, as acdc, the units it kept)."""
    result = run_method(setup, method, Options(steps, threshold, max_seconds))
    return result.scores, result.kept


def discover(
    model: TokenModel,
    inputs: Tensor | tuple[Tensor, ...],
    labels: Tensor,
    corrupted: Batch | None = None,
    method: str | None = None,
    metric: str | None = None,
    ablation: str = "corrupted",
    steps: int = 5,
    threshold: float = 0.01,
    level: str | None = None,
    truth: Sequence[str] | None = None,
    max_seconds: float | None = 600.0,
    verify: int = VERIFY,
    ci: float = 0.95,
    graph: Graph | None = None,
) -> Circuit:
    """Score every edge (node) with the registered `method` (default: eap, or eap_ig for kl), check an
    approximate method's top `verify` units by exact patching (0: none), evaluate the top-k circuits by
    effect, find the smallest reaching 0.9 faithfulness; with `ci` (a level; 0: none), every number's
    bootstrap interval over the examples and each unit's stability; with `truth` (an answer key's
    circuit: edge names `src -> dst`, or node names), also the ROC AUC of the method's scores against it.
    The metric defaults to logit_diff with a corruption and logprob without (patcher.prepare). `graph`: a
    graph of units of your own (an SAE's features: `graph.feature_graph`)."""
    if method is not None:
        require_method(method)
    require_verify(verify)
    ci = check_level(ci)
    defaults = tuple(name for name, given in (("method", method), ("metric", metric)) if given is None)
    setup = prepare(model, inputs, labels, corrupted, metric, ablation, level, graph)
    if method is None:  # eap where its gradient says something; KL's is 0 at the clean input
        method = "eap_ig" if setup.metric.name == "kl" else "eap"
    units = setup.graph.units
    count = 0 if METHODS[method].exact else min(verify, units)  # an exact method has nothing to check
    started = time.perf_counter()
    result = run_method(setup, method, Options(steps, threshold, max_seconds))
    seconds = time.perf_counter() - started
    estimate = result.scores.float().cpu()
    if count:  # (a method of one pass per unit, as acdc, refused a larger cost already)
        what = "edges" if setup.graph.level == "edge" else "nodes"
        require_time(
            setup, f"verify={verify}", "about", max_seconds, count,
            f"lower verify= (the top {what} checked by exact patching; verify=0: none) or use fewer "
            "examples (num_examples=)",
        )  # fmt: skip
    check = evidence.verify(setup, estimate, count) if count else None
    found = Circuit(
        method, setup.metric.name, setup.graph.level, setup.inputs[0].size(0), seconds, setup.graph, estimate,
        [], [], None, setup.clean_metric, setup.ablated_metric, ablation, kept=result.kept,
        check=check, defaults=defaults,
    )  # fmt: skip
    if setup.metric.chosen is not None:
        found.corrupted_answers = setup.metric.bad[setup.metric.chosen].cpu()
    effects = found.effects
    if check is not None:
        found.disagreements = evidence.disagreements(setup, estimate, effects, check.units)
    chosen = choose(setup, effects)
    found.sizes, found.curve, found.smallest = chosen.sizes, chosen.curve, chosen.smallest
    found.circuit, found.pruned = chosen.circuit, chosen.pruned
    shares = chosen.shares
    if check is not None:  # what the method's own ranking alone would have chosen, beside it
        found.alone = choose(setup, estimate)
    per_example = None if result.per_example is None else result.per_example.float().cpu()
    found.intervals = evidence.resample(setup, ci, per_example, check, shares)
    if truth is not None:
        found.answer_key_auc = roc_auc(estimate, truth_mask(setup.graph, truth))
    return found


def truth_mask(g: Graph, truth: Sequence[str]) -> Tensor:
    """Bool [units]: which units an answer key's circuit names (`src -> dst` edges, or node names)."""
    names = g.unit_names()
    unknown = sorted(set(truth) - set(names))
    if unknown:
        require(False, f"the answer key names {unknown[0]!r}, which is not in this model's graph")
    wanted = set(truth)
    return torch.tensor([name in wanted for name in names])


# the built-in methods' scores by their names of before the registry (tests, scripts/bench.py, the docs)
def score_eap(setup: Setup) -> Tensor:
    """eap's scores, also with metric=kl (all 0 there: `discover` refuses it)."""
    return attribution(setup, gradients(setup, None)).scores


def score_eap_ig(setup: Setup, steps: int = 5) -> Tensor:
    """eap_ig's scores (`eap_ig.score`)."""
    return eap_ig.score(setup, Options(steps=steps)).scores


def score_patching(setup: Setup, max_seconds: float | None = 600.0) -> Tensor:
    """Exact patching's scores (`patching.score`)."""
    return patching.score(setup, Options(max_seconds=max_seconds)).scores


def score_acdc(
    setup: Setup, threshold: float = 0.01, max_seconds: float | None = 600.0
) -> tuple[Tensor, Tensor]:
    """acdc's scores and the units it kept (`acdc.score`)."""
    result = acdc.score(setup, Options(threshold=threshold, max_seconds=max_seconds))
    return result.scores, result.kept
