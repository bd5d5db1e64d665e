"""ModelConfig: every hyperparameter that shapes a model, checked once, in one place.

A config is plain data (strings, numbers, lists), so it is stored in checkpoints as it is and a model is
rebuilt from it with `build_model(config)`. Error messages name the `model.<key>` of the training
config, where these values are usually set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

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
POSITIONAL_ENCODINGS = ("sinusoidal", "learned", "none")
ACTIVATIONS = ("relu", "gelu", "gelu_new")  # gelu_new: GPT-2's tanh approximation (blocks.GELUNew)


class UnknownSetting(ValueError):
    """A key that is not a setting of `ModelConfig` (a typo, or a file of another version)."""


@dataclass
class ModelConfig:
    """The architecture of one of the three models.

    arch: `encoder` (EncoderClassifier: a class per position), `decoder` (DecoderLM: GPT-style causal
    language model) or `encoder_decoder` (EncoderDecoder: Vaswani et al.).
    vocab / vocab_size: the tokens' strings, or only how many there are (their strings are then "0", "1",
    ...); give either.
    num_classes: an encoder's output classes (default: one per token); decoders predict tokens.
    pad_id, bos_id, eos_id, sep_id: special tokens, where the task has them. Padding positions (`pad_id`)
    are hidden from attention; `bos_id` starts and `eos_id` ends a generated sequence; `sep_id` ends a
    decoder-only model's source (`source <sep> target`; default: the token `<sep>` if the vocabulary has one).
    dim_feedforward: the MLP's hidden size (default `mlp_ratio * model_dim`).
    max_len: positions the model can read (the positional encoding's length; a decoder's context).
    norm_first: pre-norm blocks (GPT-2) instead of post-norm (the original Transformer).
    bias: additive biases in every Linear and LayerNorm (false: nanoGPT's bias-free model).
    output_mlp: the course tutorial's Linear-LayerNorm-ReLU-Linear classifier instead of one Linear.
    tie_embeddings: one matrix for the token embedding and the output layer (Press & Wolf, 2017).
    scale_attention: divide attention scores by sqrt(d_head) (false only to see why it is there).
    mlp: an MLP in every block (false: attention-only blocks, as in the induction-head experiments).
    """

    arch: str = "encoder"
    vocab_size: int | None = None
    vocab: list[str] | None = None
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

    @classmethod
    def from_dict(cls, values: Mapping) -> ModelConfig:
        """The config of plain data (a training config's `model.*`, a checkpoint's `net`): a ValueError
        naming the first key that is not a setting (`UnknownSetting`) or the first value out of bounds."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UnknownSetting(f"model.{unknown[0]} is not an architecture setting ({', '.join(known)})")
        return cls(**values)

    def __post_init__(self) -> None:
        if self.vocab is not None:
            self.vocab = [str(token) for token in self.vocab]
            if self.vocab_size is None:
                self.vocab_size = len(self.vocab)
            if self.sep_id is None and "<sep>" in self.vocab:  # checkpoints from before sep_id existed
                self.sep_id = self.vocab.index("<sep>")
        self.check()

    @property
    def feedforward_dim(self) -> int:
        return self.dim_feedforward or self.mlp_ratio * self.model_dim

    @property
    def output_classes(self) -> int:
        return self.num_classes or self.vocab_size

    @property
    def tokens(self) -> list[str]:
        """The vocabulary's strings (the token ids as strings when none were given)."""
        return self.vocab if self.vocab is not None else [str(i) for i in range(self.vocab_size)]

    def check(self) -> None:
        """Raise ValueError naming the first impossible value and how to fix it."""
        _require(
            self.arch in ARCHITECTURES, f"model.arch={self.arch!r} is unknown; use {', '.join(ARCHITECTURES)}"
        )
        for key in ("vocab_size", "model_dim", "num_heads", "num_layers", "mlp_ratio", "max_len"):
            value = getattr(self, key)
            _require(_is_int(value) and value > 0, f"model.{key}={value!r} must be a positive integer")
        for key in ("dim_feedforward", "num_classes"):
            value = getattr(self, key)
            _require(
                value is None or (_is_int(value) and value > 0),
                f"model.{key}={value!r} must be a positive integer (or null)",
            )
        for key, bound in LIMITS.items():
            value = getattr(self, key)
            _require(
                value is None or value <= bound,
                f"model.{key}={value} is more than this package's limit of {bound}; use a smaller value",
            )
        for key in ("pad_id", "bos_id", "eos_id", "sep_id"):
            value = getattr(self, key)
            _require(
                value is None or (_is_int(value) and 0 <= value < self.vocab_size),
                f"{key}={value!r} must be a token id below vocab_size={self.vocab_size} (or null)",
            )
        _require(
            self.vocab is None or len(self.vocab) == self.vocab_size,
            f"the vocabulary lists {len(self.vocab or [])} tokens but vocab_size={self.vocab_size}",
        )
        _require(
            self.model_dim % self.num_heads == 0,
            f"model.model_dim={self.model_dim} is not divisible by model.num_heads={self.num_heads}; "
            "choose model_dim as a multiple of num_heads",
        )
        for key in ("dropout", "input_dropout"):
            value = getattr(self, key)
            _require(
                isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1,
                f"model.{key}={value!r} must be in [0, 1)",
            )
        for key in ("norm_first", "bias", "output_mlp", "tie_embeddings", "scale_attention", "mlp"):
            value = getattr(self, key)
            _require(isinstance(value, bool), f"model.{key}={value!r} must be true or false")
        _require(
            self.activation in ACTIVATIONS,
            f"model.activation={self.activation!r}: use relu or gelu (or gelu_new, GPT-2's tanh form)",
        )
        _require(
            self.positional_encoding in POSITIONAL_ENCODINGS,
            f"model.positional_encoding={self.positional_encoding!r}: use sinusoidal, learned or none",
        )
        _require(
            not self.tie_embeddings or self.output_classes == self.vocab_size,
            "model.tie_embeddings=true needs as many output classes as input tokens",
        )

    def architecture(self) -> dict:
        """Every setting but the dropout rates: what weights trained with this config can continue
        training as (dropout may change when resuming)."""
        return {k: v for k, v in asdict(self).items() if k not in ("dropout", "input_dropout")}

    def to_dict(self) -> dict:
        """Plain data, for checkpoints (loadable with torch.load(weights_only=True))."""
        return asdict(self)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
