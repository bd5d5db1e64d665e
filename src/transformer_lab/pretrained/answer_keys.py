"""Answer keys: models built by hand, every weight set directly, whose circuit is known by construction (as
tracr compiles a program into weights, at toy scale), to grade circuit discovery and explanations on.

    python scripts/pretrain.py key_reverse key_induction key_reverse_encdec   # build, measure, record

Heads are named as everywhere (`L{layer}H{head}`, counted from 0; `E`, `D`, `X` in an encoder-decoder).

* `key_reverse` (task=reverse, encoder): L1H0 attends from position p to the mirror position 15 - p and
  copies its digit where the unembedding reads it. Distractors: the four heads of layer 0 (L0H1 with the
  very same mirror pattern) and L1H1..3, each attending sharply to one structured place (the previous, the
  next, the first, the last position, itself) and writing where nothing reads.
* `key_induction` (distinct-token induction, decoder): L0H0 copies each position's previous token next to
  it (a previous-token head); L1H2 attends from a token to the place whose previous token is that token,
  i.e. to what followed it last time, and copies it: an induction head that finds its key through the
  previous-token head's output (K-composition). Distractors: L0H1..3 and L1H0, L1H1, L1H3, attending
  sharply to the first position, the previous one, the one two back, or themselves.
* `key_reverse_encdec` (task=reverse, encoder-decoder): X0H0 (cross-attention) attends from target
  position t to source position 15 - t and copies that digit; the decoder's position 16 writes <eos>.
  Distractors: E0H0..3, D0H0..2 (D0H3 does nothing) and X0H1..3, attending sharply and writing where
  nothing reads.

How a hand-built network stays exact: the residual stream is laid out in named blocks of dimensions
(`Layout`): one dimension per token (TOK), per position (POS), per copied token (OUT, PREV), a junk block
(JUNK) where distractors write, and three bookkeeping dimensions. Every vector written into the stream
sums to zero (its SINK dimension takes minus the sum of the others), so LayerNorm's mean is 0; every
position also carries +C and -C in two dimensions (BIG), which dominate the variance, so every LayerNorm
divides by nearly the same number everywhere: with its weight set to that number it is the identity, up
to a relative 1e-3. Features are then exactly 0 or 1 where a head reads them.

Each key records its mechanism (every edge the computation uses) and, separately, its circuit for the
task's corruption: the edges whose activations the corruption changes and on which the metric at the
changed answer depends (purely positional edges carry the same values in both runs, score 0 under any
patching method, and are not in it). Circuit heads attend moderately (about 0.9 on their key): sharp
enough to be right everywhere, soft enough that gradients, which edge attribution patching is made of,
pass through their attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from transformer_lab import pretrained
from transformer_lab.nn import ModelConfig, MultiheadAttention, TokenModel, build_model

C = 100.0  # the constant every position carries (+C, -C): LayerNorm divides by ~ C sqrt(2 / D) everywhere
SHARP = 20.0  # attention score of the key a distractor looks at (others 0): weight 1 - 1e-8
SOFT = 5.0  # ... of the key a circuit head looks at: weight ~0.9 among 16 keys, gradients still flow
GAIN = 10.0  # the logit a copied token gets


# -------------------------------------------------------------------------- the residual stream's layout
class Layout:
    """Named blocks of the residual stream's dimensions, in order; `SINK`, `BIG_PLUS`, `BIG_MINUS` last."""

    def __init__(self, dim: int, **blocks: int):
        self.dim, self.start, offset = dim, {}, 0
        for name, size in [*blocks.items(), ("BIG_PLUS", 1), ("BIG_MINUS", 1), ("SINK", 1)]:
            self.start[name], offset = offset, offset + size
        if offset > dim:
            raise ValueError(f"the layout needs {offset} dimensions, the model has {dim}")

    def __call__(self, block: str, i: int = 0) -> int:
        """The dimension of entry i of a block."""
        return self.start[block] + i

    @property
    def scale(self) -> float:
        """What every LayerNorm divides by (the +C, -C pair dominates the variance): its weight."""
        return C * math.sqrt(2 / self.dim)


def write(vector: Tensor, layout: Layout, entries: dict[int, float]) -> None:
    """Set `vector`'s entries (dimension -> value) and SINK to minus their sum: a zero-mean write."""
    for dim, value in entries.items():
        vector[dim] += value
    vector[layout("SINK")] -= sum(entries.values())


class Head:
    """Views into one head's weights: W^Q, W^K, W^V rows [d_head, D] and W^O columns [D, d_head]."""

    def __init__(self, attn: MultiheadAttention, head: int):
        e, d = attn.embed_dim, attn.head_dim
        rows = slice(head * d, (head + 1) * d)
        weight = attn.qkv_proj.weight
        self.q, self.k, self.v = weight[rows], weight[e:][rows], weight[2 * e :][rows]
        self.o = attn.o_proj.weight[:, rows]
        self.root = math.sqrt(d)  # scores are q . k / sqrt(d_head)

    def attend(self, pairs: list[tuple[int, int]], score: float) -> None:
        """For each (query feature, key feature) pair: score `score` between a query with the one and a key
        with the other. Key feature number i is read into slot i of k; a query feature into the slot of
        each key feature it is paired with."""
        slots: dict[int, int] = {}
        for query, key in pairs:
            slot = slots.setdefault(key, len(slots))
            self.q[slot, query] += score * self.root
            self.k[slot, key] = 1.0

    def penalise(self, query: int, key: int, slot: int, score: float) -> None:
        """Add `score` between a query with feature `query` (read with weight 1/C: the BIG dimension) and a
        key with feature `key`."""
        self.q[slot, query] += score * self.root / C
        self.k[slot, key] += 1.0

    def copy(self, layout: Layout, source: str, target: str, size: int, gain: float = 1.0) -> None:
        """Read block `source` (entries 0 .. size-1) as the value, write it into block `target`."""
        for i in range(size):
            self.v[i, layout(source, i)] = 1.0
            self.o[layout(target, i), i] += gain
            self.o[layout("SINK"), i] -= gain


def positions(layout: Layout, target: Callable[[int], int | None], count: int) -> list[tuple[int, int]]:
    """(query POS p, key POS target(p)) pairs: a head attending by position."""
    return [(layout("POS", p), layout("POS", target(p))) for p in range(count) if target(p) is not None]


def embed(weight: Tensor, layout: Layout, block: str, count: int, offset: int = 0) -> None:
    """Row offset + i of an embedding writes 1 at entry i of `block`."""
    for i in range(count):
        write(weight[offset + i], layout, {layout(block, i): 1.0})


def positional(weight: Tensor, layout: Layout, count: int) -> None:
    """Position p writes 1 at POS p, and +C / -C at BIG (every position)."""
    for p in range(count):
        write(weight[p], layout, {layout("POS", p): 1.0, layout("BIG_PLUS"): C, layout("BIG_MINUS"): -C})


def blank(model: TokenModel, layout: Layout) -> None:
    """Every weight 0, every LayerNorm's weight the scale that makes it the identity (see the docstring)."""
    for parameter in model.parameters():
        parameter.zero_()
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.weight.fill_(layout.scale)


# ------------------------------------------------------------------------------------------ the keys
@dataclass
class AnswerKey:
    """A hand-built model: what it is, its task, its config, how its weights are set, and its circuits."""

    name: str
    description: str
    task_class: str
    task_hparams: dict
    config: dict
    metrics: list[str]
    headline: list[str]
    build: Callable[[TokenModel], None]
    mechanism: list[str]  # every edge the computation uses, `src -> dst`
    circuit: list[str]  # the edges of the mechanism the task's corruption changes and the answer needs
    distractors: list[str] = field(default_factory=list)  # heads built to look important and not be

    def model(self) -> TokenModel:
        """The model, its weights set by `build`, in eval mode."""
        torch.manual_seed(0)
        model = build_model(ModelConfig(**self.config))
        with torch.no_grad():
            self.build(model)
        return model.eval()


REVERSE_VOCAB = ["<pad>", "<bos>", "<eos>", "<sep>", *(str(d) for d in range(10))]
SPECIALS = {"pad_id": 0, "bos_id": 1, "eos_id": 2, "sep_id": 3}
DIGITS = 10  # token 4 + d is digit d
REVERSE_DATA = {
    "num_categories": 10,
    "seq_len": 16,
    "min_seq_len": 16,
    "train_size": 50000,
    "val_size": 1000,
    "test_size": 10000,
    "batch_size": 128,
    "num_workers": 0,
    "seed": 0,
}
KEY_MODEL = {  # what every key shares: pre-norm, attention only, no biases, learned positions, one Linear out
    "num_layers": 2,
    "mlp": False,
    "norm_first": True,
    "bias": False,
    "positional_encoding": "learned",
    "output_mlp": False,
    "tie_embeddings": False,
    "dropout": 0.0,
}


def build_reverse(model: TokenModel) -> None:
    """task=reverse with an encoder: 16 digits in, each position's class the digit at its mirror."""
    # the stream: a token and a position come in; the mirror head's output goes to OUT, the rest to JUNK
    layout = Layout(64, TOK=14, POS=16, OUT=14, JUNK=16)
    blank(model, layout)
    embed(model.embed.weight, layout, "TOK", 14)  # token i -> TOK i (digit d is token 4 + d)
    positional(model.pos_embed.embedding.weight, layout, 16)  # position p -> POS p
    first, second = model.blocks[0].attn, model.blocks[1].attn
    # layer 1: four distractors, sharp, writing into JUNK, which no head and not the unembedding reads
    previous = Head(first, 0)  # L0H0: the previous position (position 0: itself), copies its token
    previous.attend(positions(layout, lambda p: max(p - 1, 0), 16), SHARP)
    previous.copy(layout, "TOK", "JUNK", 14)
    decoy = Head(first, 1)  # L0H1: the mirror position, exactly the pattern of the head that does the work
    decoy.attend(positions(layout, lambda p: 15 - p, 16), SHARP)
    decoy.copy(layout, "TOK", "JUNK", 14)
    start = Head(first, 2)  # L0H2: the first position, from everywhere (the query reads BIG_PLUS)
    start.penalise(layout("BIG_PLUS"), layout("POS", 0), 0, SHARP)
    start.copy(layout, "TOK", "JUNK", 14)
    itself = Head(first, 3)  # L0H3: itself, copies its position
    itself.attend(positions(layout, lambda p: p, 16), SHARP)
    itself.copy(layout, "POS", "JUNK", 16)
    # layer 2: the mirror head, and three distractors reading and writing JUNK
    mirror = Head(second, 0)  # L1H0: position p looks at 15 - p and copies its token into OUT
    mirror.attend(positions(layout, lambda p: 15 - p, 16), SOFT)
    mirror.copy(layout, "TOK", "OUT", 14)
    following = Head(second, 1)  # L1H1: the next position (the last: itself), copies what layer 1 wrote
    following.attend(positions(layout, lambda p: min(p + 1, 15), 16), SHARP)
    following.copy(layout, "JUNK", "JUNK", 16)
    last = Head(second, 2)  # L1H2: the last position, from everywhere
    last.penalise(layout("BIG_PLUS"), layout("POS", 15), 0, SHARP)
    last.copy(layout, "TOK", "JUNK", 14)
    same = Head(second, 3)  # L1H3: itself, copies JUNK
    same.attend(positions(layout, lambda p: p, 16), SHARP)
    same.copy(layout, "JUNK", "JUNK", 16)
    for i in range(14):  # the unembedding reads OUT only: class i <- OUT i
        model.unembed.weight[i, layout("OUT", i)] = GAIN


def build_induction(model: TokenModel) -> None:
    """Distinct-token induction (20 tokens, 16 positions) with a decoder."""
    layout = Layout(128, TOK=20, POS=16, PREV=20, OUT=20, JUNK=20)
    blank(model, layout)
    embed(model.embed.weight, layout, "TOK", 20)
    positional(model.pos_embed.embedding.weight, layout, 16)
    first, second = model.blocks[0].attn, model.blocks[1].attn
    previous = Head(first, 0)  # L0H0, the previous-token head: p looks at p - 1, writes its token to PREV
    previous.attend(positions(layout, lambda p: max(p - 1, 0), 16), SHARP)
    previous.copy(layout, "TOK", "PREV", 20)
    start = Head(first, 1)  # L0H1: the first position, copies its token to JUNK
    start.penalise(layout("BIG_PLUS"), layout("POS", 0), 0, SHARP)
    start.copy(layout, "TOK", "JUNK", 20)
    itself = Head(first, 2)  # L0H2: itself
    itself.attend(positions(layout, lambda p: p, 16), SHARP)
    itself.copy(layout, "TOK", "JUNK", 20)
    two_back = Head(first, 3)  # L0H3: two positions back (or the first)
    two_back.attend(positions(layout, lambda p: max(p - 2, 0), 16), SHARP)
    two_back.copy(layout, "TOK", "JUNK", 20)
    echo = Head(second, 0)  # L1H0: the previous position again, copies what the previous-token head wrote
    echo.attend(positions(layout, lambda p: max(p - 1, 0), 16), SHARP)
    echo.copy(layout, "PREV", "JUNK", 20)
    start2 = Head(second, 1)  # L1H1: the first position
    start2.penalise(layout("BIG_PLUS"), layout("POS", 0), 0, SHARP)
    start2.copy(layout, "TOK", "JUNK", 20)
    induction = Head(second, 2)  # L1H2: query TOK t meets key PREV t: the place after t's last occurrence
    induction.attend([(layout("TOK", t), layout("PREV", t)) for t in range(20)], SOFT)
    # position 0 has no previous token (its PREV is its own token): a large negative score keeps it out
    induction.penalise(layout("BIG_PLUS"), layout("POS", 0), 20, -4 * SHARP)
    induction.copy(layout, "TOK", "OUT", 20)
    same = Head(second, 3)  # L1H3: itself
    same.attend(positions(layout, lambda p: p, 16), SHARP)
    same.copy(layout, "TOK", "JUNK", 20)
    for i in range(20):
        model.unembed.weight[i, layout("OUT", i)] = GAIN


def build_reverse_encdec(model: TokenModel) -> None:
    """task=reverse with an encoder-decoder: the source's 16 digits in, <bos> + 16 target positions."""
    layout = Layout(80, TOK=14, POS=17, OUT=14, JUNK=14, EOS=1)
    blank(model, layout)
    embed(model.encoder.embed.weight, layout, "TOK", 14)  # shared by the decoder
    positional(model.encoder.pos_embed.embedding.weight, layout, 17)
    positional(model.decoder.pos_embed.embedding.weight, layout, 17)
    write(model.decoder.pos_embed.embedding.weight[16], layout, {layout("EOS"): 1.0})  # the 17th writes <eos>
    encoder = model.encoder.blocks[0].attn
    for h, target in enumerate([lambda p: max(p - 1, 0), lambda p: 15 - p, lambda p: p, lambda p: 0]):
        head = Head(encoder, h)  # E0H0..3: previous, mirror, itself, first: all into JUNK
        head.attend(positions(layout, target, 16), SHARP)
        head.copy(layout, "TOK", "JUNK", 14)
    block = model.decoder.blocks[0]
    for h, target in enumerate([lambda p: 0, lambda p: max(p - 1, 0), lambda p: p]):
        head = Head(block.attn, h)  # D0H0..2 (causal): <bos>, previous, itself; D0H3 does nothing
        head.attend(positions(layout, target, 17), SHARP)
        head.copy(layout, "TOK", "JUNK", 14)
    mirror = Head(block.cross_attn, 0)  # X0H0: target position t reads source position 15 - t
    mirror.attend(positions(layout, lambda t: 15 - t if t <= 15 else None, 17), SOFT)
    mirror.copy(layout, "TOK", "OUT", 14)
    for h, target in [(1, lambda t: 0), (2, lambda t: min(t, 15)), (3, lambda t: 15)]:
        head = Head(block.cross_attn, h)  # X0H1..3: the first, the same, the last source position
        head.attend(positions(layout, target, 17), SHARP)
        head.copy(layout, "TOK", "JUNK", 14)
    for i in range(14):
        model.unembed.weight[i, layout("OUT", i)] = GAIN
    model.unembed.weight[2, layout("EOS")] = 3 * GAIN  # <eos> beats any mix of copied digits


def _edges(*pairs: tuple[str, str]) -> list[str]:
    return [f"{src} -> {dst}" for src, dst in pairs]


def reverse_key(
    arch: str, model_dim: int, max_len: int, num_layers: int = KEY_MODEL["num_layers"], **key: object
) -> AnswerKey:
    """An answer key on task=reverse (16 digits) with a key model (`KEY_MODEL`, 4 heads) of architecture
    `arch`: the task's data, vocabulary and metrics; `key` gives the rest (name, description, build,
    mechanism, circuit, distractors)."""
    return AnswerKey(
        task_class="transformer_lab.data.reverse.ReverseDataModule",
        task_hparams={"arch": arch, **REVERSE_DATA},
        config={
            "arch": arch,
            "vocab": REVERSE_VOCAB,
            **SPECIALS,
            "model_dim": model_dim,
            "num_heads": 4,
            "max_len": max_len,
            **KEY_MODEL,
            "num_layers": num_layers,
        },
        metrics=["acc", "seq_acc"],
        headline=["test/acc", "test/seq_acc"],
        **key,
    )


KEYS = {
    key.name: key
    for key in [
        reverse_key(
            "encoder",
            model_dim=64,
            max_len=16,
            name="key_reverse",
            description="hand-built answer key: reverses 16 digits with one mirror head, among 7 sharp "
            "distractors",
            build=build_reverse,
            mechanism=_edges(
                ("pos_embed", "blocks.1.attn.head.0.q"),
                ("pos_embed", "blocks.1.attn.head.0.k"),
                ("embed", "blocks.1.attn.head.0.v"),
                ("blocks.1.attn.head.0", "logits"),
            ),
            circuit=_edges(("embed", "blocks.1.attn.head.0.v"), ("blocks.1.attn.head.0", "logits")),
            distractors=[f"blocks.0.attn.head.{h}" for h in range(4)]
            + [f"blocks.1.attn.head.{h}" for h in (1, 2, 3)],
        ),
        AnswerKey(
            name="key_induction",
            description="hand-built answer key: a previous-token head and an induction head (K-composition) "
            "among 6 sharp distractors, on distinct-token induction",
            task_class="transformer_lab.data.distinct_induction.DistinctInductionDataModule",
            task_hparams={
                "vocab_size": 20,
                "seq_len": 16,
                "min_repeat": 3,
                "max_repeat": 7,
                "train_size": 50000,
                "val_size": 1000,
                "test_size": 2000,
                "batch_size": 64,
                "seed": 0,
            },
            config={
                "arch": "decoder",
                "vocab": [str(i) for i in range(20)],
                "model_dim": 128,
                "num_heads": 4,
                "max_len": 16,
                **KEY_MODEL,
            },
            metrics=["acc"],
            headline=["test/acc"],
            build=build_induction,
            mechanism=_edges(
                ("pos_embed", "blocks.0.attn.head.0.q"),
                ("pos_embed", "blocks.0.attn.head.0.k"),
                ("embed", "blocks.0.attn.head.0.v"),
                ("blocks.0.attn.head.0", "blocks.1.attn.head.2.k"),
                ("embed", "blocks.1.attn.head.2.q"),
                ("pos_embed", "blocks.1.attn.head.2.q"),
                ("pos_embed", "blocks.1.attn.head.2.k"),
                ("embed", "blocks.1.attn.head.2.v"),
                ("blocks.1.attn.head.2", "logits"),
            ),
            circuit=_edges(
                ("embed", "blocks.0.attn.head.0.v"),
                ("blocks.0.attn.head.0", "blocks.1.attn.head.2.k"),
                ("blocks.1.attn.head.2", "logits"),
            ),
            distractors=[f"blocks.0.attn.head.{h}" for h in (1, 2, 3)]
            + [f"blocks.1.attn.head.{h}" for h in (0, 1, 3)],
        ),
        reverse_key(
            "encoder_decoder",
            model_dim=80,
            max_len=17,
            num_layers=1,
            name="key_reverse_encdec",
            description="hand-built answer key: an encoder-decoder reversing 16 digits through one "
            "cross-attention head, among 10 sharp distractors",
            build=build_reverse_encdec,
            mechanism=_edges(
                ("encoder.embed", "encoder.output"),
                ("encoder.pos_embed", "encoder.output"),
                ("decoder.pos_embed", "decoder.blocks.0.cross_attn.head.0.q"),
                ("encoder.output", "decoder.blocks.0.cross_attn.head.0.k"),
                ("encoder.output", "decoder.blocks.0.cross_attn.head.0.v"),
                ("decoder.blocks.0.cross_attn.head.0", "logits"),
                ("decoder.pos_embed", "logits"),
            ),
            circuit=_edges(
                ("encoder.embed", "encoder.output"),
                ("encoder.output", "decoder.blocks.0.cross_attn.head.0.v"),
                ("decoder.blocks.0.cross_attn.head.0", "logits"),
            ),
            distractors=[f"encoder.blocks.0.attn.head.{h}" for h in range(4)]
            + [f"decoder.blocks.0.attn.head.{h}" for h in range(3)]
            + [f"decoder.blocks.0.cross_attn.head.{h}" for h in (1, 2, 3)],
        ),
    ]
}


def is_answer_key(location: object) -> bool:
    """Whether a checkpoint location is `pretrained:<name>` of a hand-built answer key."""
    if not pretrained.is_pretrained(location):
        return False
    return str(location).removeprefix(pretrained.PREFIX) in KEYS


def key_for(location: object) -> AnswerKey | None:
    """The answer key a checkpoint location names, or None."""
    return KEYS[str(location).removeprefix(pretrained.PREFIX)] if is_answer_key(location) else None
