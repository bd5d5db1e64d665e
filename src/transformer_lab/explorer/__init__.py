"""An interactive attention explorer in one self-contained HTML file (offline; no server).

    import transformer_lab
    from transformer_lab.explorer import explore

    ckpt = transformer_lab.load("pretrained:reverse_2l4h")
    page = explore(ckpt, *ckpt.text_example("3 1 4 1 5 9 2 6"))  # a str; Jupyter shows it inline
    page.save("explorer.html")                                   # open it in any browser, from disk

The page has a head view (hover a token: lines to the tokens it attends to, one colour per head), a
model view (every layer x head as a small heatmap), attention rollout and gradient-weighted relevance
next to the last layer's attention, the head-ablation table, and the model's top-3 predictions per
position. `python -m transformer_lab.explore ckpt_path=...` does the same from a checkpoint.

Files, one job each: `collect.py` (the numbers, from the model's hook points), `pack.py` (matrices
made small), `page.py` (the HTML: page.html + explorer.css + explorer.js + the data, inlined).
"""

from collections.abc import Sequence

from torch import Tensor

from transformer_lab.analysis.arguments import as_model
from transformer_lab.explorer.collect import ExplorerData, explorer_data
from transformer_lab.explorer.page import ExplorerPage, render, write_page
from transformer_lab.nn import TokenModel

__all__ = ["ExplorerData", "ExplorerPage", "explore", "explorer_data", "render", "write_page"]


def explore(
    model: TokenModel,
    tokens: Sequence[int] | Tensor | tuple[Tensor, ...],
    labels: Sequence[int] | Tensor | None = None,
    title: str | None = None,
    ablation: bool = True,
) -> ExplorerPage:
    """The explorer page for one input of `model` (any model of `transformer_lab.nn`, or a checkpoint
    loaded with `transformer_lab.load`, whose task then names the outputs).

    tokens: token ids [T] or [1, T], or the model's inputs as a tuple (an encoder-decoder: source and
    target; given the source alone, it is explained on the output it writes greedily). labels: the
    expected output at each output position (-100 where none), to mark each prediction right or wrong.
    title: the page's heading. ablation: include the head-ablation table (one forward pass per head).
    Returns the HTML as an `ExplorerPage` (a str; `.save(path)` writes it).
    """
    names = getattr(model, "output_names", None)  # a Checkpoint knows its task's class names
    net = as_model(model)
    data = explorer_data(net, tokens, labels, ablation=ablation, output_names=names)
    return render(data, title or f"Attention explorer: {net.config.arch} model")
