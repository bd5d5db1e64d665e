"""The computational graph of a model (`graph(model)`): what a circuit is made of.

Nodes: the embeddings (`embed`, `pos_embed`), every attention head's output (`blocks.{i}.attn.head.{h}`,
`cross_attn` for cross-attention), every MLP (`blocks.{i}.mlp`), the logits, and in an encoder-decoder the
encoder's output (`encoder.output`, what every cross-attention head reads its keys and values from);
`encoder.` / `decoder.` prefix the names in an encoder-decoder. In a pre-norm model the residual stream
anywhere is the sum of the outputs written before it (plus constant biases), so every input a node reads
is a sum over edges:

    input_d = sum over upstream nodes u of out_u  (+ constants)        edges u -> d

with a head's query, key and value inputs as separate targets (`....head.{h}.q`, `.k`, `.v`: the model's
per-head hook points `hook_q_input` etc., see `HookedModule.per_head_hooks`). With grouped-query
attention the keys and values are read once per key-value head (`....kv_head.{g}.k`, `.v`), for the
group of query heads it serves. In a parallel block (GPT-NeoX) the MLP reads the block's input, as its
heads do, not what they write. A post-norm block,
LN(x + f(x)), is no such sum, so post-norm models get node-level circuits: the units scored are the
embeddings, the heads and the MLPs, each patched as a whole.

Plain data, no torch: the package imports this module at once (the command line reads the registry of
methods beside it before torch loads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from transformer_lab.errors import require

if TYPE_CHECKING:
    from transformer_lab.nn import TokenModel

LEVELS = ("edge", "node")
FEATURES_PER_ROW = 16  # a feature graph's drawing: this many features side by side


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
    group: tuple[int, ...] = ()  # every node reading it where several do (a key-value head's query heads)

    @property
    def nodes(self) -> tuple[int, ...]:
        """The nodes reading this input: `group`, or `node` alone."""
        return self.group or (self.node,)


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
    features: bool = False  # the units are an SAE's features and its error (`feature_graph`)

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


def _read_heads(
    read: object,
    nodes: list[Node],
    heads: list[int],
    kv_heads: int,
    module: str,
    hooks: str,
    prefix: str,
    cross: bool,
) -> None:
    """The inputs a layer's heads read: each head's queries (`hooks` + `q_input`, from its stack), keys
    and values (from the encoder's output in cross-attention): one per head, or with grouped-query
    attention one per key-value head, read by its group of query heads (`{module}.kv_head.{g}.k`)."""
    source = "encoder." if cross else prefix
    if kv_heads == len(heads):
        for h, node in enumerate(heads):
            for part in "qkv":
                shared = cross and part != "q"
                read(
                    f"{nodes[node].name}.{part}",
                    node,
                    f"{hooks}{part}_input",
                    h,
                    source if shared else prefix,
                    shared,
                )
        return
    group = len(heads) // kv_heads
    for h, node in enumerate(heads):
        read(f"{nodes[node].name}.q", node, f"{hooks}q_input", h, prefix)
    for g in range(kv_heads):
        served = tuple(heads[g * group : (g + 1) * group])
        for part in "kv":
            read(
                f"{module}.kv_head.{g}.{part}",
                served[0],
                f"{hooks}{part}_input",
                g,
                source,
                cross,
                group=served,
            )


def is_pre_norm(model: TokenModel) -> bool:
    """Whether the residual stream is a sum of the component outputs (edges are defined)."""
    return bool(model.config.norm_first)


def graph(model: TokenModel, level: str | None = None) -> Graph:
    """The model's computational graph (see the module docstring); `level` defaults to `edge` for a
    pre-norm model and `node` for a post-norm one (whose edges are not defined)."""
    from transformer_lab.analysis.arguments import as_model  # torch: loaded when a graph is built

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

    def read(
        name: str,
        node: int,
        hook: str,
        head: int | None,
        stack: str,
        cross: bool = False,
        count: int | None = None,
        group: tuple[int, ...] = (),
    ) -> None:
        """An input of `node` (and of `group`) summing the first `count` outputs written in `stack` (all
        so far by default; cross: the encoder's output, the last thing the encoder writes)."""
        count = len(writers[stack]) if count is None else count
        sources = (count - 1, count) if cross else (0, count)
        readers.append(Reader(name, node, hook, head, stack, sources, group))

    for prefix, stack in stacks.items():
        row = 0  # each stack's inputs at the bottom of its own column
        mine = writers.setdefault(prefix, [])
        mine.append(add(Node(f"{prefix}embed", _label(prefix, "embed"), prefix, row, f"{prefix}hook_embed")))
        pos = Node(f"{prefix}pos_embed", _label(prefix, "pos_embed"), prefix, row, f"{prefix}hook_pos_embed")
        mine.append(add(pos))
        for i, block in enumerate(stack.blocks):
            name = f"{prefix}blocks.{i}"
            block_input = len(mine)  # what a parallel block's MLP reads: the stream before its heads
            parts = [("attn", "")] + ([("cross_attn", "cross_")] if hasattr(block, "cross_attn") else [])
            for module, hook_prefix in parts:
                row += 1
                kind = "cross" if module == "cross_attn" else "attn"
                output = f"{name}.{module}.hook_{'result' if edges else 'z'}"
                attn = getattr(block, module)
                heads = [
                    add(Node(f"{name}.{module}.head.{h}", _label(prefix, kind, i, h), prefix, row, output, h))
                    for h in range(attn.num_heads)
                ]
                if edges:
                    _read_heads(
                        read,
                        nodes,
                        heads,
                        getattr(attn, "num_kv_heads", attn.num_heads),  # grouped-query attention
                        f"{name}.{module}",
                        f"{name}.hook_{hook_prefix}",
                        prefix,
                        kind == "cross",
                    )
                mine.extend(heads)
            if block.mlp is not None:
                row += 1
                mlp = add(Node(f"{name}.mlp", _label(prefix, "mlp", i), prefix, row, f"{name}.hook_mlp_out"))
                if edges:
                    count = block_input if getattr(block, "parallel_residual", False) else None
                    read(nodes[mlp].name, mlp, f"{name}.hook_mlp_in", None, prefix, count=count)
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


def feature_graph(model: TokenModel, hook: str, features: list[int]) -> Graph:
    """The node-level graph of an SAE spliced into `model` at `hook` (`nn.sae.splice`): a node per feature
    of `features` (`<hook>.sae.feature.{i}`, drawn `F{i}`: slice i of `<hook>.sae.hook_sae_acts_post`),
    one for the SAE's error term (`<hook>.sae.error`), and the logits. Patching a feature replaces its
    activation (the model's activation at the hook moves by the change times its decoder direction);
    patching the error replaces the part of the activation the SAE does not reconstruct. Features have no
    edges between them: one SAE's features all read the same activation, through the encoder's
    nonlinearity, and all write into the same place."""
    prefix = next((p for p in ("encoder.", "decoder.") if hook.startswith(p)), "")
    point = f"{hook}.sae.hook_sae_acts_post"
    nodes = [
        Node(f"{hook}.sae.feature.{i}", f"F{i}", prefix, 1 + k // FEATURES_PER_ROW, point, i)
        for k, i in enumerate(features)
    ]
    top = 1 + max(len(features) - 1, 0) // FEATURES_PER_ROW
    nodes.append(Node(f"{hook}.sae.error", "error", prefix, 0, f"{hook}.sae.hook_sae_error"))
    readout = next(iter(model.readout))
    nodes.append(Node("logits", "logits", readout, top + 1, None))
    return Graph("node", nodes, [], {}, scored=list(range(len(features) + 1)), features=True)
