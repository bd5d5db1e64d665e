"""Write an interactive attention explorer for one input of a checkpoint: ONE self-contained HTML file.

    python -m transformer_lab.explore ckpt_path=pretrained:reverse_2l4h index=5
    python -m transformer_lab.explore ckpt_path=pretrained:shakespeare text="ROMEO: I" out=romeo.html
    python -m transformer_lab.explore ckpt_path=saved_models/sort/<run>/checkpoints/best.ckpt source="3 1 3 9"

(`python scripts/explore.py ...` in a checkout is the same.) The input is test example `index=` of the
checkpoint's task (default 0; its labels mark each prediction right or wrong), or your own `text=` (written
as the task writes it: characters for Tiny Shakespeare, where each next character is the label; "3 1 4 1"
for the digit tasks, whose output the task knows; `source=` says the same for a sequence-to-sequence
task). The page (data, JavaScript and CSS inline, nothing fetched from the network) opens from disk in any
current browser: a head view, a model view of every layer x head, attention rollout and gradient-weighted
relevance, the head-ablation table, and the top-3 predictions per position; Save PNG downloads the view.
See docs/explorer.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.cli import output_file, parse_key_values, pick_device, run
from transformer_lab.errors import ConfigError, as_config_error, require

if TYPE_CHECKING:
    from transformer_lab.checkpoint import Batch, Checkpoint

KEYS = {
    "ckpt_path": "checkpoint (required): <run>/checkpoints/best.ckpt, a run directory, or pretrained:<name>",
    "index": "which test example of the checkpoint's task (default 0)",
    "text": 'your own input, e.g. text="ROMEO:" (Shakespeare) or text="3 1 4 1" (digits; a source)',
    "source": 'a sequence-to-sequence task\'s input, e.g. source="3 1 3 9" (reverse, sort)',
    "out": "the HTML file to write (default explorer.html)",
    "data_path": "the task's data file, if it reads one the package does not ship (your own text)",
    "device": "auto | cpu | cuda | mps (default auto)",
}


def parse_args(argv: list[str] | None) -> dict[str, str]:
    args = parse_key_values(argv, KEYS, __doc__)
    require("ckpt_path" in args, "missing ckpt_path=...; pass e.g. ckpt_path=<run>/checkpoints/best.ckpt")
    given = [key for key in ("index", "text", "source") if key in args]
    require(
        len(given) <= 1, f"pass one of index=, text= or source=, not {' and '.join(k + '=' for k in given)}"
    )
    return args


def model_input(checkpoint: Checkpoint, args: dict[str, str]) -> tuple[Batch, str]:
    """The example to explore, (model inputs, labels), and a few words naming it."""
    if "source" in args:
        require(
            hasattr(checkpoint.task, "source_ids"),
            f"source= needs a sequence-to-sequence task (reverse, sort); {checkpoint.location} was trained "
            f"on {checkpoint.task_name}: give your input with text= instead",
        )
    for key in ("source", "text"):
        if key in args:
            note = checkpoint.task.length_note(len(checkpoint.encode(args[key], key)))
            if note:
                print(note, file=sys.stderr)
            return checkpoint.text_example(args[key], key), f'{key} "{args[key]}"'
    index = args.get("index", "0")
    require(index.isdigit(), f"index={index} is not a test example; use an integer >= 0")
    return checkpoint.without_padding(*checkpoint.example(int(index))), f"test example {index}"


def size_text(num_bytes: int) -> str:
    return f"{num_bytes / 1e6:.1f} MB" if num_bytes >= 100_000 else f"{num_bytes / 1e3:.0f} kB"


def explore_checkpoint(args: dict[str, str]) -> Path:
    out = output_file(args.get("out", "explorer.html"), "out", "explorer.html")
    from transformer_lab.checkpoint import load
    from transformer_lab.explorer import explore, write_page

    checkpoint = load(
        args["ckpt_path"], device=pick_device(args.get("device", "auto")), data_path=args.get("data_path")
    )
    (inputs, labels), what = model_input(checkpoint, args)
    title = f"{checkpoint.task_name}, {checkpoint.config.arch.replace('_', '-')} model: {what}"
    with as_config_error():
        page = explore(checkpoint, inputs, labels, title=title)
    try:
        write_page(page, out)
    except OSError as exc:
        raise ConfigError(f"cannot write out={out}: {exc.strerror or exc}; choose another out=") from exc
    size = out.stat().st_size
    print(f"Wrote {out} ({size_text(size)}): open it in a browser ({out.resolve().as_uri()})")
    return out


def main(argv: list[str] | None = None) -> None:
    explore_checkpoint(parse_args(argv))


if __name__ == "__main__":
    run(main)
