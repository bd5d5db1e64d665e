"""TransformerPredictor: one LightningModule that runs the Transformer as an encoder or a causal decoder.

    tokens [B, T] -> embedding -> + positions -> N blocks -> output network -> logits [B, T, classes]

As an encoder (`causal=False`, the reverse task) every position sees the whole sequence and predicts its
own label. As a decoder (`causal=True`, language modelling) position t sees positions <= t and predicts
token t + 1; `generate` then writes text one token at a time, with a KV cache.
"""

import math

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric

from transformer_lab.errors import ConfigError, require
from transformer_lab.nn import KVCache, TransformerEncoder, make_dropout, make_positional_encoding
from transformer_lab.sampling import check_sampling_args, sample_next_token
from transformer_lab.schedulers import CosineWarmupScheduler

METRICS = ("acc", "seq_acc", "bpc", "ppl")
FUSED_ADAMW_DEVICES = ("cpu", "cuda")  # devices with a fused (single-kernel) AdamW in torch >= 2.4


def _check_hparams(h: dict) -> None:
    """Reject impossible hyperparameters with a message naming the config key and the fix."""
    for key in ("vocab_size", "num_classes", "model_dim", "num_heads", "num_layers", "mlp_ratio", "max_len"):
        require(isinstance(h[key], int) and h[key] > 0, f"model.{key}={h[key]!r} must be a positive integer")
    for key in ("dim_feedforward", "max_iters", "block_size"):
        require(
            h[key] is None or (isinstance(h[key], int) and h[key] > 0),
            f"model.{key}={h[key]!r} must be a positive integer (or null)",
        )
    require(
        h["model_dim"] % h["num_heads"] == 0,
        f"model.model_dim={h['model_dim']} is not divisible by model.num_heads={h['num_heads']}; "
        "choose model_dim as a multiple of num_heads",
    )
    require(h["lr"] > 0, f"model.lr={h['lr']} must be positive")
    require(
        len(h["betas"]) == 2 and all(0 <= b < 1 for b in h["betas"]),
        f"model.betas={h['betas']} must be two numbers in [0, 1)",
    )
    require(h["warmup"] >= 0, f"model.warmup={h['warmup']} must be >= 0")
    require(h["weight_decay"] >= 0, f"model.weight_decay={h['weight_decay']} must be >= 0")
    for key in ("dropout", "input_dropout"):
        require(0 <= h[key] < 1, f"model.{key}={h[key]} must be in [0, 1)")
    require(h["activation"] in ("relu", "gelu"), f"model.activation={h['activation']!r}: use relu or gelu")
    require(
        h["positional_encoding"] in ("sinusoidal", "learned", "none"),
        f"model.positional_encoding={h['positional_encoding']!r}: use sinusoidal, learned or none",
    )
    if h["block_size"] is not None:
        require(
            h["block_size"] <= h["max_len"],
            f"sequence length {h['block_size']} is longer than model.max_len={h['max_len']} positions; "
            "raise model.max_len or shorten the sequences",
        )
    require(
        not h["tie_embeddings"] or h["vocab_size"] == h["num_classes"],
        "model.tie_embeddings=true needs as many output classes as input tokens",
    )
    unknown = sorted(set(h["metrics"]) - set(METRICS))
    require(not unknown, f"model.metrics has unknown names {unknown}; choose from {list(METRICS)}")


class TransformerPredictor(L.LightningModule):
    """Transformer for per-position classification (encoder) or next-token prediction (decoder).

    `vocab_size`, `num_classes`, `vocab` and `block_size` come from the datamodule; the rest from
    `configs/model/*.yaml`. `dim_feedforward` defaults to `mlp_ratio * model_dim`. `bias=False` removes
    the additive biases of every Linear and LayerNorm layer, as nanoGPT does by default. `max_iters` (the
    length of the cosine schedule) defaults to the trainer's number of optimisation steps. `compile=True`
    runs the training and evaluation forward pass through `torch.compile`; `fused_adamw=True` uses the
    single-kernel AdamW on devices that have one.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        model_dim: int = 32,
        num_heads: int = 1,
        num_layers: int = 1,
        dim_feedforward: int | None = None,
        mlp_ratio: int = 2,
        dropout: float = 0.0,
        input_dropout: float = 0.0,
        lr: float = 5e-4,
        betas: tuple[float, float] | list[float] = (0.9, 0.999),
        warmup: int = 50,
        max_iters: int | None = None,
        weight_decay: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        bias: bool = True,
        positional_encoding: str = "sinusoidal",
        max_len: int = 5000,
        causal: bool = False,
        output_mlp: bool = True,
        tie_embeddings: bool = False,
        block_size: int | None = None,
        vocab: list[str] | None = None,
        metrics: list[str] | tuple[str, ...] = ("acc",),
        compile: bool = False,
        fused_adamw: bool = True,
    ):
        super().__init__()
        # Plain Python types only, so checkpoints load with torch.load(weights_only=True).
        metrics = [str(m) for m in metrics]
        betas = [float(b) for b in betas]
        vocab = None if vocab is None else [str(t) for t in vocab]
        self.save_hyperparameters()
        _check_hparams(self.hparams)
        h = self.hparams
        dim_feedforward = dim_feedforward or mlp_ratio * model_dim

        # One-hot input followed by a linear layer is an embedding lookup; Embedding does it without the
        # [B, T, vocab] one-hot tensor.
        self.embedding = nn.Embedding(vocab_size, model_dim)
        self.input_dropout = make_dropout(input_dropout)
        self.positional_encoding = make_positional_encoding(positional_encoding, model_dim, max_len)
        self.transformer = TransformerEncoder(
            num_layers=num_layers,
            causal=causal,
            input_dim=model_dim,
            num_heads=num_heads,
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            norm_first=norm_first,
            activation=activation,
            bias=bias,
        )
        self.head = nn.Linear(model_dim, num_classes, bias=bias)
        if output_mlp:
            self.output_net = nn.Sequential(
                nn.Linear(model_dim, model_dim, bias=bias),
                nn.LayerNorm(model_dim, bias=bias),
                nn.ReLU(inplace=True),
                make_dropout(dropout),
                self.head,
            )
        else:
            self.output_net = self.head
        if tie_embeddings:
            # Press & Wolf (2017): one matrix in and out. GPT-2's N(0, 0.02) init keeps the initial
            # logits near zero (N(0, 1), Embedding's default, would give logits of std ~sqrt(model_dim)).
            nn.init.normal_(self.embedding.weight, std=0.02)
            self.head.weight = self.embedding.weight
        if "ppl" in h.metrics:  # exp(mean loss) over the epoch, not the mean of per-batch exp(loss)
            # nan_strategy="disable": no NaN test per update (a host-device sync); a NaN loss gives NaN ppl
            self.val_loss_mean = MeanMetric(nan_strategy="disable")
            self.test_loss_mean = MeanMetric(nan_strategy="disable")
        self._compiled_loss = None  # set by configure_model when compile=True

    # ----------------------------------------------------------------------------------------- model
    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """Token ids [B, T] at positions offset.. -> input vectors [B, T, model_dim] for the first block."""
        return self.positional_encoding(self.input_dropout(self.embedding(x)), offset)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        kv_caches: list[KVCache] | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Token ids [B, T] -> logits [B, T, num_classes]. `mask == 0` hides a key from a query.

        With `return_attention`, also the attention weights of every layer ([B, H, T, T] each) that these
        logits were computed from (hand-written path, so d logits / d attention exists).
        """
        offset = kv_caches[0].length if kv_caches else 0
        hidden = self.transformer(self.embed(x, offset), mask, kv_caches, return_attention)
        if return_attention:
            hidden, maps = hidden
            return self.output_net(hidden), maps
        return self.output_net(hidden)

    def get_attention_maps(self, x: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        """Attention weights per layer, each [B, H, T, T], through the hand-written attention path."""
        return self.transformer.get_attention_maps(self.embed(x), mask=mask)

    # ------------------------------------------------------------------------------------ training
    def configure_model(self) -> None:
        """With `compile=True`, compile the training and evaluation pass (tokens -> logits -> loss).
        Generation and attention maps stay eager: their shapes change from call to call."""
        if self.hparams.compile and self._compiled_loss is None:
            self._compiled_loss = torch.compile(self._logits_and_loss)

    def _logits_and_loss(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Logits [B, T, C] and the mean cross-entropy -sum_t log p(y_t | x) / (B T) over all positions."""
        logits = self(x)
        return logits, F.cross_entropy(logits.flatten(0, 1), y.flatten())

    def _logs_this_step(self, stage: str) -> bool:
        """Whether Lightning writes this step's metrics. Training metrics are computed and logged only
        then (every `trainer.log_every_n_steps`): each `self.log` call costs Python time on every step,
        and the progress bar shows the values of the last logged step."""
        if stage != "train":
            return True
        trainer = self.trainer
        return bool(trainer.fast_dev_run) or trainer._logger_connector.should_update_logs

    def _shared_step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        x, y = batch
        logits, loss = (self._compiled_loss or self._logits_and_loss)(x, y)
        if "ppl" in self.hparams.metrics and stage != "train":
            getattr(self, f"{stage}_loss_mean").update(loss.detach(), weight=x.size(0))
        if not self._logs_this_step(stage):
            return loss
        values = {"loss": loss}
        metrics = self.hparams.metrics
        if "acc" in metrics or "seq_acc" in metrics:
            correct = logits.argmax(dim=-1) == y
            if "acc" in metrics:
                values["acc"] = correct.float().mean()
            if "seq_acc" in metrics:
                values["seq_acc"] = correct.all(dim=-1).float().mean()
        if "bpc" in metrics:
            values["bpc"] = loss / math.log(2)  # nats -> bits per character
        on_step = stage == "train"
        self.log_dict(
            {f"{stage}/{name}": value for name, value in values.items()},
            on_step=on_step,
            on_epoch=not on_step,
            prog_bar=True,
            batch_size=x.size(0),
            sync_dist=not on_step,  # DDP: val/test metrics averaged over every rank's share of the data
        )
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._shared_step(batch, "test")

    def _log_perplexity(self, stage: str) -> None:
        if "ppl" in self.hparams.metrics:
            mean = getattr(self, f"{stage}_loss_mean")
            self.log(f"{stage}/ppl", torch.exp(mean.compute()))
            mean.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_perplexity("val")

    def on_test_epoch_end(self) -> None:
        self._log_perplexity("test")

    def configure_optimizers(self) -> dict:
        """AdamW with decoupled weight decay on weight matrices only (not biases, norms or embeddings),
        and the cosine-warmup schedule stepped every optimisation step."""
        embeddings = {id(p) for m in self.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
        if self.hparams.weight_decay > 0:
            decay, no_decay = [], []
            for p in self.parameters():
                (decay if p.ndim >= 2 and id(p) not in embeddings else no_decay).append(p)
            groups = [
                {"params": decay, "weight_decay": self.hparams.weight_decay, "name": "decay"},
                {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
            ]
        else:
            groups = [{"params": list(self.parameters()), "weight_decay": 0.0}]
        # The fused kernel updates every parameter in one pass: 4-5x faster than the per-tensor loop
        # PyTorch uses by default on CPU (about 4% of a shakespeare_cpu step).
        fused = self.hparams.fused_adamw and self.device.type in FUSED_ADAMW_DEVICES
        betas = tuple(self.hparams.betas)
        optimizer = torch.optim.AdamW(groups, lr=self.hparams.lr, betas=betas, fused=fused)
        max_iters = self.hparams.max_iters or self.trainer.estimated_stepping_batches
        if not math.isfinite(max_iters):
            raise ConfigError("cannot infer model.max_iters: set model.max_iters or trainer.max_steps")
        scheduler = CosineWarmupScheduler(optimizer, warmup=self.hparams.warmup, max_iters=int(max_iters))
        schedule = {"scheduler": scheduler, "interval": "step", "name": "train/lr"}  # LearningRateMonitor tag
        return {"optimizer": optimizer, "lr_scheduler": schedule}

    # ---------------------------------------------------------------------------------- generation
    @property
    def block_size(self) -> int:
        """The longest context the model was trained on."""
        return self.hparams.block_size or self.hparams.max_len

    def _new_kv_caches(self, batch: int, like: Tensor) -> list[KVCache]:
        attn = self.transformer.layers[0].self_attn
        return [
            KVCache(batch, attn.num_heads, self.block_size, attn.head_dim, like)
            for _ in self.transformer.layers
        ]

    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Extend token ids idx [B, T] by `max_new_tokens` sampled tokens -> [B, T + max_new_tokens].

        The context is cropped to the last `block_size` tokens. With `use_cache` each new token costs one
        position's work: its keys and values are appended to a per-layer KV cache. Positions are absolute,
        so a full cache cannot slide by one; instead the last half window is re-encoded from position 0
        (one forward pass every block_size / 2 tokens, so the cost stays amortised). Until the sequence
        outgrows the block size, cached and uncached decoding give identical results. Runs under
        `torch.inference_mode` (no autograd bookkeeping: about 1.4x faster per cached token than no_grad).
        """
        require(self.hparams.causal, "generate() needs a causal decoder (model=decoder)")
        require(
            idx.ndim == 2 and idx.size(1) > 0, f"idx must be [batch, T>0] token ids, got {tuple(idx.shape)}"
        )
        check_sampling_args(temperature, top_k, top_p)
        was_training = self.training
        self.eval()
        block = self.block_size
        caches: list[KVCache] | None = None
        with torch.inference_mode():
            for _ in range(max_new_tokens):
                if not use_cache:
                    logits = self(idx[:, -block:])
                elif caches is None or caches[0].length == block:
                    window = block if caches is None else max(1, block // 2)
                    caches = self._new_kv_caches(idx.size(0), self.embedding.weight)
                    logits = self(idx[:, -window:], kv_caches=caches)
                else:
                    logits = self(idx[:, -1:], kv_caches=caches)
                next_token = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
                idx = torch.cat([idx, next_token], dim=1)
        self.train(was_training)
        return idx.clone()  # an ordinary tensor again: inference-mode tensors cannot enter autograd
