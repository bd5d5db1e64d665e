"""Figures of the interventions: activation patching, the logit lens, deletion curves, head ablation."""

import math
from collections.abc import Callable

import torch
from matplotlib.figure import Figure
from torch import Tensor

from transformer_lab.figures.attention import cpu_float, token_labels
from transformer_lab.nn import parse_hook_name


def _annotate(ax, values: Tensor, dark: Callable[[float], bool], fmt: str = "{:.2f}") -> None:
    """Write each cell's value in it: black text, white where `dark(value)` says the cell is dark; nothing
    in a cell without a value (NaN)."""
    for i, row in enumerate(values.tolist()):
        for j, value in enumerate(row):
            if math.isnan(value):
                continue
            colour = "white" if dark(value) else "black"
            text = fmt.format(value).replace("-0.00", "0.00")  # no "-0.00" for a tiny negative
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)


def activation_patching(
    resid: dict[str, list[float]],
    layers: list[str],
    heads: list[list[float]],
    title: str,
    mlp: dict[str, list[float]] | None = None,
) -> Figure:
    """Activation patching: the share of the clean logit difference restored by patching the residual
    stream at one layer and position (one panel per stack), one MLP's output at one position, and one
    head's output (z). 1 = patching it alone restores the clean output; 0 = it carries nothing of the
    difference."""
    stacks: dict[str, dict[str, list[float]]] = {}
    for name, row in resid.items():
        where = parse_hook_name(name)
        stacks.setdefault(where.stack or "residual stream", {})[
            f"{where.hook.removeprefix('hook_')} {where.block}"
        ] = row
    for name, row in (mlp or {}).items():
        where = parse_hook_name(name)
        stacks.setdefault(f"{where.stack + ' ' if where.stack else ''}MLP outputs", {})[
            f"mlp {where.block}"
        ] = row
    widths = [max(len(r) for r in rows.values()) for rows in stacks.values()] + [len(heads[0])]
    fig = Figure(
        figsize=(0.35 * sum(widths) + 2.5 * len(widths) + 1, 0.45 * len(layers) + 2.2), layout="constrained"
    )
    axes = fig.subplots(1, len(widths), width_ratios=[w + 3 for w in widths], squeeze=False)[0]
    panels = [(f"{stack}: patch one position", rows) for stack, rows in stacks.items()]
    panels.append(("patch one head's z (every position)", dict(zip(layers, heads, strict=True))))
    for ax, (panel_title, rows) in zip(axes, panels, strict=True):
        values = torch.tensor(list(rows.values()))
        image = ax.imshow(values, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
        ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
        is_heads = panel_title.startswith("patch one head")
        ax.set_xticks(
            range(values.size(1)),
            [f"head {h}" if is_heads else str(h) for h in range(values.size(1))],
            fontsize=7,
        )
        ax.set_xlabel("head" if is_heads else "position", fontsize=8)
        ax.set_title(panel_title, fontsize=9)
        if is_heads or values.size(1) <= 16:
            _annotate(ax, values, dark=lambda v: abs(v) > 0.6)  # RdBu: dark at both ends
    fig.colorbar(image, ax=axes, shrink=0.8, label="share of the clean logit difference restored")
    fig.suptitle(title, fontsize=10)
    return fig


def logit_lens(probability: Tensor, predicted: list[list[str]], tokens: list[str], title: str) -> Figure:
    """The logit lens on one sequence: rows = the stream after the embedding and after each block, columns
    = positions; each cell shows the token read there (its top prediction), coloured by the probability
    it gives the right output (a language model's: the next token)."""
    probability = cpu_float(probability)
    rows, columns = probability.shape
    fig = Figure(figsize=(0.42 * columns + 2.2, 0.42 * rows + 1.6), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(probability, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i, row in enumerate(predicted):
        for j, token in enumerate(token_labels(row)):
            colour = "black" if probability[i, j] > 0.6 else "white"
            ax.text(j, i, token, ha="center", va="center", fontsize=8, color=colour)
    ax.set_xticks(
        range(columns), [f"{j} {t}" for j, t in enumerate(token_labels(tokens))], fontsize=7, rotation=90
    )
    ax.set_yticks(range(rows), ["embedding"] + [f"after block {i}" for i in range(rows - 1)], fontsize=8)
    ax.set_xlabel("position and input token (in each cell: the prediction read at that layer)", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.8, label="probability of the right output")
    return fig


def deletion_curves(
    fractions: list[float], curves: dict[str, list[float]], auc: dict[str, float], title: str
) -> Figure:
    """Faithfulness: the correct output's probability as input tokens are deleted, most relevant first,
    for each explanation (the legend gives each curve's area: lower = more faithful)."""
    fig = Figure(figsize=(5.2, 3.6), layout="constrained")
    ax = fig.subplots()
    for method in sorted(curves, key=auc.get):
        style = "--" if method == "random" else "-"
        ax.plot(
            fractions,
            curves[method],
            style,
            marker="o",
            markersize=3,
            label=f"{method} (AUC {auc[method]:.3f})",
        )
    ax.set_xlabel("fraction of the input deleted (most relevant first)", fontsize=9)
    ax.set_ylabel("probability of the correct output", fontsize=9)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return fig


def head_ablation(result) -> Figure:
    """Head ablation (an `interventions.HeadAblation`): the task's accuracy with each head removed, one
    row per attention layer, the value in every cell; the title gives the accuracy with every head."""
    values = torch.tensor(result.ablated)
    fig = Figure(figsize=(1.0 * values.size(1) + 2.8, 0.5 * values.size(0) + 1.4), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(values.size(1)), [f"head {h}" for h in range(values.size(1))], fontsize=8)
    ax.set_yticks(range(values.size(0)), result.layers, fontsize=8)
    _annotate(ax, values, dark=lambda v: v < 0.6)  # viridis: dark at the low end
    ax.set_title(
        f"{result.metric} with one head {result.method}-ablated (none: {result.baseline:.3f})", fontsize=10
    )
    fig.colorbar(image, ax=ax, shrink=0.8, label=result.metric)
    return fig


def head_measures(tables: dict[str, list[list[float | None]]], layers: list[str], title: str) -> Figure:
    """Every per-head measure (`analysis.measures`) as a layers x heads heatmap, one panel each, the value
    in every cell (blank where a measure does not apply to a layer), each on its own colour scale."""
    fig = Figure(figsize=(3.2 * len(tables) + 1.0, 0.5 * len(layers) + 1.8), layout="constrained")
    axes = fig.subplots(1, len(tables), squeeze=False)[0]
    for ax, (name, table) in zip(axes, tables.items(), strict=True):
        values = torch.tensor([[float("nan") if v is None else v for v in row] for row in table])
        known = values[~values.isnan()]
        low, high = (float(known.min()), float(known.max())) if known.numel() else (0.0, 1.0)
        high = high if high > low else low + 1
        image = ax.imshow(values, cmap="viridis", vmin=low, vmax=high, aspect="auto")
        ax.set_xticks(range(values.size(1)), [f"H{h}" for h in range(values.size(1))], fontsize=7)
        ax.set_yticks(range(values.size(0)), layers, fontsize=7)
        middle = (low + high) / 2
        _annotate(ax, values, dark=lambda v, middle=middle: v < middle)
        ax.set_title(name, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(title, fontsize=10)
    return fig
