"""Causal interventions: remove heads, paste activations from one input into another.

Attention maps say where a model looks; intervening says what it uses (the TransformerLens and ARENA
way). Every function here works on any model of `transformer_lab.nn` through its hook points, cross-
attention included, and runs in eval mode without gradients; hooks are gone and the weights untouched
when it returns.

* `ablate_heads`: the task's accuracy with each attention head removed in turn (zero ablation: its
  output z_h = 0; mean ablation: z_h = its mean over a reference batch), as a [layers, heads] table;
  `ablate_head_set` removes several heads at once. The blocks before a removed head's cannot change,
  so they are not run again: they return their output of the run without ablation (`replaying`, as
  TransformerLens's `start_at_layer`), which halves the cost on average.
* `patch_residual` / `patch_heads` (activation patching, or causal tracing): run a corrupted input, but
  paste one activation from the clean run; the share of the clean logit difference that comes back,

      restored = (LD_patched - LD_corrupted) / (LD_clean - LD_corrupted),
      LD = logit(clean answer) - logit(corrupted answer) at the first output the corruption changes,

  says how much of the difference between the two inputs flows through that activation.

A batch is `(inputs, labels)` as the tasks lay it out: model inputs (tokens, or source and target) and
labels [B, T] with -100 where nothing is predicted. "Layers" are the attention layers in forward order
(`attention_layers`): for an encoder-decoder the encoder's, then each decoder block's self- and
cross-attention.
"""

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lab.analysis import intervals
from transformer_lab.analysis.arguments import as_inputs, as_model
from transformer_lab.nn import (
    IGNORE_INDEX,
    HookedModule,
    HookPoint,
    TokenModel,
    evaluating,
    head_name,
    parse_hook_name,
)

ABLATIONS = ("zero", "mean")
LABEL_LETTERS = {"encoder": "E", "decoder": "D"}


def attention_layers(model: TokenModel) -> list[str]:
    """The names of the model's attention modules in forward order, e.g. `blocks.0.attn` or
    `decoder.blocks.1.cross_attn`: the rows of a head table (`model.attention_layers()` has the rest)."""
    return [layer.name for layer in as_model(model).attention_layers()]


def block_names(model: TokenModel) -> list[str]:
    """Every block's name in forward order (an encoder-decoder: the encoder's, then the decoder's)."""
    return [
        f"{p}blocks.{i}" for p, stack in as_model(model).stacks().items() for i in range(len(stack.blocks))
    ]


def keeping_outputs(model: TokenModel, outputs: dict[str, Tensor]) -> list[tuple[str, Callable]]:
    """Hooks that keep every block's output (its `hook_resid_post`) in `outputs`, by block name: what
    `replaying` replays."""

    def keep(activation: Tensor, hook: HookPoint) -> None:
        outputs[hook.name.removesuffix(".hook_resid_post")] = activation

    return [(f"{name}.hook_resid_post", keep) for name in block_names(model)]


@contextmanager
def replaying(model: TokenModel, outputs: dict[str, Tensor], name: str) -> Iterator[None]:
    """Inside the block: every block that runs before the one holding `name` (a hook point or module in
    a block, e.g. `blocks.3.attn.hook_z`) returns its output of an earlier run on the same inputs
    (`outputs`, kept by `keeping_outputs`) instead of computing it: exact, since nothing before `name`
    differs from that run, and the blocks before it cost nothing (TransformerLens's `start_at_layer`)."""
    names = block_names(model)
    block = re.match(r"(.*?blocks\.\d+)(\.|$)", name)
    if block is None:
        raise ValueError(f"{name} is not in a block")
    replayed = [model.get_submodule(n) for n in names[: names.index(block.group(1))]]
    for block, name in zip(replayed, names, strict=False):
        block.forward = lambda *args, _out=outputs[name], **kwargs: (
            _out
        )  # the instance's: shadows the class's
    try:
        yield
    finally:
        for block in replayed:
            del block.forward


def head_label(layer: str, head: int) -> str:
    """A short name for a head: `L0H3` (`blocks.0.attn`), `E0H3` / `D0H3` / `X0H3` for an
    encoder-decoder's encoder, decoder self-attention and cross-attention."""
    name = parse_hook_name(layer)
    letter = "X" if name.module == "cross_attn" else LABEL_LETTERS.get(name.stack, "L")
    return head_name(f"{letter}{name.block}", head)


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Share of labelled positions (labels != -100) whose argmax is the label."""
    labelled = labels != IGNORE_INDEX
    return float(((logits.argmax(dim=-1) == labels) & labelled).sum() / labelled.sum().clamp(min=1))


def _run(model: HookedModule, inputs: tuple[Tensor, ...], fwd_hooks: Sequence = ()) -> Tensor:
    """The logits in eval mode without gradients (the model's mode is restored)."""
    with evaluating(model):
        return model.run_with_hooks(*inputs, fwd_hooks=list(fwd_hooks))


def check_heads(model: TokenModel, heads: list[tuple[int, int]]) -> list[str]:
    """The attention layers' names, after checking that every (layer, head) pair exists."""
    layers = attention_layers(model)
    num_heads = model.config.num_heads
    for layer, head in heads:
        if not 0 <= layer < len(layers):
            raise ValueError(
                f"layer {layer} is out of range: the model has attention layers 0 to {len(layers) - 1}"
            )
        if not 0 <= head < num_heads:
            raise ValueError(f"head {head} is out of range: each layer has heads 0 to {num_heads - 1}")
    return layers


def _reference_means(
    model: HookedModule, layers: list[str], method: str, reference: tuple[Tensor, ...]
) -> dict[str, Tensor] | None:
    """For mean ablation, each layer's z averaged over the reference batch, per position
    ([1, T, H, d_head], in eval mode); None for zero ablation."""
    if method not in ABLATIONS:
        raise ValueError(f"method={method!r} is unknown; use zero or mean")
    if method == "zero":
        return None
    names = {f"{layer}.hook_z" for layer in layers}
    with evaluating(model):
        _, cache = model.run_with_cache(*reference, names_filter=lambda name: name in names)
    return {name: z.mean(dim=0, keepdim=True) for name, z in cache.items()}


def ablation_hooks(
    heads: list[tuple[int, int]], layers: list[str], means: dict[str, Tensor] | None
) -> list[tuple[str, Callable]]:
    """`run_with_hooks` pairs: one hook per layer that replaces the chosen (layer index, head) pairs' z by
    zero (`means=None`) or by their mean; `layers` are `attention_layers(model)`."""
    by_layer: dict[str, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(f"{layers[layer]}.hook_z", []).append(head)

    def ablate(z: Tensor, hook: HookPoint) -> Tensor:
        z = z.clone()
        chosen = by_layer[hook.name]
        if means is None:
            z[:, :, chosen] = 0.0
        else:
            z[:, :, chosen] = means[hook.name][:, : z.size(1), chosen].to(z.dtype)
        return z

    return [(name, ablate) for name in by_layer]


@dataclass
class HeadAblation:
    """The metric with each head ablated: `ablated[layer][head]`, next to `baseline` (nothing ablated);
    with `level`, each value's interval over the examples (`intervals[layer][head]`: [low, high]), the
    interval of its drop from the baseline (`drops`, the same resamples) and whether that drop is within
    noise (`within_noise`: its interval holds 0)."""

    layers: list[str]
    baseline: float
    ablated: list[list[float]]
    method: str = "zero"
    metric: str = "acc"
    level: float = 0.0
    intervals: list[list[list[float]]] | None = None
    within_noise: list[list[bool]] | None = None
    drops: list[list[list[float]]] | None = None
    baseline_loss: float | None = None  # the cross-entropy on the labels, and with each head ablated
    losses: list[list[float]] | None = None

    def _drops(self) -> list[tuple[float, float, float, str]]:
        """(drop, low, high, head) for every head; without intervals, low = high = the drop."""
        found = []
        for i, (layer, row) in enumerate(zip(self.layers, self.ablated, strict=True)):
            for h, value in enumerate(row):
                drop = self.baseline - value
                low, high = self.drops[i][h] if self.drops is not None else (drop, drop)
                found.append((drop, low, high, head_label(layer, h)))
        return sorted(found, key=lambda d: -d[0])

    def important(self, drop: float = 0.1) -> list[str]:
        """The heads whose removal costs more than `drop` of the metric across the whole interval of the
        drop (its low end above it; without intervals, the drop itself), most important first."""
        return [head for _, low, _, head in self._drops() if low > drop]

    def uncertain(self, drop: float = 0.1) -> list[str]:
        """The heads whose drop's interval holds `drop`: whether removing them costs that much, the
        examples do not settle (most costly first)."""
        return [head for _, low, high, head in self._drops() if low <= drop < high]

    def findings(self, drop: float = 0.1) -> list[str]:
        """The lines a tool prints: the heads whose removal costs more than `drop` (across the interval),
        each with its drop and interval; and apart, those the interval leaves uncertain."""
        by_head = {head: (d, low, high) for d, low, high, head in self._drops()}

        def said(heads: list[str]) -> str:
            if self.drops is None:
                return ", ".join(heads) or "none"
            return ", ".join(
                f"{h} {by_head[h][0]:.3f} [{by_head[h][1]:.3f}, {by_head[h][2]:.3f}]" for h in heads
            )

        metric = "accuracy" if self.metric == "acc" else self.metric
        what = f"Heads whose removal costs more than {drop:g} {metric}"
        if self.drops is None:
            return [f"{what}: {said(self.important(drop))}"]
        found = said(self.important(drop)) or "none"
        lines = [f"{what} (the whole {self.level:.0%} interval of the drop): {found}"]
        uncertain = said(self.uncertain(drop)) or "none"
        return [*lines, f"Uncertain (the interval of the drop holds {drop:g}): {uncertain}"]

    def table(self) -> str:
        """The [layers, heads] table as text, one row per attention layer, each value with its interval
        over the examples where there is one, and a `~` after those whose drop from the baseline is
        within noise (its interval holds 0)."""
        heads = len(self.ablated[0])
        width = max(len(name) for name in self.layers)
        noise = self.within_noise or [[False] * heads for _ in self.layers]
        bounds = self.intervals or [[None] * heads for _ in self.layers]
        mark = (
            f"; [its {self.level:.0%} interval over the examples], ~: the drop's holds 0"
            if self.within_noise
            else ""
        )

        def cell(value: float, bound: list[float] | None, near: bool) -> str:
            interval = "" if bound is None else f" [{bound[0]:.3f}, {bound[1]:.3f}]"
            return f"{value:.3f}{interval}{'~' if near else ' '}"

        rows = [
            [cell(v, b, n) for v, b, n in zip(row, bound_row, near, strict=True)]
            for row, bound_row, near in zip(self.ablated, bounds, noise, strict=True)
        ]
        size = max(len(c) for row in rows for c in row)
        lines = [
            f"{self.metric} with one head {self.method}-ablated (baseline {self.baseline:.3f}{mark}):",
            f"{'layer':<{width}} "
            + " ".join(f"{'head ' + str(h):>{size - 1}} " for h in range(heads)).rstrip(),
        ]
        for name, row in zip(self.layers, rows, strict=True):
            lines.append(f"{name:<{width}} " + " ".join(f"{c:>{size}}" for c in row).rstrip())
        return "\n".join(lines)

    def loss_table(self) -> str:
        """The cross-entropy with each head ablated, [layers, heads] as text, and its rise over the
        baseline: what ablation tables of language models report beside accuracy."""
        width = max(len(name) for name in self.layers)
        heads = len(self.losses[0])
        baseline = f"baseline {self.baseline_loss:.4f}"
        title = f"loss with one head {self.method}-ablated ({baseline}; and its change)"
        lines = [
            title + ":",
            f"{'layer':<{width}} " + " ".join(f"{'head ' + str(h):>16}" for h in range(heads)),
        ]
        for name, row in zip(self.layers, self.losses, strict=True):
            cells = [f"{v:.4f} {v - self.baseline_loss:+.4f}" for v in row]
            lines.append(f"{name:<{width}} " + " ".join(f"{c:>16}" for c in cells))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "method": self.method,
            "baseline": self.baseline,
            "layers": self.layers,
            "ablated": self.ablated,
            **({"baseline_loss": self.baseline_loss, "losses": self.losses} if self.losses else {}),
            **(
                {
                    "ci": {
                        "level": self.level,
                        "ablated": self.intervals,
                        "drops": self.drops,
                        "within_noise": self.within_noise,
                    }
                }
                if self.intervals is not None
                else {}
            ),
        }


def ablate_head_set(
    model: TokenModel,
    inputs: Tensor | tuple[Tensor, ...],
    labels: Tensor,
    heads: list[tuple[int, int]],
    method: str = "zero",
    reference: Tensor | tuple[Tensor, ...] | None = None,
) -> float:
    """Accuracy on (inputs, labels) with every head in `heads` ((layer, head) pairs, layer indexing
    `attention_layers`) ablated at once: `zero`, or `mean` (over `reference`, default the inputs)."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    layers = check_heads(model, heads)
    reference = inputs if reference is None else as_inputs(reference, model)
    means = _reference_means(model, layers, method, reference)
    return accuracy(_run(model, inputs, ablation_hooks(heads, layers, means)), labels)


def ablate_heads(
    model: TokenModel,
    inputs: Tensor | tuple[Tensor, ...],
    labels: Tensor | None = None,
    method: str = "zero",
    reference: Tensor | tuple[Tensor, ...] | None = None,
    score: Callable[[Tensor], float] | None = None,
    metric: str = "acc",
    level: float = 0.0,
) -> HeadAblation:
    """The metric with each head ablated in turn, [layers, heads], and the baseline without ablation:
    the accuracy on `labels`, or `score(logits)` (named `metric`) for any other measure. With `level`
    (the accuracy only), each value's bootstrap interval over the examples (`analysis.intervals`) and
    whether its drop from the baseline is within noise."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    if score is None and labels is None:
        raise TypeError("ablate_heads needs the labels (or a score function of the logits)")
    layers = attention_layers(model)
    reference = inputs if reference is None else as_inputs(reference, model)
    means = _reference_means(model, layers, method, reference)
    heads = model.config.num_heads
    ablations = [[]] + [
        ablation_hooks([(i, h)], layers, means) for i in range(len(layers)) for h in range(heads)
    ]
    labelled = None if labels is None else labels != IGNORE_INDEX
    values, correct, losses = [], [], []
    outputs: dict[str, Tensor] = {}  # each block's output without ablation, replayed before an ablated head
    for k, hooks in enumerate(ablations):  # the model without ablation, then each head ablated
        if k == 0:
            logits = _run(model, inputs, keeping_outputs(model, outputs))
        else:
            with replaying(model, outputs, layers[(k - 1) // heads]):
                logits = _run(model, inputs, hooks)
        values.append(score(logits) if score else accuracy(logits, labels))
        if labels is not None and bool(labelled.any()):
            losses.append(float(F.cross_entropy(logits[labelled].float(), labels[labelled])))
        if level and score is None and labels.size(0) > 1:  # over one example, a bootstrap says nothing
            correct.append(((logits.argmax(-1) == labels) & labelled).sum(1))
    rows = [values[1 + i * heads : 1 + (i + 1) * heads] for i in range(len(layers))]
    result = HeadAblation(layers, values[0], rows, method, metric)
    if losses:
        result.baseline_loss = losses[0]
        result.losses = [losses[1 + i * heads : 1 + (i + 1) * heads] for i in range(len(layers))]
    if correct:
        columns = {"correct": torch.stack(correct, dim=1), "labelled": labelled.sum(1)}
        ablated = intervals.bootstrap(columns, lambda s: s["correct"][:, 1:] / s["labelled"][:, None], level)
        drops = intervals.bootstrap(
            columns, lambda s: (s["correct"][:, :1] - s["correct"][:, 1:]) / s["labelled"][:, None], level
        )
        shape = (len(layers), heads)
        result.level = level
        result.intervals = torch.stack(ablated, dim=-1).view(*shape, 2).tolist()
        result.drops = torch.stack(drops, dim=-1).view(*shape, 2).tolist()
        result.within_noise = [[intervals.within(lo, hi) for lo, hi in row] for row in result.drops]
    return result


# ------------------------------------------------------------------------------ activation patching
@dataclass
class Answers:
    """What a logit difference compares in each pair [B]: at `positions`, logit(good) - logit(bad);
    `chosen` marks the rows whose bad answer the corrupted run chose (None: none did)."""

    positions: Tensor
    good: Tensor
    bad: Tensor
    chosen: Tensor | None = None


def answers(
    clean_labels: Tensor,
    corrupted_labels: Tensor,
    corrupted_logits: Tensor | Callable[[Tensor], Tensor] | None = None,
) -> Answers:
    """The answers of each pair: at the first output the corruption changes, the clean label against
    the corrupted one; in a row whose labels it leaves as they were (a language model's text: the next
    tokens stay the text's), at its last labelled output the clean label against the corrupted run's
    most likely token other than it (`corrupted_logits` needed then: [B, T, V], or a function of each
    row's position [B] giving the logits there [B, V])."""
    labelled = clean_labels != IGNORE_INDEX
    differs = labelled & (corrupted_labels != clean_labels)
    changed = differs.any(dim=1)
    if not bool((changed | labelled.any(dim=1)).all()):
        raise ValueError("an example has no labelled output to compare; use other examples")
    rows = torch.arange(clean_labels.size(0), device=clean_labels.device)
    last = clean_labels.size(1) - 1 - labelled.flip(1).int().argmax(dim=1)  # each row's last labelled output
    positions = torch.where(changed, differs.int().argmax(dim=1), last)
    good, bad = clean_labels[rows, positions], corrupted_labels[rows, positions]
    if bool(changed.all()):
        return Answers(positions, good, bad)
    if corrupted_logits is None:
        raise ValueError("a corrupted example has the same labels as its clean one: give its logits")
    if callable(corrupted_logits):
        at = corrupted_logits(positions).float().clone()  # [B, V]
    else:
        at = corrupted_logits.float()[rows, positions].clone()
    at[rows, good] = float("-inf")
    return Answers(positions, good, torch.where(~changed, at.argmax(dim=-1), bad), ~changed)


def logit_difference(logits: Tensor, positions: Tensor, clean: Tensor, corrupted: Tensor) -> Tensor:
    """Mean over the batch of logit(clean answer) - logit(corrupted answer) at each row's position."""
    return logit_differences(logits, positions, clean, corrupted).mean()


def logit_differences(logits: Tensor, positions: Tensor, clean: Tensor, corrupted: Tensor) -> Tensor:
    """Per row [B], logit(clean answer) - logit(corrupted answer) at the row's position."""
    rows = torch.arange(logits.size(0), device=logits.device)
    at = logits[rows, positions].float()
    return at[rows, clean] - at[rows, corrupted]


@dataclass
class Patching:
    """Activation-patching results: `resid[hook name]` = restored share per position [T] (every block's
    `hook_resid_pre` and the last block's `hook_resid_post`), `mlp[hook name]` the same of every MLP's
    output (`hook_mlp_out`), `heads` = restored share per attention layer x head (patching `hook_z` at
    every position), and the clean and corrupted logit differences: what TransformerLens's
    `get_act_patch_resid_pre`, `get_act_patch_mlp_out` and `get_act_patch_attn_head_out_all_pos`
    compute, as shares of (clean - corrupted)."""

    clean: float
    corrupted: float
    resid: dict[str, list[float]]
    layers: list[str]
    heads: list[list[float]]
    mlp: dict[str, list[float]] = field(default_factory=dict)
    chosen: int = 0  # pairs whose wrong answer the corrupted run chose (`answers`)
    level: float = 0.0
    resid_intervals: dict[str, list[list[float]]] | None = None  # [low, high] per position
    mlp_intervals: dict[str, list[list[float]]] | None = None
    head_intervals: list[list[list[float]]] | None = None  # [low, high] per layer and head

    def to_dict(self) -> dict:
        ci = (
            {
                "ci": {
                    "level": self.level,
                    "resid": self.resid_intervals,
                    "mlp": self.mlp_intervals,
                    "heads": self.head_intervals,
                }
            }
            if self.head_intervals is not None
            else {}
        )
        return {
            "metric": "logit_diff",
            "clean_logit_diff": self.clean,
            "wrong_answers_chosen_by_the_corrupted_run": self.chosen,
            "corrupted_logit_diff": self.corrupted,
            "resid": self.resid,
            "mlp": self.mlp,
            "layers": self.layers,
            "heads": self.heads,
            **ci,
        }


def residual_hooks(model: TokenModel) -> list[str]:
    """The residual stream's hook points, per stack: each block's input, then the last block's output."""
    streams = []
    for prefix, stack in as_model(model).stacks().items():
        streams += [f"{prefix}blocks.{i}.hook_resid_pre" for i in range(len(stack.blocks))]
        streams.append(f"{prefix}blocks.{len(stack.blocks) - 1}.hook_resid_post")
    return streams


def patch_hook(name: str, clean: Tensor, index: tuple = (slice(None),)) -> tuple[str, Callable]:
    """A hook for `run_with_hooks` that pastes `clean[index]` (an activation of the clean run, as
    `run_with_cache` returns it) into hook point `name`'s activation; the default index is everything.
    E.g. position p of the residual stream: index=(slice(None), p); head h's z: (slice(None), slice(None), h).
    """

    def paste(activation: Tensor, hook: HookPoint) -> Tensor:
        activation = activation.clone()
        activation[index] = clean[index].to(activation.dtype)
        return activation

    return name, paste


def answer_logits(
    model: TokenModel, inputs: tuple[Tensor, ...], positions: Tensor, hooks: Sequence = ()
) -> Tensor:
    """[B, classes]: the logits at each row's position [B] with `hooks` attached, in eval mode without
    gradients: the forward pass stops at the normalised stream the output layer reads, and only those
    rows go through it (a 50 K vocabulary's logits at every position cost more than the model)."""
    prefix, _ = model.readout
    name = f"{prefix}ln_final.hook_normalized"
    with evaluating(model), model.hooks(list(hooks)):
        _, cache = model.run_with_cache(*inputs, names_filter=name, stop_at_last=True)
        rows = torch.arange(len(positions), device=positions.device)
        return model.unembed(cache[name][rows, positions])


def unchanged_before(model: TokenModel, clean: tuple[Tensor, ...], corrupted: tuple[Tensor, ...]) -> int:
    """The first position where any pair's tokens differ, in a model of one causal stack (a decoder):
    every activation before it is the same in both runs, so patching it restores exactly 0; else 0."""
    stacks = list(model.stacks().values())
    if len(clean) != 1 or len(stacks) != 1 or not stacks[0].causal:
        return 0
    differs = (clean[0] != corrupted[0]).any(dim=0)  # [T]
    return int(differs.int().argmax()) if bool(differs.any()) else clean[0].size(1)


def activation_patching(
    model: TokenModel,
    clean: tuple[tuple[Tensor, ...], Tensor],
    corrupted: tuple[tuple[Tensor, ...], Tensor],
    level: float = 0.0,
) -> Patching:
    """Patch every residual-stream position of every layer, and every head's z, from the clean run into
    the corrupted run; report the share of the clean logit difference each patch restores, and with
    `level` its bootstrap interval over the pairs (`analysis.intervals`).

    `clean` and `corrupted` are (inputs, labels) of the same shapes, differing in a token (a task's
    `corrupted_pairs`, or a language model's prompts: `Checkpoint.prompt_pairs`). The logit difference
    is read as `answers` says: at each row's first output the corruption changes, else at its last
    output against the corrupted run's own most likely token.
    """
    model = as_model(model)
    (clean_inputs, clean_labels), (bad_inputs, bad_labels) = clean, corrupted
    clean_inputs, bad_inputs = as_inputs(clean_inputs, model), as_inputs(bad_inputs, model)
    found = answers(clean_labels, bad_labels, lambda at: answer_logits(model, bad_inputs, at))
    positions, good_answer, bad_answer = found.positions, found.good, found.bad
    rows = torch.arange(len(positions), device=positions.device)
    per_row: dict[str, Tensor] = {}  # every run's logit differences per pair, by name

    def difference(inputs: tuple[Tensor, ...], name: str, hooks: Sequence = ()) -> float:
        at = answer_logits(model, inputs, positions, hooks).float()
        per_row[name] = at[rows, good_answer] - at[rows, bad_answer]
        return float(per_row[name].mean())

    streams = residual_hooks(model)
    mlps = [f"{prefix}blocks.{i}.hook_mlp_out" for prefix, stack in model.stacks().items()
            for i, block in enumerate(stack.blocks) if block.mlp is not None]  # fmt: skip
    layers = attention_layers(model)
    z_names = [f"{layer}.hook_z" for layer in layers]
    same_before = unchanged_before(model, clean_inputs, bad_inputs)
    with evaluating(model):
        wanted = set(streams) | set(mlps) | set(z_names)
        _, cache = model.run_with_cache(*clean_inputs, names_filter=lambda n: n in wanted, stop_at_last=True)
        outputs: dict[str, Tensor] = {}  # the corrupted run's blocks, replayed before each patch
        clean_diff = difference(clean_inputs, "clean")
        bad_diff = difference(bad_inputs, "corrupted", keeping_outputs(model, outputs))
        scale = clean_diff - bad_diff
        if abs(scale) < 1e-6:
            raise ValueError(
                "the clean and corrupted inputs give the same logit difference: nothing to restore"
            )

        def restored(hook: tuple[str, Callable], key: str, position: int | None = None) -> float:
            if position is not None and position < same_before:  # the clean run's activation is the same
                per_row[key] = per_row["corrupted"]
                return 0.0
            with replaying(model, outputs, hook[0]):
                return (difference(bad_inputs, key, [hook]) - bad_diff) / scale

        resid = {
            name: [
                restored(patch_hook(name, cache[name], (slice(None), p)), f"{name}:{p}", p)
                for p in range(cache[name].size(1))
            ]
            for name in streams
        }
        mlp = {
            name: [
                restored(patch_hook(name, cache[name], (slice(None), p)), f"{name}:{p}", p)
                for p in range(cache[name].size(1))
            ]
            for name in mlps
        }
        heads = [
            [
                restored(patch_hook(name, cache[name], (slice(None), slice(None), h)), f"{name}:{h}")
                for h in range(model.config.num_heads)
            ]
            for name in z_names
        ]
    chosen = 0 if found.chosen is None else int(found.chosen.sum())
    result = Patching(clean_diff, bad_diff, resid, layers, heads, mlp, chosen)
    if level and len(positions) > 1:
        keys = [k for k in per_row if ":" in k]
        columns = {"patched": torch.stack([per_row[k] for k in keys], dim=1), **per_row}
        low, high = intervals.bootstrap(
            {k: columns[k] for k in ("patched", "clean", "corrupted")},
            lambda s: (s["patched"] - s["corrupted"][:, None]) / (s["clean"] - s["corrupted"])[:, None],
            level,
        )
        found = dict(zip(keys, torch.stack([low, high], dim=-1).tolist(), strict=True))
        result.level = level
        result.resid_intervals = {n: [found[f"{n}:{p}"] for p in range(len(resid[n]))] for n in streams}
        result.mlp_intervals = {n: [found[f"{n}:{p}"] for p in range(len(mlp[n]))] for n in mlps}
        heads_count = model.config.num_heads
        result.head_intervals = [[found[f"{n}:{h}"] for h in range(heads_count)] for n in z_names]
    return result
