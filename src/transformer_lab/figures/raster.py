"""Figures drawn straight into RGB arrays (a colour lookup table and Pillow's text, no matplotlib figure):
milliseconds instead of seconds, for TensorBoard's `add_image` while a model trains."""

import math
from functools import cache

import numpy as np
import torch
from torch import Tensor

from transformer_lab.figures.attention import cpu_float, layer_scales, position_labels, token_labels
from transformer_lab.nn import head_name


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
    labels: list[str] | None = None,
) -> np.ndarray:
    """`attention_grid` drawn straight into an RGB array [height, width, 3] (uint8), in milliseconds: the
    same panels (rows = layers, columns = heads; x = keys, y = queries), ticks reading `position token`,
    a colour scale per layer (0 to its largest weight) with its colour bar. For TensorBoard's
    `add_image(tag, image, step, dataformats="HWC")`."""
    from PIL import Image, ImageDraw

    maps = [cpu_float(m[index] if m.ndim == 4 else m).numpy() for m in maps]
    num_layers, num_heads = len(maps), maps[0].shape[0]
    labels = labels or [f"L{i}" for i in range(num_layers)]
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
                head_name(labels[layer], head),
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
