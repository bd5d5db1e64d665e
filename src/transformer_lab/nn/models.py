"""The models: token ids in, logits out; each a plain `nn.Module` with hook points.

    tokens [B, T] -> token embedding + positions -> blocks -> final norm -> unembedding -> logits

* `EncoderClassifier`: every position sees the whole sequence and gets a class of its own (the course
  tutorial's network for the reverse task).
* `DecoderLM`: GPT-style; position t sees positions <= t and predicts token t + 1; `generate` writes
  text one token at a time with a KV cache.
* `EncoderDecoder`: Vaswani et al.'s Transformer: an encoder reads the source, a decoder writes the
  target, reading the encoder's output through cross-attention; `generate` does greedy or beam search.

Padding: where the config has a `pad_id`, the model derives everything from the ids itself: padding
positions are hidden from attention, and positions count real tokens only, so a sequence gets the same
logits on its real positions alone or padded in a batch, padded on the right or on the left.

What the three share (`TokenModel`), so that the tools built on them never ask which one they have:
`attention_layers()` (each with its kind: self, causal or cross), `stacks()` and `readout` (the stack
whose stream the output layer reads), how a sequence-to-sequence example is laid out as a batch for
each (`layout`, `prompts`, `sources`, `output_labels`, `alignment`), and `answer`: the greedy output for a
batch of prompts.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lab.nn.attention import KVCache
from transformer_lab.nn.blocks import DecoderBlock, EncoderBlock, make_dropout, make_norm
from transformer_lab.nn.config import ModelConfig
from transformer_lab.nn.hooks import HookedModule, HookPoint, evaluating
from transformer_lab.nn.positional import make_positional_encoding
from transformer_lab.nn.sampling import check_sampling_args, sample_next_token


class FinalNorm(nn.Module):
    """The norm (LayerNorm or RMSNorm) after the last block of a pre-norm stack. Post-norm blocks end in a
    norm of their own, so there it is the identity. Hook point `hook_normalized`: the stream the
    unembedding reads."""

    def __init__(self, dim: int, enabled: bool, bias: bool = True, kind: str = "layer", eps: float = 1e-5):
        super().__init__()
        self.norm = make_norm(kind, dim, eps, bias) if enabled else nn.Identity()
        self.hook_normalized = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        return self.hook_normalized(self.norm(x))


def make_unembedding(config: ModelConfig) -> nn.Module:
    """The output layer: one Linear to the classes (its bias: `unembed_bias`), or the tutorial's
    Linear-LayerNorm-ReLU-Linear."""
    dim, bias = config.model_dim, config.bias
    head = nn.Linear(dim, config.output_classes, bias=config.has_bias("unembed"))
    if not config.output_mlp:
        return head
    return nn.Sequential(
        nn.Linear(dim, dim, bias=bias),
        nn.LayerNorm(dim, bias=bias),
        nn.ReLU(inplace=True),
        make_dropout(config.dropout),
        head,
    )


IGNORE_INDEX = -100  # a label that counts for nothing (F.cross_entropy's default ignore_index): padding


class Specials(NamedTuple):
    """A sequence-to-sequence task's special token ids, from which every model lays out its batches."""

    pad: int
    bos: int
    eos: int
    sep: int


# The title of each group of attention layers (`AttentionLayer.group`) wherever they are shown together:
# the grids of explain and of TensorBoard, the explorer's headings (each adds what its axes mean).
GROUP_TITLES = {
    "self": "Attention weights",
    "encoder": "Encoder self-attention",
    "decoder": "Decoder self-attention",
    "cross": "Cross-attention",
}


def head_name(label: str, head: int) -> str:
    """A head's short name, the same everywhere (tables, figures, TensorBoard tags, the page): `L0H3` for
    head 3 of the layer labelled `L0` (`E0H3`, `D0H3`, `X0H3` in an encoder-decoder)."""
    return f"{label}H{head}"


@dataclass(frozen=True)
class AttentionLayer:
    """One attention layer of a model, as the analyses see it.

    name: the module's name (`blocks.0.attn`, `decoder.blocks.1.cross_attn`); its hook points are
    `{name}.hook_pattern` etc. kind: `self` (every query sees every key), `causal` (earlier keys only) or
    `cross` (queries from the decoder, keys from the encoder's output). group: the maps drawn together:
    `self` (a single stack), `encoder`, `decoder` or `cross`. label: `L0`, or `E0` / `D0` / `X0` in an
    encoder-decoder; head h is `{label}H{h}`. queries / keys: which model input holds the tokens of the
    queries / keys (0: the tokens, or an encoder-decoder's source; 1: its target). reads_source: whether
    the model's outputs read its input here (where a task's alignment, e.g. the mirror position, applies).
    """

    name: str
    kind: str
    group: str
    label: str
    queries: int
    keys: int
    reads_source: bool

    def head(self, head: int) -> str:
        """A head's short name, `L0H3` (`head_name`)."""
        return head_name(self.label, head)


class TokenModel(HookedModule):
    """A model of `self.config`: what a task and a tool need to know of it.

    Subclasses set `num_inputs` (the model inputs of a batch: tokens, or source and target) and
    `generates` (whether outputs are written one after the other, each reading the ones before, rather
    than all at once), and implement `stacks`, `layout` and `answer`.
    """

    config: ModelConfig
    num_inputs: int = 1
    generates: bool = False

    @property
    def vocab(self) -> list[str]:
        """The token strings; token id i is vocab[i]."""
        return self.config.tokens

    @property
    def pad_id(self) -> int | None:
        return self.config.pad_id

    @property
    def bos_id(self) -> int | None:
        return self.config.bos_id

    @property
    def eos_id(self) -> int | None:
        return self.config.eos_id

    @property
    def max_len(self) -> int:
        """The longest sequence the model reads (a decoder's context)."""
        return self.config.max_len

    # ------------------------------------------------------- what kind of model it is: one test each
    @property
    def decoder_only(self) -> bool:
        """One stream read causally, each position predicting the next token (GPT-style); on a
        sequence-to-sequence task it reads `source <sep>` and writes the target after it."""
        return self.generates and self.num_inputs == 1

    @property
    def language_model(self) -> bool:
        """A decoder-only model of text without padding: every position is text, and it continues any
        prompt (Shakespeare, the induction task)."""
        return self.decoder_only and self.pad_id is None

    @property
    def reads_source(self) -> bool:
        """Whether the model reads its input as a separate source (an encoder-decoder: source, target)."""
        return self.num_inputs == 2

    @property
    def has_cross_attention(self) -> bool:
        """Whether some layer's queries read another stack's output (the encoder-decoder's decoder)."""
        return any(layer.kind == "cross" for layer in self.attention_layers())

    # ------------------------------------------------------------------ what the model is made of
    def stacks(self) -> dict[str, "TransformerStack"]:
        """Its stacks of blocks by hook-name prefix: `{"": self}`, or `encoder.` and `decoder.`."""
        raise NotImplementedError

    @property
    def readout(self) -> tuple[str, "TransformerStack"]:
        """The prefix and the stack whose normalised stream the output layer reads (the last stack)."""
        return list(self.stacks().items())[-1]

    @property
    def source_stack(self) -> tuple[str, "TransformerStack"]:
        """The prefix and the stack that embeds the model's first input (the tokens, or the source)."""
        return next(iter(self.stacks().items()))

    def attention_layers(self) -> list[AttentionLayer]:
        """Every attention layer, in forward order (the rows of a head table)."""
        stacks = self.stacks()
        has_cross = any(hasattr(block, "cross_attn") for stack in stacks.values() for block in stack.blocks)
        layers = []
        for input_index, (prefix, stack) in enumerate(stacks.items()):
            name = prefix.rstrip(".")
            for i, block in enumerate(stack.blocks):
                label = f"{name[0].upper()}{i}" if name else f"L{i}"
                kind = "causal" if stack.causal else "self"
                layers.append(
                    AttentionLayer(
                        f"{prefix}blocks.{i}.attn",
                        kind,
                        name or "self",
                        label,
                        input_index,
                        input_index,
                        not has_cross,
                    )
                )
                if hasattr(block, "cross_attn"):
                    layers.append(
                        AttentionLayer(
                            f"{prefix}blocks.{i}.cross_attn", "cross", "cross", f"X{i}", input_index, 0, True
                        )
                    )
        return layers

    def shape(self) -> str:
        """`2 layers, 4 heads, model_dim 64` (`2 encoder + 2 decoder layers, ...` for two stacks)."""
        stacks = self.stacks()
        counts = [(prefix.rstrip("."), len(stack.blocks)) for prefix, stack in stacks.items()]
        if len(counts) == 1:
            layers = f"{counts[0][1]} layer{'s' * (counts[0][1] != 1)}"
        else:
            layers = " + ".join(f"{n} {name}" for name, n in counts) + " layers"
        heads = self.config.num_heads
        return f"{layers}, {heads} head{'s' * (heads != 1)}, model_dim {self.config.model_dim}"

    # ------------------------------------------- a sequence-to-sequence example, as each model reads it
    @classmethod
    def layout(cls, sources: Tensor, targets: Tensor, specials: Specials) -> tuple[Tensor, ...]:
        """A batch `(*model inputs, labels)` for source ids [B, S] and target ids [B, T], each padded with
        `specials.pad` on the right. Labels of IGNORE_INDEX count for nothing."""
        raise NotImplementedError

    @classmethod
    def positions(cls, source_len: int, target_len: int) -> int:
        """How many positions a model reads for sources and targets of these lengths: the source."""
        return source_len

    @classmethod
    def prompts(cls, inputs: tuple[Tensor, ...], specials: Specials) -> Tensor:
        """What generation starts from for each row of a batch laid out by `layout`: the source."""
        return inputs[0]

    @classmethod
    def sources(cls, inputs: tuple[Tensor, ...], specials: Specials) -> Tensor:
        """The source of each row of such a batch, [B, S'] (padding elsewhere)."""
        return inputs[0]

    @classmethod
    def output_labels(cls, inputs: tuple[Tensor, ...], labels: Tensor, specials: Specials) -> Tensor:
        """The labels of the outputs in order, [B, K] (IGNORE_INDEX after the last one)."""
        return labels

    @classmethod
    def alignment(cls, expected: Tensor, inputs: tuple[Tensor, ...], specials: Specials) -> Tensor:
        """Bool [B, K, S'] (output k needs source position s) in the coordinates of the attention layers
        that read the source (`AttentionLayer.reads_source`): [B, T_query, T_key]."""
        return expected

    def prompt(self, source: Tensor) -> Tensor:
        """One source's ids [S] as the input `answer` takes, [1, P]."""
        return source.reshape(1, -1)

    def answer(self, prompts: Tensor, max_new_tokens: int | None = None, beam_size: int = 1) -> Tensor:
        """The greedy output for each prompt [B, P], [B, W]: for a model that generates, the tokens after
        the prompt up to and including <eos>, then padding."""
        raise NotImplementedError

    def forced_inputs(self, prompt: Tensor, output: Tensor) -> tuple[Tensor, ...]:
        """The model inputs under which the model reads `prompt` [1, P] and writes `output` [1, W]
        position by position (teacher forcing), to look at how it produced that output."""
        return (prompt,)


class Cache:
    """What a stack remembers between generation steps: each block's self-attention keys and values
    (and its cross-attention's, computed once from the encoder's output); with padding, which cached
    positions are real tokens and how many real tokens each row has read (its next position). Room for
    `capacity` positions (default: the model's max_len; generation asks only for what it will write, so a
    model of a long context does not allocate it all)."""

    def __init__(
        self, stack: "TransformerStack", batch: int, memory_len: int = 0, capacity: int | None = None
    ):
        attn, like = stack.blocks[0].attn, stack.embed.weight

        def kv_cache(length: int) -> KVCache:
            return KVCache(batch, attn.num_kv_heads, length, attn.head_dim, like)

        self.blocks = [kv_cache(capacity or stack.max_len) for _ in stack.blocks]
        self.memory = [kv_cache(memory_len) for _ in stack.blocks] if memory_len else None
        self.real = torch.zeros(batch, 0, dtype=torch.bool, device=like.device)
        self.count = torch.zeros(batch, dtype=torch.long, device=like.device)

    @property
    def length(self) -> int:
        return self.blocks[0].length

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` (beam search). The memory caches are the same for every beam of a source
        and beams never move between sources, so they stay."""
        for kv_cache in self.blocks:
            kv_cache.reorder(index)
        self.real, self.count = self.real[index], self.count[index]


class TransformerStack(TokenModel):
    """Token ids -> the residual stream after the final norm, [B, T, model_dim].

    resid_0 = E[token] + P[position];  resid_l = Block_l(resid_{l-1});  out = LN_final(resid_L).

    Encoder blocks, causal or not; or, with `cross_attention`, decoder blocks that also read an
    encoder's output (`memory`). Hook points: `hook_embed` (E[token], [B, T, D]), `hook_pos_embed`
    (P[position], [B, T, D]; zeros with rotary positions, which the self-attention applies: the stack
    computes their angles once per pass), every block's (`blocks.{i}.…`), `ln_final.hook_normalized`.
    """

    def __init__(self, config: ModelConfig, causal: bool = False, cross_attention: bool = False):
        super().__init__()
        config.check()
        self.config = config
        self.causal = causal
        dim = config.model_dim
        self.embed = nn.Embedding(config.vocab_size, dim)
        self.hook_embed = HookPoint()
        self.input_dropout = make_dropout(config.input_dropout)
        self.pos_embed = make_positional_encoding(
            config.positional_encoding, dim, config.max_len, config.rotary_dim, config.rotary_base
        )
        self.hook_pos_embed = HookPoint()
        block = DecoderBlock if cross_attention else EncoderBlock
        self.blocks = nn.ModuleList(block(config.block(i)) for i in range(config.num_layers))
        self.ln_final = FinalNorm(
            dim, config.norm_first, config.has_bias("norm"), config.norm, config.norm_eps
        )

    def padding_mask(self, tokens: Tensor) -> Tensor | None:
        """[B, 1, 1, T], False at padding keys (every query ignores them); None without a pad_id."""
        if self.config.pad_id is None:
            return None
        return (tokens != self.config.pad_id)[:, None, None, :]

    def residual_stream(
        self,
        tokens: Tensor,
        cache: Cache | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        """Token ids [B, T] -> the normalised stream [B, T, D] the unembedding reads. With a `cache`,
        `tokens` are the positions after the cached ones; `memory` [B, S, D] is what decoder blocks'
        cross-attention reads, `memory_mask` [B, 1, 1, S] its padding."""
        batch, seq_len = tokens.shape
        offset = cache.length if cache is not None else 0
        if offset + seq_len > self.max_len:
            raise ValueError(
                f"{offset + seq_len} positions are more than the model's max_len={self.max_len}; "
                "shorten the input"
            )
        token_embed = self.hook_embed(self.embed(tokens))
        rotary = None
        if self.config.pad_id is None:
            positions = self.pos_embed.encoding(seq_len, offset).expand(batch, -1, -1)
            mask = None
            if self.config.positional_encoding == "rotary":
                rotary = self.pos_embed.angles(
                    torch.arange(offset, offset + seq_len, device=tokens.device)[None]
                )
        else:  # position = real tokens before this one; padding is hidden from every query
            real = tokens != self.config.pad_id
            count = real.cumsum(1) if cache is None else real.cumsum(1) + cache.count[:, None]
            position_ids = (count - 1).clamp(min=0)
            positions = self.pos_embed.lookup(position_ids)
            if self.config.positional_encoding == "rotary":
                rotary = self.pos_embed.angles(position_ids)
            if cache is not None:
                real = torch.cat([cache.real, real], dim=1)
                cache.real, cache.count = real, count[:, -1]
            mask = real[:, None, None, :]
        x = self.input_dropout(token_embed) + self.hook_pos_embed(positions)
        for i, block in enumerate(self.blocks):
            kv_cache = None if cache is None else cache.blocks[i]
            if memory is None:
                x = block(x, mask, self.causal, kv_cache, rotary)
            else:
                memory_cache = None if cache is None or cache.memory is None else cache.memory[i]
                x = block(x, memory, mask, memory_mask, kv_cache, memory_cache, rotary)
        return self.ln_final(x)

    def forward(self, tokens: Tensor, cache: Cache | None = None) -> Tensor:
        """The stack alone: token ids -> its normalised residual stream [B, T, D]."""
        return self.residual_stream(tokens, cache)

    def stacks(self) -> dict[str, "TransformerStack"]:
        return {"": self}


class EncoderClassifier(TransformerStack):
    """Bidirectional encoder with a class for every position: tokens [B, T] -> logits [B, T, classes].

    The course tutorial's reverse-task network (post-norm blocks, sinusoidal positions, an MLP head).
    """

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.unembed = make_unembedding(config)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.unembed(self.residual_stream(tokens))

    @classmethod
    def layout(cls, sources: Tensor, targets: Tensor, specials: Specials) -> tuple[Tensor, ...]:
        """tokens = S, labels = T: a class per source position."""
        return sources, targets.masked_fill(targets == specials.pad, IGNORE_INDEX)

    def answer(self, prompts: Tensor, max_new_tokens: int | None = None, beam_size: int = 1) -> Tensor:
        """The class of every position, all at once (an encoder writes nothing token by token)."""
        if beam_size != 1:
            raise ValueError(f"beam_size={beam_size}: beam search needs a model that generates its output")
        with evaluating(self):
            return self(prompts).argmax(dim=-1)


def _tie(unembed: nn.Module, embed: nn.Embedding) -> None:
    """One matrix for the token embedding and the output layer (Press & Wolf, 2017), initialised N(0, 0.02)
    as in GPT-2, so that the first logits are near zero."""
    nn.init.normal_(embed.weight, std=0.02)
    head = unembed[-1] if isinstance(unembed, nn.Sequential) else unembed
    head.weight = embed.weight


class DecoderLM(TransformerStack):
    """GPT-style causal language model: tokens [B, T] -> next-token logits [B, T, vocab_size]."""

    def __init__(self, config: ModelConfig):
        super().__init__(config, causal=True)
        self.unembed = make_unembedding(config)
        if config.tie_embeddings:
            _tie(self.unembed, self.embed)

    generates = True

    def forward(self, tokens: Tensor, cache: Cache | None = None) -> Tensor:
        """Token ids [B, T] -> logits [B, T, vocab_size]; logits[:, t] predict token t + 1."""
        return self.unembed(self.residual_stream(tokens, cache))

    @classmethod
    def layout(cls, sources: Tensor, targets: Tensor, specials: Specials) -> tuple[Tensor, ...]:
        """tokens = S <sep> T (then padding), labels = the next token on the target part only:
        IGNORE ... IGNORE T <eos>. Column j of the row and its label (the token at j + 1), all at once."""
        pad, sep, eos = specials.pad, specials.sep, specials.eos
        source_len = (sources != pad).sum(1, keepdim=True)
        target_len = (targets != pad).sum(1, keepdim=True)
        width = sources.size(1) + 1 + targets.size(1)
        j = torch.arange(width, device=sources.device).expand(len(sources), -1)
        in_target = j - source_len - 1  # index into the target, where 0 <= it < target_len
        tokens = torch.where(j < source_len, sources.gather(1, j.clamp(max=sources.size(1) - 1)), pad)
        tokens = torch.where(j == source_len, sep, tokens)
        from_target = targets.gather(1, in_target.clamp(0, targets.size(1) - 1))
        tokens = torch.where((in_target >= 0) & (in_target < target_len), from_target, tokens)
        predicted = targets.gather(1, (j - source_len).clamp(0, targets.size(1) - 1))
        labels = torch.where((j >= source_len) & (j < source_len + target_len), predicted, IGNORE_INDEX)
        labels = torch.where(j == source_len + target_len, eos, labels)
        return tokens, labels

    @classmethod
    def positions(cls, source_len: int, target_len: int) -> int:
        """source <sep> target."""
        return source_len + 1 + target_len

    @staticmethod
    def _separators(tokens: Tensor, specials: Specials) -> Tensor:
        """Each row's <sep> column, [B]: its source is tokens[:, :n] (the whole row where it has none)."""
        found = tokens == specials.sep
        return torch.where(found.any(dim=1), found.int().argmax(dim=1), tokens.size(1))

    @classmethod
    def prompts(cls, inputs: tuple[Tensor, ...], specials: Specials) -> Tensor:
        """`source <sep>` of each row, padded on the left so every row's next token is at one column."""
        tokens = inputs[0]
        ends = cls._separators(tokens, specials)
        width = int(ends.max()) + 1
        index = ends[:, None] - (width - 1) + torch.arange(width, device=tokens.device)
        inside = (index >= 0) & (index < tokens.size(1))
        return torch.where(inside, tokens.gather(1, index.clamp(0, tokens.size(1) - 1)), specials.pad)

    @classmethod
    def sources(cls, inputs: tuple[Tensor, ...], specials: Specials) -> Tensor:
        tokens = inputs[0]
        column = torch.arange(tokens.size(1), device=tokens.device)
        return tokens.masked_fill(column >= cls._separators(tokens, specials)[:, None], specials.pad)

    @classmethod
    def _output_rows(cls, inputs: tuple[Tensor, ...], specials: Specials) -> tuple[Tensor, Tensor]:
        """The row predicting output k, [B, K] (from the <sep> on), and whether it exists."""
        tokens = inputs[0]
        ends = cls._separators(tokens, specials)
        rows = ends[:, None] + torch.arange(tokens.size(1) - int(ends.min()), device=tokens.device)
        return rows.clamp(max=tokens.size(1) - 1), rows < tokens.size(1)

    @classmethod
    def output_labels(cls, inputs: tuple[Tensor, ...], labels: Tensor, specials: Specials) -> Tensor:
        rows, exists = cls._output_rows(inputs, specials)
        return labels.gather(1, rows).masked_fill(~exists, IGNORE_INDEX)

    @classmethod
    def alignment(cls, expected: Tensor, inputs: tuple[Tensor, ...], specials: Specials) -> Tensor:
        """Output k is predicted at row <sep> + k of the self-attention [B, W, W]."""
        rows, exists = cls._output_rows(inputs, specials)
        width = inputs[0].size(1)
        expected = (expected & exists[:, :, None]).to(torch.uint8)
        out = torch.zeros(len(rows), width, width, dtype=torch.uint8, device=expected.device)
        return out.scatter_add_(1, rows[:, :, None].expand(-1, -1, width), expected) > 0

    def prompt(self, source: Tensor) -> Tensor:
        """`source <sep>`, [1, S + 1]."""
        if self.config.sep_id is None:
            raise ValueError("this model has no <sep> token: it continues text (prompt=), it maps no source")
        sep = torch.tensor([self.config.sep_id], dtype=source.dtype, device=source.device)
        return torch.cat([source.reshape(-1), sep]).unsqueeze(0)

    def answer(self, prompts: Tensor, max_new_tokens: int | None = None, beam_size: int = 1) -> Tensor:
        """Greedy continuation of `prompts` (padded on the left): the new tokens only."""
        if beam_size != 1:
            raise ValueError(f"beam_size={beam_size}: beam search is the encoder-decoder's; use beam_size=1")
        new = self.max_len - prompts.size(1) if max_new_tokens is None else max_new_tokens
        return self.generate(prompts, new, temperature=0)[:, prompts.size(1) :]

    def forced_inputs(self, prompt: Tensor, output: Tensor) -> tuple[Tensor, ...]:
        """The prompt and the output but its last token (which nothing reads) as one sequence."""
        return (torch.cat([prompt, output[:, :-1]], dim=1),)

    def generate(
        self,
        tokens: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        on_token: Callable[[Tensor], None] | None = None,
    ) -> Tensor:
        """Extend token ids [B, T] by up to `max_new_tokens` sampled tokens -> [B, T + new tokens].
        `on_token(next_tokens [B, 1])` is called with each new token as it is chosen (to stream them).

        With `use_cache` each new token costs one position's work: its keys and values are appended to
        a per-block KV cache. `temperature=0` is greedy; see `sample_next_token` for top-k and top-p.
        Runs in eval mode under `torch.inference_mode` (no autograd bookkeeping: about 1.4x faster per
        cached token than no_grad). Cached and uncached decoding give identical results.

        Without padding (a language model) the context is cropped to the last `max_len` tokens. Positions
        are absolute, so a full cache cannot slide by one; instead the last half window is re-encoded
        from position 0 (one forward pass every max_len / 2 tokens, so the cost stays amortised).
        With a `pad_id` (a prompt per row, of different lengths: pad them on the left) generation stops
        when the context is full; with an `eos_id` a row that wrote <eos> continues with padding, and
        generation stops once every row has.
        """
        if tokens.ndim != 2 or tokens.size(1) == 0:
            raise ValueError(f"tokens must be [batch, T>0] token ids, got shape {tuple(tokens.shape)}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
        check_sampling_args(temperature, top_k, top_p)
        pad, eos, block = self.config.pad_id, self.config.eos_id, self.max_len
        if pad is not None and tokens.size(1) > block:
            raise ValueError(f"the prompt has {tokens.size(1)} positions, more than max_len={block}")
        cache: Cache | None = None
        batch, length = tokens.shape
        finished = torch.zeros(batch, dtype=torch.bool, device=tokens.device)
        with evaluating(self, autograd="inference"):
            out = torch.empty(batch, length + max_new_tokens, dtype=tokens.dtype, device=tokens.device)
            out[:, :length] = tokens  # written in place: no copy of the whole sequence per token
            for written in range(max_new_tokens):
                if pad is not None and length > block:
                    break  # padded rows cannot slide their positions: the context is full
                if not use_cache:
                    logits = self(out[:, max(0, length - block) : length])
                elif cache is None or cache.length == block:
                    window = min(length, block if cache is None else max(1, block // 2))
                    cache = Cache(self, batch, capacity=min(block, window + max_new_tokens - written))
                    logits = self(out[:, length - window : length], cache)
                else:
                    logits = self(out[:, length - 1 : length], cache)
                usable = logits[:, -1, : self.config.used_tokens]  # never an unused row (a hub's padding)
                next_token = sample_next_token(usable, temperature, top_k, top_p, generator)
                if eos is not None:
                    next_token = next_token.masked_fill(finished[:, None], eos if pad is None else pad)
                    finished |= next_token[:, 0] == eos
                out[:, length] = next_token[:, 0]
                length += 1
                if on_token is not None:
                    on_token(next_token)
                if eos is not None and bool(finished.all()):
                    break
        return out[:, :length].clone()  # an ordinary tensor again: inference tensors cannot enter autograd


class EncoderDecoder(TokenModel):
    """The Transformer of Vaswani et al. (2017): source ids [B, S] and target ids [B, T] -> logits
    [B, T, vocab_size], where logits[:, t] predict target token t + 1 (teacher forcing: the target
    starts with <bos>).

    `encoder` reads the source (encoder blocks); `decoder` reads the target so far with causal
    self-attention and the encoder's output with cross-attention (decoder blocks). Source and target
    share one vocabulary and one token embedding (section 3.4); `tie_embeddings` also makes it the
    output layer. Hook points are the two stacks', prefixed `encoder.` and `decoder.`.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        config.check()
        if config.pad_id is None or config.bos_id is None or config.eos_id is None:
            raise ValueError(
                "an encoder-decoder needs pad_id, bos_id and eos_id (a task with special tokens)"
            )
        self.config = config
        self.encoder = TransformerStack(config)
        self.decoder = TransformerStack(config, causal=True, cross_attention=True)
        self.decoder.embed.weight = self.encoder.embed.weight
        self.unembed = make_unembedding(config)
        if config.tie_embeddings:
            _tie(self.unembed, self.encoder.embed)

    num_inputs = 2
    generates = True

    def stacks(self) -> dict[str, TransformerStack]:
        return {"encoder.": self.encoder, "decoder.": self.decoder}

    @classmethod
    def layout(cls, sources: Tensor, targets: Tensor, specials: Specials) -> tuple[Tensor, ...]:
        """source = S, target = <bos> T, labels = T <eos>."""
        target_len = (targets != specials.pad).sum(1)
        target_in = torch.cat([torch.full_like(targets[:, :1], specials.bos), targets], dim=1)
        labels = targets.masked_fill(targets == specials.pad, IGNORE_INDEX)
        labels = torch.cat([labels, torch.full_like(labels[:, :1], IGNORE_INDEX)], dim=1)
        labels[torch.arange(len(targets), device=targets.device), target_len] = specials.eos
        return sources, target_in, labels

    @classmethod
    def positions(cls, source_len: int, target_len: int) -> int:
        """The longer of the source and <bos> target (each stack reads one)."""
        return max(source_len, target_len + 1)

    def answer(self, prompts: Tensor, max_new_tokens: int | None = None, beam_size: int = 1) -> Tensor:
        return self.generate(prompts, max_new_tokens, beam_size=beam_size)

    def forced_inputs(self, prompt: Tensor, output: Tensor) -> tuple[Tensor, ...]:
        """The source, and the target <bos> output[:-1]."""
        bos = torch.full_like(output[:, :1], self.bos_id)
        return prompt, torch.cat([bos, output[:, :-1]], dim=1)

    def encode(self, source: Tensor) -> tuple[Tensor, Tensor | None]:
        """The encoder's output [B, S, D] and the source's padding mask [B, 1, 1, S]."""
        return self.encoder.residual_stream(source), self.encoder.padding_mask(source)

    def forward(self, source: Tensor, target: Tensor) -> Tensor:
        memory, memory_mask = self.encode(source)
        return self.unembed(self.decoder.residual_stream(target, memory=memory, memory_mask=memory_mask))

    def generate(
        self,
        source: Tensor,
        max_new_tokens: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        use_cache: bool = True,
    ) -> Tensor:
        """Target ids [B, T_out] for source ids [B, S]: the tokens after <bos>, up to and including <eos>,
        then padding. Greedy with `beam_size=1`, beam search otherwise.

        Beam search keeps the `beam_size` best hypotheses per source, ranked by log p(y | x) / |y|^alpha
        (`length_penalty` alpha: 0 ranks by probability alone, which favours short outputs; 1 by the mean
        log-probability per token). A finished hypothesis stays in its beam, extended by padding at no
        cost. The greedy output is always a candidate too, so beam search never returns a worse score
        than greedy decoding (plain beam search can). With `use_cache` (the default) the decoder keeps
        its keys and values and the cross-attention's keys and values are computed once per source;
        without, every step re-runs the whole decoder (the same result, slower).
        `max_new_tokens` defaults to `max_len`, the decoder's positions.
        """
        self._check_source(source)
        if max_new_tokens is None:
            max_new_tokens = self.max_len
        if not 1 <= max_new_tokens <= self.max_len:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be between 1 and max_len={self.max_len}")
        if not (isinstance(beam_size, int) and beam_size >= 1):
            raise ValueError(f"beam_size={beam_size!r} must be an integer >= 1 (1: greedy)")
        with evaluating(self, autograd="inference"):
            output, score = self._beam_search(source, beam_size, max_new_tokens, length_penalty, use_cache)
            if beam_size > 1:
                greedy, greedy_score = self._beam_search(source, 1, max_new_tokens, length_penalty, use_cache)
                width = max(output.size(1), greedy.size(1))
                output, greedy = (
                    F.pad(t, (0, width - t.size(1)), value=self.pad_id) for t in (output, greedy)
                )
                output = torch.where((greedy_score > score)[:, None], greedy, output)
            output = output[:, : int((output != self.pad_id).sum(dim=1).max())]  # no all-padding columns
        return output.clone()

    def _check_source(self, source: Tensor) -> None:
        if source.ndim != 2 or source.size(1) == 0:
            raise ValueError(f"source must be [batch, S>0] token ids, got shape {tuple(source.shape)}")
        if source.size(1) > self.max_len:
            raise ValueError(
                f"the source has {source.size(1)} tokens, more than the model's max_len={self.max_len}; "
                "shorten it"
            )
        if int(source.min()) < 0 or int(source.max()) >= self.config.vocab_size:
            raise ValueError(
                f"source token ids must be in [0, {self.config.vocab_size}); tokenize with the model's vocab"
            )
        empty = (source == self.pad_id).all(dim=1).nonzero()
        if len(empty):
            raise ValueError(f"source row {int(empty[0])} is empty (only padding); give at least one token")

    def _beam_search(
        self, source: Tensor, beams: int, steps: int, length_penalty: float, use_cache: bool
    ) -> tuple[Tensor, Tensor]:
        """The best of `beams` hypotheses per source ([B, T_out] after <bos>) and its ranking score [B].
        With beams=1 this is greedy decoding: the top-1 candidate is the argmax of each step."""
        batch, vocab = source.size(0), self.config.vocab_size
        memory, memory_mask = self.encode(source)
        memory, memory_mask = memory.repeat_interleave(beams, 0), memory_mask.repeat_interleave(beams, 0)
        rows = batch * beams
        cache = Cache(self.decoder, rows, memory_len=source.size(1)) if use_cache else None
        tokens = torch.full((rows, 1), self.bos_id, dtype=torch.long, device=source.device)
        scores = torch.zeros(batch, beams, device=source.device)
        scores[:, 1:] = float("-inf")  # every beam starts as the same <bos>: expand only the first
        scores = scores.view(rows)
        lengths = torch.zeros(rows, dtype=torch.long, device=source.device)
        finished = torch.zeros(rows, dtype=torch.bool, device=source.device)
        only_pad = torch.full((vocab,), float("-inf"), device=source.device)
        only_pad[self.pad_id] = 0.0  # a finished hypothesis continues with padding, at no cost
        first = torch.arange(batch, device=source.device)[:, None] * beams
        for _ in range(steps):
            reads = tokens[:, -1:] if use_cache else tokens
            hidden = self.decoder.residual_stream(reads, cache, memory, memory_mask)[:, -1]
            log_probs = F.log_softmax(self.unembed(hidden).float(), dim=-1)
            log_probs = torch.where(finished[:, None], only_pad, log_probs)
            new_lengths = lengths + (~finished).long()
            candidates = scores[:, None] + log_probs  # [rows, V]: log p of each one-token extension
            ranked = candidates / new_lengths[:, None].clamp(min=1) ** length_penalty
            best = ranked.view(batch, beams * vocab).topk(beams, dim=-1).indices  # [B, beams]
            origin = (first + best // vocab).view(rows)
            token = (best % vocab).view(rows)
            scores = candidates.view(batch, beams * vocab).gather(1, best).view(rows)
            tokens = torch.cat([tokens[origin], token[:, None]], dim=1)
            lengths = new_lengths[origin]
            finished = finished[origin] | (token == self.eos_id)
            if cache is not None and beams > 1:  # greedy: every row continues itself
                cache.reorder(origin)
            if bool(finished.all()):
                break
        ranked = (scores / lengths.clamp(min=1) ** length_penalty).view(batch, beams)
        best_score, best_beam = ranked.max(dim=-1)
        return tokens[first[:, 0] + best_beam, 1:], best_score


MODELS = {"encoder": EncoderClassifier, "decoder": DecoderLM, "encoder_decoder": EncoderDecoder}


def build_model(config: ModelConfig | dict) -> TokenModel:
    """The model `config.arch` names, freshly initialised."""
    if isinstance(config, dict):
        config = ModelConfig(**config)
    return MODELS[config.arch](config)
