"""Look inside a trained checkpoint: attention maps, rollout and gradient-weighted attention as PNGs.

    python scripts/explain.py ckpt_path=saved_models/reverse/<run>/checkpoints/best.ckpt index=5
    python scripts/explain.py ckpt_path=<decoder run>/checkpoints/best.ckpt text="ROMEO:" out_dir=explain_out
    python scripts/explain.py ckpt_path=saved_models/sort/<run>/checkpoints/best.ckpt text="3 1 3 9 1"

The input is test example `index=` of the checkpoint's task (default 0), or your own `text=` (written as
the task writes it: characters for Tiny Shakespeare, "3 1 4 1" for digit tasks; for an encoder-decoder,
the source). Writes attention_grid.png, head_mean_first.png, head_mean_last.png, rollout.png and
gradient_attention.png (an encoder-decoder: encoder_attention.png, decoder_attention.png,
cross_attention.png, rollout.png, gradient_attention.png, explaining the output it generates), and
prints, for every output position, the input position it relies on most.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.cli import parse_key_values, pick_device, run
from transformer_lab.errors import as_config_error, require

if TYPE_CHECKING:  # torch, matplotlib and the model load after the arguments are parsed (fast --help)
    import torch

    from transformer_lab.nn import EncoderDecoder, TokenModel

KEYS = {
    "ckpt_path": "checkpoint to explain (required), e.g. <run>/checkpoints/best.ckpt",
    "index": "which test example of the checkpoint's task (default 0)",
    "text": 'your own input instead, e.g. text="ROMEO:" (Shakespeare) or text="3 1 4 1" (digits, a source)',
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
    from transformer_lab.checkpoints import example_from_checkpoint, text_from_checkpoint

    path = args["ckpt_path"]
    if "text" in args:
        return text_from_checkpoint(checkpoint, path, args["text"], model.max_len).unsqueeze(0)
    inputs, _ = example_from_checkpoint(checkpoint, path, args.get("index", "0"))
    tokens = inputs[0]
    return tokens if model.pad_id is None else tokens[:, tokens[0] != model.pad_id]  # without padding


def most_relevant_table(
    rollout: torch.Tensor, relevance: torch.Tensor, tokens: list[str], predicted: list[str], causal: bool
) -> str:
    """For every output position: the input position (other than itself) each method finds most relevant."""
    from transformer_lab import explain

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


def explain_checkpoint(args: dict[str, str]) -> None:
    """Load the checkpoint, pick the input, and write the figures of its architecture."""
    from transformer_lab.checkpoints import model_from_checkpoint, read_checkpoint
    from transformer_lab.nn import EncoderDecoder

    checkpoint = read_checkpoint(args["ckpt_path"])
    model = model_from_checkpoint(checkpoint, args["ckpt_path"], pick_device(args.get("device", "auto")))
    x = model_input(checkpoint, model, args).to(next(model.parameters()).device)
    out_dir = Path(args.get("out_dir", "explain_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(model, EncoderDecoder):
        explain_encoder_decoder(model, x, out_dir)
    else:
        explain_stack(model, x, out_dir)


def explain_encoder_decoder(model: EncoderDecoder, source: torch.Tensor, out_dir: Path) -> None:
    """The output the model generates for `source`, and how each output token reads the source."""
    import torch

    from transformer_lab import explain, plots

    with as_config_error():
        output = model.generate(source)
    target = torch.cat([torch.full_like(output[:, :1], model.bos_id), output[:, :-1]], dim=1)
    maps = explain.encoder_decoder_maps(model, source, target)
    # each output token's relevance as shares of 1 over the source: rows compare across outputs
    rollout = explain.row_shares(explain.encoder_decoder_rollout(maps)[0])
    relevance = explain.row_shares(explain.source_relevance(model, source, target)[0])
    vocab = model.vocab
    source_tokens = plots.token_labels([vocab[i] for i in source[0].tolist()])
    target_tokens = plots.token_labels([vocab[i] for i in target[0].tolist()])
    output_tokens = plots.token_labels([vocab[i] for i in output[0].tolist()])
    figures = {
        "encoder_attention": plots.attention_grid(
            maps["encoder"], source_tokens, title="Encoder self-attention"
        ),
        "decoder_attention": plots.attention_grid(
            maps["decoder"], target_tokens, title="Decoder self-attention (causal; row = target position)"
        ),
        "cross_attention": plots.attention_grid(
            maps["cross"], source_tokens, title="Cross-attention (row = target, column = source)",
            row_tokens=target_tokens,
        ),
        "rollout": plots.token_map(
            rollout, source_tokens, "Rollout (Chefer et al.)", output_tokens,
            xlabel="source", ylabel="output token", colorbar_label="share of the output's relevance",
        ),
        "gradient_attention": plots.token_map(
            relevance, source_tokens, "Gradient x attention (Chefer et al.)", output_tokens,
            xlabel="source", ylabel="output token", colorbar_label="share of the output's relevance",
        ),
    }  # fmt: skip
    for name, figure in figures.items():
        figure.savefig(out_dir / f"{name}.png", dpi=100)
    by_rollout, by_gradient = rollout.argmax(-1).tolist(), relevance.argmax(-1).tolist()
    print(f"source: {' '.join(source_tokens)}")
    print(f"output: {' '.join(output_tokens)}")
    print("Source position each output token relies on most (its share of the output's relevance):")
    print(f"{'output':>6} {'token':>7} | {'rollout':<17} | gradient-attention")
    for t, token in enumerate(output_tokens):
        cells = [
            f"{j:>3} {source_tokens[j]!r:>5} {float(m[t, j]):.2f}"
            for m, j in ((rollout, by_rollout[t]), (relevance, by_gradient[t]))
        ]
        print(f"{t:>6} {token!r:>7} | {cells[0]:<17} | {cells[1]}")
    print(f"Wrote {', '.join(f'{name}.png' for name in figures)} to {out_dir}")


def explain_stack(model: TokenModel, x: torch.Tensor, out_dir: Path) -> None:
    """Self-attention of an encoder or a decoder-only model on `x`, and what each output relies on."""
    import torch

    from transformer_lab import explain, plots

    causal = model.causal
    with torch.no_grad():
        maps = explain.attention_maps(model, x)
        predicted_ids = model(x).argmax(dim=-1)[0].tolist()
    rollout = explain.attention_rollout(maps)[0]
    relevance = explain.attention_added(explain.gradient_attention_all(model, x)[0])

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
            vmax=plots.colour_cap(rollout),
        ),
        "gradient_attention": plots.token_map(
            relevance,
            tokens,
            "Gradient-weighted attention (Chefer et al.)",
            predicted,
            ylabel=outputs,
            colorbar_label="share of the output's relevance",
            vmax=plots.colour_cap(relevance),
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
