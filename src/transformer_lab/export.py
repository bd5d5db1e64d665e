"""Write a checkpoint's model in a format other tools open: TransformerLens, Hugging Face, ONNX.

    python -m transformer_lab.export ckpt_path=pretrained:shakespeare to=transformer_lens out=shakespeare-tl
    python -m transformer_lab.export ckpt_path=pretrained:shakespeare to=huggingface out=shakespeare-hf
    python -m transformer_lab.export ckpt_path=pretrained:sort to=onnx out=sort-onnx
    python -m transformer_lab.export sae=<SAE run> to=sae_lens out=my-sae

(`python scripts/export.py ...` in a checkout is the same.) `to=transformer_lens` and `to=huggingface` take
pre-norm decoders (GPT-style language models) and print the Python that loads the result;
`to=onnx` takes every model (encoder, decoder, encoder-decoder) and checks the graph with ONNX Runtime.
A model a format cannot express is refused in one line saying why and what would work. The files are
written into a new folder beside `out`, checked, then renamed to `out` (`files.replacing_folder`): an
interrupted export leaves nothing a library would load. `out` may hold only this project's earlier export
of the same format, known by the manifest it wrote beside its files (`files.MANIFEST`: each file's
sha256), not by their names; anything else is refused, or replaced whole with `overwrite=true`, except
the folder the model was made from (its hf: folder, its run, the weights its run started from), which is
never replaced. The formats'
libraries are the optional `[interop]` extra (`pip install "transformer-lab[interop]"`). What each file
holds, weight by weight: docs/interop.md and `transformer_lab.interop`. The other direction is
`ckpt_path=hf:<folder>` in any tool (`transformer_lab.load("hf:<folder>")`). `to=sae_lens` writes an SAE
run (`sae=`) as the folder SAELens saves (`interop.sae_lens_export`); `sae=saelens:<folder>` reads one back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer_lab.cli import output_dir, parse_key_values, run, starting
from transformer_lab.errors import ConfigError, require
from transformer_lab.files import write_text

if TYPE_CHECKING:
    from pathlib import Path

    from transformer_lab.checkpoint import Checkpoint

FORMATS = ("transformer_lens", "huggingface", "onnx", "sae_lens")  # interop.FORMATS, without torch
WRITES = {  # the files each format writes (beside files.MANIFEST, which lists them with their sha256)
    "transformer_lens": {"config.json", "model.safetensors", "vocab.json", "tokenizer.json"},
    "huggingface": {
        *("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"),
        *("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"),
    },
    "onnx": {"model.onnx", "model.onnx.data", "vocab.json", "tokenizer.json"},
    "sae_lens": {"cfg.json", "sae_weights.safetensors"},
}
KEYS = {
    "ckpt_path": "checkpoint (required): <run>/checkpoints/best.ckpt, a run directory, pretrained:<name> or "
    "hf:<folder>",
    "to": f"the format (required): {' | '.join(FORMATS)}",
    "out": "the folder to write the files into (required; made if missing, or this project's earlier export "
    "of the same format, replaced whole)",
    "overwrite": "true: replace out= whole even if it holds other files (default false)",
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
    require(
        args.get("overwrite", "false") in ("true", "false"),
        f"overwrite={args.get('overwrite')} must be true or false",
    )
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
    tokenizer_json = (checkpoint.contents.get("task") or {}).get("tokenizer")  # a BPE's, or None
    if to == "huggingface":
        from transformer_lab.interop import hf_export

        hf_export.check(model.config)
        separator = checkpoint.tokenizer.separator
        text = prompt if prompt is not None else example_prompt(checkpoint)
        return hf_export.export(model, out, separator, text, tokenizer_json)  # its tokenizer.json inside
    if to == "transformer_lens":
        from transformer_lab.interop import transformer_lens

        transformer_lens.check(model.config)
        lines = transformer_lens.export(model, out)
    else:
        from transformer_lab.interop import onnx

        lines = onnx.export(model, out)
    if tokenizer_json is not None:  # text to tokens as the model's own tokenizer makes them
        write_text(out / "tokenizer.json", tokenizer_json)
        lines.append(
            "and tokenizer.json, the model's tokenizer: tokenizers.Tokenizer.from_file(...).encode(text).ids"
        )
    return lines


def sources(location: str | None, checkpoint: Checkpoint | None = None) -> tuple[Path, ...]:
    """What an export is made from, which its `out` must neither be nor hold: the folder of hf:<folder>
    or saelens:<folder>, a checkpoint file or run, and the weights its run started from (`init_from=`,
    as the checkpoint records it)."""
    from pathlib import Path

    found = []
    for where in (location, checkpoint.init_from if checkpoint is not None else None):
        if not where or where.startswith("pretrained:"):
            continue
        path = Path(where.split(":", 1)[1] if where.startswith(("hf:", "saelens:")) else where).expanduser()
        if path.exists():
            found.append(path)
    return tuple(found)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = output_dir(args["out"], "out")
    from transformer_lab.files import replacing_folder, require_replaceable, write_manifest

    to, overwrite = args["to"], args.get("overwrite") == "true"
    source = args.get("sae") if to == "sae_lens" else args["ckpt_path"]
    require_replaceable(out, "out", to, overwrite, sources(source))  # before the model is read
    if to == "sae_lens":
        from transformer_lab.interop import sae_lens_export
        from transformer_lab.sae_checkpoint import load_sae

        starting(f"Loading {args['sae']} to export it to sae_lens")
        run = load_sae(args["sae"], source=args.get("ckpt_path"))
        require(
            run.config.to_dict().get("d_out") is None,
            f"sae={args['sae']} is a transcoder, which to=sae_lens does not write yet (an SAE's format)",
        )
        model = (run.record or {}).get("location") or (run.record or {}).get("model_name") or "none"
        with replacing_folder(out, "out", to, overwrite, sources(source)) as folder:
            lines = sae_lens_export.export(run.sae, folder, model, args["sae"])
            write_manifest(folder, to, args["sae"])
        for line in lines:
            print(line.replace(str(folder), str(out)))  # the folder by the name it has now
        return
    starting(f"Loading {args['ckpt_path']} to export it to {to}")
    from transformer_lab.checkpoint import load

    checkpoint = load(args["ckpt_path"], device="cpu")
    with replacing_folder(out, "out", to, overwrite, sources(source, checkpoint)) as folder:
        lines = export(checkpoint, to, folder, args.get("prompt"))
        written = {p.name for p in folder.iterdir()}
        require(
            written <= WRITES[to],
            f"to={to} wrote {', '.join(sorted(written - WRITES[to]))}, which export.WRITES does not list; "
            "report it",
        )
        write_manifest(folder, to, args["ckpt_path"])
    for line in lines:
        print(line.replace(str(folder), str(out)))  # the folder by the name it has now


if __name__ == "__main__":
    run(main)
