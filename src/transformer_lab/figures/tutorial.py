"""The tutorial's figures: the sinusoidal positional encoding and the learning-rate schedule."""

import torch
from matplotlib.figure import Figure

from transformer_lab.nn import PositionalEncoding
from transformer_lab.nn.schedules import CosineWarmupScheduler


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


MAX_POINTS = 10_000  # a line of more points than this draws the same picture, slower


def drawn_steps(end: int) -> range:
    """The steps 0..end-1 that a curve draws: every one, or evenly spaced `MAX_POINTS` of them (a schedule
    of 10^12 steps is drawn in a moment, as one of 3900)."""
    return range(end) if end <= MAX_POINTS else range(0, end, -(-end // MAX_POINTS))


def learning_rates(lr: float, warmup: int, max_iters: int, steps: range | None = None) -> list[float]:
    """The learning rate at each of `steps` (default: every one of `max_iters`), lr * f(t) from the real
    CosineWarmupScheduler."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = CosineWarmupScheduler(optimizer, warmup=warmup, max_iters=max_iters)
    return [lr * scheduler.get_lr_factor(t) for t in (range(max_iters) if steps is None else steps)]


def lr_schedule(lr: float, warmup: int, max_iters: int, title: str = "Learning-rate schedule") -> Figure:
    """Linear warmup for `warmup` steps, then cosine decay to 0 at `max_iters` (CosineWarmupScheduler)."""
    zoom = 0 < warmup < max_iters // 4  # a short warmup is invisible at full scale: add a close-up
    fig = Figure(figsize=(9.6 if zoom else 6.4, 3.4), layout="constrained")
    axes = fig.subplots(1, 2 if zoom else 1, squeeze=False, width_ratios=[2, 1] if zoom else None)[0]
    axes[0].set_title(title, fontsize=10)
    if zoom:
        end = min(max_iters, 3 * warmup)
        steps = drawn_steps(end)
        axes[1].plot(steps, learning_rates(lr, warmup, max_iters, steps), linewidth=1.5)
        axes[1].set_title(f"first {end} steps", fontsize=10)
    steps = drawn_steps(max_iters)
    axes[0].plot(steps, learning_rates(lr, warmup, max_iters, steps), linewidth=1.5)
    for ax in axes:
        if warmup > 0:
            ax.axvline(warmup, color="grey", linestyle="--", linewidth=1, label=f"end of warmup ({warmup})")
            ax.legend(fontsize=8)
        ax.set_xlabel("optimisation step")
        ax.set_ylabel("learning rate")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax.grid(alpha=0.3)
    return fig
