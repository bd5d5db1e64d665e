"""Tutorial figures as PNGs.

    python -m transformer_lab.plots positional_encoding [model_dim=32] [positions=64] [dims=4] [out_dir=plots]
    python -m transformer_lab.plots lr_schedule [task=reverse] [any train.py override ...] [out_dir=plots]

(`python scripts/plots.py ...` in a checkout is the same.) positional_encoding writes
positional_encoding.png (position x hidden dimension) and positional_encoding_curves.png (the sin/cos
curves of the first `dims` dimensions). lr_schedule composes the training config exactly as
`python train.py <overrides>` would and draws the learning rate of every optimisation step from the real
CosineWarmupScheduler: lr_schedule.png, or lr_schedule_<overrides>.png for a config with overrides (so
figures of two configs sit side by side).

Its library names of earlier versions (`from transformer_lab.plots import attention_grid`) still give
the figures of `transformer_lab.figures`, where they live, with a DeprecationWarning.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.cli import ArgumentParser, run
from transformer_lab.deprecated import forward
from transformer_lab.errors import require
from transformer_lab.files import write_figure

if TYPE_CHECKING:  # Hydra, torch and matplotlib load after the arguments are parsed (fast --help)
    from omegaconf import DictConfig

PE_KEYS = {"model_dim": 32, "positions": 64, "dims": 4}
MAX_CURVES = 64  # dims=: one panel each


__getattr__ = forward(
    __name__, "transformer_lab.figures"
)  # its library names of earlier versions (deprecated)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{positional_encoding,lr_schedule}"
    )
    pe = commands.add_parser("positional_encoding", help="sinusoidal positional encoding heatmap and curves")
    pe.add_argument(
        "args", nargs="*", metavar="key=value", help="model_dim=32 positions=64 dims=4 out_dir=plots"
    )
    lr = commands.add_parser("lr_schedule", help="the learning-rate schedule of a training config")
    lr.add_argument(
        "args", nargs="*", metavar="key=value", help="train.py overrides (task=..., model.*) and out_dir"
    )
    return parser.parse_args(argv)


def split_out_dir(args: list[str]) -> tuple[Path, list[str]]:
    """Take `out_dir=...` out of the key=value arguments."""
    out_dirs = [a.partition("=")[2] for a in args if a.startswith("out_dir=")]
    return Path(out_dirs[-1] if out_dirs else "plots"), [a for a in args if not a.startswith("out_dir=")]


def draw_positional_encoding(args: list[str], out_dir: Path) -> list[Path]:
    """The sinusoidal encoding as a heatmap and as curves."""
    values = dict(PE_KEYS)
    for token in args:
        key, sep, value = token.partition("=")
        require(
            bool(sep) and key in PE_KEYS,
            f"unknown argument {token!r}; use model_dim=, positions=, dims=, out_dir=",
        )
        require(value.isdigit() and int(value) > 0, f"{key}={value} must be a positive integer")
        values[key] = int(value)
    require(values["model_dim"] % 2 == 0, f"model_dim={values['model_dim']} must be even (sin/cos pairs)")
    require(
        values["dims"] <= values["model_dim"],
        f"dims={values['dims']} is more than model_dim={values['model_dim']}",
    )
    require(
        values["dims"] <= MAX_CURVES, f"dims={values['dims']} draws more curves than {MAX_CURVES}; use fewer"
    )
    from transformer_lab.limits import require_memory
    from transformer_lab.nn.config import LIMITS

    for key, limit in (("model_dim", LIMITS["model_dim"]), ("positions", LIMITS["max_len"])):
        require(
            values[key] <= limit, f"{key}={values[key]} is more than a model here has ({limit}); use less"
        )
    require_memory(
        4 * 4 * values["positions"] * values["model_dim"],  # the table, its image and their copies
        f"the encoding of {values['positions']} positions x {values['model_dim']} dimensions",
        "use fewer positions= or a smaller model_dim=",
    )
    from transformer_lab import figures

    heatmap = figures.positional_encoding_heatmap(values["model_dim"], values["positions"])
    curves = figures.positional_encoding_curves(values["model_dim"], values["positions"], values["dims"])
    return [
        save(heatmap, out_dir / "positional_encoding.png"),
        save(curves, out_dir / "positional_encoding_curves.png"),
    ]


def training_steps(cfg: DictConfig) -> int:
    """model.max_iters, or the Trainer's count: batches per epoch x trainer.max_epochs, capped by
    trainer.max_steps (max_steps alone when max_epochs is null; Lightning's 1000 epochs when both are)."""
    from transformer_lab.training.compose import instantiate

    if cfg.model.get("max_iters"):
        return int(cfg.model.max_iters)
    max_steps = cfg.trainer.get("max_steps") or -1
    max_epochs = cfg.trainer.get("max_epochs")
    if max_steps > 0 and max_epochs in (None, -1):
        return max_steps
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    steps = len(datamodule.train_dataloader()) * (max_epochs or 1000)
    return steps if max_steps < 0 else min(steps, max_steps)


def draw_lr_schedule(overrides: list[str], out_dir: Path) -> list[Path]:
    """The learning rate of every step of the config `python train.py <overrides>` composes."""
    from transformer_lab import figures
    from transformer_lab.training.compose import compose_config

    cfg = compose_config(overrides)
    max_iters = training_steps(cfg)
    model = cfg.model
    require(
        isinstance(model.lr, int | float) and model.lr > 0, f"model.lr={model.lr} must be a positive number"
    )
    require(isinstance(model.warmup, int) and model.warmup >= 0, f"model.warmup={model.warmup} must be >= 0")
    title = f"{cfg.task_name}: lr={model.lr}, warmup={model.warmup} steps, {max_iters} steps in all"
    name = "_".join(["lr_schedule", *(re.sub(r"[^\w.=-]+", "_", o) for o in overrides)])
    figure = figures.lr_schedule(model.lr, model.warmup, max_iters, title=title)
    return [save(figure, out_dir / f"{name}.png")]


def save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_figure(path, figure)
    return path


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out_dir, rest = split_out_dir(args.args)
    draw = draw_positional_encoding if args.command == "positional_encoding" else draw_lr_schedule
    written = draw(rest, out_dir)
    print("Wrote " + ", ".join(str(p) for p in written))


if __name__ == "__main__":
    run(main)
