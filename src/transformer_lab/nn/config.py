"""ModelConfig: every hyperparameter that shapes a model, checked once, in one place.

A config is plain data (strings, numbers, lists), so it is stored in checkpoints as it is and a model is
rebuilt from it with `build_model(config)`. Error messages name the `model.<key>` of the training
config, where these values are usually set.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from transformer_lab.nn import activations

ARCHITECTURES = ("encoder", "decoder", "encoder_decoder")
# Upper bounds on every size, far above what these models train on a laptop or a GPU, so that a config or
# a checkpoint made by someone else cannot make a model allocate absurd memory before any other check.
LIMITS = {
    "vocab_size": 1 << 22,
    "num_classes": 1 << 22,
    "model_dim": 1 << 15,
    "num_heads": 1 << 10,
    "num_layers": 1 << 10,
    "mlp_ratio": 1 << 6,
    "dim_feedforward": 1 << 17,
    "max_len": 1 << 20,
}
POSITIONAL_ENCODINGS = ("sinusoidal", "learned", "none", "rotary")
ACTIVATIONS = activations.NAMES  # gelu_new: GPT-2's tanh GELU; swiglu, geglu: gated MLPs (blocks.GatedMLP)
GATED = tuple(activations.GATES)
NORMS = ("layer", "rms")
BIASES = ("qkv_bias", "out_bias", "mlp_bias", "norm_bias", "unembed_bias")  # each: null = as `bias`


class UnknownSetting(ValueError):
    """A key that is not a setting of `ModelConfig` (a typo, or a file of another version)."""


@dataclass(frozen=True)
class BlockSpec:
    """One block's settings, resolved from a `ModelConfig` (`ModelConfig.block(layer)`): what `Block` and
    its attention and MLP are built from. The names are the config's; `num_kv_heads` and
    `dim_feedforward` resolved, each part's bias decided (`ModelConfig.has_bias`), `rotary` whether the
    self-attention rotates queries and keys, `attention_window` this layer's window (None: none)."""

    model_dim: int
    num_heads: int
    num_kv_heads: int
    dim_feedforward: int
    activation: str = "relu"
    dropout: float = 0.0
    norm_first: bool = False
    norm: str = "layer"
    norm_eps: float = 1e-5
    mlp: bool = True
    parallel_residual: bool = False
    scale_attention: bool = True
    rotary: bool = False
    attention_window: int | None = None
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    norm_bias: bool = True

    @staticmethod
    def of_settings(arch: str, model_dim: int, num_heads: int, **settings: object) -> BlockSpec:
        """A block's spec from the course tutorial's arguments and any other `ModelConfig` setting,
        checked as a model's are (the first block of a one-layer model of `arch`)."""
        config = ModelConfig(
            arch=arch, vocab_size=1, max_len=1, model_dim=model_dim, num_heads=num_heads, **settings
        )
        return config.block(0)


@dataclass
class ModelConfig:
    """The architecture of one of the three models.

    arch: `encoder` (EncoderClassifier: a class per position), `decoder` (DecoderLM: GPT-style causal
    language model) or `encoder_decoder` (EncoderDecoder: Vaswani et al.).
    vocab / vocab_size: the tokens' strings, or only how many there are (their strings are then "0", "1",
    ...); give either. unused_rows: the last rows of the embedding and output layer that no token uses
    (hub models pad theirs to a multiple of 64 or 128: Pythia-70M has 50,304 rows for 50,277 tokens):
    never generated, named `<unused_i>` in the vocabulary.
    num_classes: an encoder's output classes (default: one per token); decoders predict tokens.
    pad_id, bos_id, eos_id, sep_id: special tokens, where the task has them. Padding positions (`pad_id`)
    are hidden from attention; `bos_id` starts and `eos_id` ends a generated sequence; `sep_id` ends a
    decoder-only model's source (`source <sep> target`; default: the token `<sep>` if the vocabulary has one).
    dim_feedforward: the MLP's hidden size (default `mlp_ratio * model_dim`).
    max_len: positions the model can read (the positional encoding's length; a decoder's context).
    norm_first: pre-norm blocks (GPT-2) instead of post-norm (the original Transformer).
    bias: additive biases in every Linear and LayerNorm (false: nanoGPT's bias-free model); per part,
    where a family needs it: qkv_bias (W^Q, W^K, W^V: Qwen2 has them and Llama not), out_bias (W^O),
    mlp_bias, norm_bias (LayerNorm's beta), unembed_bias (the output layer), each null to follow `bias`.
    norm: `layer` (LayerNorm) or `rms` (RMSNorm: x / sqrt(mean(x^2) + eps) * g, no mean, no bias; Llama),
    with norm_eps, the epsilon of every norm.
    activation: relu, gelu, gelu_new, or a gated MLP (gate, up and down projections): swiglu
    (SiLU(x W_gate) * x W_up, Llama) or geglu (GELU(x W_gate) * x W_up); dim_feedforward is the width of
    the gate and of the up projection.
    positional_encoding: sinusoidal, learned, none, or rotary (RoPE, Su et al.: each query and key of a
    head rotated by its position, nothing added to the stream), on the first rotary_fraction of each
    head's dimensions (Pythia: 0.25) at frequencies rotary_base^(-2i / rotary_dim).
    num_kv_heads: key-value heads, each shared by num_heads / num_kv_heads query heads (grouped-query
    attention; 1: multi-query attention); null: one per query head.
    parallel_residual: attention and MLP read the same stream, x + Attn(LN1(x)) + MLP(LN2(x)) (GPT-NeoX,
    GPT-J; pre-norm decoders and encoders).
    attention_window: each query sees only the keys fewer than this many positions away (GPT-Neo's local
    attention), in the self-attention of window_layers (null: every layer); null: no window.
    output_mlp: the course tutorial's Linear-LayerNorm-ReLU-Linear classifier instead of one Linear.
    tie_embeddings: one matrix for the token embedding and the output layer (Press & Wolf, 2017).
    scale_attention: divide attention scores by sqrt(d_head) (false only to see why it is there).
    mlp: an MLP in every block (false: attention-only blocks, as in the induction-head experiments).
    """

    arch: str = "encoder"
    vocab_size: int | None = None
    vocab: list[str] | None = None
    unused_rows: int = 0
    num_classes: int | None = None
    pad_id: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    sep_id: int | None = None
    model_dim: int = 32
    num_heads: int = 1
    num_layers: int = 1
    dim_feedforward: int | None = None
    mlp_ratio: int = 2
    dropout: float = 0.0
    input_dropout: float = 0.0
    norm_first: bool = False
    activation: str = "relu"
    bias: bool = True
    positional_encoding: str = "sinusoidal"
    max_len: int = 5000
    output_mlp: bool = True
    tie_embeddings: bool = False
    scale_attention: bool = True
    mlp: bool = True
    norm: str = "layer"
    norm_eps: float = 1e-5
    rotary_fraction: float = 1.0
    rotary_base: float = 10000.0
    num_kv_heads: int | None = None
    parallel_residual: bool = False
    attention_window: int | None = None
    window_layers: list[int] | None = None
    qkv_bias: bool | None = None
    out_bias: bool | None = None
    mlp_bias: bool | None = None
    norm_bias: bool | None = None
    unembed_bias: bool | None = None

    @classmethod
    def from_dict(cls, values: Mapping) -> ModelConfig:
        """The config of plain data (a training config's `model.*`, a checkpoint's `net`): a ValueError
        naming the first key that is not a setting (`UnknownSetting`) or the first value out of bounds."""

        def unknown(key: str, known: str) -> Exception:
            return UnknownSetting(f"model.{key} is not an architecture setting ({known})")

        return from_plain(cls, values, unknown)

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:  # one key-value head per query head
            self.num_kv_heads = self.num_heads
        if self.dim_feedforward is None and is_int(self.mlp_ratio) and is_int(self.model_dim):
            self.dim_feedforward = self.mlp_ratio * self.model_dim
        if self.vocab is not None:
            self.vocab = [str(token) for token in self.vocab]
            if self.vocab_size is None:
                self.vocab_size = len(self.vocab)
            if self.sep_id is None and "<sep>" in self.vocab:  # checkpoints from before sep_id existed
                self.sep_id = self.vocab.index("<sep>")
        self.check()

    @property
    def feedforward_dim(self) -> int:
        """Deprecated: `dim_feedforward` (resolved from mlp_ratio when it is not given)."""
        warnings.warn("ModelConfig.feedforward_dim is deprecated; use dim_feedforward", DeprecationWarning, 2)
        return self.dim_feedforward

    @property
    def head_dim(self) -> int:
        return self.model_dim // self.num_heads

    @property
    def kv_heads(self) -> int:
        """Deprecated: `num_kv_heads` (resolved to num_heads when it is not given)."""
        warnings.warn("ModelConfig.kv_heads is deprecated; use num_kv_heads", DeprecationWarning, 2)
        return self.num_kv_heads

    @property
    def rotary_dim(self) -> int:
        """The dimensions of each head that rotary positions rotate (0: no rotary positions)."""
        if self.positional_encoding != "rotary":
            return 0
        return int(self.head_dim * self.rotary_fraction)

    def has_bias(self, part: str) -> bool:
        """Whether `part` (qkv, out, mlp, norm, unembed) has additive biases: its own setting, or `bias`."""
        own = getattr(self, f"{part}_bias")
        if part == "norm" and self.norm == "rms":
            return False  # RMSNorm has no bias
        return self.bias if own is None else own

    def block(self, layer: int) -> BlockSpec:
        """The settings of block `layer`, resolved: biases per part decided, its attention window."""
        return BlockSpec(
            model_dim=self.model_dim,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            dim_feedforward=self.dim_feedforward,
            activation=self.activation,
            dropout=self.dropout,
            norm_first=self.norm_first,
            norm=self.norm,
            norm_eps=self.norm_eps,
            mlp=self.mlp,
            parallel_residual=self.parallel_residual,
            scale_attention=self.scale_attention,
            rotary=self.positional_encoding == "rotary",
            attention_window=self.windowed(layer),
            qkv_bias=self.has_bias("qkv"),
            out_bias=self.has_bias("out"),
            mlp_bias=self.has_bias("mlp"),
            norm_bias=self.has_bias("norm"),
        )

    def windowed(self, layer: int) -> int | None:
        """The attention window of self-attention layer `layer` (None: it sees every key)."""
        if self.attention_window is None or (
            self.window_layers is not None and layer not in self.window_layers
        ):
            return None
        return self.attention_window

    @property
    def used_tokens(self) -> int:
        """The token ids a model may write: 0 .. vocab_size - unused_rows - 1."""
        return self.vocab_size - self.unused_rows

    @property
    def output_classes(self) -> int:
        return self.num_classes or self.vocab_size

    @property
    def tokens(self) -> list[str]:
        """The vocabulary's strings (the token ids as strings when none were given)."""
        return self.vocab if self.vocab is not None else [str(i) for i in range(self.vocab_size)]

    def check(self) -> None:
        """Raise ValueError naming the first impossible value and how to fix it."""
        require(
            self.arch in ARCHITECTURES, f"model.arch={self.arch!r} is unknown; use {', '.join(ARCHITECTURES)}"
        )
        for key in ("vocab_size", "model_dim", "num_heads", "num_layers", "mlp_ratio", "max_len"):
            value = getattr(self, key)
            require(is_int(value) and value > 0, f"model.{key}={value!r} must be a positive integer")
        for key in ("dim_feedforward", "num_classes"):
            value = getattr(self, key)
            require(
                value is None or (is_int(value) and value > 0),
                f"model.{key}={value!r} must be a positive integer (or null)",
            )
        for key, bound in LIMITS.items():
            value = getattr(self, key)
            require(
                value is None or value <= bound,
                f"model.{key}={value} is more than this package's limit of {bound}; use a smaller value",
            )
        require(
            is_int(self.unused_rows) and 0 <= self.unused_rows < self.vocab_size,
            f"model.unused_rows={self.unused_rows!r} must be an integer from 0 to vocab_size - 1",
        )
        for key in ("pad_id", "bos_id", "eos_id", "sep_id"):
            value = getattr(self, key)
            require(
                value is None or (is_int(value) and 0 <= value < self.vocab_size),
                f"{key}={value!r} must be a token id below vocab_size={self.vocab_size} (or null)",
            )
        require(
            self.vocab is None or len(self.vocab) == self.vocab_size,
            f"the vocabulary lists {len(self.vocab or [])} tokens but vocab_size={self.vocab_size}",
        )
        require(
            self.model_dim % self.num_heads == 0,
            f"model.model_dim={self.model_dim} is not divisible by model.num_heads={self.num_heads}; "
            "choose model_dim as a multiple of num_heads",
        )
        for key in ("dropout", "input_dropout"):
            value = getattr(self, key)
            require(
                isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1,
                f"model.{key}={value!r} must be in [0, 1)",
            )
        for key in ("norm_first", "bias", "output_mlp", "tie_embeddings", "scale_attention", "mlp"):
            value = getattr(self, key)
            require(isinstance(value, bool), f"model.{key}={value!r} must be true or false")
        require(
            self.activation in ACTIVATIONS,
            f"model.activation={self.activation!r}: use relu or gelu (or gelu_new, GPT-2's tanh form), or "
            "a gated MLP: swiglu or geglu",
        )
        require(
            self.positional_encoding in POSITIONAL_ENCODINGS,
            f"model.positional_encoding={self.positional_encoding!r}: use sinusoidal, learned, none or "
            "rotary",
        )
        require(
            not self.tie_embeddings or self.output_classes == self.vocab_size,
            "model.tie_embeddings=true needs as many output classes as input tokens",
        )
        self._check_modern_blocks()

    def _check_modern_blocks(self) -> None:
        """The settings of the blocks of Llama, GPT-NeoX and GPT-Neo: norm, rotary, grouped-query attention,
        parallel residual, attention windows, biases per part."""
        require(self.norm in NORMS, f"model.norm={self.norm!r}: use layer (LayerNorm) or rms (RMSNorm)")
        require(
            is_number(self.norm_eps) and 0 < self.norm_eps < 1,
            f"model.norm_eps={self.norm_eps!r} must be a small positive number (1e-5: LayerNorm's default)",
        )
        require(
            is_number(self.rotary_fraction) and 0 < self.rotary_fraction <= 1,
            f"model.rotary_fraction={self.rotary_fraction!r} must be in (0, 1] (the share of each head's "
            "dimensions rotary positions rotate; Pythia's is 0.25)",
        )
        require(
            is_number(self.rotary_base) and self.rotary_base > 1,
            f"model.rotary_base={self.rotary_base!r} must be a number > 1 (10000: RoPE's)",
        )
        if self.positional_encoding == "rotary":
            rotated = self.rotary_dim
            require(
                rotated >= 2 and rotated % 2 == 0,
                f"model.rotary_fraction={self.rotary_fraction} of a head of {self.head_dim} dimensions "
                f"rotates {rotated}; rotary positions rotate pairs of dimensions: choose model_dim, "
                "num_heads and rotary_fraction so that head_dim x rotary_fraction is an even number >= 2",
            )
        kv = self.num_kv_heads
        require(
            kv is None or (is_int(kv) and 0 < kv <= self.num_heads and self.num_heads % kv == 0),
            f"model.num_kv_heads={kv!r} must divide model.num_heads={self.num_heads} (each key-value head "
            "serves num_heads / num_kv_heads query heads; 1: multi-query attention; null: one per head)",
        )
        for key in ("parallel_residual",):
            require(
                isinstance(getattr(self, key), bool),
                f"model.{key}={getattr(self, key)!r} must be true or false",
            )
        if self.parallel_residual:
            require(
                self.norm_first,
                "model.parallel_residual=true needs pre-norm blocks (model.norm_first=true): "
                "x + Attn(LN1(x)) + MLP(LN2(x)) reads the stream before either sub-layer",
            )
            require(
                self.arch != "encoder_decoder",
                "model.parallel_residual=true is for blocks of one attention sub-layer (arch=decoder or "
                "encoder); the encoder-decoder's decoder blocks have cross-attention between the two",
            )
        window, layers = self.attention_window, self.window_layers
        require(
            window is None or (is_int(window) and 0 < window <= LIMITS["max_len"]),
            f"model.attention_window={window!r} must be a positive integer (the positions a query sees) "
            "or null",
        )
        require(
            layers is None
            or (
                isinstance(layers, list | tuple)
                and all(is_int(i) and 0 <= i < self.num_layers for i in layers)
                and len(set(layers)) == len(layers)
            ),
            f"model.window_layers={layers!r} must list distinct layers 0 .. {self.num_layers - 1} "
            "(null: every layer)",
        )
        require(
            layers is None or window is not None,
            "model.window_layers is set but model.attention_window is null; set the window, e.g. "
            "model.attention_window=256",
        )
        if layers is not None:
            self.window_layers = sorted(int(i) for i in layers)
        for key in BIASES:
            value = getattr(self, key)
            require(
                value is None or isinstance(value, bool), f"model.{key}={value!r} must be true, false or null"
            )
        require(
            not (self.norm == "rms" and self.norm_bias),
            "model.norm_bias=true with model.norm=rms: RMSNorm has no bias; use norm=layer or norm_bias=null",
        )

    def architecture(self) -> dict:
        """Every setting but the dropout rates: what weights trained with this config can continue
        training as (dropout may change when resuming)."""
        return {k: v for k, v in asdict(self).items() if k not in ("dropout", "input_dropout")}

    def to_dict(self) -> dict:
        """Plain data, for checkpoints (loadable with torch.load(weights_only=True))."""
        return asdict(self)


def from_plain(cls: type, values: Mapping, unknown_key: Callable[[str, str], Exception]) -> Any:
    """A config dataclass `cls` of plain data; `unknown_key(key, the known keys)` is raised for the first
    key that is not one of its fields."""
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise unknown_key(unknown[0], ", ".join(known))
    return cls(**values)


def is_int(value: object) -> bool:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An int or float, not a bool, finite (no NaN, no infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def require(condition: bool, message: str) -> None:
    """A ValueError with `message` unless `condition`."""
    if not condition:
        raise ValueError(message)
