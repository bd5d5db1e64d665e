"""An interactive attention explorer in one self-contained HTML file (offline; no server).

    from transformer_lab import load_model
    from transformer_lab.data.tokenizer import Tokenizer
    from transformer_lab.explorer import explore

    model = load_model("saved_models/reverse/<run>/checkpoints/best.ckpt")
    digits = Tokenizer(model.vocab, separator=" ")
    page = explore(model, digits.encode("3 1 4 1 5 9 2 6"))  # the HTML as a str; Jupyter shows it inline
    page.save("explorer.html")                                # open it in any browser, from disk

The page has a head view (hover a token: lines to the tokens it attends to, one colour per head), a
model view (every layer x head as a small heatmap), attention rollout and gradient-weighted relevance
next to the last layer's attention, the head-ablation table, and the model's top-3 predictions per
position. `python scripts/explore.py ckpt_path=...` does the same from a checkpoint.

Files, one job each: `collect.py` (the numbers, from the model's hook points), `pack.py` (matrices
made small), `page.py` (the HTML: page.html + explorer.css + explorer.js + the data, inlined).
"""

from collections.abc import Sequence

from torch import Tensor

from transformer_lab.explorer.collect import ExplorerData, explorer_data
from transformer_lab.explorer.page import ExplorerPage, render, write_page
from transformer_lab.nn import TokenModel

__all__ = ["ExplorerData", "ExplorerPage", "explore", "explorer_data", "render", "write_page"]


def explore(
    model: TokenModel,
    tokens: Sequence[int] | Tensor,
    labels: Sequence[int] | Tensor | None = None,
    title: str | None = None,
    ablation: bool = True,
) -> ExplorerPage:
    """The explorer page for one input of `model` (any model of `transformer_lab.nn`).

    tokens: token ids [T] or [1, T]; for an encoder-decoder the source (its greedy output is explained).
    labels: the expected outputs, to mark each prediction right or wrong: one per position (-100 where
    none) for an encoder or a decoder-only model, the expected output sequence (with <eos>) for an
    encoder-decoder. title: the page's heading. ablation: include the head-ablation table (one forward
    pass per head). Returns the HTML as an `ExplorerPage` (a str; `.save(path)` writes it).
    """
    data = explorer_data(model, tokens, labels, ablation=ablation)
    return render(data, title or f"Attention explorer: {model.config.arch} model")
