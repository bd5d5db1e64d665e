"""Attention and relevance maps as matplotlib figures, ticks reading `position token`.

Every function returns a `matplotlib.figure.Figure` built without pyplot (no global state, no display
needed; PNGs are rendered by the Agg backend): save it with `fig.savefig(path)`, log it with TensorBoard's
`add_figure`, or show it in a notebook.
"""

import math
import textwrap

import torch
from matplotlib.figure import Figure
from torch import Tensor

from transformer_lab.data.tokenizer import visible
from transformer_lab.nn import head_name

MAX_TICKS = 48  # more positions than this on an axis: label every k-th one

GRID_NOTES = {  # what a grid's rows and columns are, after its group's title (`nn.GROUP_TITLES`)
    "self": " (row = query)",
    "decoder": " (causal; row = target position)",
    "cross": " (row = target, column = source)",
}


def token_labels(tokens: list[str]) -> list[str]:
    """Tick labels for tokens: spaces, newlines and tabs made visible (`data.tokenizer.visible`)."""
    return [visible(t) for t in tokens]


def tick_step(count: int, max_ticks: int = MAX_TICKS) -> int:
    """Label every k-th position of an axis with `count` positions, so at most `max_ticks` labels show."""
    return max(1, math.ceil(count / max_ticks))


def position_labels(tokens: list[str], stacked: bool = False) -> list[str]:
    """Tick labels that locate a cell: position and token, `"3 a"` (or `"a\n3"` stacked, for the x axis)."""
    return [f"{t}\n{i}" if stacked else f"{i} {t}" for i, t in enumerate(token_labels(tokens))]


def _label_axes(
    ax, tokens: list[str], row_tokens: list[str] | None, panel: float, x: bool = True, y: bool = True
) -> None:
    """Ticks labelled with position and token (every k-th one when there are many), the font sized to the
    cells (`panel` inches hold all the positions). Short tokens stack under their position on the x axis;
    longer ones are written `position token`, turned upright."""
    rows = row_tokens or tokens
    shown = max(len(tokens), len(rows)) / tick_step(max(len(tokens), len(rows)))
    size = max(4.5, min(9.0, 0.8 * panel * 72 / shown))
    # stack `token` over `position` under a column if both fit its width (a digit is ~0.64 em wide)
    digits = len(str(len(tokens) - 1))
    width = max(len(t) for t in token_labels(tokens)) if tokens else 1
    stacked = panel * 72 / shown >= 0.7 * size * max(digits, width) + 3
    for axis, labels, show in ((ax.xaxis, tokens, x), (ax.yaxis, rows, y)):
        step = tick_step(len(labels))
        text = position_labels(labels, stacked=stacked and axis is ax.xaxis)
        axis.set_ticks(range(0, len(labels), step), text[::step] if show else [], fontsize=size)
        if axis is ax.xaxis and not stacked and show:
            ax.tick_params(axis="x", labelrotation=90)
    ax.tick_params(length=0)


def cpu_float(t: Tensor) -> Tensor:
    return t.detach().float().cpu()


def layer_scales(maps: list[Tensor], quantile: float = 0.99) -> list[float]:
    """Each layer's colour scale, 0 to the `quantile` of its non-zero weights over the heads shown: a
    diffuse layer (weights around 1/T) keeps its structure instead of fading into a shared 0-to-1 scale,
    and the few weights a causal map's first rows must give (row 0 puts all of it on key 0) saturate
    instead of setting the scale."""
    scales = []
    for m in maps:
        values = m[m > 0].flatten().float()
        cap = float(torch.quantile(values, quantile)) if values.numel() else 0.0
        scales.append(max(cap, 1e-6))
    return scales


def colour_cap(matrix: Tensor, quantile: float = 0.95, exclude_diagonal: bool = True) -> float:
    """A colour-scale cap for a relevance or rollout matrix: the `quantile` of its off-diagonal entries
    (the non-zero ones: a causal map's upper triangle is empty). The diagonal (each token relying on
    itself through the residual path) and a few outlying cells then saturate instead of setting the
    scale, and the pattern of the rest (the reverse task's anti-diagonal) shows."""
    matrix = cpu_float(matrix)
    values = matrix
    if exclude_diagonal and matrix.size(-1) == matrix.size(-2):
        eye = torch.eye(matrix.size(-1), dtype=torch.bool)
        values = matrix[~eye.expand_as(matrix)]
    values = values[values > 0].flatten()
    if values.numel() == 0:
        return max(float(matrix.max()), 1e-6)
    return max(float(torch.quantile(values, quantile)), 1e-6)


def attention_grid(
    maps: list[Tensor],
    tokens: list[str],
    index: int = 0,
    title: str | None = None,
    row_tokens: list[str] | None = None,
    labels: list[str] | None = None,
) -> Figure:
    """All attention maps of one example: rows = layers, columns = heads; x = keys, y = queries.

    maps: list over layers of [B, H, Tq, Tk] (as from `explain.attention_maps`) or [H, Tq, Tk]; `index`
    picks the example of the batch. `tokens` label the keys, `row_tokens` the queries (default: the
    same; cross-attention's queries are other tokens); each tick reads `position token`. `labels` name
    the layers (`AttentionLayer.label`: L0, or E0 / D0 / X0; default L0, L1, ...): panels read L0H3. Each
    layer has its own colour scale, 0 to the 99th percentile of its weights (`layer_scales`; the largest 1%
    saturate, as the arrow on its colour bar says), with its own colour bar.
    """
    maps = [cpu_float(m[index] if m.ndim == 4 else m) for m in maps]
    num_layers, num_heads = len(maps), maps[0].size(0)
    labels = labels or [f"L{i}" for i in range(num_layers)]
    positions = max(len(tokens), len(row_tokens or tokens))
    panel = max(1.9, 0.16 * min(positions, 2 * MAX_TICKS))
    fig = Figure(figsize=(panel * num_heads + 1.6, panel * num_layers + 0.6), layout="constrained")
    axes = fig.subplots(num_layers, num_heads, squeeze=False)
    for layer, (row, vmax) in enumerate(zip(axes, layer_scales(maps), strict=True)):
        for head, ax in enumerate(row):
            image = ax.imshow(maps[layer][head], vmin=0, vmax=vmax, cmap="viridis", interpolation="nearest")
            ax.set_title(head_name(labels[layer], head), fontsize=9)
            _label_axes(ax, tokens, row_tokens, panel, x=layer == num_layers - 1, y=head == 0)
        clipped = any(float(m.max()) > vmax for m in maps[layer])
        bar = fig.colorbar(
            image, ax=row, shrink=0.9, pad=0.01, aspect=15, extend="max" if clipped else "neither"
        )
        bar.set_label(f"{labels[layer]}: attention weight", fontsize=8)
        bar.ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("key: position and token", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("query: position and token", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def token_map(
    matrix: Tensor,
    tokens: list[str],
    title: str,
    row_tokens: list[str] | None = None,
    xlabel: str = "input",
    ylabel: str = "output",
    colorbar_label: str = "weight",
    vmax: float | None = None,
) -> Figure:
    """One [T, T] map (a head mean, a rollout, a relevance matrix) with `position token` tick labels.

    Columns are labelled with `tokens` (the inputs), rows with `row_tokens` (default: the same tokens).
    `vmax` caps the colour scale (e.g. `colour_cap(matrix)`): larger values saturate, which the colour
    bar shows with an arrow and its label with the cap, so the diagonal (each token relying on itself)
    or one outlying cell does not wash out everything else.
    """
    matrix = cpu_float(matrix)
    panel = max(3.6, 0.24 * min(max(len(tokens), len(row_tokens or tokens)), 2 * MAX_TICKS))
    fig = Figure(figsize=(panel + 1.7, panel + 0.5), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(matrix, vmin=0, vmax=vmax, cmap="viridis", interpolation="nearest")
    _label_axes(ax, tokens, row_tokens, panel)
    ax.set_xlabel(f"{xlabel}: position and token", fontsize=9)
    ax.set_ylabel(f"{ylabel}: position and token", fontsize=9)
    ax.set_title(wrapped(title, panel + 1.5, 10), fontsize=10)
    clipped = vmax is not None and matrix.max() > vmax
    if clipped:
        share = float((matrix > vmax).float().mean())
        capped = f"colour capped at {vmax:.2g}: the top {share:.0%} of cells saturate"
        colorbar_label = f"{colorbar_label} ({capped})"
    label = wrapped(colorbar_label, 0.8 * panel, 9)  # along the bar: 80% of the panel's height
    fig.colorbar(image, ax=ax, shrink=0.8, label=label, extend="max" if clipped else "neither")
    return fig


def wrapped(text: str, inches: float, fontsize: float) -> str:
    """`text` broken into lines that fit `inches` at `fontsize` points (a character of DejaVu Sans is
    about 0.55 of its size wide), so a small figure's title or colour-bar label is not cut off."""
    return textwrap.fill(text, width=max(12, int(inches * 72 / (0.55 * fontsize))))
