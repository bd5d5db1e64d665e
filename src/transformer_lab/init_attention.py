"""Attention at initialisation: why the scores are divided by sqrt(d_k).

    python -m transformer_lab.init_attention model.model_dim=128                          # scaled (default)
    python -m transformer_lab.init_attention model.model_dim=128 model.scale_attention=false  # unscaled

Builds the model `python train.py <overrides>` would start training from (same task, settings and seed),
runs `num_examples=` of the task's test examples through it, and prints for every layer and head:

    std(q), std(k)    the spread of one query / key coordinate, read at the hook points hook_q / hook_k
    std(score)        the spread of the scores the softmax sees: q.k / sqrt(d_k), or q.k without scaling
    entropy           the mean entropy of the attention rows, in nats, against log(T) for uniform attention
    max weight        the mean of each row's largest attention weight (1 = one key takes everything)
    |grad W_QK|       the norm of the loss's gradient with respect to the head's rows of W_Q and W_K: how
                      much the first training step can change where the head looks

A dot product of d_k coordinates, each a product of two independent values of spread s_q and s_k, has
spread sqrt(d_k) s_q s_k: without the scaling the scores grow with the head size, the softmax saturates,
and almost all of a row's weight goes to one key: d softmax / d score is then nearly zero, and so is
the gradient that would teach the head where to look. Writes the attention
maps of the first example to `out_dir=` (default init_attention_out/) as attention_grid.png.
"""

import math
from pathlib import Path

from transformer_lab.cli import ArgumentParser, run
from transformer_lab.errors import require
from transformer_lab.files import write_figure

OWN_KEYS = ("out_dir", "num_examples")


def attention_statistics(model, inputs: tuple, labels=None) -> list[dict]:
    """Per attention layer: q, k, score, entropy and max-weight statistics per head (lists over heads),
    from one forward pass with the hook points hook_q, hook_k and hook_pattern cached; with `labels`, also
    the norm of the loss's gradient with respect to each head's rows of W_Q and W_K."""
    import torch
    import torch.nn.functional as F

    from transformer_lab.nn import IGNORE_INDEX

    wanted = ("attn.hook_q", "attn.hook_k", "attn.hook_pattern")
    model.eval().zero_grad()
    logits, cache = model.run_with_cache(*inputs, names_filter=lambda name: name.endswith(wanted))
    if labels is not None:
        loss = F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=IGNORE_INDEX)
        loss.backward()
    modules = dict(model.named_modules())
    rows = []
    for name in [n for n in cache if n.endswith("attn.hook_pattern")]:
        layer = name.removesuffix(".hook_pattern")
        q, k = cache[f"{layer}.hook_q"], cache[f"{layer}.hook_k"]  # [B, T, H, d_k]
        pattern = cache[name]  # [B, H, T_query, T_key]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k)
        if model.config.scale_attention:
            scores = scores / math.sqrt(q.size(-1))
        visible = pattern > 0  # keys the mask lets each query see
        entropy = -(pattern * pattern.clamp_min(1e-30).log()).sum(-1)  # [B, H, T]
        attn = modules[layer]  # the MultiheadAttention whose hook points these are
        grad, d = attn.qkv_proj.weight.grad, attn.head_dim
        grad_qk = [
            float(torch.cat([grad[h * d : (h + 1) * d], grad[attn.embed_dim + h * d :][:d]]).norm())
            if grad is not None
            else float("nan")
            for h in range(attn.num_heads)
        ]
        rows.append(
            {
                "layer": layer,
                "grad_qk": grad_qk,
                "q": q.std(dim=(0, 1, 3)).tolist(),
                "k": k.std(dim=(0, 1, 3)).tolist(),
                "score": [float(scores[:, h][visible[:, h]].std()) for h in range(scores.size(1))],
                "entropy": entropy.mean(dim=(0, 2)).tolist(),
                "max_weight": pattern.amax(-1).mean(dim=(0, 2)).tolist(),
                "keys": pattern.size(-1),
                "d_k": q.size(-1),
            }
        )
    return rows


def format_statistics(rows: list[dict], scaled: bool) -> str:
    score = "q.k / sqrt(d_k)" if scaled else "q.k (not scaled)"
    lines = [
        f"{'layer':<22} {'head':>4} {'std(q)':>7} {'std(k)':>7} {'std(score)':>10} {'entropy':>8} "
        f"{'log T':>6} {'max weight':>10} {'|grad W_QK|':>11}   score = {score}"
    ]
    for row in rows:
        for h in range(len(row["q"])):
            lines.append(
                f"{row['layer']:<22} {h:>4} {row['q'][h]:>7.3f} {row['k'][h]:>7.3f} {row['score'][h]:>10.3f} "
                f"{row['entropy'][h]:>8.3f} {math.log(row['keys']):>6.3f} {row['max_weight'][h]:>10.3f} "
                f"{row['grad_qk'][h]:>11.2e}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import argparse
    import sys

    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="train.py overrides, out_dir=, num_examples="
    )
    tokens = parser.parse_args(sys.argv[1:] if argv is None else argv).overrides
    own = {t.partition("=")[0]: t.partition("=")[2] for t in tokens if t.partition("=")[0] in OWN_KEYS}
    overrides = [t for t in tokens if t.partition("=")[0] not in OWN_KEYS]
    count = own.get("num_examples", "64")
    require(count.isdigit() and int(count) > 0, f"num_examples={count} must be a positive integer")
    out_dir = Path(own.get("out_dir", "init_attention_out"))

    from transformer_lab import figures
    from transformer_lab.errors import as_config_error
    from transformer_lab.training.compose import compose_config, task_and_model

    cfg = compose_config(overrides)
    task, model = task_and_model(cfg)
    with as_config_error():
        inputs, labels = task.examples(int(count))
    rows = attention_statistics(model, inputs, labels)
    config = model.config
    print(
        f"{type(model).__name__} for task={cfg.task_name} at initialisation (seed {cfg.seed}): "
        f"d={config.model_dim}, heads={config.num_heads}, d_k={rows[0]['d_k']}, "
        f"scale_attention={config.scale_attention}, {int(count)} test examples"
    )
    print(format_statistics(rows, config.scale_attention))

    from transformer_lab.analysis import explain

    first = tuple(x[:1] for x in inputs)
    maps = explain.attention_maps(model, *first)
    vocab = model.vocab
    labels = [vocab[i] for i in first[0][0].tolist()]
    title = f"At initialisation, scale_attention={config.scale_attention} (d_k={rows[0]['d_k']})"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "attention_grid.png"
    write_figure(path, figures.attention_grid([m.detach() for m in maps[: len(rows)]], labels, title=title))
    print(f"Wrote {path}")


if __name__ == "__main__":
    run(main)
