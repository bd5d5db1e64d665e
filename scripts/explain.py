"""Look inside a trained checkpoint: attention maps, rollout and gradient-weighted attention as PNGs.

    python scripts/explain.py ckpt_path=saved_models/reverse/<run>/checkpoints/best.ckpt index=5
    python scripts/explain.py ckpt_path=<decoder run>/checkpoints/best.ckpt text="ROMEO:" out_dir=explain_out

The input is test example `index=` of the checkpoint's task (default 0), or your own `text=` (written as
the task writes it: characters for Tiny Shakespeare, "3 1 4 1" for digit tasks). Writes
attention_grid.png, head_mean_first.png, head_mean_last.png, rollout.png and gradient_attention.png, and
prints, for every output position, the input position it relies on most.
"""

from pathlib import Path

import torch

from transformer_lab import explain, plots
from transformer_lab.checkpoints import (
    model_from_checkpoint,
    read_checkpoint,
    task_from_checkpoint,
    tokenizer_from_checkpoint,
)
from transformer_lab.cli import parse_key_values, pick_device, run
from transformer_lab.errors import require
from transformer_lab.nn import TokenModel

KEYS = {
    "ckpt_path": "checkpoint to explain (required), e.g. <run>/checkpoints/best.ckpt",
    "index": "which test example of the checkpoint's task (default 0)",
    "text": 'your own input instead, e.g. text="ROMEO:" (Shakespeare) or text="3 1 4 1" (digits)',
    "out_dir": "where to write the PNGs (default explain_out)",
    "device": "auto | cpu | cuda | mps (default auto)",
}


def parse_args(argv: list[str] | None) -> dict[str, str]:
    args = parse_key_values(argv, KEYS, __doc__)
    require("ckpt_path" in args, "missing ckpt_path=...; pass e.g. ckpt_path=<run>/checkpoints/best.ckpt")
    require("text" not in args or "index" not in args, "pass either index= or text=, not both")
    return args


def model_input(checkpoint: dict, model: TokenModel, args: dict[str, str]) -> torch.Tensor:
    """Token ids [1, T]: the user's `text=`, or test example `index=` of the checkpoint's task."""
    path = args["ckpt_path"]
    if "text" in args:
        text = args["text"]
        require(len(text.strip()) > 0, 'text= is empty; pass some input, e.g. text="ROMEO:"')
        ids = tokenizer_from_checkpoint(checkpoint, path).encode(text)
        require(
            len(ids) <= model.max_len,
            f"text has {len(ids)} tokens, more than the model's {model.max_len} positions; shorten it",
        )
        return ids.unsqueeze(0)
    index = args.get("index", "0")
    require(index.isdigit(), f"index={index} is not a test example; use an integer >= 0")
    inputs, _ = task_from_checkpoint(checkpoint, path).example(int(index), split="test")
    return inputs[0]


def most_relevant_table(
    rollout: torch.Tensor, relevance: torch.Tensor, tokens: list[str], predicted: list[str], causal: bool
) -> str:
    """For every output position: the input position (other than itself) each method finds most relevant."""
    by_rollout = explain.most_relevant(rollout, causal=causal).tolist()
    by_gradient = explain.most_relevant(relevance, causal=causal).tolist()
    what = "next-token prediction" if causal else "prediction"
    lines = [
        f"Input position each output relies on most (itself excluded; output t = the {what} at t):",
        f"{'output':>6} {'pred':>5} | {'rollout':<17} | gradient-attention",
    ]
    for t, pred in enumerate(predicted):
        cells = []
        for matrix, j in ((rollout, by_rollout[t]), (relevance, by_gradient[t])):
            cells.append("-" if j < 0 else f"{j:>3} {tokens[j]!r:>5} {float(matrix[t, j]):.2f}")
        lines.append(f"{t:>6} {pred!r:>5} | {cells[0]:<17} | {cells[1]}")
    return "\n".join(lines)


def off_diagonal_max(matrix: torch.Tensor) -> float:
    """Colour-scale cap: the diagonal (each token relying on itself, via the residual path) saturates."""
    eye = torch.eye(matrix.size(-1), dtype=torch.bool, device=matrix.device)
    return float(matrix.masked_fill(eye, 0).max())


def explain_checkpoint(args: dict[str, str]) -> None:
    checkpoint = read_checkpoint(args["ckpt_path"])
    model = model_from_checkpoint(checkpoint, args["ckpt_path"], pick_device(args.get("device", "auto")))
    device = next(model.parameters()).device
    x = model_input(checkpoint, model, args).to(device)
    causal = model.causal
    out_dir = Path(args.get("out_dir", "explain_out"))
    out_dir.mkdir(parents=True, exist_ok=True)

    with torch.no_grad():
        maps = explain.attention_maps(model, x)
        predicted_ids = model(x).argmax(dim=-1)[0].tolist()
    rollout = explain.attention_rollout(maps)[0]
    relevance = explain.gradient_attention_all(model, x)[0]

    vocab = model.vocab
    tokens = plots.token_labels([vocab[i] for i in x[0].tolist()])
    predicted = plots.token_labels([vocab[i] for i in predicted_ids])

    outputs = "output: predicted next token" if causal else "output: predicted token"
    figures = {
        "attention_grid": plots.attention_grid(maps, tokens, title="Attention weights (row = query)"),
        "head_mean_first": plots.token_map(
            explain.head_mean(maps, 0)[0],
            tokens,
            "Layer 1, mean over heads",
            xlabel="key",
            ylabel="query",
            colorbar_label="attention weight",
        ),
        "head_mean_last": plots.token_map(
            explain.head_mean(maps, -1)[0],
            tokens,
            f"Layer {len(maps)} (last), mean over heads",
            xlabel="key",
            ylabel="query",
            colorbar_label="attention weight",
        ),
        "rollout": plots.token_map(
            rollout,
            tokens,
            "Attention rollout (Abnar & Zuidema)",
            predicted,
            ylabel=outputs,
            colorbar_label="share of the output",
            vmax=off_diagonal_max(rollout),
        ),
        "gradient_attention": plots.token_map(
            relevance,
            tokens,
            "Gradient-weighted attention (Chefer et al.)",
            predicted,
            ylabel=outputs,
            colorbar_label="relevance",
            vmax=off_diagonal_max(relevance),
        ),
    }
    for name, figure in figures.items():
        figure.savefig(out_dir / f"{name}.png", dpi=100)

    print(f"input:  {' '.join(tokens)}")
    print(f"output: {' '.join(predicted)}")
    print(most_relevant_table(rollout, relevance, tokens, predicted, causal))
    print(f"Wrote {', '.join(f'{name}.png' for name in figures)} to {out_dir}")


def main(argv: list[str] | None = None) -> None:
    explain_checkpoint(parse_args(argv))


if __name__ == "__main__":
    run(main)
