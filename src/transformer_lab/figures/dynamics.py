"""The figure of `interpret analysis=dynamics`: a run's measures over its snapshots, on a log-step axis.

top      the loss and the accuracy
middle   the task's scores (induction / previous-token / repeat gain; or the grokking progress
         measures), the logit lens dotted
bottom   the per-head measure of the task (each head's induction and previous-token score), or each
         head's attention entropy
every    the events: dotted lines where the loss fell or a score changed fastest, half way; the spikes
         (snapshots whose training loss spiked, left out of every timing): red crosses on the loss and a
         red band on every panel
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

if TYPE_CHECKING:
    from transformer_lab.analysis.dynamics import Dynamics
    from transformer_lab.analysis.seeds import Seeds

HEAD_STYLES = ("-", "--", ":")
# One colour and line style per measure, the same in every figure (dashed: a loss, in nats); any other
# measure gets one from its name, the same in every run.
STYLES = {
    "loss": ("tab:red", "-"),
    "acc": ("tab:blue", "-"),
    "induction": ("tab:green", "-"),
    "previous_token": ("tab:olive", "-"),
    "repeat_gain": ("tab:purple", "--"),
    "train_acc": ("tab:cyan", "-"),
    "fourier_sparsity": ("tab:brown", "-"),
    "restricted_loss": ("tab:green", "--"),
    "excluded_loss": ("tab:orange", "--"),
    "test_loss": ("tab:blue", "--"),
    "train_loss": ("tab:cyan", "--"),
}
PALETTE = ("tab:pink", "tab:gray", "darkgoldenrod", "teal", "navy", "maroon", "darkkhaki", "slateblue")


def style(name: str) -> tuple[str, str]:
    """(colour, line style) of a measure: its own (`STYLES`), or one its name picks from `PALETTE`."""
    if name in STYLES:
        return STYLES[name]
    return PALETTE[sum(map(ord, name)) % len(PALETTE)], "--" if in_nats(name) else "-"


def _from_zero(ax, values: list[float], top: float | None = None) -> None:
    """An axis from 0 (or below, for a negative value) to at least `top`: a change is drawn at its size
    against the whole scale, not stretched over the panel (a 0.08-nat drift of a 3.5-nat loss stays
    small)."""
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    if finite:
        high = max([*finite, top or 0.0])
        low = min([*finite, 0.0])
        ax.set_ylim(low - 0.02 * (high - low), high + 0.02 * (high - low) + 1e-9)


def in_nats(name: str) -> bool:
    """Whether a score is a loss (or a difference of losses), drawn on the nats axis."""
    return name.endswith("loss") or name == "repeat_gain"


def _log_steps(ax) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlim(left=0)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.grid(True, which="major", alpha=0.3)


def _events(axes, result: Dynamics, label_ax) -> None:
    """A dotted line where the events that ended at one snapshot were half way (their median), on every
    panel, labelled on `label_ax` with what changed there (heads counted, not named: the console and the
    JSON name them)."""
    groups: dict[int, list[dict]] = {}
    for event in result.events:
        groups.setdefault(event["step"], []).append(event)
    at = {
        round(statistics.median(e.get("halfway", e["step"]) for e in group)): [
            e["what"].split(" rose ")[0].split(" fell ")[0] for e in group
        ]
        for group in groups.values()
    }
    curves = set(result.curves())
    for number, (step, names) in enumerate(sorted(at.items())):
        for ax in axes:
            ax.axvline(step, color="grey", linestyle=":", linewidth=1)
        heads = [n for n in names if n not in curves]
        shown = [n for n in names if n in curves]
        shown += [f"{len(heads)} head{'s' * (len(heads) != 1)}"] if heads else []
        label_ax.annotate(
            f"step {step}: " + ", ".join(shown),
            (step, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(-3, -12 - 10 * (number % 3)),
            textcoords="offset points",
            ha="right",
            fontsize=7,
            color="dimgrey",
        )


def _spikes(axes, steps: list[int], spikes: list[int], loss_ax=None, loss: list[float] | None = None) -> None:
    """Each spike (a snapshot left out of every timing) as a red band around its step on every panel,
    and a red cross on the loss where given."""
    for spike in spikes:
        k = steps.index(spike)
        low = steps[k - 1] if k > 0 else spike
        high = steps[k + 1] if k + 1 < len(steps) else spike
        for ax in axes:
            ax.axvspan((low + spike) / 2, (spike + high) / 2, color="red", alpha=0.08, linewidth=0)
        if loss_ax is not None and loss is not None:
            loss_ax.plot([spike], [loss[k]], "x", color="red", markersize=8, label=None)


def dynamics_figure(result: Dynamics, title: str) -> Figure:
    """Loss and accuracy on top, the task's scores in the middle, per-head measures below, against the
    optimisation step (symmetric log scale: step 0, the initial weights, at the left edge)."""
    fig = Figure(figsize=(10, 10), layout="constrained")
    top, middle, bottom = fig.subplots(3, 1, sharex=True)
    steps = result.steps

    top.plot(steps, result.loss, color=style("loss")[0], marker=".", label="loss")
    top.set_ylabel("loss (nats)", color=style("loss")[0])
    _from_zero(top, result.loss)
    right = top.twinx()
    colour = style(result.metric_name)[0]
    right.plot(steps, result.metric, color=colour, marker=".", label=result.metric_name)
    right.set_ylabel(result.metric_name, color=colour)
    right.set_ylim(-0.02, 1.02)
    top.set_title(title)

    scores = {name: values for name, values in result.scores.items() if not name.startswith("lens_")}
    nats = middle.twinx() if any(in_nats(name) for name in scores) else None
    for name, values in scores.items():
        ax = nats if in_nats(name) else middle
        colour, line = style(name)
        ax.plot(steps, values, marker=".", label=name, color=colour, linestyle=line)
    for name, values in result.scores.items():
        if name.startswith("lens_"):
            middle.plot(steps, values, linestyle=":", linewidth=1, label=f"{name} (acc)")
    _from_zero(middle, [v for n, vs in result.scores.items() if not in_nats(n) for v in vs], top=1.0)
    if nats is not None:
        # every loss on the scale of the run's loss, so that 0.3 nats looks like 0.3 nats of it
        _from_zero(nats, [v for n, vs in scores.items() if in_nats(n) for v in vs], top=max(result.loss))
    middle.set_ylabel("score")
    middle.legend(loc="upper left", fontsize=7, ncols=2)
    if nats is not None:
        nats.set_ylabel("loss (nats), dashed")
        nats.legend(loc="upper right", fontsize=7)
    if result.notes:
        middle.set_title("; ".join(result.notes), fontsize=9)

    measures = result.own_heads or ["entropy"]
    names = result.head_names()
    colours = [f"C{i}" for i in range(10)]
    drawn = []
    for line, measure in zip(HEAD_STYLES, measures, strict=False):
        series = result.heads[measure]
        for layer, row in enumerate(names):
            for head, name in enumerate(row):
                values = [snapshot[layer][head] for snapshot in series]
                drawn += [v for v in values if v is not None]
                colour = colours[(layer * len(row) + head) % len(colours)]
                label = name if line == "-" else None
                bottom.plot(steps, values, linestyle=line, color=colour, label=label)
    _from_zero(bottom, drawn, top=1.0)
    what = " (solid), ".join(measures[:2]) + (" (dashed)" if len(measures) > 1 else "")
    bottom.set_ylabel(f"per head: {what}")
    bottom.legend(loc="upper left", fontsize=7, ncols=4)
    bottom.set_xlabel("optimisation step (log scale; 0 = the initial weights)")
    for ax in (top, middle, bottom):
        _log_steps(ax)
    _events((top, middle, bottom), result, top)
    reference = result.scores.get("train_loss")
    _spikes((top, middle, bottom), steps, result.spikes, top, result.loss if reference is None else None)
    if reference is not None and nats is not None:
        _spikes((), steps, result.spikes, nats, reference)  # the training loss that spiked
    if result.spikes:
        top.plot([], [], "x", color="red", label="spike (left out of timings)")
        top.legend(loc="lower left", fontsize=7)
    return fig


def seeds_figure(seeds: Seeds, title: str) -> Figure:
    """Runs that differ only by their seed, over their snapshots: each measure's median over the seeds
    and the band from the lowest to the highest (each seed also as a thin line); dotted lines where the
    events were half way, median over the seeds they appeared in."""
    fig = Figure(figsize=(10, 7), layout="constrained")
    top, middle = fig.subplots(2, 1, sharex=True)
    runs = list(seeds.runs.values())
    first = runs[0]
    shared = all(r.steps == first.steps for r in runs)
    curves = {"loss": [r.loss for r in runs], first.metric_name: [r.metric for r in runs]}
    for name in first.scores:
        if not name.startswith("lens_") and all(name in r.scores for r in runs):
            curves[name] = [r.scores[name] for r in runs]
    right = top.twinx()
    nats = middle.twinx() if any(in_nats(name) for name in curves if name != "loss") else None
    drawn: dict[object, list[float]] = {}
    for name, series in curves.items():
        if name in ("loss", first.metric_name):
            ax = top if name == "loss" else right
        else:
            ax = nats if in_nats(name) else middle
        colour, line = style(name)
        for run, values in zip(runs, series, strict=True):
            ax.plot(run.steps, values, color=colour, linestyle=line, linewidth=0.5, alpha=0.5)
        if shared:
            low = [min(v) for v in zip(*series, strict=True)]
            high = [max(v) for v in zip(*series, strict=True)]
            median = [statistics.median(v) for v in zip(*series, strict=True)]
            ax.fill_between(first.steps, low, high, color=colour, alpha=0.2)
            ax.plot(first.steps, median, color=colour, linestyle=line, marker=".", label=name)
        if ax in (top, right):
            ax.set_ylabel(name if ax is right else "loss (nats)", color=colour)
        drawn.setdefault(ax, []).extend(v for values in series for v in values)
    losses = drawn[top]
    _from_zero(top, losses)
    right.set_ylim(-0.02, 1.02)
    _from_zero(middle, drawn.get(middle, []), top=1.0)
    middle.set_ylabel("score")
    middle.legend(loc="upper left", fontsize=7, ncols=2)
    if nats is not None:
        # every loss on the scale of the run's loss, so that 0.3 nats looks like 0.3 nats of it
        _from_zero(nats, drawn[nats], top=max(v for v in losses if v == v))
        nats.set_ylabel("loss (nats), dashed")
        nats.legend(loc="upper right", fontsize=7)
    for ax in (top, middle):
        _log_steps(ax)
    for event in seeds.events:
        step = statistics.median(event.steps)
        for ax in (top, middle):
            ax.axvline(step, color="grey", linestyle=":", linewidth=1)
    for run in runs:  # each run's spikes: a red cross on its loss
        _spikes((), run.steps, run.spikes, top, run.loss)
    top.set_title(f"{title}: median and range over {len(runs)} seeds")
    middle.set_xlabel("optimisation step (log scale; 0 = the initial weights)")
    return fig
