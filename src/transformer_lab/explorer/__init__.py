"""An interactive attention explorer in one self-contained HTML file (offline; no server).

    import transformer_lab
    from transformer_lab.explorer import explore

    ckpt = transformer_lab.load("pretrained:reverse_2l4h")
    page = explore(ckpt, *ckpt.text_example("3 1 4 1 5 9 2 6"))  # a str; Jupyter shows it inline
    page.save("explorer.html")                                   # open it in any browser, from disk

The page has a head view (hover a token: lines to the tokens it attends to, one colour per head), a
model view (every layer x head as a small heatmap), attention rollout and gradient-weighted relevance
next to the last layer's attention, the head-ablation table, activation patching, and the model's top-3
predictions per position. A live page (the default where the model fits) also holds the model's weights
and runs it in the page: edit the input, remove heads, generate, and every view follows.
`python -m transformer_lab.explore ckpt_path=...` does the same from a checkpoint.

Files, one job each: `collect.py` (the numbers, from the model's hook points), `pack.py` (matrices
made small), `layout.py` (what the page's forward pass runs: the settings, the label rules, the role of
every weight), `live.py` (the model packed for the page), `page.py` (the HTML: page.html, explorer.css,
the JavaScript modules in the order of `page.MODEL_SCRIPTS` and `page.PAGE_SCRIPTS`, and the data,
inlined).
"""

from collections.abc import Sequence

from torch import Tensor

from transformer_lab.analysis.arguments import as_model
from transformer_lab.errors import ConfigError
from transformer_lab.explorer import live as live_module
from transformer_lab.explorer.collect import MEASURE_EXAMPLES, ExplorerData, explorer_data, head_measures
from transformer_lab.explorer.layout import check_runnable
from transformer_lab.explorer.live import Snapshot, live_payload
from transformer_lab.explorer.page import ExplorerPage, render, write_page
from transformer_lab.nn import TokenModel

__all__ = [
    "ExplorerData",
    "ExplorerPage",
    "Snapshot",
    "explore",
    "explorer_data",
    "render",
    "write_page",
]
PAGE_SECONDS = 8.0  # of a default page's time, for each of its two reads of the task's examples
REFERENCE_EXAMPLES = 512  # the reference batch of mean ablation: as many test examples as interpret.py's


def _task_facts(checkpoint: object) -> dict:
    """What a loaded checkpoint's task tells the page: how it writes text (a byte-level BPE: the
    tokenizer itself, `data.tokenizer.page_tokenizer`), its rule for the expected output of an edited
    input, the source lengths it trains on, and its reference batch."""
    facts: dict = {}
    if not hasattr(checkpoint, "tokenizer"):
        return facts
    try:
        tokenizer = checkpoint.tokenizer
    except (ConfigError, OSError, ValueError):  # no task record
        return facts
    from transformer_lab.data.tokenizer import page_tokenizer

    facts["tokenizer"] = page_tokenizer(tokenizer)  # a BPE the page cannot hold is refused: live=false
    if facts["tokenizer"] is not None:
        facts["decode"], facts["token_names"] = tokenizer.decode, tokenizer.names()
    try:
        facts["separator"] = tokenizer.separator
        facts["label_rule"] = checkpoint.label_rule
        task = checkpoint.task
        low, high = getattr(task, "min_seq_len", None), getattr(task, "max_source_len", None)
        if isinstance(low, int) and isinstance(high, int):
            facts["trained_lengths"] = (low, high)
        facts["reference"] = checkpoint.examples(_within(checkpoint, REFERENCE_EXAMPLES, 1), exact=False)[0]
    except (ConfigError, OSError, ValueError):  # no task record, or its data cannot be read here
        pass
    return facts


def _within(checkpoint: object, usual: int, passes: int) -> int:
    """How many of the task's examples the page reads where `usual` would take more than its share of
    the page's time budget on a laptop CPU (a text model of millions of parameters; estimated from its size,
    `analysis.budget`); said in one line."""
    from transformer_lab.analysis.budget import examples_within
    from transformer_lab.progress import say

    probe, _ = checkpoint.examples(min(8, usual), exact=False)
    what = "the page's mean ablation" if passes == 1 else "the page's per-head measures"
    sets = "interpret analysis=heads num_examples= reads more"
    count, line = examples_within(checkpoint.model, probe, passes, usual, what, PAGE_SECONDS, sets)
    if line:
        say(line)
    return count


def _task_measures(checkpoint: object) -> dict | None:
    """The per-head measures of a loaded checkpoint's model on its task's first test examples (the page's
    heads view), or None for a bare model or a task whose data cannot be read here."""
    if not hasattr(checkpoint, "examples"):
        return None
    try:
        passes = len(checkpoint.model.attention_layers()) * checkpoint.model.config.num_heads + 4
        inputs, labels = checkpoint.examples(_within(checkpoint, MEASURE_EXAMPLES, passes), exact=False)
        return head_measures(checkpoint.model, inputs, labels, checkpoint.task)
    except (ConfigError, OSError, ValueError):
        return None


def explore(
    model: TokenModel,
    tokens: Sequence[int] | Tensor | tuple[Tensor, ...],
    labels: Sequence[int] | Tensor | None = None,
    title: str | None = None,
    ablation: bool = True,
    live: bool = True,
    reference: Tensor | tuple[Tensor, ...] | None = None,
    snapshots: Sequence[Snapshot] | None = None,
    weights: str = "float32",
    weight_budget: int | None = None,
    features: dict | None = None,
) -> ExplorerPage:
    """The explorer page for one input of `model` (any model of `transformer_lab.nn`, or a checkpoint
    loaded with `transformer_lab.load`, whose task then names the outputs).

    tokens: token ids [T] or [1, T], or the model's inputs as a tuple (an encoder-decoder: source and
    target; given the source alone, it is explained on the output it writes greedily). labels: the
    expected output at each output position (-100 where none), to mark each prediction right or wrong.
    title: the page's heading. ablation: include the head-ablation table (one forward pass per head).
    live: put the model in the page so that the page runs it (its weights take at most `weight_budget`
    characters, default `live.WEIGHT_BUDGET`, 20 MB; `weights="float16"` halves them); a model over the
    budget gets the precomputed page with a note saying why (`page.live_note`). reference: the batch
    whose mean z replaces a head in mean ablation (default: a checkpoint's first 512 test examples, else
    the input). snapshots: the same model at other training steps, for the page's step slider.
    features: an SAE of the model, for the features view (`features.features_payload`).
    Returns the HTML as an `ExplorerPage` (a str; `.save(path)` writes it). A live page of a model with a
    setting the page's JavaScript cannot run is a ConfigError, raised before anything is computed
    (`layout.check_runnable`; `live=False` makes the precomputed page).
    """
    names = getattr(model, "output_names", None)  # a Checkpoint knows its task's class names
    net = as_model(model)
    if live:
        check_runnable(net.config)
    facts = _task_facts(model) if live else {}
    data = explorer_data(net, tokens, labels, ablation=ablation, output_names=names)
    data.measures = _task_measures(model)
    heading = title or f"Attention explorer: {net.config.arch} model"
    if not live:
        return render(data, heading, features=features)
    inputs = tuple(_batch(x, net) for x in data.inputs)
    if reference is not None:
        reference = (reference,) if isinstance(reference, Tensor) else tuple(reference)
        reference = tuple(_batch(x, net, row=False) for x in reference)
    section, note = live_payload(
        net,
        inputs,
        labels=data.labels,
        reference=reference or facts.get("reference") or inputs,
        snapshots=list(snapshots) if snapshots else None,
        dtype=weights,
        budget=weight_budget or live_module.WEIGHT_BUDGET,
        separator=facts.get("separator"),
        label_rule=facts.get("label_rule"),
        output_names=names,
        trained_lengths=facts.get("trained_lengths"),
        tokenizer=facts.get("tokenizer"),
        decode=facts.get("decode"),
        token_names=facts.get("token_names"),
    )
    page = render(data, heading, live=section, live_note=note, features=features)
    page.live_note = note
    page.steps = len(section["series"]["steps"]) if section and section["series"] else 0
    page.weight_chars = section["chars"] if section else 0
    return page


def _batch(x: object, model: TokenModel, row: bool = True) -> Tensor:
    """Token ids as a LongTensor on the model's device: [1, T] for one row, as given for a batch."""
    import torch

    device = next(model.parameters()).device
    tensor = torch.as_tensor(x, dtype=torch.long, device=device)
    return tensor.reshape(1, -1) if row else tensor
