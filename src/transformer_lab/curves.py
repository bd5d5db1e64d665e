"""Training curves of several runs in one figure, from their TensorBoard logs.

    python train.py -m model.scale_attention=true,false   # a sweep: saved_models/multirun/<date>_<time>
    python -m transformer_lab.curves saved_models/multirun/<date>_<time> metric=train/loss
    python -m transformer_lab.curves saved_models/reverse metric=val/acc out=val_acc.png

Every run directory under the given directories (a directory with `.hydra/` and TensorBoard events) is one
curve, labelled with the command-line overrides it ran with (the swept values). `metric=` is any scalar the
runs logged (train/loss, train/acc, val/loss, val/acc, val/seq_acc, val/bpc, train/lr, ...; default
train/loss); the x axis is the optimisation step. Writes `out=` (default curves.png) and prints, per run,
the metric's first and last values. Losses are drawn on a log scale (the last digits of a loss that goes to
zero are where runs differ).
"""

from pathlib import Path

from transformer_lab.cli import ArgumentParser, run
from transformer_lab.errors import ConfigError, require
from transformer_lab.files import write_figure


def run_dirs(roots: list[Path]) -> list[Path]:
    """Every run directory (one with `.hydra/` and TensorBoard events) under `roots`, sorted."""
    found = set()
    for root in roots:
        require(root.is_dir(), f"{root} is not a directory; pass a run, a sweep or saved_models/<task>")
        for hydra_dir in [root / ".hydra", *root.rglob(".hydra")]:
            if hydra_dir.is_dir() and any(hydra_dir.parent.glob("events.out.tfevents.*")):
                found.add(hydra_dir.parent)
    return sorted(found)


def label(run_dir: Path) -> str:
    """The run's command-line overrides (its swept values), or its directory name without any."""
    from transformer_lab import run_files

    has_overrides = (run_dir / ".hydra" / "overrides.yaml").exists()
    overrides = run_files.overrides(run_dir) if has_overrides else []
    return " ".join(overrides) or run_dir.name


def scalars(run_dir: Path, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one scalar in a run's TensorBoard event files, by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = {}
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        require(
            events.is_file() and not events.is_symlink(),
            f"{events} is not a regular file (a symlink, a pipe or a device); remove it from the run",
        )
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        if metric in accumulator.Tags()["scalars"]:
            points.update({event.step: event.value for event in accumulator.Scalars(metric)})
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def common_prefix_removed(labels: list[str]) -> list[str]:
    """Drop the overrides every run shares, so the legend shows what differs."""
    split = [set(text.split()) for text in labels]
    shared = set.intersection(*split) if len(split) > 1 else set()
    return [" ".join(t for t in text.split() if t not in shared) or text for text in labels]


def main(argv: list[str] | None = None) -> None:
    import argparse
    import sys

    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("args", nargs="+", metavar="DIR | metric=NAME | out=FILE")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv).args
    options = {a.partition("=")[0]: a.partition("=")[2] for a in args if "=" in a}
    unknown = sorted(set(options) - {"metric", "out"})
    if unknown:
        raise ConfigError(f"unknown argument {unknown[0]}=...; use DIR... metric=NAME out=FILE")
    roots = [Path(a) for a in args if "=" not in a]
    require(
        bool(roots),
        "no run directory given; e.g. python -m transformer_lab.curves saved_models/multirun/<sweep>",
    )
    metric, out = options.get("metric", "train/loss"), Path(options.get("out", "curves.png"))
    runs = run_dirs(roots)
    require(bool(runs), f"no run with TensorBoard events under {' '.join(map(str, roots))}")

    curves = {run_dir: scalars(run_dir, metric) for run_dir in runs}
    curves = {run_dir: curve for run_dir, curve in curves.items() if curve[0]}
    require(bool(curves), f"no run logged {metric}; e.g. metric=train/loss or metric=val/acc")

    from matplotlib.figure import Figure

    names = common_prefix_removed([label(run_dir) for run_dir in curves])
    figure = Figure(figsize=(7, 4), layout="constrained")
    ax = figure.subplots()
    for name, (steps, values) in zip(names, curves.values(), strict=True):
        ax.plot(steps, values, label=name, linewidth=1.2)
        print(f"{name}: {metric} {values[0]:.4f} at step {steps[0]} -> {values[-1]:.4f} at step {steps[-1]}")
    if metric.endswith("loss") and all(v > 0 for _, values in curves.values() for v in values):
        ax.set_yscale("log")
    ax.set_xlabel("optimisation step")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_figure(out, figure)
    print(f"Wrote {out}")


if __name__ == "__main__":
    run(main)
