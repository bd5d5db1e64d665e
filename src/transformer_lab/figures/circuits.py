"""The figure of a circuit (`transformer_lab.analysis.circuits`): the model's graph in layers, inputs at the
bottom and the logits at the top (an encoder-decoder: the encoder's column left of the decoder's), heads
labelled as in the head table (L0H1, E0H1, D0H1, X0H1), each edge drawn with a width proportional to its
|effect| (the exact effect where verify= checked it, the method's score elsewhere: what the circuit is
built from) and coloured by what it feeds (a head's query, key or value, or an MLP / the logits); at node
level the nodes are shaded by |effect|. The circuit (the smallest reaching 0.9 faithfulness) is drawn
opaque, the other strongest edges faintly. Beside it, the faithfulness curve over the circuit's size."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from transformer_lab.analysis.circuits.evaluation import Circuit

PART_COLOURS = {"q": "tab:blue", "k": "tab:green", "v": "tab:orange", "": "0.35"}
MAX_FAINT = 30  # strongest edges outside the circuit drawn faintly
MAX_DRAWN = 40  # strongest edges of the circuit drawn (a large circuit would be a thicket)


def _positions(circuit: Circuit) -> dict[int, tuple[float, float]]:
    """x, y of every node: one column per stack, each row of nodes spread across its column."""
    nodes = circuit.graph.nodes
    stacks = list(dict.fromkeys(n.stack for n in nodes))
    rows: dict[tuple[str, int], list[int]] = {}
    for i, node in enumerate(nodes):
        rows.setdefault((node.stack, node.row), []).append(i)
    where = {}
    for (stack, row), members in rows.items():
        column = stacks.index(stack)
        for k, i in enumerate(members):
            where[i] = (column + (k + 1) / (len(members) + 1), float(row))
    return where


def circuit_graph(circuit: Circuit, title: str) -> Figure:
    """The circuit as a layered graph, and its faithfulness curve (see the module docstring)."""
    g = circuit.graph
    where = _positions(circuit)
    columns = len({n.stack for n in g.nodes})
    height = max(y for _, y in where.values()) + 1
    widest = max(
        sum(1 for n in g.nodes if (n.stack, n.row) == key) for key in {(n.stack, n.row) for n in g.nodes}
    )
    width = max(5.0, 1.1 * widest * columns)
    fig = Figure(figsize=(width + 4.0, 0.7 * height + 1.8), layout="constrained")
    graph_ax, curve_ax = fig.subplots(1, 2, width_ratios=[width, 3.6])
    scores = np.abs(circuit.effects.numpy())
    top = float(scores.max()) if scores.size and scores.max() > 0 else 1.0
    chosen = set(circuit.circuit_units())
    drawn = chosen
    if g.level == "edge":
        order = [int(e) for e in np.argsort(-scores, kind="stable")]
        drawn = set([e for e in order if e in chosen][:MAX_DRAWN])
        faint = [e for e in order if e not in chosen][:MAX_FAINT]
        for e in [*faint, *sorted(drawn)]:
            u, r = g.edges[e]
            reader = g.readers[r]
            part = reader.name.rsplit(".", 1)[-1] if reader.head is not None else ""
            (x0, y0), (x1, y1) = where[u], where[reader.node]
            offset = {"q": -0.06, "k": 0.0, "v": 0.06}.get(part, 0.0) / columns
            graph_ax.plot(
                [x0, x1 + offset],
                [y0, y1 - 0.12],
                color=PART_COLOURS[part],
                linewidth=0.3 + 5.0 * scores[e] / top,
                alpha=0.9 if e in drawn else 0.18,
                solid_capstyle="round",
                zorder=2 if e in drawn else 1,
            )
        node_scores: dict[int, float] = {}
    else:
        node_scores = {n: float(scores[k]) / top for k, n in enumerate(g.scored)}
    cmap = __import__("matplotlib").colormaps["Reds"]
    for i, node in enumerate(g.nodes):
        x, y = where[i]
        shade = node_scores.get(i, 0.0)
        in_circuit = g.level == "node" and i in chosen
        graph_ax.text(
            x,
            y,
            node.label,
            ha="center",
            va="center",
            fontsize=7,
            color="white" if shade > 0.55 else "black",
            zorder=3,
            bbox={
                "boxstyle": "round,pad=0.25",
                "facecolor": cmap(0.15 + 0.75 * shade) if g.level == "node" else "white",
                "edgecolor": "black" if in_circuit or node.hook is None else "0.6",
                "linewidth": 1.6 if in_circuit else 0.6,
            },
        )
    graph_ax.set_xlim(0, columns)
    graph_ax.set_ylim(-0.6, height - 0.4)
    graph_ax.axis("off")
    if g.level == "edge":
        for part, colour in PART_COLOURS.items():
            graph_ax.plot([], [], color=colour, label=f"-> {part or 'MLP / output'}")
        graph_ax.legend(loc="upper left", fontsize=7, frameon=False)
    what = "edges" if g.level == "edge" else "nodes"
    size = "none reaches 0.9" if circuit.circuit is None else f"{len(chosen)} {what}"
    if len(drawn) < len(chosen):
        size += f" (the {len(drawn)} strongest drawn)"
    checked = f", top {len(circuit.check.units)} verified" if circuit.check is not None else ""
    graph_ax.set_title(f"{circuit.method}{checked}, {g.level} level: circuit {size}", fontsize=9)
    curve_ax.plot(circuit.sizes, circuit.curve, marker="o", markersize=3)
    curve_ax.axhline(0.9, color="0.6", linestyle=":", linewidth=1)
    curve_ax.set_xscale("log")
    curve_ax.set_xlabel(f"{'edges' if g.level == 'edge' else 'nodes'} kept (top by |effect|)", fontsize=8)
    curve_ax.set_ylabel("faithfulness", fontsize=8)
    curve_ax.set_title(f"faithfulness (area {circuit.area:.3f})", fontsize=9)
    curve_ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    return fig
