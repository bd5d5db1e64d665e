"""A per-head measure written outside the package: one function, one registration (docs/development.md).
Importing this module is all it takes for every tool to show it."""

from transformer_lab.analysis import measures


@measures.register(
    "first_token",
    "rise",
    "attention mass on the first token (an attention sink)",
    scale=1.0,
    chance=measures.UNIFORM,
)
def first_token(heads: measures.Heads) -> measures.Table:
    return heads.per_layer(lambda pattern, layer: pattern[..., 0].mean(dim=(0, 2)))
