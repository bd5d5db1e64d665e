"""Look inside a trained checkpoint: attention maps, rollout and gradient-weighted attention as PNGs.

    python -m transformer_lab.explain ckpt_path=pretrained:reverse_2l4h index=5
    python -m transformer_lab.explain ckpt_path=pretrained:shakespeare text="ROMEO:" out_dir=explain_out
    python -m transformer_lab.explain ckpt_path=pretrained:sort text="3 1 3 9 1"

(`python scripts/explain.py ...` in a checkout is the same.) The input is test example `index=` of the
checkpoint's task (default 0), or your own `text=` (written as the task writes it: characters for Tiny
Shakespeare, "3 1 4 1" for the digit tasks, whose output the task knows). Writes attention_grid.png,
head_mean_first.png, head_mean_last.png, rollout.png and gradient_attention.png (an encoder-decoder:
encoder_attention.png, decoder_attention.png, cross_attention.png, rollout.png, gradient_attention.png),
and prints, for every output position, the input position it relies on most.

Its library names of earlier versions (`from transformer_lab.explain import attention_maps`) still give
those of `transformer_lab.analysis.explain`, where they live, with a DeprecationWarning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer_lab.cli import output_dir, parse_key_values, pick_device, run, starting
from transformer_lab.deprecated import forward
from transformer_lab.errors import require
from transformer_lab.files import write_figure

if TYPE_CHECKING:  # torch, matplotlib and the model load after the arguments are parsed (fast --help)
    from transformer_lab.checkpoint import Checkpoint

KEYS = {
    "ckpt_path": "checkpoint (required): <run>/checkpoints/best.ckpt, a run directory, or pretrained:<name>",
    "index": "which test example of the checkpoint's task (default 0)",
    "text": 'your own input instead, e.g. text="ROMEO:" (Shakespeare) or text="3 1 4 1" (digits, a source)',
    "out_dir": "where to write the PNGs (default explain_out)",
    "data_path": "the task's data file, if it reads one the package does not ship (your own text)",
    "device": "auto | cpu | cuda | mps (default auto)",
}
GRID_FILES = {"self": "attention_grid", "encoder": "encoder_attention", "decoder": "decoder_attention"}


__getattr__ = forward(
    __name__, "transformer_lab.analysis.explain"
)  # its library names of earlier versions (deprecated)


def parse_args(argv: list[str] | None) -> dict[str, str]:
    args = parse_key_values(argv, KEYS, __doc__)
    require("ckpt_path" in args, "missing ckpt_path=...; pass e.g. ckpt_path=<run>/checkpoints/best.ckpt")
    require("text" not in args or "index" not in args, "pass either index= or text=, not both")
    return args


def model_input(checkpoint: Checkpoint, args: dict[str, str]):
    """(model inputs, labels): the user's `text=`, or test example `index=` without its padding."""
    if "text" in args:
        return checkpoint.text_example(args["text"])
    index = args.get("index", "0")
    require(index.isdigit(), f"index={index} is not a test example; use an integer >= 0")
    return checkpoint.without_padding(*checkpoint.example(int(index)))


def most_relevant_table(
    rollout, relevance, tokens: list[str], predicted: list[str], exclude_self: bool, causal: bool
) -> str:
    """For every output position: the input position each method finds it relies on most."""
    from transformer_lab.analysis import explain

    by_rollout = explain.most_relevant(rollout, exclude_self, causal).tolist()
    by_gradient = explain.most_relevant(relevance, exclude_self, causal).tolist()
    itself = " (itself excluded)" if exclude_self else ""
    lines = [
        f"Input position each output relies on most{itself}, with its share of the output's relevance:",
        f"{'output':>6} {'pred':>5} | {'rollout':<17} | gradient-attention",
    ]
    for t, pred in enumerate(predicted):
        if not pred:
            continue  # a position whose output the task does not ask for
        cells = []
        for matrix, j in ((rollout, by_rollout[t]), (relevance, by_gradient[t])):
            cells.append("-" if j < 0 else f"{j:>3} {tokens[j]!r:>5} {float(matrix[t, j]):.2f}")
        lines.append(f"{t:>6} {pred!r:>5} | {cells[0]:<17} | {cells[1]}")
    return "\n".join(lines)


def explain_checkpoint(args: dict[str, str]) -> None:
    """Load the checkpoint, pick the input, write the figures and print what each output relies on."""
    out_dir = output_dir(args.get("out_dir", "explain_out"), "out_dir")
    from transformer_lab import figures
    from transformer_lab.analysis import explain
    from transformer_lab.checkpoint import load
    from transformer_lab.nn import GROUP_TITLES, IGNORE_INDEX, evaluating

    checkpoint = load(
        args["ckpt_path"], device=pick_device(args.get("device", "auto")), data_path=args.get("data_path")
    )
    model = checkpoint.model
    inputs, labels = model_input(checkpoint, args)
    groups = explain.grouped_maps(model, *inputs)
    rollout = explain.rollout(groups)[0]
    relevance = explain.relevance(model, *inputs)[0]
    with evaluating(model):
        predicted_ids = model(*inputs).argmax(dim=-1)[0].tolist()
    names = checkpoint.output_names
    tokens = [checkpoint.tokenizer.display(x[0].tolist()) for x in inputs]  # a BPE's "Ġthe" as "␣the"
    predicted = figures.token_labels([names[i] for i in predicted_ids])
    labelled = labels[0] != IGNORE_INDEX
    if bool(labelled.any()):  # before the first label: a prompt, whose outputs mean nothing
        first = int(labelled.int().argmax())
        predicted = [""] * first + predicted[first:]
    layers = {layer.group: layer for layer in model.attention_layers()}
    reads_source = "cross" if "cross" in groups else "self"
    source, outputs = tokens[0], [p or "·" for p in predicted]
    figures_by_file = {}
    for group, maps in groups.items():
        layer = layers[group]
        labels_of_layers = [item.label for item in model.attention_layers() if item.group == group]
        figures_by_file[GRID_FILES.get(group, f"{group}_attention")] = figures.attention_grid(
            maps,
            tokens[layer.keys],
            title=GROUP_TITLES[group] + figures.GRID_NOTES.get(group, ""),
            row_tokens=tokens[layer.queries],
            labels=labels_of_layers,
        )
        if group == "self":
            for which, index in (("first", 0), ("last", -1)):
                figures_by_file[f"head_mean_{which}"] = figures.token_map(
                    explain.head_mean(maps, index)[0],
                    source,
                    f"{labels_of_layers[index]}, mean over heads",
                    xlabel="key",
                    ylabel="query",
                    colorbar_label="attention weight",
                )
    output_axis = "output: predicted next token" if model.generates and reads_source == "self" else "output"
    through = "; Chefer et al. through cross-attention" if reads_source == "cross" else ""
    for name, matrix, title in (
        ("rollout", rollout, f"Attention rollout (Abnar & Zuidema{through})"),
        ("gradient_attention", relevance, "Gradient-weighted attention (Chefer et al.)"),
    ):
        figures_by_file[name] = figures.token_map(
            matrix,
            source,
            title,
            outputs,
            xlabel="input",
            ylabel=output_axis,
            colorbar_label="share of the output's relevance",
            vmax=figures.colour_cap(matrix) if reads_source == "self" else None,
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, figure in figures_by_file.items():
        write_figure(out_dir / f"{name}.png", figure)
    print(f"input:  {' '.join(source)}")
    print(f"output: {' '.join(outputs)}")
    exclude_self = reads_source == "self"
    print(
        most_relevant_table(
            rollout, relevance, source, predicted, exclude_self, model.generates and exclude_self
        )
    )
    print(f"Wrote {', '.join(f'{name}.png' for name in figures_by_file)} to {out_dir}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    starting(f"Loading {args['ckpt_path']}")
    explain_checkpoint(args)


if __name__ == "__main__":
    run(main)
