"""Circuits: which paths through the model carry a task, found automatically and then checked.

The computational graph (`graph(model)`). Nodes: the embeddings (`embed`, `pos_embed`), every attention
head's output (`blocks.{i}.attn.head.{h}`, `cross_attn` for cross-attention), every MLP
(`blocks.{i}.mlp`), the logits, and in an encoder-decoder the encoder's output (`encoder.output`, what every
cross-attention head reads its keys and values from); `encoder.` / `decoder.` prefix the names in an
encoder-decoder. In a pre-norm model the residual stream anywhere is the sum of the outputs written
before it (plus constant biases), so every input a node reads is a sum over edges:

    input_d = sum over upstream nodes u of out_u  (+ constants)        edges u -> d

with a head's query, key and value inputs as separate targets (`....head.{h}.q`, `.k`, `.v`: the model's
per-head hook points `hook_q_input` etc., see `HookedModule.per_head_hooks`). Patching edge u -> d replaces
u's term in d's input only: input_d + (out_u' - out_u), where out_u' is u's output on the corrupted input
(`ablation="corrupted"`), zero (`"zero"`) or its mean over the batch (`"mean"`). A post-norm block,
LN(x + f(x)), is no such sum, so post-norm models get node-level circuits: a node is patched as a whole
(its output replaced by out_u'), and the nodes scored are the embeddings, the heads and the MLPs.

The metric M compares the outputs (`logit_diff`: logit of the clean answer minus that of the corrupted
answer at each row's first output the corruption changes, averaged; `kl`: KL(p_clean || p) at the outputs
the corruption changes, or at every labelled output where it changes none). Scores, each the (estimated)
change of M when an edge (or node) alone is patched:

* `patching`: exact: M(patched) - M(clean), one patched forward pass per edge (chunked: several edges,
  one copy of the batch each, per pass): the slow reference the others are compared to;
* `eap` (edge attribution patching, Syed et al. 2023): the first-order estimate
  (out_u' - out_u) . dM/d input_d, every edge from two forward passes and one backward pass;
* `eap_ig` (Hanna et al. 2024): the same with dM/d input_d averaged over `steps` points on the line from
  the corrupted to the clean embeddings (integrated gradients; steps=1 is eap);
* `acdc` (Conmy et al. 2023): from the logits backwards, patch each edge in turn, keeping the ones patched
  so far patched, and leave it patched (removed) when M moves by less than `threshold` x
  |M(clean) - M(all patched)|; an edge's score is the change recorded when it was tested (0 for edges into
  a node nothing kept reads).

A circuit is evaluated, not just drawn: keep the top-k edges (by |score|), patch every other one, and

    faithfulness(k) = (M(circuit) - M(all patched)) / (M(clean) - M(all patched))

over k on a log scale; its area (over log k from one edge to all), and the smallest circuit reaching 0.9.
Everything runs in eval mode, leaves no hook behind and never changes a weight.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lab.analysis.arguments import as_inputs, as_model
from transformer_lab.analysis.interventions import answer_positions
from transformer_lab.errors import require
from transformer_lab.limits import available_memory
from transformer_lab.nn import IGNORE_INDEX, HookPoint, TokenModel, evaluating

METHODS = ("eap", "eap_ig", "patching", "acdc")
METRICS = ("logit_diff", "kl")
ABLATIONS = ("corrupted", "zero", "mean")
LEVELS = ("edge", "node")
FAITHFUL = 0.9  # the smallest circuit reaching this faithfulness is "the" circuit
MAX_REPLICAS = 32  # copies of the batch per patched forward pass (memory permitting)
Batch = tuple[tuple[Tensor, ...], Tensor]


# --------------------------------------------------------------------------------------------- graph
@dataclass(frozen=True)
class Node:
    """A node of the graph. `hook`: the hook point holding its output ([B, T, D]; a head's is slice
    `head` of `attn.hook_result` [B, T, H, D], or of `attn.hook_z` at node level); None for the logits.
    `row`: its height in a drawing of its stack (embeddings 0, then each layer's heads and MLP, the logits
    last)."""

    name: str
    label: str
    stack: str
    row: int
    hook: str | None
    head: int | None = None


@dataclass(frozen=True)
class Reader:
    """An input a node reads: the target of edges. `name`: `blocks.1.attn.head.2.k`, `blocks.0.mlp`,
    `logits`, `encoder.output`; `node`: the index of the node reading it; `hook`: the hook point carrying
    it (`head`: its slice); `sources`: the nodes whose outputs it sums, a slice of `stack`'s writers."""

    name: str
    node: int
    hook: str
    head: int | None
    stack: str
    sources: tuple[int, int]


@dataclass
class Graph:
    """The nodes, the inputs they read and the edges between them (edge level), or the nodes scored
    (node level). Edges are (node index, reader index) pairs in forward order of the reader."""

    level: str
    nodes: list[Node]
    readers: list[Reader]
    writers: dict[str, list[int]]  # per stack, the nodes writing into its residual stream, in forward order
    edges: list[tuple[int, int]] = field(default_factory=list)
    scored: list[int] = field(default_factory=list)  # node level: the nodes patched and scored

    def index(self, name: str) -> int:
        return next(i for i, node in enumerate(self.nodes) if node.name == name)

    @property
    def units(self) -> int:
        """How many things are scored: edges, or nodes at node level."""
        return len(self.edges) if self.level == "edge" else len(self.scored)

    def edge_names(self) -> list[tuple[str, str]]:
        return [(self.nodes[u].name, self.readers[r].name) for u, r in self.edges]

    def unit_names(self) -> list[str]:
        """`src -> dst` per edge, or the node names at node level."""
        if self.level == "edge":
            return [f"{src} -> {dst}" for src, dst in self.edge_names()]
        return [self.nodes[n].name for n in self.scored]

    def hooks(self) -> set[str]:
        return {n.hook for n in self.nodes if n.hook} | {r.hook for r in self.readers}


def _label(prefix: str, kind: str, block: int | None = None, head: int | None = None) -> str:
    letter = {"": "L", "encoder.": "E", "decoder.": "D"}[prefix]
    if kind == "cross":
        return f"X{block}H{head}"
    if kind == "attn":
        return f"{letter}{block}H{head}"
    if kind == "mlp":
        return f"MLP{block}" if not prefix else f"{letter}-MLP{block}"
    short = {"embed": "embed", "pos_embed": "pos"}[kind]
    return short if not prefix else f"{letter}-{short}"


def is_pre_norm(model: TokenModel) -> bool:
    """Whether the residual stream is a sum of the component outputs (edges are defined)."""
    return bool(model.config.norm_first)


def graph(model: TokenModel, level: str | None = None) -> Graph:
    """The model's computational graph (see the module docstring); `level` defaults to `edge` for a
    pre-norm model and `node` for a post-norm one (whose edges are not defined)."""
    model = as_model(model)
    level = level or ("edge" if is_pre_norm(model) else "node")
    require(level in LEVELS, f"level={level!r} is unknown; use edge or node")
    require(
        level == "node" or is_pre_norm(model),
        "level=edge needs a pre-norm model (model.norm_first=true): in a post-norm block LN(x + f(x)) the "
        "stream is not a sum of the components' outputs; use level=node",
    )
    nodes: list[Node] = []
    readers: list[Reader] = []
    writers: dict[str, list[int]] = {}
    stacks = model.stacks()
    edges = level == "edge"
    row = 0

    def add(node: Node) -> int:
        nodes.append(node)
        return len(nodes) - 1

    def read(name: str, node: int, hook: str, head: int | None, stack: str, cross: bool = False) -> None:
        """An input of `node` summing the outputs written so far in `stack` (cross: the encoder's output,
        the last thing the encoder writes)."""
        count = len(writers[stack])
        readers.append(Reader(name, node, hook, head, stack, (count - 1, count) if cross else (0, count)))

    for prefix, stack in stacks.items():
        row = 0  # each stack's inputs at the bottom of its own column
        mine = writers.setdefault(prefix, [])
        mine.append(add(Node(f"{prefix}embed", _label(prefix, "embed"), prefix, row, f"{prefix}hook_embed")))
        pos = Node(f"{prefix}pos_embed", _label(prefix, "pos_embed"), prefix, row, f"{prefix}hook_pos_embed")
        mine.append(add(pos))
        for i, block in enumerate(stack.blocks):
            name = f"{prefix}blocks.{i}"
            parts = [("attn", "")] + ([("cross_attn", "cross_")] if hasattr(block, "cross_attn") else [])
            for module, hook_prefix in parts:
                row += 1
                kind = "cross" if module == "cross_attn" else "attn"
                output = f"{name}.{module}.hook_{'result' if edges else 'z'}"
                heads = [
                    add(Node(f"{name}.{module}.head.{h}", _label(prefix, kind, i, h), prefix, row, output, h))
                    for h in range(getattr(block, module).num_heads)
                ]
                for h, node in enumerate(heads if edges else []):
                    for part in "qkv":
                        cross = kind == "cross" and part != "q"
                        hook = f"{name}.hook_{hook_prefix}{part}_input"
                        read(
                            f"{nodes[node].name}.{part}",
                            node,
                            hook,
                            h,
                            "encoder." if cross else prefix,
                            cross,
                        )
                mine.extend(heads)
            if hasattr(block, "mlp"):
                row += 1
                mlp = add(Node(f"{name}.mlp", _label(prefix, "mlp", i), prefix, row, f"{name}.hook_mlp_out"))
                if edges:
                    read(nodes[mlp].name, mlp, f"{name}.hook_mlp_in", None, prefix)
                mine.append(mlp)
        last = f"{prefix}blocks.{len(stack.blocks) - 1}.hook_resid_post"  # the stream the final norm reads
        if prefix == "encoder.":
            row += 1
            out = add(Node("encoder.output", "E-out", prefix, row, "encoder.ln_final.hook_normalized"))
            if edges:
                read("encoder.output", out, last, None, prefix)
            mine.append(out)
    row += 1
    readout = list(stacks)[-1]
    logits = add(Node("logits", "logits", readout, row, None))
    if edges:
        read(
            "logits",
            logits,
            f"{readout}blocks.{len(stacks[readout].blocks) - 1}.hook_resid_post",
            None,
            readout,
        )
    result = Graph(level, nodes, readers, writers)
    if edges:
        for r, reader in enumerate(readers):
            start, stop = reader.sources
            result.edges += [(u, r) for u in writers[reader.stack][start:stop]]
    else:
        result.scored = [i for i, node in enumerate(nodes) if node.hook and node.name != "encoder.output"]
    return result


# -------------------------------------------------------------------------------------------- metric
@dataclass
class Metric:
    """M(logits) per copy of the batch: [R * B, T, V] -> [R] (see the module docstring)."""

    name: str
    batch: int
    positions: Tensor | None = None  # logit_diff: each row's position, its clean and corrupted answers
    good: Tensor | None = None
    bad: Tensor | None = None
    mask: Tensor | None = None  # kl: bool [B, T], the outputs compared
    clean_log_probs: Tensor | None = None  # kl: [N, V] at those outputs

    def __call__(self, logits: Tensor) -> Tensor:
        copies = logits.size(0) // self.batch
        logits = logits.float().view(copies, self.batch, *logits.shape[1:])
        if self.name == "logit_diff":
            rows = torch.arange(self.batch, device=logits.device)
            at = logits[:, rows, self.positions]  # [R, B, V]
            return (at[:, rows, self.good] - at[:, rows, self.bad]).mean(dim=1)
        log_probs = F.log_softmax(logits[:, self.mask], dim=-1)  # [R, N, V]
        clean = self.clean_log_probs
        return (clean.exp() * (clean - log_probs)).sum(dim=-1).mean(dim=1)


def make_metric(name: str, logits: Tensor, labels: Tensor, corrupted_labels: Tensor | None) -> Metric:
    """The metric `name` for a batch whose clean logits are `logits` (see the module docstring)."""
    require(name in METRICS, f"metric={name} is unknown; use metric={' | '.join(METRICS)}")
    batch = labels.size(0)
    labelled = labels != IGNORE_INDEX
    differs = labelled & (corrupted_labels != labels) if corrupted_labels is not None else None
    if name == "logit_diff":
        require(
            differs is not None and bool(differs.any(dim=1).all()),
            "metric=logit_diff needs a corruption that changes an answer of every example (this one "
            "leaves some answers as they were, or there is none); use metric=kl",
        )
        positions = answer_positions(labels, corrupted_labels)
        rows = torch.arange(batch, device=labels.device)
        good, bad = labels[rows, positions], corrupted_labels[rows, positions]
        return Metric(name, batch, positions=positions, good=good, bad=bad)
    mask = labelled
    if differs is not None:
        mask = torch.where(differs.any(dim=1, keepdim=True), differs, labelled)
    require(bool(mask.any()), "these examples have no labelled output to compare; use other examples")
    clean = F.log_softmax(logits.float()[mask], dim=-1)
    return Metric(name, batch, mask=mask, clean_log_probs=clean)


# ------------------------------------------------------------------------------------- the patcher
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
        alternative = torch.stack([self.alternative[n] for n in nodes], dim=2)  # [B, T, H, d]
        w = weight[:, None, None, :, None]
        return (shaped + w * (alternative - shaped)).view_as(activation)

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


# ------------------------------------------------------------------------------------------ scoring
class Setup:
    """Everything a scoring method needs: the graph, the clean batch, the patcher, the metric, and
    M(clean) and M(all patched) (the corrupted model's metric; computed when first asked for zero and mean
    ablation)."""

    def __init__(
        self,
        model: TokenModel,
        g: Graph,
        inputs: tuple[Tensor, ...],
        clean_outputs: dict[int, Tensor],
        patcher: Patcher,
        metric: Metric,
        clean_metric: float,
        ablated_metric: float | None,
        ablation: str,
    ):
        self.model, self.graph, self.inputs = model, g, inputs
        self.clean_outputs, self.patcher, self.metric = clean_outputs, patcher, metric
        self.clean_metric, self._ablated, self.ablation = clean_metric, ablated_metric, ablation

    @property
    def ablated_metric(self) -> float:
        if self._ablated is None:
            self._ablated = float(self.evaluate(torch.ones(1, self.graph.units), chunk=1)[0])
        require(
            abs(self.clean_metric - self._ablated) > 1e-6,
            f"patching every {'edge' if self.graph.level == 'edge' else 'node'} leaves metric="
            f"{self.metric.name} where it was ({self.clean_metric:.4g}): the corruption changes nothing the "
            "metric sees; use other examples or another metric",
        )
        return self._ablated

    def evaluate(self, mask: Tensor, chunk: int | None = None) -> Tensor:
        """M for each row of `mask` [K, units] (K patched runs, chunked), [K]."""
        chunk = chunk or replicas_for(self.model, self.inputs, self.graph)
        out = []
        with evaluating(self.model):
            for start in range(0, mask.size(0), chunk):
                out.append(self.metric(self.patcher.run(mask[start : start + chunk])))
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
) -> Setup:
    """The graph, the alternative outputs and the metric for a clean batch (inputs, labels) and, for
    `ablation="corrupted"` or `metric="logit_diff"`, its corruption (inputs, labels)."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    require(ablation in ABLATIONS, f"ablation={ablation} is unknown; use ablation={' | '.join(ABLATIONS)}")
    require(inputs[0].size(0) > 0, "num_examples=0: give at least one example, e.g. num_examples=64")
    corrupted_inputs, corrupted_labels = None, None
    if corrupted is not None:
        corrupted_inputs, corrupted_labels = as_inputs(corrupted[0], model), corrupted[1]
        require(
            all(a.shape == b.shape for a, b in zip(inputs, corrupted_inputs, strict=True)),
            "the corrupted inputs must have the clean inputs' shapes (the task's corrupted_pairs)",
        )
    if metric is None:
        differs = corrupted_labels is not None and bool(
            ((corrupted_labels != labels) & (labels != IGNORE_INDEX)).any(dim=1).all()
        )
        metric = "logit_diff" if differs else "kl"
    require(metric in METRICS, f"metric={metric} is unknown; use metric={' | '.join(METRICS)}")
    require(
        ablation != "corrupted" or corrupted is not None,
        "ablation=corrupted needs corrupted inputs, and this task defines no corruption; use ablation=zero "
        "or ablation=mean with metric=kl, or define corrupted_pairs in the task (docs/own_task.md)",
    )
    g = graph(model, level)
    ablated = None
    with evaluating(model):
        clean_logits, clean_outputs = node_outputs(model, g, inputs)
        if ablation == "corrupted":
            corrupted_logits, alternative = node_outputs(model, g, corrupted_inputs)
        elif ablation == "zero":
            alternative = {i: torch.zeros_like(v) for i, v in clean_outputs.items()}
        else:
            alternative = {i: v.mean(dim=0, keepdim=True).expand_as(v) for i, v in clean_outputs.items()}
    m = make_metric(metric, clean_logits, labels, corrupted_labels)
    if ablation == "corrupted":  # every edge patched with its corrupted value is the corrupted run
        ablated = float(m(corrupted_logits)[0])
    patcher = Patcher(model, g, inputs, alternative)
    setup = Setup(model, g, inputs, clean_outputs, patcher, m, float(m(clean_logits)[0]), ablated, ablation)
    if ablated is not None:
        setup.ablated_metric  # noqa: B018  (the check that the corruption changes the metric)
    return setup


def score_patching(setup: Setup, max_seconds: float | None = 600.0) -> Tensor:
    """Exact: M(only unit e patched) - M(clean) for every edge (node), chunked over copies of the batch.
    A model whose estimate exceeds `max_seconds` is refused before it starts (use eap)."""
    g = setup.graph
    chunk = replicas_for(setup.model, setup.inputs, g)
    require_time(setup, "method=patching", "about", max_seconds)
    eye = torch.eye(g.units)
    return setup.evaluate(eye, chunk=chunk) - setup.clean_metric


def require_time(setup: Setup, what: str, bound: str, max_seconds: float | None) -> None:
    """Time one patched pass and refuse, before it starts, a method that makes one per unit when that
    would take more than `max_seconds` (`bound`: "about" for exact patching, "up to" for acdc, which
    stops testing the inputs of nodes it has pruned)."""
    if max_seconds is None:
        return
    g = setup.graph
    started = time.perf_counter()
    setup.evaluate(torch.zeros(1, g.units), chunk=1)
    per_pass = time.perf_counter() - started
    estimate = per_pass * g.units
    require(
        estimate <= max_seconds,
        f"{what} would take {bound} {_duration(estimate)} here ({g.units} "
        f"{'edges' if g.level == 'edge' else 'nodes'} x {per_pass:.2f} s per patched pass over "
        f"{setup.inputs[0].size(0)} examples; the limit is {_duration(max_seconds)}); use method=eap "
        "(two forward passes and one backward pass) or fewer examples (num_examples=)",
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _gradients(setup: Setup, interpolate: float | None) -> dict[str, Tensor]:
    """dM/d(every reader activation) (edge level) or dM/d(every node output) (node level) on the clean
    batch; with `interpolate` = alpha, the embeddings are out' + alpha (out - out') (integrated gradients)."""
    p, g = setup.patcher, setup.graph
    p.replace = {}
    if interpolate is not None:
        for i, node in enumerate(g.nodes):
            if node.name.endswith("embed") and node.hook is not None:
                clean, alternative = setup.clean_outputs[i], p.alternative[i]
                mixed = alternative + interpolate * (clean - alternative)
                p.replace[i] = lambda activation, mixed=mixed: mixed.to(activation.dtype)
    kept: dict[str, Tensor] = {}
    p.keep = kept
    try:
        with evaluating(setup.model, autograd="on"):
            value = setup.metric(p.run()).sum()
            names = list(kept)
            grads = torch.autograd.grad(value, [kept[n] for n in names], allow_unused=True)
    finally:
        p.keep = None
        p.replace = {}
    return {n: torch.zeros_like(kept[n]) if d is None else d for n, d in zip(names, grads, strict=True)}


def _attribution(setup: Setup, grads: dict[str, Tensor]) -> Tensor:
    """(out_u' - out_u) . gradient, per edge (node): the first-order change of M when it is patched."""
    g, p = setup.graph, setup.patcher
    scores = torch.zeros(g.units)
    if g.level == "edge":
        delta = {  # per stack, out' - out of every node [U, B T D]
            stack: (p.stacked[stack] - torch.stack([setup.clean_outputs[u] for u in us])).flatten(1)
            for stack, us in g.writers.items()
        }
        for hook in p.readers_by_hook:
            start, stop, stack = p.span(hook)
            gradient = grads[hook]
            gradient = (
                gradient.transpose(2, 3).reshape(-1, gradient.size(2))
                if gradient.dim() == 4
                else gradient.reshape(-1, 1)
            )
            values = delta[stack][start:stop] @ gradient  # [n, heads]
            scores[p.unit_index[hook].flatten()] = values.flatten().float().cpu()
        return scores
    for hook, nodes in p.outputs_by_hook.items():
        gradient = grads[hook]
        for k, n in enumerate(nodes):
            head = g.nodes[n].head
            grad = gradient if head is None else gradient[:, :, head]
            delta = p.alternative[n] - setup.clean_outputs[n]
            scores[p.unit_index[hook][k]] = float((delta.double() * grad.double()).sum())
    return scores


def score_eap(setup: Setup) -> Tensor:
    """EAP: (out_u' - out_u) . dM/d input_d at the clean input, every edge from one backward pass."""
    return _attribution(setup, _gradients(setup, None))


def score_eap_ig(setup: Setup, steps: int = 5) -> Tensor:
    """EAP-IG: the gradient averaged over alpha = k / steps, k = 1 .. steps (right Riemann sum of the
    path from the corrupted embeddings, alpha = 0, to the clean ones, alpha = 1)."""
    require(isinstance(steps, int) and steps >= 1, f"steps={steps!r} must be an integer >= 1 (default 5)")
    total: dict[str, Tensor] = {}
    for k in range(1, steps + 1):
        for name, gradient in _gradients(setup, k / steps).items():
            total[name] = total[name] + gradient if name in total else gradient
    return _attribution(setup, {name: t / steps for name, t in total.items()})


def score_acdc(
    setup: Setup, threshold: float = 0.01, max_seconds: float | None = 600.0
) -> tuple[Tensor, Tensor]:
    """ACDC: greedy pruning from the logits backwards (see the module docstring). Returns the scores (the
    change of M recorded when each unit was tested; 0 if never tested) and the units kept (bool). A model
    whose worst case (one patched pass per unit) exceeds `max_seconds` is refused before it starts."""
    require(
        isinstance(threshold, int | float) and 0 < threshold < 1,
        f"threshold={threshold!r} is out of range: it is a share of |M(clean) - M(all patched)|, between 0 "
        "and 1 (default 0.01)",
    )
    require_time(setup, "method=acdc", "up to", max_seconds)
    g = setup.graph
    tolerance = threshold * abs(setup.clean_metric - setup.ablated_metric)
    mask = torch.zeros(1, g.units)
    scores = torch.zeros(g.units)
    current = setup.clean_metric

    def test(unit: int) -> None:
        nonlocal current
        mask[0, unit] = 1.0
        value = float(setup.evaluate(mask, chunk=1)[0])
        scores[unit] = value - current
        if abs(value - current) < tolerance:
            current = value
        else:
            mask[0, unit] = 0.0

    if g.level == "node":
        for k in reversed(range(g.units)):
            test(k)
        return scores, mask[0] == 0
    alive = {len(g.nodes) - 1}  # the logits
    by_reader: dict[int, list[int]] = {}
    for e, (_, r) in enumerate(g.edges):
        by_reader.setdefault(r, []).append(e)
    for r in reversed(range(len(g.readers))):
        reader = g.readers[r]
        if reader.node not in alive:  # nothing kept reads this node: its inputs do not matter
            for e in by_reader[r]:
                mask[0, e] = 1.0
            continue
        for e in reversed(by_reader[r]):
            test(e)
            if mask[0, e] == 0:
                alive.add(g.edges[e][0])
    return scores, mask[0] == 0


# ----------------------------------------------------------------------------------- faithfulness
def sizes_for(units: int, points: int = 12) -> list[int]:
    """Circuit sizes on a log scale from 1 to `units`."""
    grid = np.unique(np.round(np.logspace(0, math.log10(max(units, 1)), points)).astype(int))
    return [int(k) for k in grid if 1 <= k <= units] or [units]


def ranking(scores: Tensor) -> Tensor:
    """Units by |score|, largest first (ties: forward order)."""
    return torch.argsort(-scores.abs(), stable=True)


def faithfulness(setup: Setup, scores: Tensor, sizes: Sequence[int]) -> list[float]:
    """faithfulness(k) for each k: the top-k units kept, every other one patched."""
    order = ranking(scores)
    mask = torch.ones(len(sizes), setup.graph.units)
    for row, k in enumerate(sizes):
        mask[row, order[:k]] = 0.0
    values = setup.evaluate(mask)
    return ((values - setup.ablated_metric) / (setup.clean_metric - setup.ablated_metric)).tolist()


def circuit_faithfulness(setup: Setup, kept: Sequence[int]) -> float:
    """The faithfulness of one circuit: these units kept, every other one patched."""
    mask = torch.ones(1, setup.graph.units)
    mask[0, list(kept)] = 0.0
    value = float(setup.evaluate(mask, chunk=1)[0])
    return (value - setup.ablated_metric) / (setup.clean_metric - setup.ablated_metric)


def smallest_circuit(setup: Setup, scores: Tensor, curve: dict[int, float]) -> int | None:
    """The fewest top units reaching FAITHFUL, searched between the grid points of `curve` (k ->
    faithfulness) around the first that reaches it; None if none does."""
    reached = [k for k, f in sorted(curve.items()) if f >= FAITHFUL]
    if not reached:
        return None
    high = reached[0]
    low = max([k for k in curve if k < high], default=0)  # the grid point below fails
    order = ranking(scores)
    while high - low > 1:
        middle = (low + high) // 2
        if circuit_faithfulness(setup, order[:middle].tolist()) >= FAITHFUL:
            high = middle
        else:
            low = middle
    return high


def area(sizes: Sequence[int], values: Sequence[float], units: int) -> float:
    """The area under faithfulness over log k / log(units), from one unit to all (0 to 1)."""
    if units <= 1 or len(sizes) < 2:
        return float(values[-1]) if len(values) else 0.0
    x = np.log(np.asarray(sizes, dtype=float)) / math.log(units)
    return float(np.trapezoid(np.asarray(values, dtype=float), x))


def roc_auc(scores: Tensor, truth: Tensor) -> float:
    """P(|score| of a true unit > |score| of another), ties counting a half: ROC AUC of the ranking."""
    values = scores.abs().double()
    positive, negative = values[truth], values[~truth]
    require(len(positive) > 0 and len(negative) > 0, "the answer key must mark some units true and some not")
    greater = (positive[:, None] > negative[None, :]).double().mean()
    equal = (positive[:, None] == negative[None, :]).double().mean()
    return float(greater + 0.5 * equal)


# ------------------------------------------------------------------------------------------ result
@dataclass
class Circuit:
    """What `discover` found (circuit.json is `to_dict()`)."""

    method: str
    metric: str
    level: str
    num_examples: int
    seconds: float
    graph: Graph
    scores: Tensor
    sizes: list[int]
    curve: list[float]
    circuit: list[int] | None
    clean_metric: float
    ablated_metric: float
    ablation: str
    answer_key_auc: float | None = None
    kept: Tensor | None = None  # acdc: the units it kept

    @property
    def area(self) -> float:
        return area(self.sizes, self.curve, self.graph.units)

    def circuit_units(self) -> list[int]:
        """The units of the circuit: indices into edges, or into `graph.nodes` at node level."""
        if self.circuit is None:
            return []
        return self.circuit

    def to_dict(self) -> dict:
        g = self.graph
        edges, node_scores = [], []
        if g.level == "edge":
            edges = [
                {"src": src, "dst": dst, "score": float(s)}
                for (src, dst), s in zip(g.edge_names(), self.scores.tolist(), strict=True)
            ]
        else:
            node_scores = [
                {"node": g.nodes[n].name, "score": float(s)}
                for n, s in zip(g.scored, self.scores.tolist(), strict=True)
            ]
        out = {
            "method": self.method,
            "metric": self.metric,
            "level": g.level,
            "num_examples": self.num_examples,
            "seconds": self.seconds,
            "nodes": [n.name for n in g.nodes],
            "edges": edges,
            "node_scores": node_scores,
            "faithfulness": [
                {"size": k, "faithfulness": f} for k, f in zip(self.sizes, self.curve, strict=True)
            ],
            "circuit": self.circuit,
        }
        if self.answer_key_auc is not None:
            out["answer_key_auc"] = self.answer_key_auc
        return out


def score(
    setup: Setup, method: str, steps: int = 5, threshold: float = 0.01, max_seconds: float | None = 600.0
) -> tuple[Tensor, Tensor | None]:
    """The scores of `method` (and, for acdc, the units it kept)."""
    require(method in METHODS, f"method={method} is unknown; use method={' | '.join(METHODS)}")
    require(
        not (method == "eap" and setup.metric.name == "kl"),
        "method=eap with metric=kl scores every edge 0: KL divergence to the clean output has zero gradient "
        "at the clean input, where eap takes it; use method=eap_ig (integrated gradients), or "
        "metric=logit_diff where the corruption changes the answer",
    )
    if method == "eap":
        return score_eap(setup), None
    if method == "eap_ig":
        return score_eap_ig(setup, steps), None
    if method == "patching":
        return score_patching(setup, max_seconds), None
    return score_acdc(setup, threshold, max_seconds)


def discover(
    model: TokenModel,
    inputs: Tensor | tuple[Tensor, ...],
    labels: Tensor,
    corrupted: Batch | None = None,
    method: str | None = None,
    metric: str | None = None,
    ablation: str = "corrupted",
    steps: int = 5,
    threshold: float = 0.01,
    level: str | None = None,
    truth: Sequence[str] | None = None,
    max_seconds: float | None = 600.0,
) -> Circuit:
    """Score every edge (node) with `method` (default: eap for logit_diff, eap_ig for kl), evaluate the
    top-k circuits, find the smallest reaching 0.9 faithfulness; with `truth` (an answer key's circuit:
    edge names `src -> dst`, or node names), also the ROC AUC of the scores against it."""
    require(
        method is None or method in METHODS, f"method={method} is unknown; use method={' | '.join(METHODS)}"
    )
    setup = prepare(model, inputs, labels, corrupted, metric, ablation, level)
    if method is None:  # eap where its gradient says something; KL's is 0 at the clean input
        method = "eap" if setup.metric.name == "logit_diff" else "eap_ig"
    started = time.perf_counter()
    scores, kept = score(setup, method, steps, threshold, max_seconds)
    seconds = time.perf_counter() - started
    units = setup.graph.units
    sizes = sizes_for(units)
    values = faithfulness(setup, scores, sizes)
    smallest = smallest_circuit(setup, scores, dict(zip(sizes, values, strict=True)))
    circuit = None
    if smallest is not None and smallest not in sizes:  # the curve shows the circuit's own point too
        at = sum(k < smallest for k in sizes)
        sizes.insert(at, smallest)
        values.insert(at, circuit_faithfulness(setup, ranking(scores)[:smallest].tolist()))
    if smallest is not None:
        chosen = sorted(ranking(scores)[:smallest].tolist())
        circuit = chosen if setup.graph.level == "edge" else [setup.graph.scored[k] for k in chosen]
    auc = None
    if truth is not None:
        auc = roc_auc(scores, truth_mask(setup.graph, truth))
    return Circuit(
        method,
        setup.metric.name,
        setup.graph.level,
        setup.inputs[0].size(0),
        seconds,
        setup.graph,
        scores,
        sizes,
        values,
        circuit,
        setup.clean_metric,
        setup.ablated_metric,
        ablation,
        auc,
        kept,
    )


def truth_mask(g: Graph, truth: Sequence[str]) -> Tensor:
    """Bool [units]: which units an answer key's circuit names (`src -> dst` edges, or node names)."""
    names = g.unit_names()
    unknown = sorted(set(truth) - set(names))
    if unknown:
        require(False, f"the answer key names {unknown[0]!r}, which is not in this model's graph")
    wanted = set(truth)
    return torch.tensor([name in wanted for name in names])
