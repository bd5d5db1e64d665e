"""Look inside a trained checkpoint: attention maps, rollout and gradient-weighted attention as PNGs.

    python scripts/explain.py ckpt_path=saved_models/reverse/<run>/checkpoints/best.ckpt index=5 out_dir=docs
    python scripts/explain.py ckpt_path=<decoder run>/checkpoints/best.ckpt text="ROMEO:" out_dir=explain_out

Writes attention_grid.png, head_mean_first.png, head_mean_last.png, rollout.png and
gradient_attention.png, and prints, for every output position, the input position it relies on most.
"""

from pathlib import Path

import torch

from transformer_lab import explain, plots
from transformer_lab.checkpoints import predictor_from_checkpoint, read_checkpoint
from transformer_lab.cli import parse_key_values, pick_device, run
from transformer_lab.data import CharTokenizer, ReverseDataModule
from transformer_lab.errors import ConfigError, require
from transformer_lab.predictor import TransformerPredictor

KEYS = {
    "ckpt_path": "checkpoint to explain (required), e.g. <run>/checkpoints/best.ckpt",
    "index": "encoder checkpoints: which example of the test set (default 0)",
    "text": 'decoder checkpoints: the text to explain, e.g. text="ROMEO:"',
    "out_dir": "where to write the PNGs (default explain_out)",
    "device": "auto | cpu | cuda | mps (default auto)",
}


def parse_args(argv: list[str] | None) -> dict[str, str]:
    args = parse_key_values(argv, KEYS, __doc__)
    require("ckpt_path" in args, "missing ckpt_path=...; pass e.g. ckpt_path=<run>/checkpoints/best.ckpt")
    return args


def encode_text(model: TransformerPredictor, args: dict[str, str]) -> torch.Tensor:
    """Decoder: the characters of `text=` as token ids [1, T]."""
    require(
        "index" not in args,
        'index= picks a test example of an encoder checkpoint; for this decoder pass text="..."',
    )
    require(
        "text" in args,
        'this is a decoder (language model) checkpoint: pass the text to explain, e.g. text="ROMEO:"',
    )
    vocab, text = model.hparams.vocab, args["text"]
    require(
        vocab is not None, "the checkpoint has no vocabulary (hyper_parameters['vocab']) to encode text= with"
    )
    require(len(text) > 0, 'text= is empty; pass some characters, e.g. text="ROMEO:"')
    require(
        len(text) <= model.block_size,
        f"text has {len(text)} characters, more than the model's context of {model.block_size}; shorten it",
    )
    return CharTokenizer(vocab).encode(text).unsqueeze(0)


def reverse_example(checkpoint: dict, args: dict[str, str]) -> torch.Tensor:
    """Encoder: test example `index=` of the reverse datamodule rebuilt from the checkpoint, [1, T]."""
    require(
        "text" not in args,
        "text= is for decoder checkpoints; for this encoder pick a test example with index=N",
    )
    hparams = checkpoint.get("datamodule_hyper_parameters")
    require(
        hparams is not None, "the checkpoint has no datamodule_hyper_parameters to rebuild its test set from"
    )
    try:
        datamodule = ReverseDataModule(**hparams)
    except TypeError as exc:
        raise ConfigError(f"the checkpoint's datamodule is not the reverse task's: {exc}") from exc
    index = args.get("index", "0")
    size = datamodule.hparams.test_size
    require(
        index.isdigit() and int(index) < size,
        f"index={index} is not a test example; use an integer from 0 to {size - 1}",
    )
    datamodule.setup("test")
    return datamodule.test_set[int(index)][0].unsqueeze(0)


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
    model = predictor_from_checkpoint(checkpoint, args["ckpt_path"], pick_device(args.get("device", "auto")))
    device = model.device
    causal = model.hparams.causal
    x = (encode_text(model, args) if causal else reverse_example(checkpoint, args)).to(device)
    vocab = model.hparams.vocab or [str(i) for i in range(model.hparams.vocab_size)]
    out_dir = Path(args.get("out_dir", "explain_out"))
    out_dir.mkdir(parents=True, exist_ok=True)

    with torch.no_grad():
        maps = explain.attention_maps(model, x)
        predicted_ids = model(x).argmax(dim=-1)[0].tolist()
    rollout = explain.attention_rollout(maps)[0]
    relevance = explain.gradient_attention_all(model, x)[0]

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
