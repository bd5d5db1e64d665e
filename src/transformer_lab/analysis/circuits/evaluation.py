"""A circuit is evaluated, not just drawn: `discover` scores every unit with a registered method, keeps
the top-k units (by |score|), patches every other one, and measures

    faithfulness(k) = (M(circuit) - M(all patched)) / (M(clean) - M(all patched))

over k on a log scale: the curve, its area (over log k from one unit to all), and the smallest circuit
reaching 0.9. With an answer key (a circuit known because the model was built by hand), also the ROC AUC
of the scores against it: 1 when every true unit ranks above every other, 0.5 by chance.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from transformer_lab.analysis.circuits import acdc, eap_ig, patching
from transformer_lab.analysis.circuits.attribution import attribution, gradients
from transformer_lab.analysis.circuits.graph import Graph
from transformer_lab.analysis.circuits.methods import METHODS, require_method
from transformer_lab.analysis.circuits.options import Options
from transformer_lab.analysis.circuits.patcher import Batch, Setup, prepare
from transformer_lab.errors import require
from transformer_lab.nn import TokenModel

FAITHFUL = 0.9  # the smallest circuit reaching this faithfulness is "the" circuit


def sizes_for(units: int, points: int = 12) -> list[int]:
    """Circuit sizes on a log scale from 1 to `units`."""
    grid = np.unique(np.round(np.logspace(0, math.log10(max(units, 1)), points)).astype(int))
    return [int(k) for k in grid if 1 <= k <= units] or [units]


def ranking(scores: Tensor) -> Tensor:
    """Units by |score|, largest first (ties: forward order)."""
    return torch.argsort(-scores.abs(), stable=True)


def faithfulness(setup: Setup, scores: Tensor, sizes: Sequence[int]) -> list[float]:
    """faithfulness(k) for each k: the top-k units kept, every other one patched."""
    order = ranking(scores)
    mask = torch.ones(len(sizes), setup.graph.units)
    for row, k in enumerate(sizes):
        mask[row, order[:k]] = 0.0
    values = setup.evaluate(mask)
    return ((values - setup.ablated_metric) / (setup.clean_metric - setup.ablated_metric)).tolist()


def circuit_faithfulness(setup: Setup, kept: Sequence[int]) -> float:
    """The faithfulness of one circuit: these units kept, every other one patched."""
    mask = torch.ones(1, setup.graph.units)
    mask[0, list(kept)] = 0.0
    value = float(setup.evaluate(mask, chunk=1)[0])
    return (value - setup.ablated_metric) / (setup.clean_metric - setup.ablated_metric)


def smallest_circuit(setup: Setup, scores: Tensor, curve: dict[int, float]) -> int | None:
    """The fewest top units reaching FAITHFUL, searched between the grid points of `curve` (k ->
    faithfulness) around the first that reaches it; None if none does."""
    reached = [k for k, f in sorted(curve.items()) if f >= FAITHFUL]
    if not reached:
        return None
    high = reached[0]
    low = max([k for k in curve if k < high], default=0)  # the grid point below fails
    order = ranking(scores)
    while high - low > 1:
        middle = (low + high) // 2
        if circuit_faithfulness(setup, order[:middle].tolist()) >= FAITHFUL:
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
    """What `discover` found (circuit.json is `to_dict()`)."""

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

    @property
    def area(self) -> float:
        return area(self.sizes, self.curve, self.graph.units)

    def circuit_units(self) -> list[int]:
        """The units of the circuit: indices into edges, or into `graph.nodes` at node level."""
        if self.circuit is None:
            return []
        return self.circuit

    def to_dict(self) -> dict:
        g = self.graph
        edges, node_scores = [], []
        if g.level == "edge":
            edges = [
                {"src": src, "dst": dst, "score": float(s)}
                for (src, dst), s in zip(g.edge_names(), self.scores.tolist(), strict=True)
            ]
        else:
            node_scores = [
                {"node": g.nodes[n].name, "score": float(s)}
                for n, s in zip(g.scored, self.scores.tolist(), strict=True)
            ]
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
                {"size": k, "faithfulness": f} for k, f in zip(self.sizes, self.curve, strict=True)
            ],
            "circuit": self.circuit,
        }
        if self.answer_key_auc is not None:
            out["answer_key_auc"] = self.answer_key_auc
        return out


def score(
    setup: Setup, method: str, steps: int = 5, threshold: float = 0.01, max_seconds: float | None = 600.0
) -> tuple[Tensor, Tensor | None]:
    """The scores of the registered `method` (and, for one that prunes, as acdc, the units it kept)."""
    require_method(method)
    result = METHODS[method].function(setup, Options(steps, threshold, max_seconds))
    require(
        tuple(result.scores.shape) == (setup.graph.units,),
        f"method={method} gave scores of shape {tuple(result.scores.shape)}; a method scores each of the "
        f"{setup.graph.units} units once",
    )
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
) -> Circuit:
    """Score every edge (node) with the registered `method` (default: eap for logit_diff, eap_ig for kl),
    evaluate the top-k circuits, find the smallest reaching 0.9 faithfulness; with `truth` (an answer
    key's circuit: edge names `src -> dst`, or node names), also the ROC AUC of the scores against it."""
    if method is not None:
        require_method(method)
    setup = prepare(model, inputs, labels, corrupted, metric, ablation, level)
    if method is None:  # eap where its gradient says something; KL's is 0 at the clean input
        method = "eap" if setup.metric.name == "logit_diff" else "eap_ig"
    started = time.perf_counter()
    scores, kept = score(setup, method, steps, threshold, max_seconds)
    seconds = time.perf_counter() - started
    units = setup.graph.units
    sizes = sizes_for(units)
    values = faithfulness(setup, scores, sizes)
    smallest = smallest_circuit(setup, scores, dict(zip(sizes, values, strict=True)))
    circuit = None
    if smallest is not None and smallest not in sizes:  # the curve shows the circuit's own point too
        at = sum(k < smallest for k in sizes)
        sizes.insert(at, smallest)
        values.insert(at, circuit_faithfulness(setup, ranking(scores)[:smallest].tolist()))
    if smallest is not None:
        chosen = sorted(ranking(scores)[:smallest].tolist())
        circuit = chosen if setup.graph.level == "edge" else [setup.graph.scored[k] for k in chosen]
    auc = None
    if truth is not None:
        auc = roc_auc(scores, truth_mask(setup.graph, truth))
    return Circuit(
        method,
        setup.metric.name,
        setup.graph.level,
        setup.inputs[0].size(0),
        seconds,
        setup.graph,
        scores,
        sizes,
        values,
        circuit,
        setup.clean_metric,
        setup.ablated_metric,
        ablation,
        auc,
        kept,
    )


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
    """eap's scores, also with metric=kl (all 0 there: `discover` refuses it, the benchmark times it)."""
    return attribution(setup, gradients(setup, None))


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
