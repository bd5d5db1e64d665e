"""Figures for the tutorial: attention maps, relevance, positional encodings and the learning-rate schedule.

Every function returns a `matplotlib.figure.Figure` built without pyplot (no global state, no display
needed; PNGs are rendered by the Agg backend): save it with `fig.savefig(path)`, log it with TensorBoard's
`add_figure`, or show it in a notebook. `attention_grid_image` draws the attention grid straight into an
RGB array (a colour lookup table and Pillow's text, no matplotlib): milliseconds instead of seconds, for
logging during training with TensorBoard's `add_image`.
"""

import math
from collections.abc import Callable
from functools import cache

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from transformer_lab.nn import PositionalEncoding
from transformer_lab.schedulers import CosineWarmupScheduler

SHOWN_AS = {"\n": "⏎", " ": "␣", "\t": "⇥"}
MAX_TICKS = 48  # more positions than this on an axis: label every k-th one


def token_labels(tokens: list[str]) -> list[str]:
    """Tick labels for tokens: newline, space and tab made visible."""
    return [SHOWN_AS.get(t, t) for t in tokens]


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


def _to_cpu(t: Tensor) -> Tensor:
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
    matrix = _to_cpu(matrix)
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
) -> Figure:
    """All attention maps of one example: rows = layers, columns = heads; x = keys, y = queries.

    maps: list over layers of [B, H, Tq, Tk] (as from `explain.attention_maps`) or [H, Tq, Tk]; `index`
    picks the example of the batch. `tokens` label the keys, `row_tokens` the queries (default: the
    same; cross-attention's queries are other tokens); each tick reads `position token`. Each layer has
    its own colour scale, 0 to the 99th percentile of its weights (`layer_scales`; the largest 1%
    saturate, as the arrow on its colour bar says), with its own colour bar.
    """
    maps = [_to_cpu(m[index] if m.ndim == 4 else m) for m in maps]
    num_layers, num_heads = len(maps), maps[0].size(0)
    positions = max(len(tokens), len(row_tokens or tokens))
    panel = max(1.9, 0.16 * min(positions, 2 * MAX_TICKS))
    fig = Figure(figsize=(panel * num_heads + 1.6, panel * num_layers + 0.6), layout="constrained")
    axes = fig.subplots(num_layers, num_heads, squeeze=False)
    for layer, (row, vmax) in enumerate(zip(axes, layer_scales(maps), strict=True)):
        for head, ax in enumerate(row):
            image = ax.imshow(maps[layer][head], vmin=0, vmax=vmax, cmap="viridis", interpolation="nearest")
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=9)
            _label_axes(ax, tokens, row_tokens, panel, x=layer == num_layers - 1, y=head == 0)
        clipped = any(float(m.max()) > vmax for m in maps[layer])
        bar = fig.colorbar(
            image, ax=row, shrink=0.9, pad=0.01, aspect=15, extend="max" if clipped else "neither"
        )
        bar.set_label(f"layer {layer + 1}: attention weight", fontsize=8)
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
    matrix = _to_cpu(matrix)
    panel = max(3.6, 0.24 * min(max(len(tokens), len(row_tokens or tokens)), 2 * MAX_TICKS))
    fig = Figure(figsize=(panel + 1.7, panel + 0.5), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(matrix, vmin=0, vmax=vmax, cmap="viridis", interpolation="nearest")
    _label_axes(ax, tokens, row_tokens, panel)
    ax.set_xlabel(f"{xlabel}: position and token", fontsize=9)
    ax.set_ylabel(f"{ylabel}: position and token", fontsize=9)
    ax.set_title(title, fontsize=10)
    clipped = vmax is not None and matrix.max() > vmax
    if clipped:
        share = float((matrix > vmax).float().mean())
        colorbar_label = (
            f"{colorbar_label}\n(colour capped at {vmax:.2g}: the top {share:.0%} of cells saturate)"
        )
    fig.colorbar(image, ax=ax, shrink=0.8, label=colorbar_label, extend="max" if clipped else "neither")
    return fig


# ------------------------------------------------------------------ the attention grid as an RGB array
@cache
def _viridis() -> np.ndarray:
    """viridis as a [256, 3] uint8 lookup table (matplotlib's, read once)."""
    from matplotlib import colormaps

    return (colormaps["viridis"](np.linspace(0, 1, 256))[:, :3] * 255).round().astype(np.uint8)


@cache
def _font(size: int):
    """DejaVu Sans (shipped with matplotlib: it has ⏎ and ␣) at `size` pixels, for Pillow."""
    from pathlib import Path

    import matplotlib
    from PIL import ImageFont

    return ImageFont.truetype(
        str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"), size
    )


def _colours(values: np.ndarray, vmax: float) -> np.ndarray:
    """[..., ] floats -> [..., 3] uint8 viridis colours, 0 to `vmax` (above it: the top colour)."""
    index = np.clip(values / vmax * 255, 0, 255).round().astype(np.uint8)
    return _viridis()[index]


def attention_grid_image(
    maps: list[Tensor],
    tokens: list[str],
    index: int = 0,
    title: str | None = None,
    row_tokens: list[str] | None = None,
) -> np.ndarray:
    """`attention_grid` drawn straight into an RGB array [height, width, 3] (uint8), in milliseconds: the
    same panels (rows = layers, columns = heads; x = keys, y = queries), ticks reading `position token`,
    a colour scale per layer (0 to its largest weight) with its colour bar. For TensorBoard's
    `add_image(tag, image, step, dataformats="HWC")`."""
    from PIL import Image, ImageDraw

    maps = [_to_cpu(m[index] if m.ndim == 4 else m).numpy() for m in maps]
    num_layers, num_heads = len(maps), maps[0].shape[0]
    keys, queries = token_labels(tokens), token_labels(row_tokens or tokens)
    t_q, t_k = len(queries), len(keys)
    cell = int(min(24, max(4, 384 // max(t_q, t_k))))
    size = 10
    step = max(1, math.ceil((size + 1) / cell))  # label every k-th position if the cells are small
    font, small = _font(size), _font(size - 1)
    y_text = position_labels(queries)
    x_text = position_labels(keys)
    label_w = max(int(font.getlength(t)) for t in y_text) + 6
    x_label_h = max(int(font.getlength(t)) for t in x_text) + 6
    pad, title_h, head_h, bar_w = 10, 22 if title else 4, 18, 62
    panel_w, panel_h = t_k * cell, t_q * cell
    caption = "rows: query, columns: key (position token); colours: each layer 0 to its 99th percentile"
    grid_w = pad + label_w + num_heads * (panel_w + pad) + bar_w + pad
    width = max(grid_w, int(small.getlength(caption)) + 2 * pad, int(font.getlength(title or "")) + 2 * pad)
    height = title_h + num_layers * (head_h + panel_h + pad) + x_label_h + 14
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    if title:
        draw.text((width // 2, 4), title, fill="black", font=font, anchor="mt")
    scales = layer_scales([torch.from_numpy(m) for m in maps])
    for layer, (layer_maps, vmax) in enumerate(zip(maps, scales, strict=True)):
        top = title_h + layer * (head_h + panel_h + pad) + head_h
        for head in range(num_heads):
            left = pad + label_w + head * (panel_w + pad)
            draw.text(
                (left + panel_w // 2, top - 3),
                f"layer {layer + 1}, head {head + 1}",
                fill="black",
                font=small,
                anchor="md",
            )
            pixels = np.repeat(np.repeat(_colours(layer_maps[head], vmax), cell, 0), cell, 1)
            canvas.paste(Image.fromarray(pixels), (left, top))
        for i in range(0, t_q, step):  # query ticks left of the first panel
            draw.text(
                (pad + label_w - 4, top + i * cell + cell // 2),
                y_text[i],
                fill="black",
                font=font,
                anchor="rm",
            )
        bar_left = pad + label_w + num_heads * (panel_w + pad)  # this layer's colour bar
        ramp = np.linspace(vmax, 0, panel_h)[:, None].repeat(10, 1)
        canvas.paste(Image.fromarray(_colours(ramp, vmax)), (bar_left, top))
        clipped = float(layer_maps.max()) > vmax  # the largest weights saturate: the top label says so
        for text, y in (
            (f"{'≥' if clipped else ''}{vmax:.2f}", top + 5),
            (f"{vmax / 2:.2f}", top + panel_h // 2),
            ("0.00", top + panel_h - 5),
        ):
            draw.text((bar_left + 13, y), text, fill="black", font=small, anchor="lm")
    strip = Image.new("L", (x_label_h, panel_w), 0)  # the key ticks, written sideways, then turned upright
    strip_draw = ImageDraw.Draw(strip)
    for j in range(0, t_k, step):
        strip_draw.text((x_label_h - 4, j * cell + cell // 2), x_text[j], fill=255, font=font, anchor="rm")
    strip = strip.rotate(90, expand=True)
    bottom = title_h + num_layers * (head_h + panel_h + pad) - pad + 2
    for head in range(num_heads):  # under the last row of panels
        canvas.paste((0, 0, 0), (pad + label_w + head * (panel_w + pad), bottom), strip)
    draw.text((pad, height - 3), caption, fill=(90, 90, 90), font=small, anchor="ld")
    return np.asarray(canvas)


def positional_encoding_heatmap(model_dim: int = 32, positions: int = 64) -> Figure:
    """The sinusoidal encoding PE[pos, dim] (Vaswani et al., 2017): fast-rotating dimensions on the
    left, slow ones on the right, so every position gets a distinct pattern."""
    pe = PositionalEncoding(model_dim, max_len=positions).pe[0]
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(pe, cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xlabel("hidden dimension")
    ax.set_ylabel("position in sequence")
    ax.set_title(f"Sinusoidal positional encoding (d_model={model_dim})", fontsize=10)
    fig.colorbar(image, ax=ax, label="PE value")
    return fig


def positional_encoding_curves(model_dim: int = 32, positions: int = 64, dims: int = 4) -> Figure:
    """PE[:, d] against the position for the first `dims` dimensions: sin at even d, cos at odd d, the
    wavelength growing by 10000^(2/d_model) with every pair."""
    pe = PositionalEncoding(model_dim, max_len=positions).pe[0]
    fig = Figure(figsize=(6.4, 1.3 * dims + 0.6), layout="constrained")
    axes = fig.subplots(dims, 1, sharex=True, squeeze=False)[:, 0]
    for d, ax in enumerate(axes):
        ax.plot(range(positions), pe[:, d], marker="o", markersize=2.5, linewidth=1)
        ax.set_ylim(-1.15, 1.15)
        ax.set_ylabel(f"dim {d}\n({'sin' if d % 2 == 0 else 'cos'})", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("position in sequence")
    fig.suptitle("Positional encoding: first dimensions", fontsize=10)
    return fig


def learning_rates(lr: float, warmup: int, max_iters: int) -> list[float]:
    """The learning rate at each of `max_iters` steps, from the real CosineWarmupScheduler."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = CosineWarmupScheduler(optimizer, warmup=warmup, max_iters=max_iters)
    rates = []
    for _ in range(max_iters):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def lr_schedule(lr: float, warmup: int, max_iters: int, title: str = "Learning-rate schedule") -> Figure:
    """Linear warmup for `warmup` steps, then cosine decay to 0 at `max_iters` (CosineWarmupScheduler)."""
    rates = learning_rates(lr, warmup, max_iters)
    zoom = 0 < warmup < max_iters // 4  # a short warmup is invisible at full scale: add a close-up
    fig = Figure(figsize=(9.6 if zoom else 6.4, 3.4), layout="constrained")
    axes = fig.subplots(1, 2 if zoom else 1, squeeze=False, width_ratios=[2, 1] if zoom else None)[0]
    axes[0].set_title(title, fontsize=10)
    if zoom:
        end = min(max_iters, 3 * warmup)
        axes[1].plot(range(end), rates[:end], linewidth=1.5)
        axes[1].set_title(f"first {end} steps", fontsize=10)
    axes[0].plot(range(max_iters), rates, linewidth=1.5)
    for ax in axes:
        if warmup > 0:
            ax.axvline(warmup, color="grey", linestyle="--", linewidth=1, label=f"end of warmup ({warmup})")
            ax.legend(fontsize=8)
        ax.set_xlabel("optimisation step")
        ax.set_ylabel("learning rate")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax.grid(alpha=0.3)
    return fig


def _annotate(ax, values: Tensor, dark: Callable[[float], bool], fmt: str = "{:.2f}") -> None:
    """Write each cell's value in it: black text, white where `dark(value)` says the cell is dark."""
    for i, row in enumerate(values.tolist()):
        for j, value in enumerate(row):
            colour = "white" if dark(value) else "black"
            text = fmt.format(value).replace("-0.00", "0.00")  # no "-0.00" for a tiny negative
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)


def activation_patching(
    resid: dict[str, list[float]], layers: list[str], heads: list[list[float]], title: str
) -> Figure:
    """Activation patching: the share of the clean logit difference restored by patching the residual
    stream at one layer and position (one panel per stack), and by patching one head's output (z).
    1 = patching it alone restores the clean output; 0 = it carries nothing of the difference."""
    stacks: dict[str, dict[str, list[float]]] = {}
    for name, row in resid.items():
        stack, _, rest = name.partition("blocks.")
        layer, _, hook = rest.partition(".")
        stacks.setdefault(stack.rstrip(".") or "residual stream", {})[
            f"{hook.removeprefix('hook_')} {layer}"
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
    probability = _to_cpu(probability)
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


def head_ablation_image(result) -> np.ndarray:
    """`head_ablation` drawn straight into an RGB array [height, width, 3] (uint8), for TensorBoard's
    `add_image` at the end of training: one row per attention layer, one column per head, the metric
    with that head removed written in each cell (0 to 1 in viridis), the baseline in the title."""
    from PIL import Image, ImageDraw

    values = np.asarray(result.ablated, dtype=float)
    rows, columns = values.shape
    font, small = _font(11), _font(10)
    cell_w, cell_h, pad = 56, 26, 10
    label_w = max(int(font.getlength(str(name))) for name in result.layers) + 8
    title = f"{result.metric} with one head {result.method}-ablated (none: {result.baseline:.3f})"
    grid_w = pad + label_w + columns * cell_w + 70
    width = max(grid_w, int(font.getlength(title)) + 2 * pad)
    height = 26 + 16 + rows * cell_h + pad
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    draw.text((width // 2, 4), title, fill="black", font=font, anchor="mt")
    top, left = 42, pad + label_w
    pixels = np.repeat(np.repeat(_colours(values, 1.0), cell_h, 0), cell_w, 1)
    canvas.paste(Image.fromarray(pixels), (left, top))
    for h in range(columns):
        draw.text(
            (left + h * cell_w + cell_w // 2, top - 3), f"head {h}", fill="black", font=small, anchor="md"
        )
    for i, name in enumerate(result.layers):
        draw.text(
            (left - 4, top + i * cell_h + cell_h // 2), str(name), fill="black", font=small, anchor="rm"
        )
        for h in range(columns):
            colour = "white" if values[i, h] < 0.6 else "black"  # viridis is dark at the low end
            centre = (left + h * cell_w + cell_w // 2, top + i * cell_h + cell_h // 2)
            draw.text(centre, f"{values[i, h]:.2f}", fill=colour, font=font, anchor="mm")
    bar_left = left + columns * cell_w + 10  # the colour bar, 0 to 1
    ramp = np.linspace(1, 0, rows * cell_h)[:, None].repeat(10, 1)
    canvas.paste(Image.fromarray(_colours(ramp, 1.0)), (bar_left, top))
    for value, y in ((1.0, top + 5), (0.0, top + rows * cell_h - 5)):
        draw.text((bar_left + 13, y), f"{value:.0f}", fill="black", font=small, anchor="lm")
    draw.text((bar_left + 13, top + rows * cell_h // 2), result.metric, fill="black", font=small, anchor="lm")
    return np.asarray(canvas)
