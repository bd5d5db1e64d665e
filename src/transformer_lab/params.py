"""Count a model's parameters, part by part: where the weights of a Transformer are.

    python -m transformer_lab.params                                  # the tutorial's reverse model
    python -m transformer_lab.params model.model_dim=100              # the lab's question: embedding size 100
    python -m transformer_lab.params experiment=shakespeare_cpu       # any train.py overrides

The model is built exactly as `python train.py <overrides>` would build it (same task, same settings),
and every parameter tensor is counted once (tied weights are one tensor). A Linear layer of n_in -> n_out
inputs has n_in * n_out weights + n_out biases; a LayerNorm has a scale and a shift per dimension (2d); a
sinusoidal positional encoding is a fixed table, not a parameter.
"""

from collections import defaultdict

from transformer_lab.cli import ArgumentParser, run

KEYS_HELP = "train.py overrides, e.g. model.model_dim=100 model.num_heads=4 task=sort"

MEANING = {  # the module names of transformer_lab.nn, in words
    "embed": "token embedding: a d-vector per token (V x d)",
    "pos_embed": "learned positional encoding: a d-vector per position",
    "attn.qkv_proj": "self-attention: W_Q, W_K, W_V, all heads (3 (d x d + d))",
    "attn.o_proj": "self-attention: output projection W_O (d x d + d)",
    "cross_attn.qkv_proj": "cross-attention: W_Q, W_K, W_V (3 (d x d + d))",
    "cross_attn.o_proj": "cross-attention: output projection W_O (d x d + d)",
    "norm1": "LayerNorm of the self-attention sublayer (2d)",
    "norm2": "LayerNorm of the next sublayer (2d)",
    "norm3": "LayerNorm of the MLP sublayer (2d)",
    "mlp.fc_in": "MLP: d -> d_ff (d x d_ff + d_ff)",
    "mlp.fc_out": "MLP: d_ff -> d (d_ff x d + d)",
    "ln_final": "final LayerNorm (2d)",
}


SUBLAYERS = {
    "norm1": "the self-attention sublayer",
    "norm2": "the next sublayer",
    "norm3": "the MLP sublayer",
}


def part_of(name: str) -> tuple[str, str]:
    """('encoder.blocks.0', 'attn.qkv_proj') for 'encoder.blocks.0.attn.qkv_proj.weight': where a
    parameter is (a block, a stack, or '' for the model itself) and which part of it."""
    path = name.split(".")[:-1]  # without .weight / .bias
    if "blocks" in path:
        at = path.index("blocks") + 2
        return ".".join(path[:at]), ".".join(path[at:])
    if path[0] in ("encoder", "decoder"):
        return path[0], ".".join(path[1:])
    return "", ".".join(path)


def meaning(model, part: str) -> str:
    """What a part is, in words (the modern blocks' by what they are: RMSNorm, grouped-query attention,
    a gated MLP); the output network's layers by their type."""
    config = model.config
    if config.norm == "rms" and (part in SUBLAYERS or part.startswith("ln_final")):
        name = "final RMSNorm" if part.startswith("ln_final") else f"RMSNorm of {SUBLAYERS[part]}"
        return f"{name} (d: a scale, no shift)"
    if part.endswith("qkv_proj") and config.num_kv_heads < config.num_heads:
        kind = "cross-attention" if part.startswith("cross") else "self-attention"
        return (
            f"{kind}: W_Q for {config.num_heads} heads, W_K and W_V for {config.num_kv_heads} key-value "
            "heads (d x d + 2 d x d_kv)"
        )
    if config.activation in ("swiglu", "geglu") and part in ("mlp.fc_gate", "mlp.fc_in", "mlp.fc_out"):
        which = {"mlp.fc_gate": "the gate, d -> d_ff", "mlp.fc_in": "the up projection, d -> d_ff"}
        return f"gated MLP ({config.activation}): {which.get(part, 'the down projection, d_ff -> d')}"
    if part in MEANING:
        return MEANING[part]
    if part.startswith("ln_final"):
        return MEANING["ln_final"]
    layer = model.get_submodule(part)
    kind = type(layer).__name__
    if kind == "Linear":
        tied = " (weight tied to the token embedding: only its bias counts here)"
        head = getattr(model, "unembed", None)
        last = head[-1] if hasattr(head, "__getitem__") else head
        is_tied = layer is last and model.config.tie_embeddings
        return f"output network: Linear {layer.in_features} -> {layer.out_features}" + (
            tied if is_tied else ""
        )
    return f"output network: {kind}"


def parameter_table(model) -> list[tuple[str, str, str, int, str]]:
    """Rows (where, part, tensor shapes, parameters, meaning): every parameter tensor of `model` counted
    once, in the order the model is built."""
    counts: dict[tuple[str, str], list] = defaultdict(list)
    for name, tensor in model.named_parameters():  # named_parameters yields a tied tensor only once
        counts[part_of(name)].append(tensor)
    rows = []
    for (where, part), tensors in counts.items():
        shapes = " + ".join("x".join(str(s) for s in t.shape) for t in tensors)
        rows.append((where, part, shapes, sum(t.numel() for t in tensors), meaning(model, part)))
    return rows


def format_table(rows: list[tuple[str, str, str, int, str]], title: str) -> str:
    """The rows as a text table, with a subtotal after each block and the total."""
    total = sum(row[3] for row in rows)
    lines = [title, f"{'where':<18} {'part':<20} {'tensors':<16} {'params':>9} {'share':>6}  what"]
    block_total, current = 0, None
    for where, part, shapes, count, what in rows:
        if current is not None and where != current and block_total:
            lines.append(f"{'':<18} {'= ' + current:<37} {block_total:>9,}")
            block_total = 0
        current = where
        if "blocks" in where:
            block_total += count
        lines.append(
            f"{where or 'model':<18} {part:<20} {shapes:<16} {count:>9,} {count / total:>6.1%}  {what}"
        )
    if block_total:
        lines.append(f"{'':<18} {'= ' + current:<37} {block_total:>9,}")
    lines.append(f"{'total':<18} {'':<37} {total:>9,} {1:>6.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import argparse
    import sys

    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help=KEYS_HELP)
    overrides = parser.parse_args(sys.argv[1:] if argv is None else argv).overrides
    from transformer_lab.training.compose import compose_config, task_and_model

    cfg = compose_config(overrides)
    _, model = task_and_model(cfg, seed=False)
    config = model.config
    title = (
        f"{type(model).__name__} for task={cfg.task_name}: d={config.model_dim}, heads={config.num_heads}, "
        f"layers={config.num_layers}, d_ff={config.dim_feedforward}, V={config.vocab_size}, "
        f"positions={config.positional_encoding}"
    )
    print(format_table(parameter_table(model), title))


if __name__ == "__main__":
    run(main)
