"""Figures of an SAE's features: the density of every feature (a histogram of log10 of the share of
positions it fires at, the dead ones apart) and, for the features shown, the effect of ablating each."""

from __future__ import annotations

import math

from matplotlib.figure import Figure


def feature_density(density: list[float], title: str, ablations: dict[int, float] | None = None) -> Figure:
    """Left: how many features fire at each log10 share of positions (dead: never); right, where given,
    the change of the model's loss when each feature shown is set to 0."""
    panels = 2 if ablations else 1
    fig = Figure(figsize=(5.5 * panels, 3.6), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    alive = [math.log10(d) for d in density if d > 0]
    dead = len(density) - len(alive)
    ax = axes[0]
    ax.hist(alive, bins=[x / 2 for x in range(-16, 1)], color="tab:blue")
    ax.set_xlabel("log10(density): the share of positions a feature fires at")
    ax.set_ylabel("features")
    ax.set_title(f"{len(density)} features, {dead} dead (never fire)", fontsize=9)
    if ablations:
        ax = axes[1]
        names = [f"f{i}" for i in ablations]
        ax.barh(names[::-1], list(ablations.values())[::-1], color="tab:red")
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_xlabel("loss change when the feature is set to 0")
        ax.set_title("Ablating each feature", fontsize=9)
    fig.suptitle(title, fontsize=10)
    return fig
