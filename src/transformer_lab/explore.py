"""Write an interactive attention explorer for one input of a checkpoint: ONE self-contained HTML file.

    python -m transformer_lab.explore ckpt_path=pretrained:reverse_2l4h index=5
    python -m transformer_lab.explore ckpt_path=pretrained:shakespeare text="ROMEO: I" out=romeo.html
    python -m transformer_lab.explore ckpt_path=saved_models/sort/<run>/checkpoints/best.ckpt source="3 1 3 9"
    python -m transformer_lab.explore sae=<SAE run> text="..."      # + the features view of an SAE

(`python scripts/explore.py ...` in a checkout is the same.) The input is test example `index=` of the
checkpoint's task (default 0; its labels mark each prediction right or wrong), or your own `text=` (written
as the task writes it: characters for Tiny Shakespeare, where each next character is the label; "3 1 4 1"
for the digit tasks, whose output the task knows; `source=` says the same for a sequence-to-sequence
task). The page (data, JavaScript and CSS inline, nothing fetched from the network) opens from disk in any
current browser: a head view, a model view of every layer x head, attention rollout and gradient-weighted
relevance, the head-ablation table, and the top-3 predictions per position; Save PNG and Save SVG download
the view. With `live=true` (the default, where the model fits the page's budget) the page also holds the
model and runs it: edit the input, remove heads, generate, patch activations. Given a run directory whose
training kept snapshots (checkpoints/snapshots/step_*.ckpt), or a ready-made series, a step slider shows
every view at each; a checkpoint file gives the page of that checkpoint alone (`steps=true` adds its run's
slider). See docs/explorer.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.cli import is_file, output_file, parse_key_values, pick_device, run, starting
from transformer_lab.errors import ConfigError, as_config_error, require

if TYPE_CHECKING:
    import torch

    from transformer_lab.checkpoint import Batch, Checkpoint

KEYS = {
    "ckpt_path": "checkpoint (required): <run>/checkpoints/best.ckpt, a run directory (its snapshots: a step "
    "slider), or pretrained:<name>",
    "index": "which test example of the checkpoint's task (default 0)",
    "text": 'your own input, e.g. text="ROMEO:" (Shakespeare) or text="3 1 4 1" (digits; a source)',
    "source": 'a sequence-to-sequence task\'s input, e.g. source="3 1 3 9" (reverse, sort)',
    "out": "the HTML file to write (default explorer.html)",
    "live": "true (default): the model runs in the page where it fits; false: precomputed views only",
    "weights": "auto (default: float32 where the page stays under 5 MB, else float16, else no model in the "
    "page) | float32 | float16 (half the size): how a live page stores the weights (up to 20 MB asked for)",
    "steps": "true: a step slider over the run's snapshots (the default for a run directory or a ready-made "
    "series); false: this checkpoint alone (the default for a checkpoint file)",
    "data_path": "the task's data file, if it reads one the package does not ship (your own text)",
    "device": "auto | cpu | cuda | mps (default auto)",
    "sae": "an SAE run of the model (python train.py experiment=sae ...): the page's features view",
}


def parse_args(argv: list[str] | None) -> dict[str, str]:
    args = parse_key_values(argv, KEYS, __doc__)
    require(
        "ckpt_path" in args or "sae" in args,
        "missing ckpt_path=...; pass e.g. ckpt_path=<run>/checkpoints/best.ckpt (or sae=<SAE run>)",
    )
    given = [key for key in ("index", "text", "source") if key in args]
    require(
        len(given) <= 1, f"pass one of index=, text= or source=, not {' and '.join(k + '=' for k in given)}"
    )
    live = args.get("live", "true")
    require(live in ("true", "false"), f"live={live} is not true or false; use live=true or live=false")
    weights = args.get("weights", "auto")
    require(
        weights in ("auto", "float32", "float16"),
        f"weights={weights} is unknown; use weights=auto, float32 or float16",
    )
    steps = args.get("steps")
    require(steps in (None, "true", "false"), f"steps={steps} is not true or false; use steps=true or false")
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
    (inputs, *more), labels = checkpoint.without_padding(*checkpoint.example(int(index)))
    what = f"test example {index}"
    if checkpoint.label_rule == "next" and not more and inputs.size(1) > PAGE_TOKENS:
        # a language model's window: its first PAGE_TOKENS tokens (relevance costs a backward pass per
        # token, and each view grows with the square of the length)
        inputs, labels = inputs[:, :PAGE_TOKENS], labels[:, :PAGE_TOKENS]
        what = f"the first {PAGE_TOKENS} tokens of test example {index}"
        print(f"note: the page shows {what} (text= shows any input)", file=sys.stderr)
    return ((inputs, *more), labels), what


PAGE_TOKENS = 64  # of a language model's test window, the page shows the first
PAGE = 5_000_000  # characters a page takes by default: a text model's page, not 20 MB of it
WEIGHTS_IN_PAGE = 4_000_000  # of which the weights (the views, the tokenizer and the code take the rest)


def page_weights(model: torch.nn.Module, asked: str, slider: bool) -> tuple[str, int | None]:
    """How a live page stores the weights and the characters they may take (None: the live module's own
    20 MB). `auto`: float32 where they fit `WEIGHTS_IN_PAGE` (every model of the lab's tasks), else
    float16 (half: a text model of a million parameters); a page of one checkpoint keeps them within that
    budget, so it stays under `PAGE` (a larger model's shows the precomputed views and says why), while a
    step slider, which a run directory or steps=true asks for, takes the 20 MB its snapshots need."""
    if asked != "auto":
        return asked, None
    values = sum(
        t.numel() for t in {p.untyped_storage().data_ptr(): p for p in model.state_dict().values()}.values()
    )
    in_page = values * 4 * 4 // 3  # float32 as base64
    return ("float32" if in_page <= WEIGHTS_IN_PAGE else "float16"), None if slider else WEIGHTS_IN_PAGE


def size_text(num_bytes: int) -> str:
    return f"{num_bytes / 1e6:.1f} MB" if num_bytes >= 100_000 else f"{num_bytes / 1e3:.0f} kB"


def snapshot_files(location: str) -> list[Path]:
    """The snapshots of a run (`checkpoints/snapshots/step_{step:08d}.ckpt` of a run directory or of a
    checkpoint file's run), or of a ready-made series (`pretrained:<name>`), oldest first; [] for none."""
    from transformer_lab import pretrained, snapshots

    if pretrained.is_pretrained(location):
        name = location.removeprefix(pretrained.PREFIX)
        if name not in pretrained.names() or not pretrained.record(name).get("snapshots"):
            return []
    elif snapshots.folder(location) is None:
        return []
    return [snapshot.path for snapshot in snapshots.find(location)]


def _step(path: Path) -> int | None:
    digits = path.stem.removeprefix("step_")
    return int(digits) if digits.isdigit() else None


def load_snapshots(files: list[Path], checkpoint: Checkpoint, device: torch.device) -> list:
    """The snapshots as the explorer's `Snapshot`s, the checkpoint among them: at its own step, or, where
    it records none (a shipped file), as the snapshot whose weights it has (a series' final model)."""
    import torch

    from transformer_lab.checkpoint import load
    from transformer_lab.explorer import Snapshot

    step = checkpoint.global_step
    series = []
    for file in files:
        snapshot = load(file, device=device)
        same = step is None and all(
            torch.equal(value, checkpoint.weights[key]) for key, value in snapshot.weights.items()
        )
        if same:
            step = _step(file)
        if _step(file) == step:
            continue  # the checkpoint itself stands for the snapshot of its step
        series.append(Snapshot(_step(file), f"step {_step(file)}", snapshot.model))
    name = checkpoint.file.name if checkpoint.file is not None else "checkpoint"
    last = max((s.step for s in series), default=0)
    series.append(Snapshot(step if step is not None else last + 1, f"step {step} ({name})", checkpoint.model))
    return sorted(series, key=lambda snapshot: snapshot.step)


def explore_checkpoint(args: dict[str, str]) -> Path:
    out = output_file(args.get("out", "explorer.html"), "out", "explorer.html")
    live = args.get("live", "true")
    from transformer_lab.checkpoint import load
    from transformer_lab.explorer import explore, write_page

    device = pick_device(args.get("device", "auto"))
    sae_run = None
    if "sae" in args:
        from transformer_lab.sae_checkpoint import load_sae

        sae_run = load_sae(
            args["sae"], device=device, data_path=args.get("data_path"), source=args.get("ckpt_path")
        )
        args.setdefault("ckpt_path", sae_run.source.location)
    location = args["ckpt_path"]
    a_file = not location.startswith("pretrained:") and is_file(location, "ckpt_path")
    slider = args.get("steps", "false" if a_file else "true") == "true"
    snapshots = snapshot_files(location) if slider else []
    main_file = location
    run = Path(location) / "checkpoints"
    if (
        snapshots
        and Path(location).is_dir()
        and not any((run / n).is_file() for n in ("best.ckpt", "last.ckpt"))
    ):
        main_file = str(snapshots[-1])  # a run with snapshots only: open on the last
    if sae_run is not None:
        checkpoint = sae_run.source
    else:
        checkpoint = load(main_file, device=device, data_path=args.get("data_path"))
    asked = args.get("weights", "auto")
    weights, weight_budget = page_weights(checkpoint.model, asked, slider=bool(snapshots))
    (inputs, labels), what = model_input(checkpoint, args)
    features = None
    if sae_run is not None:
        from transformer_lab.explorer.features import features_payload

        with as_config_error():
            features = features_payload(sae_run, inputs)
    title = f"{checkpoint.task_name}, {checkpoint.config.arch.replace('_', '-')} model: {what}"
    # an SAE was trained on the final model: no step slider beside its features
    wanted = snapshots and live == "true" and sae_run is None
    series = load_snapshots(snapshots, checkpoint, device) if wanted else None
    with as_config_error():
        page = explore(
            checkpoint,
            inputs,
            labels,
            title=title,
            live=live == "true",
            snapshots=series,
            weights=weights,
            features=features,
            weight_budget=weight_budget,
        )
    if page.live_note:
        auto = asked == "auto" and weight_budget is not None
        lift = "; weights=float16 puts it in a page of up to 20 MB" if auto else ""
        print(f"note: the page shows the precomputed views only: {page.live_note}{lift}", file=sys.stderr)
    try:
        write_page(page, out)
    except OSError as exc:
        raise ConfigError(f"cannot write out={out}: {exc.strerror or exc}; choose another out=") from exc
    size = out.stat().st_size
    kept = f", a step slider over {page.steps} checkpoints" if page.steps > 1 else ""
    what_page = "live page" if live == "true" and not page.live_note else "page"
    print(
        f"Wrote {out} ({size_text(size)}, {what_page}{kept}): open it in a browser ({out.resolve().as_uri()})"
    )
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    starting(f"Loading {args.get('ckpt_path') or args['sae']} for the page")
    explore_checkpoint(args)


if __name__ == "__main__":
    run(main)
