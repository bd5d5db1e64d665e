"""Patching many sets of units at once: the `Patcher`, and `prepare`, which makes the `Setup` every method
and every evaluation works on.

Patching edge u -> d replaces u's term in d's input only:

    input_d  ->  input_d + (out_u' - out_u)

where out_u' is u's output on the corrupted input (`ablation="corrupted"`), zero (`"zero"`) or its mean
over the batch (`"mean"`). At node level (post-norm models) a node is patched as a whole: its output is
replaced by out_u'. Everything runs in eval mode, leaves no hook behind and never changes a weight.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch
from torch import Tensor

from transformer_lab.analysis.arguments import as_inputs, as_model
from transformer_lab.analysis.circuits.graph import Graph
from transformer_lab.analysis.circuits.graph import graph as build_graph
from transformer_lab.analysis.circuits.metrics import Metric, make_metric
from transformer_lab.analysis.circuits.options import require_ablation, require_metric
from transformer_lab.errors import require
from transformer_lab.limits import available_memory
from transformer_lab.nn import HookPoint, TokenModel, evaluating

ADVICE = "use method=eap (two forward passes and one backward pass) or fewer examples (num_examples=)"
MAX_REPLICAS = 32  # copies of the batch per patched forward pass (memory permitting)
Batch = tuple[tuple[Tensor, ...], Tensor]


class Patcher:
    """Runs the model on R copies of the clean batch at once, copy r with its own set of patched edges
    (or nodes): `mask` [R, units], 1 = patched (carries the ablated value), 0 = clean.

    The alternative outputs out_u' (corrupted run, zero or batch mean) are computed once. At edge level a
    hook on each node's output records its value in the current pass (one buffer [U, R B, T, D] per
    stack), and a hook on each input d adds sum_u mask[u -> d] (out_u' - out_u) to it (two matrix
    products over u); at node level the output itself is mixed: out + mask (out' - out)."""

    def __init__(
        self, model: TokenModel, g: Graph, inputs: tuple[Tensor, ...], alternative: dict[int, Tensor]
    ):
        self.model, self.graph, self.inputs = model, g, inputs
        self.batch = inputs[0].size(0)
        self.alternative = alternative  # node index -> [B, T, D] (a head's slice at node level: [B, T, d])
        self.mask: Tensor | None = None
        self.current: dict[str, Tensor] = {}  # per stack, the outputs of this pass [U, R * B, T, D]
        self.replace: dict[int, Callable[[Tensor], Tensor]] = {}  # node -> new output (interpolation)
        self.keep: dict[str, Tensor] | None = None  # activations kept for gradients, by hook name
        self.outputs_by_hook: dict[str, list[int]] = {}
        for i, node in enumerate(g.nodes):
            if node.hook is not None and (g.level == "edge" or i in g.scored):
                self.outputs_by_hook.setdefault(node.hook, []).append(i)
        self.readers_by_hook: dict[str, list[int]] = {}
        for r, reader in enumerate(g.readers):
            self.readers_by_hook.setdefault(reader.hook, []).append(r)
        # where each node's output goes in its stack's buffer
        self.slot = {u: (stack, k) for stack, us in g.writers.items() for k, u in enumerate(us)}
        self.unit_index: dict[str, Tensor] = {}  # per hook: the mask columns of what it patches
        if g.level == "edge":
            position = {edge: e for e, edge in enumerate(g.edges)}
            for hook, rs in self.readers_by_hook.items():
                sources = self.sources(hook)
                self.unit_index[hook] = torch.tensor([[position[(u, r)] for r in rs] for u in sources])
            self.stacked = {  # per stack, the alternative outputs [U, B, T, D]
                stack: torch.stack([alternative[u] for u in us]) for stack, us in g.writers.items()
            }
        else:
            position = {n: k for k, n in enumerate(g.scored)}
            for hook, ns in self.outputs_by_hook.items():
                self.unit_index[hook] = torch.tensor([position[n] for n in ns])

    def sources(self, hook: str) -> list[int]:
        """The nodes whose outputs the input at `hook` sums."""
        start, stop, stack = self.span(hook)
        return self.graph.writers[stack][start:stop]

    def span(self, hook: str) -> tuple[int, int, str]:
        reader = self.graph.readers[self.readers_by_hook[hook][0]]
        return (*reader.sources, reader.stack)

    # -- hooks
    def _on_output(self, activation: Tensor, hook: HookPoint) -> Tensor:
        nodes = self.outputs_by_hook[hook.name]
        for n in nodes:
            if n in self.replace:
                activation = self.replace[n](activation)
        if self.keep is not None:  # a tensor of its own, so its gradient is this hook's alone
            activation = activation.view_as(activation) if activation.requires_grad else activation.detach()
            activation.requires_grad_(True)
        if self.graph.level == "node":
            if self.keep is not None:
                self.keep[hook.name] = activation
            if self.mask is not None:
                activation = self._mix_nodes(activation, nodes, self.unit_index[hook.name])
        elif self.mask is not None:
            stack, first = self.slot[nodes[0]]
            buffer = self.current.get(stack)
            if buffer is None:
                shape = (len(self.graph.writers[stack]), *activation.shape[:2], activation.shape[-1])
                buffer = self.current[stack] = activation.new_empty(shape)
            if len(nodes) == 1:
                buffer[first].copy_(activation)
            else:  # a layer's heads: [R B, T, H, D] -> H consecutive slots
                buffer[first : first + len(nodes)].copy_(activation.permute(2, 0, 1, 3))
        return activation

    def _mix_nodes(self, activation: Tensor, nodes: list[int], index: Tensor) -> Tensor:
        weight = self.mask[:, index.to(self.mask.device)].to(activation)  # [R, n], on its device
        if not bool(weight.any()):
            return activation
        shaped = activation.view(weight.size(0), self.batch, *activation.shape[1:])
        if self.graph.nodes[nodes[0]].head is None:
            w = weight[:, 0, None, None, None]
            return (shaped + w * (self.alternative[nodes[0]] - shaped)).view_as(activation)
        # slices of dimension 2: heads of [B, T, H, d], or an SAE's features of [B, T, W]
        slots = [self.graph.nodes[n].head for n in nodes]
        alternative = torch.stack([self.alternative[n] for n in nodes], dim=2)  # [B, T, n(, d)]
        current = shaped[:, :, :, slots]
        w = weight.view(*weight.shape[:1], 1, 1, weight.size(1), *([1] * (activation.dim() - 3)))
        mixed = shaped.clone()
        mixed[:, :, :, slots] = current + w * (alternative - current)
        return mixed.view_as(activation)

    def _on_input(self, activation: Tensor, hook: HookPoint) -> Tensor:
        if self.keep is not None:
            activation = activation.view_as(activation)  # its own tensor: the gradient of this input only
            self.keep[hook.name] = activation
        if self.mask is None:
            return activation
        weight = self.mask[:, self.unit_index[hook.name].to(self.mask.device)]  # [R, n, heads]
        if not bool(weight.any()):
            return activation
        start, stop, stack = self.span(hook.name)
        weight = weight.to(activation)  # its dtype and device
        copies, n, heads = weight.shape
        alternative = self.stacked[stack][start:stop].flatten(1)  # [n, B T D]
        current = self.current[stack][start:stop].view(n, copies, -1)  # [n, R, B T D]
        # change[r] = sum_u w[r, u, h] (alt_u - cur_u[r]), as [R, B T D, heads]
        change = alternative.t() @ weight - current.permute(1, 2, 0) @ weight
        change = change.view(copies, self.batch, *self.stacked[stack].shape[2:], heads)
        if activation.dim() == 4:  # per head: [R B, T, H, D]
            return activation + change.permute(0, 1, 2, 4, 3).reshape(activation.shape)
        return activation + change[..., 0].reshape(activation.shape)

    def hooks(self) -> list[tuple[str, Callable]]:
        """What this pass hooks: the inputs some copy patches and the outputs they need (a layer whose
        inputs nothing patches runs as usual: no per-head copies); every input when gradients are kept."""
        replaced = [
            hook for hook, nodes in self.outputs_by_hook.items() if any(n in self.replace for n in nodes)
        ]
        if self.graph.level == "node":
            if self.keep is not None:
                outputs = list(self.outputs_by_hook)
            elif self.mask is None:
                outputs = replaced
            else:
                outputs = [h for h in self.outputs_by_hook if bool(self.mask[:, self.unit_index[h]].any())]
            return [(hook, self._on_output) for hook in outputs]
        if self.mask is None:
            readers = list(self.readers_by_hook) if self.keep is not None else []
            needed: set[int] = set()
        else:
            readers = [h for h in self.readers_by_hook if bool(self.mask[:, self.unit_index[h]].any())]
            needed = {u for hook in readers for u in self.sources(hook)}
        outputs = [
            hook
            for hook, nodes in self.outputs_by_hook.items()
            if hook in replaced or any(n in needed for n in nodes)
        ]
        return [(hook, self._on_output) for hook in outputs] + [(hook, self._on_input) for hook in readers]

    # -- runs
    def run(self, mask: Tensor | None = None) -> Tensor:
        """The logits of the clean batch repeated mask.size(0) times, copy r patched as mask[r] says."""
        self.mask, self.current = mask, {}
        copies = 1 if mask is None else mask.size(0)
        inputs = tuple(x.repeat(copies, *([1] * (x.dim() - 1))) for x in self.inputs)
        try:
            with _forward_context(self.model, self.graph.level):
                return self.model.run_with_hooks(*inputs, fwd_hooks=self.hooks())
        finally:
            self.mask, self.current = None, {}


def _forward_context(model: TokenModel, level: str) -> contextlib.AbstractContextManager:
    """The per-head hook points, where edges need them."""
    return model.per_head_hooks() if level == "edge" else contextlib.nullcontext()


def node_outputs(model: TokenModel, g: Graph, inputs: tuple[Tensor, ...]) -> tuple[Tensor, dict[int, Tensor]]:
    """The logits on `inputs` and each node's output ([B, T, D]; a head's slice of its layer's hook)."""
    wanted = {n.hook for n in g.nodes if n.hook}
    with _forward_context(model, g.level):
        logits, cache = model.run_with_cache(*inputs, names_filter=lambda name: name in wanted)
    return logits, {
        i: cache[n.hook] if n.head is None else cache[n.hook][:, :, n.head]
        for i, n in enumerate(g.nodes)
        if n.hook is not None
    }


class Setup:
    """Everything a scoring method needs: the graph, the clean batch, the patcher, the metric, and
    M(clean) and M(all patched) (the corrupted model's metric; computed when first asked for zero and mean
    ablation), each also per example (`clean_values`, `ablated_values`: each example's share, [B])."""

    def __init__(
        self,
        model: TokenModel,
        g: Graph,
        inputs: tuple[Tensor, ...],
        clean_outputs: dict[int, Tensor],
        patcher: Patcher,
        metric: Metric,
        clean_values: Tensor,
        ablated_values: Tensor | None,
        ablation: str,
    ):
        self.model, self.graph, self.inputs = model, g, inputs
        self.clean_outputs, self.patcher, self.metric = clean_outputs, patcher, metric
        self.clean_values, self._ablated, self.ablation = clean_values, ablated_values, ablation
        self.clean_metric = float(clean_values.sum())

    @property
    def ablated_values(self) -> Tensor:
        """Each example's share of M(all patched) [B]."""
        if self._ablated is None:
            self._ablated = self.evaluate(torch.ones(1, self.graph.units), chunk=1, per_example=True)[0]
        return self._ablated

    @property
    def ablated_metric(self) -> float:
        ablated = float(self.ablated_values.sum())
        require(
            abs(self.clean_metric - ablated) > 1e-6,
            f"patching every {'edge' if self.graph.level == 'edge' else 'node'} leaves metric="
            f"{self.metric.name} where it was ({self.clean_metric:.4g}): the corruption changes nothing the "
            "metric sees; use other examples or another metric",
        )
        return ablated

    def evaluate(self, mask: Tensor, chunk: int | None = None, per_example: bool = False) -> Tensor:
        """M for each row of `mask` [K, units] (K patched runs, chunked), [K]; with `per_example`, each
        example's share of it, [K, B]."""
        chunk = chunk or replicas_for(self.model, self.inputs, self.graph)
        measure = self.metric.contributions if per_example else self.metric
        out = []
        with evaluating(self.model):
            for start in range(0, mask.size(0), chunk):
                out.append(measure(self.patcher.run(mask[start : start + chunk])))
        return torch.cat(out)


def replicas_for(model: TokenModel, inputs: tuple[Tensor, ...], g: Graph) -> int:
    """Copies of the batch per patched forward pass: what a quarter of the free memory holds, at most
    MAX_REPLICAS (the activations of one pass: about 4 L (3 H + 12) B T D floats)."""
    stacks = model.stacks()
    layers = sum(len(s.blocks) for s in stacks.values())
    heads = model.config.num_heads
    tokens = sum(x.numel() for x in inputs)
    per_copy = 4 * layers * (3 * heads + 12) * tokens * model.config.model_dim * 4
    return int(max(1, min(MAX_REPLICAS, available_memory() // 4 // max(per_copy, 1))))


def prepare(
    model: TokenModel,
    inputs: Tensor | tuple[Tensor, ...],
    labels: Tensor,
    corrupted: Batch | None = None,
    metric: str | None = None,
    ablation: str = "corrupted",
    level: str | None = None,
    graph: Graph | None = None,
) -> Setup:
    """The graph, the alternative outputs and the metric for a clean batch (inputs, labels) and, for
    `ablation="corrupted"` or `metric="logit_diff"`, its corruption (inputs, labels). The default metric
    is logit_diff where there is a corruption, logprob where there is none. `graph`: a graph of other
    units than the model's own (an SAE's features: `feature_graph`), instead of `graph(model, level)`."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    require_ablation(ablation)
    require(inputs[0].size(0) > 0, "num_examples=0: give at least one example, e.g. num_examples=64")
    corrupted_inputs, corrupted_labels = None, None
    if corrupted is not None:
        corrupted_inputs, corrupted_labels = as_inputs(corrupted[0], model), corrupted[1]
        require(
            all(a.shape == b.shape for a, b in zip(inputs, corrupted_inputs, strict=True)),
            "the corrupted inputs must have the clean inputs' shapes (the task's corrupted_pairs)",
        )
    if metric is None:
        metric = "logit_diff" if corrupted is not None else "logprob"
    require_metric(metric)
    require(
        ablation != "corrupted" or corrupted is not None,
        "ablation=corrupted needs corrupted inputs, and this task defines no corruption; use ablation=zero "
        "or ablation=mean with metric=kl, or define corrupted_pairs in the task (docs/own_task.md)",
    )
    g = graph if graph is not None else build_graph(model, level)
    ablated, corrupted_logits = None, None
    with evaluating(model):
        clean_logits, clean_outputs = node_outputs(model, g, inputs)
        if ablation == "corrupted":
            corrupted_logits, alternative = node_outputs(model, g, corrupted_inputs)
        elif ablation == "zero":
            alternative = {i: torch.zeros_like(v) for i, v in clean_outputs.items()}
        else:
            alternative = {i: v.mean(dim=0, keepdim=True).expand_as(v) for i, v in clean_outputs.items()}
        if corrupted_logits is None and corrupted is not None and metric == "logit_diff":
            corrupted_logits = model(*corrupted_inputs)  # the corrupted answers where the labels stay
    m = make_metric(metric, clean_logits, labels, corrupted_labels, corrupted_logits)
    if ablation == "corrupted" and not g.features:  # every edge patched: the corrupted run
        ablated = m.contributions(corrupted_logits)[0]  # (an SAE's features patched: its hook's only)
    patcher = Patcher(model, g, inputs, alternative)
    setup = Setup(
        model, g, inputs, clean_outputs, patcher, m, m.contributions(clean_logits)[0], ablated, ablation
    )
    if ablated is not None:
        setup.ablated_metric  # noqa: B018  (the check that the corruption changes the metric)
    return setup


def require_time(
    setup: Setup,
    what: str,
    bound: str,
    max_seconds: float | None,
    units: int | None = None,
    advice: str = ADVICE,
) -> None:
    """Time one patched pass and refuse, before it starts, work of one patched pass per unit (`units`:
    how many; default every one) when that would take more than `max_seconds` (`bound`: "about" for exact
    patching, "up to" for acdc, which stops testing the inputs of nodes it has pruned); `advice`: what to
    do instead."""
    if max_seconds is None:
        return
    g = setup.graph
    units = g.units if units is None else units
    started = time.perf_counter()
    setup.evaluate(torch.zeros(1, g.units), chunk=1)
    per_pass = time.perf_counter() - started
    estimate = per_pass * units
    require(
        estimate <= max_seconds,
        f"{what} would take {bound} {_duration(estimate)} here ({units} "
        f"{'edges' if g.level == 'edge' else 'nodes'} x {per_pass:.2f} s per patched pass over "
        f"{setup.inputs[0].size(0)} examples; the limit is {_duration(max_seconds)}); {advice}",
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
