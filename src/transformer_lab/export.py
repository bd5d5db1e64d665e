"""Write a checkpoint's model in a format other tools open: TransformerLens, Hugging Face, ONNX.

    python -m transformer_lab.export ckpt_path=pretrained:shakespeare to=transformer_lens out=shakespeare-tl
    python -m transformer_lab.export ckpt_path=pretrained:shakespeare to=huggingface out=shakespeare-hf
    python -m transformer_lab.export ckpt_path=pretrained:sort to=onnx out=sort-onnx
    python -m transformer_lab.export sae=<SAE run> to=sae_lens out=my-sae

(`python scripts/export.py ...` in a checkout is the same.) `to=transformer_lens` and `to=huggingface` take
pre-norm decoders (GPT-style language models) and print the Python that loads the result;
`to=onnx` takes every model (encoder, decoder, encoder-decoder) and checks the graph with ONNX Runtime.
A model a format cannot express is refused in one line saying why and what would work. The formats'
libraries are the optional `[interop]` extra (`pip install "transformer-lab[interop]"`). What each file
holds, weight by weight: docs/interop.md and `transformer_lab.interop`. The other direction is
`ckpt_path=hf:<folder>` in any tool (`transformer_lab.load("hf:<folder>")`). `to=sae_lens` writes an SAE
run (`sae=`) as the folder SAELens saves (`interop.sae_lens`); `sae=saelens:<folder>` reads one back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer_lab.cli import output_dir, parse_key_values, run
from transformer_lab.errors import ConfigError, require

if TYPE_CHECKING:
    from pathlib import Path

    from transformer_lab.checkpoint import Checkpoint

FORMATS = ("transformer_lens", "huggingface", "onnx", "sae_lens")  # interop.FORMATS, without torch
KEYS = {
    "ckpt_path": "checkpoint (required): <run>/checkpoints/best.ckpt, a run directory, pretrained:<name> or "
    "hf:<folder>",
    "to": f"the format (required): {' | '.join(FORMATS)}",
    "out": "the folder to write the files into (required; made if missing)",
    "prompt": "to=huggingface: the text the printed example continues (default: the start of a test example)",
    "sae": "to=sae_lens: the SAE run to write (python train.py experiment=sae ...)",
}


def parse_args(argv: list[str] | None) -> dict[str, str]:
    args = parse_key_values(argv, KEYS, __doc__)
    require("to" in args, f"missing to=...; use to={' | '.join(FORMATS)}")
    require(args["to"] in FORMATS, f"to={args['to']} is not a format; use to={' | '.join(FORMATS)}")
    if args["to"] == "sae_lens":
        require(
            "sae" in args, "to=sae_lens writes an SAE: pass sae=<SAE run> (python train.py experiment=sae)"
        )
    else:
        require("sae" not in args, "sae= is for to=sae_lens")
        require("ckpt_path" in args, "missing ckpt_path=...; pass e.g. ckpt_path=pretrained:shakespeare")
    require("out" in args, "missing out=...; name the folder to write into, e.g. out=exported")
    require("prompt" not in args or args["to"] == "huggingface", "prompt= is for to=huggingface")
    return args


def example_prompt(checkpoint: Checkpoint) -> str:
    """A short text for the printed example: the first tokens of test example 0 (as the task writes
    text), or the first tokens of the vocabulary where the task has no examples to give."""
    try:
        (inputs, *_), _ = checkpoint.example(0)
        ids = inputs[0, :8].tolist()
    except ConfigError:
        ids = list(range(min(4, checkpoint.config.vocab_size)))
    return checkpoint.decode(ids)


def export(checkpoint: Checkpoint, to: str, out: Path, prompt: str | None = None) -> list[str]:
    """Write the checkpoint's model in format `to` into `out` (the interop module of the format); the
    lines to print. A model the format cannot express is a one-line ConfigError, before anything is
    written."""
    from transformer_lab import interop

    interop.check_format(to)
    require(to != "sae_lens", "to=sae_lens writes an SAE run (sae=), not a model")
    model = checkpoint.model.cpu()
    if to == "transformer_lens":
        from transformer_lab.interop import transformer_lens

        transformer_lens.check(model.config)
        return transformer_lens.export(model, out)
    if to == "huggingface":
        from transformer_lab.interop import huggingface

        huggingface.check(model.config)
        record = checkpoint.contents.get("task") or {}
        separator = checkpoint.tokenizer.separator
        text = prompt if prompt is not None else example_prompt(checkpoint)
        return huggingface.export(model, out, separator, text, record.get("tokenizer"))
    from transformer_lab.interop import onnx

    return onnx.export(model, out)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = output_dir(args["out"], "out")
    if args["to"] == "sae_lens":
        from transformer_lab.interop import sae_lens
        from transformer_lab.sae_checkpoint import load_sae

        run = load_sae(args["sae"], source=args.get("ckpt_path"))
        model = (run.record or {}).get("location") or (run.record or {}).get("model_name") or "none"
        for line in sae_lens.export(run.sae, out, model, args["sae"]):
            print(line)
        return
    from transformer_lab.checkpoint import load

    checkpoint = load(args["ckpt_path"], device="cpu")
    for line in export(checkpoint, args["to"], out, args.get("prompt")):
        print(line)


if __name__ == "__main__":
    run(main)
