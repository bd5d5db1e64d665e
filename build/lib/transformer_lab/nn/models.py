"""The models: token ids in, logits out; each a plain `nn.Module` with hook points.

    tokens [B, T] -> token embedding + positions -> blocks -> final norm -> unembedding -> logits

* `EncoderClassifier`: every position sees the whole sequence and gets a class of its own (the course
  tutorial's network for the reverse task).
* `DecoderLM`: GPT-style; position t sees positions <= t and predicts token t + 1; `generate` writes
  text one token at a time with a KV cache.

Padding: where the config has a `pad_id`, the model hides those positions from attention itself, so a
sequence gets the same logits on its real positions alone or padded in a batch.
"""

import torch
from torch import Tensor, nn

from transformer_lab.nn.attention import KVCache
from transformer_lab.nn.blocks import EncoderBlock, make_dropout
from transformer_lab.nn.config import ModelConfig
from transformer_lab.nn.hooks import HookedModule, HookPoint
from transformer_lab.nn.positional import make_positional_encoding
from transformer_lab.nn.sampling import check_sampling_args, sample_next_token


class FinalNorm(nn.Module):
    """The LayerNorm after the last block of a pre-norm stack. Post-norm blocks end in a LayerNorm of
    their own, so there it is the identity. Hook point `hook_normalized`: the stream the unembedding reads."""

    def __init__(self, dim: int, enabled: bool, bias: bool = True):
        super().__init__()
        self.norm = nn.LayerNorm(dim, bias=bias) if enabled else nn.Identity()
        self.hook_normalized = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        return self.hook_normalized(self.norm(x))


def make_unembedding(config: ModelConfig) -> nn.Module:
    """The output layer: one Linear to the classes, or the tutorial's Linear-LayerNorm-ReLU-Linear."""
    dim, bias = config.model_dim, config.bias
    head = nn.Linear(dim, config.output_classes, bias=bias)
    if not config.output_mlp:
        return head
    return nn.Sequential(
        nn.Linear(dim, dim, bias=bias),
        nn.LayerNorm(dim, bias=bias),
        nn.ReLU(inplace=True),
        make_dropout(config.dropout),
        head,
    )


class TransformerStack(HookedModule):
    """Token ids -> the residual stream after the final norm, [B, T, model_dim].

    resid_0 = E[token] + P[position];  resid_l = Block_l(resid_{l-1});  out = LN_final(resid_L).

    Hook points: `hook_embed` (E[token], [B, T, D]), `hook_pos_embed` (P[position], [B, T, D]), every
    block's (`blocks.{i}.…`), `ln_final.hook_normalized`.
    """

    causal = False

    def __init__(self, config: ModelConfig):
        super().__init__()
        config.check()
        self.config = config
        dim = config.model_dim
        self.embed = nn.Embedding(config.vocab_size, dim)
        self.hook_embed = HookPoint()
        self.input_dropout = make_dropout(config.input_dropout)
        self.pos_embed = make_positional_encoding(config.positional_encoding, dim, config.max_len)
        self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(
            EncoderBlock(
                input_dim=dim,
                num_heads=config.num_heads,
                dim_feedforward=config.feedforward_dim,
                dropout=config.dropout,
                norm_first=config.norm_first,
                activation=config.activation,
                bias=config.bias,
                scale_attention=config.scale_attention,
            )
            for _ in range(config.num_layers)
        )
        self.ln_final = FinalNorm(dim, enabled=config.norm_first, bias=config.bias)

    # What a task and a tool need to know of a model.
    @property
    def vocab(self) -> list[str]:
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

    def padding_mask(self, tokens: Tensor) -> Tensor | None:
        """[B, 1, 1, T], False at padding keys (every query ignores them); None without a pad_id."""
        if self.config.pad_id is None:
            return None
        return (tokens != self.config.pad_id)[:, None, None, :]

    def residual_stream(self, tokens: Tensor, kv_caches: list[KVCache] | None = None) -> Tensor:
        """Token ids [B, T] -> the normalised stream [B, T, D] the unembedding reads. With `kv_caches`,
        `tokens` are the positions after the cached ones."""
        batch, seq_len = tokens.shape
        offset = kv_caches[0].length if kv_caches else 0
        token_embed = self.hook_embed(self.embed(tokens))
        pos_embed = self.hook_pos_embed(self.pos_embed.encoding(seq_len, offset).expand(batch, -1, -1))
        x = self.input_dropout(token_embed) + pos_embed
        mask = self.padding_mask(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, self.causal, None if kv_caches is None else kv_caches[i])
        return self.ln_final(x)


class EncoderClassifier(TransformerStack):
    """Bidirectional encoder with a class for every position: tokens [B, T] -> logits [B, T, classes].

    The course tutorial's reverse-task network (post-norm blocks, sinusoidal positions, an MLP head).
    """

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.unembed = make_unembedding(config)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.unembed(self.residual_stream(tokens))


class DecoderLM(TransformerStack):
    """GPT-style causal language model: tokens [B, T] -> next-token logits [B, T, vocab_size].

    `tie_embeddings` uses the token embedding as the output layer (Press & Wolf, 2017), initialised
    N(0, 0.02) as in GPT-2 so that the first logits are near zero.
    """

    causal = True

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.unembed = make_unembedding(config)
        if config.tie_embeddings:
            nn.init.normal_(self.embed.weight, std=0.02)
            head = self.unembed[-1] if config.output_mlp else self.unembed
            head.weight = self.embed.weight

    def forward(self, tokens: Tensor, kv_caches: list[KVCache] | None = None) -> Tensor:
        """Token ids [B, T] -> logits [B, T, vocab_size]; logits[:, t] predict token t + 1."""
        return self.unembed(self.residual_stream(tokens, kv_caches))

    def new_kv_caches(self, batch: int) -> list[KVCache]:
        """One empty KV cache per block, each for `max_len` positions."""
        attn = self.blocks[0].attn
        like = self.embed.weight
        return [KVCache(batch, attn.num_heads, self.max_len, attn.head_dim, like) for _ in self.blocks]

    def generate(
        self,
        tokens: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Extend token ids [B, T] by `max_new_tokens` sampled tokens -> [B, T + max_new_tokens].

        The context is cropped to the last `max_len` tokens. With `use_cache` each new token costs one
        position's work: its keys and values are appended to a per-block KV cache. Positions are absolute,
        so a full cache cannot slide by one; instead the last half window is re-encoded from position 0
        (one forward pass every max_len / 2 tokens, so the cost stays amortised). Until the sequence
        outgrows `max_len`, cached and uncached decoding give identical results. Runs in eval mode under
        `torch.inference_mode` (no autograd bookkeeping: about 1.4x faster per cached token than no_grad).
        `temperature=0` is greedy; see `sample_next_token` for top-k and top-p.
        """
        if tokens.ndim != 2 or tokens.size(1) == 0:
            raise ValueError(f"tokens must be [batch, T>0] token ids, got shape {tuple(tokens.shape)}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
        check_sampling_args(temperature, top_k, top_p)
        was_training = self.training
        self.eval()
        block = self.max_len
        caches: list[KVCache] | None = None
        with torch.inference_mode():
            for _ in range(max_new_tokens):
                if not use_cache:
                    logits = self(tokens[:, -block:])
                elif caches is None or caches[0].length == block:
                    window = block if caches is None else max(1, block // 2)
                    caches = self.new_kv_caches(tokens.size(0))
                    logits = self(tokens[:, -window:], caches)
                else:
                    logits = self(tokens[:, -1:], caches)
                next_token = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
                tokens = torch.cat([tokens, next_token], dim=1)
        self.train(was_training)
        return tokens.clone()  # an ordinary tensor again: inference-mode tensors cannot enter autograd


MODELS = {"encoder": EncoderClassifier, "decoder": DecoderLM}


def build_model(config: ModelConfig | dict) -> TransformerStack:
    """The model `config.arch` names, freshly initialised."""
    if isinstance(config, dict):
        config = ModelConfig(**config)
    return MODELS[config.arch](config)
