"""Write an interactive attention explorer for one input of a checkpoint: ONE self-contained HTML file.

    python scripts/explore.py ckpt_path=saved_models/reverse/<run>/checkpoints/best.ckpt index=5
    python scripts/explore.py ckpt_path=<shakespeare run>/checkpoints/best.ckpt text="ROMEO: I" out=romeo.html
    python scripts/explore.py ckpt_path=saved_models/sort/<run>/checkpoints/best.ckpt source="3 1 3 9"

The input is test example `index=` of the checkpoint's task (default 0; its labels mark each prediction
right or wrong), your own `text=` (written as the task writes it: characters for Tiny Shakespeare, where
each next character is the label; "3 1 4 1" for digit tasks; for an encoder-decoder, the source), or a
sequence-to-sequence task's `source=` (the task's own answer is the label; a decoder-only model and an
encoder-decoder are explained on the output they generate greedily). The page (data, JavaScript and CSS
inline, nothing fetched from the network) opens from disk in any current browser: a head view, a model
view of every layer x head, attention rollout and gradient-weighted relevance, the head-ablation table,
and the top-3 predictions per position; Save PNG downloads the view. See docs/explorer.md.
"""

import os
from pathlib import Path

from transformer_lab.cli import parse_key_values, run
from transformer_lab.errors import ConfigError, require

KEYS = {
    "ckpt_path": "checkpoint to explore (required), e.g. <run>/checkpoints/best.ckpt",
    "index": "which test example of the checkpoint's task (default 0)",
    "text": 'your own input, e.g. text="ROMEO:" (Shakespeare) or text="3 1 4 1" (digits; a source)',
    "source": 'a sequence-to-sequence task\'s input, e.g. source="3 1 3 9" (reverse, sort)',
    "out": "the HTML file to write (default explorer.html)",
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


def output_path(text: str) -> Path:
    """`out=` as a path whose folder exists and can be written, checked before any work is done."""
    require(text.strip() != "", "out= is empty; name the HTML file to write, e.g. out=explorer.html")
    path = Path(text).expanduser()
    require(
        not path.is_dir(), f"out={text} is a folder; name a file in it, e.g. out={path / 'explorer.html'}"
    )
    folder = path.parent
    require(
        folder.is_dir(), f"out={text}: the folder {folder} does not exist; create it or choose another out="
    )
    require(
        os.access(folder, os.W_OK | os.X_OK),
        f"out={text}: the folder {folder} is not writable; choose another out=",
    )
    return path


def expected_output(task, source_ids) -> list[int]:
    """What a sequence-to-sequence task says the output of a source is: target ids, then <eos>."""
    import torch

    from transformer_lab.data.seq2seq import EOS, SPECIALS

    sources = torch.full((1, task.max_source_len), -1, dtype=torch.long)
    sources[0, : len(source_ids)] = source_ids - len(
        SPECIALS
    )  # the task's symbols are indexed after SPECIALS
    targets = task.targets_for(sources)[0]
    return [*(targets[targets >= 0] + len(SPECIALS)).tolist(), EOS]


def from_source(checkpoint: dict, model, args: dict[str, str]) -> tuple[list[int], list[int], str]:
    """`source=`: the tokens to explain and their labels, laid out for the model's architecture as
    scripts/sample.py's translate does (a decoder-only model: source <sep> and what it generates)."""
    from transformer_lab.checkpoints import source_from_checkpoint
    from transformer_lab.errors import as_config_error
    from transformer_lab.nn import DecoderLM, EncoderDecoder

    path = args["ckpt_path"]
    task, _, source_ids = source_from_checkpoint(
        checkpoint, path, args["source"], "give your input with text= instead"
    )
    with as_config_error():
        prompt = task.prompt(source_ids)  # checks the length; source <sep> for a decoder-only model
    expected = expected_output(task, source_ids)
    what = f"source {args['source']}"
    if isinstance(model, EncoderDecoder):
        return source_ids.tolist(), expected, what
    if not isinstance(model, DecoderLM):  # an encoder labels each source position
        labels = (expected[:-1] + [-100] * len(source_ids))[: len(source_ids)]
        return source_ids.tolist(), labels, what
    device = next(model.parameters()).device
    with as_config_error():
        generated = model.generate(prompt.to(device), task.max_target_len + 1, temperature=0)[
            0, prompt.size(1) :
        ]
    generated = generated.tolist()
    if model.eos_id in generated:
        generated = generated[: generated.index(model.eos_id) + 1]
    tokens = prompt[0].tolist() + generated[:-1]  # the last position predicts the last generated token
    start = prompt.size(1) - 1  # the <sep> position predicts the first output token
    labels = [-100] * len(tokens)
    for k, label in enumerate(expected):
        if start + k < len(tokens):
            labels[start + k] = label
    return tokens, labels, what


def model_input(checkpoint: dict, model, args: dict[str, str]) -> tuple[list[int], list[int] | None, str]:
    """The token ids to explain, their labels (None where unknown) and a few words naming the input."""
    from transformer_lab.checkpoints import example_from_checkpoint, text_from_checkpoint
    from transformer_lab.data.task import IGNORE_INDEX
    from transformer_lab.nn import DecoderLM, EncoderDecoder

    path = args["ckpt_path"]
    if "source" in args:
        return from_source(checkpoint, model, args)
    if "text" in args:
        text = args["text"]
        ids = text_from_checkpoint(checkpoint, path, text, model.max_len).tolist()
        # a language model's label at t is the next token of the text itself
        labels = [*ids[1:], IGNORE_INDEX] if isinstance(model, DecoderLM) else None
        return ids, labels, f'text "{text}"'
    index = args.get("index", "0")
    inputs, labels = example_from_checkpoint(checkpoint, path, index)
    tokens, labels = inputs[0][0], labels[0]
    what = f"test example {index}"
    if isinstance(model, EncoderDecoder):  # the source, and the expected output (target <eos>)
        keep = tokens != model.pad_id
        return tokens[keep].tolist(), labels[labels != IGNORE_INDEX].tolist(), what
    if model.pad_id is not None:  # without padding
        keep = tokens != model.pad_id
        tokens, labels = tokens[keep], labels[keep]
    return tokens.tolist(), labels.tolist(), what


def size_text(num_bytes: int) -> str:
    return f"{num_bytes / 1e6:.1f} MB" if num_bytes >= 100_000 else f"{num_bytes / 1e3:.0f} kB"


def explore_checkpoint(args: dict[str, str]) -> Path:
    out = output_path(args.get("out", "explorer.html"))
    from transformer_lab.checkpoints import model_from_checkpoint, read_checkpoint, task_record
    from transformer_lab.cli import pick_device
    from transformer_lab.errors import as_config_error
    from transformer_lab.explorer import explore, write_page

    path = args["ckpt_path"]
    checkpoint = read_checkpoint(path)
    model = model_from_checkpoint(checkpoint, path, pick_device(args.get("device", "auto")))
    tokens, labels, what = model_input(checkpoint, model, args)
    try:
        task = str(task_record(checkpoint, path)["class"]).rsplit(".", 1)[-1].removesuffix("DataModule")
    except ConfigError:
        task = "its task"
    title = f"{task}, {model.config.arch.replace('_', '-')} model: {what}"
    with as_config_error():
        page = explore(model, tokens, labels, title=title)
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
