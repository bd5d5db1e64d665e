"""TransformerPredictor: the LightningModule that trains a model of `transformer_lab.nn`.

It is thin on purpose: `.net` is the plain `nn.Module` (built from the `net` hyperparameters, a
`ModelConfig` as plain data); this class adds the loss, the metrics, the optimiser and the schedule.
Batches are `(*model inputs, labels)`; labels equal to -100 (padding) count for nothing.
"""

import getpass
import inspect
import math
import os
import tempfile
import typing
from collections.abc import Mapping
from dataclasses import fields

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric

from transformer_lab.data.task import TaskDataModule
from transformer_lab.errors import ConfigError, as_config_error, require
from transformer_lab.nn import IGNORE_INDEX, ModelConfig, build_model
from transformer_lab.nn.schedules import SCHEDULES, warmup_scheduler
from transformer_lab.training.checkpoint_io import FORMAT_VERSION
from transformer_lab.training.config_checks import check_arguments, check_values
from transformer_lab.training.datamodule import task_of


def _inductor_cache_per_kernel_set() -> None:
    """Give `torch.compile` one on-disk cache per `ATEN_CPU_CAPABILITY`: a subfolder of its cache named
    after it. The cache is not keyed by that variable, so C++ generated for AVX2 and reloaded under
    `ATEN_CPU_CAPABILITY=default` fails to build ("'at::vec' has not been declared")."""
    capability = os.environ.get("ATEN_CPU_CAPABILITY")
    if not capability:
        return
    default = os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default
    folder = f"aten_cpu_capability_{capability}"
    if os.path.basename(cache) != folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, folder)


METRICS = ("acc", "seq_acc", "bpc", "ppl")
DECAYED = ("matrices", "all")  # the parameters weight decay applies to
FUSED_ADAMW_DEVICES = ("cpu", "cuda")  # devices with a fused (single-kernel) AdamW in torch >= 2.4
ARCHITECTURE_KEYS = tuple(f.name for f in fields(ModelConfig))


class TransformerPredictor(L.LightningModule):
    """Trains `.net`: cross-entropy loss, metrics, AdamW and the cosine-warmup schedule.

    net: the model's `ModelConfig` as a dict (its `arch` picks EncoderClassifier or DecoderLM).
    max_iters: the length of the cosine schedule (default: the trainer's number of optimisation steps).
    metrics: any of `acc` (per token), `seq_acc` (whole sequence right), `bpc` (bits per character) and
    `ppl` (perplexity over an epoch). `compile=True` runs the training and evaluation pass through
    `torch.compile`; `fused_adamw=True` uses the single-kernel AdamW on devices that have one.
    schedule: `cosine` (warmup, then cosine decay to 0 at max_iters) or `constant` (warmup, then the
    constant lr: Nanda et al.'s grokking runs). weight_decay_on: `matrices` (weight matrices only, not
    biases, norms or embeddings: GPT-2's practice) or `all` (every parameter: Nanda et al.'s AdamW).
    """

    def __init__(
        self,
        net: dict,
        lr: float = 5e-4,
        betas: tuple[float, float] | list[float] = (0.9, 0.999),
        warmup: int = 50,
        max_iters: int | None = None,
        weight_decay: float = 0.0,
        metrics: list[str] | tuple[str, ...] = ("acc",),
        compile: bool = False,
        fused_adamw: bool = True,
        schedule: str = "cosine",
        weight_decay_on: str = "matrices",
    ):
        super().__init__()
        # Plain Python types only, so checkpoints load with torch.load(weights_only=True).
        with as_config_error():
            config = ModelConfig.from_dict(dict(net))
        net = config.to_dict()
        metrics = [str(m) for m in metrics]
        betas = [float(b) for b in betas]
        self.save_hyperparameters()
        _check_training_hparams(self.hparams)
        self.net = build_model(config)
        self.init_from: str | None = None  # set by train.py's init_from=: its checkpoints record it
        if "ppl" in metrics:  # exp(mean loss) over the epoch, not the mean of per-batch exp(loss)
            # nan_strategy="disable": no NaN test per update (a host-device sync); a NaN loss gives NaN ppl
            self.val_loss_mean = MeanMetric(nan_strategy="disable")
            self.test_loss_mean = MeanMetric(nan_strategy="disable")
        self._compiled_loss = None  # set by configure_model when compile=True

    def forward(self, *inputs: Tensor) -> Tensor:
        """The model's logits: `self.net(*inputs)`."""
        return self.net(*inputs)

    def get_attention_maps(self, *inputs: Tensor) -> list[Tensor]:
        """Every attention layer's weights, [B, H, T_query, T_key] each: `self.net.get_attention_maps`."""
        return self.net.get_attention_maps(*inputs)

    # ------------------------------------------------------------------------------------ training
    def configure_model(self) -> None:
        """With `compile=True`, compile the training and evaluation pass (inputs -> logits -> loss).
        Generation and analysis stay eager: their shapes change from call to call."""
        if self.hparams.compile and self._compiled_loss is None:
            _inductor_cache_per_kernel_set()
            self._compiled_loss = torch.compile(self._logits_and_loss)

    def _logits_and_loss(self, inputs: tuple[Tensor, ...], labels: Tensor) -> tuple[Tensor, Tensor]:
        """Logits [B, T, C] and the mean cross-entropy -sum_t log p(y_t | x) over the labelled positions."""
        logits = self.net(*inputs)
        return logits, F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)

    def _logs_this_step(self, stage: str) -> bool:
        """Whether Lightning writes this training step's metrics (every `trainer.log_every_n_steps`
        optimisation steps). Training metrics are computed and logged only then: each `self.log` call
        costs Python time, and the progress bar shows the values of the last logged step."""
        trainer = self.trainer
        if stage != "train" or trainer.fast_dev_run:
            return True
        every = trainer.log_every_n_steps
        return every > 0 and (trainer.global_step + 1) % every == 0

    def _shared_step(self, batch: tuple[Tensor, ...], stage: str) -> Tensor:
        *inputs, labels = batch
        logits, loss = (self._compiled_loss or self._logits_and_loss)(tuple(inputs), labels)
        if "ppl" in self.hparams.metrics and stage != "train":
            getattr(self, f"{stage}_loss_mean").update(loss.detach(), weight=labels.size(0))
        if not self._logs_this_step(stage):
            return loss
        values = {"loss": loss, **self._metrics(logits, labels, loss)}
        if stage != "train" and "seq_acc" in values:
            generated = self._generated_seq_acc(batch)
            if generated is not None:
                values["seq_acc"] = generated
        if stage == "train":
            values["lr"] = torch.tensor(self.lr_schedulers().get_last_lr()[0])
        on_step = stage == "train"
        self.log_dict(
            {f"{stage}/{name}": value for name, value in values.items()},
            on_step=on_step,
            on_epoch=not on_step,
            prog_bar=True,
            batch_size=labels.size(0),
            sync_dist=not on_step,  # DDP: val/test metrics averaged over every rank's share of the data
        )
        return loss

    def _metrics(self, logits: Tensor, labels: Tensor, loss: Tensor) -> dict[str, Tensor]:
        metrics, values = self.hparams.metrics, {}
        if "acc" in metrics or "seq_acc" in metrics:
            labelled = labels != IGNORE_INDEX
            correct = (logits.argmax(dim=-1) == labels) & labelled
            if "acc" in metrics:
                values["acc"] = correct.sum() / labelled.sum().clamp(min=1)
            if "seq_acc" in metrics:
                values["seq_acc"] = (correct | ~labelled).all(dim=-1).float().mean()
        if "bpc" in metrics:
            values["bpc"] = loss / math.log(2)  # nats -> bits per character
        return values

    def _generated_seq_acc(self, batch: tuple[Tensor, ...]) -> Tensor | None:
        """For a model that generates (decoder, encoder-decoder) on a task that says how (a
        Seq2SeqDataModule): the share of whole outputs right when generated greedily from the source,
        not when each token is predicted from the true ones before it (teacher forcing)."""
        task = task_of(self.trainer)
        result = task.generate(self.net, batch) if hasattr(task, "generate") else None
        if result is None:
            return None
        _, generated, expected = result
        return (generated == expected).all(dim=1).float().mean()

    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> None:
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

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Record the file format and the task (its class and how its text is written), so the tools can
        rebuild its data and tokenizer from the checkpoint alone; Lightning stores the task's own
        hyperparameters."""
        checkpoint["format_version"] = FORMAT_VERSION
        task = task_of(self.trainer)
        if task is not None:
            checkpoint["task"] = task.record()
        if self.init_from is not None:
            checkpoint["init_from"] = self.init_from  # what the run started from (init_from.recorded)

    def parameter_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """The parameters with weight decay (weight matrices; every one with `weight_decay_on=all`) and
        without it (biases, norms, embeddings), in the order the optimizer holds them."""
        params = list(self.parameters())
        if self.hparams.get("weight_decay_on", "matrices") == "all":
            return params, []
        embeddings = {id(p) for m in self.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
        decay = [p for p in params if p.ndim >= 2 and id(p) not in embeddings]
        no_decay = [p for p in params if not (p.ndim >= 2 and id(p) not in embeddings)]
        return decay, no_decay

    def configure_optimizers(self) -> dict:
        """AdamW with decoupled weight decay on weight matrices only (not biases, norms or embeddings; all
        of them with `weight_decay_on=all`), and the warmup schedule (`schedule`: cosine decay or
        constant) stepped every optimisation step."""
        decay, no_decay = self.parameter_groups()
        groups = [
            {"params": decay, "weight_decay": self.hparams.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        groups = [group for group in groups if group["params"]]
        # The fused kernel updates every parameter in one pass: 4-5x faster than the per-tensor loop
        # PyTorch uses by default on CPU.
        fused = self.hparams.fused_adamw and self.device.type in FUSED_ADAMW_DEVICES
        betas = tuple(self.hparams.betas)
        optimizer = torch.optim.AdamW(groups, lr=self.hparams.lr, betas=betas, fused=fused)
        schedule = self.hparams.get("schedule", "cosine")
        max_iters = None
        if schedule == "cosine":
            max_iters = self.hparams.max_iters or self.trainer.estimated_stepping_batches
            if not math.isfinite(max_iters):
                raise ConfigError("cannot infer model.max_iters: set model.max_iters or trainer.max_steps")
            if max_iters <= 0:
                raise ConfigError(f"training has no optimisation step to take: {self._why_no_step()}")
        scheduler = warmup_scheduler(optimizer, schedule, self.hparams.warmup, max_iters)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _why_no_step(self) -> str:
        """Which setting leaves training without a step, and its fix."""
        trainer = self.trainer
        if trainer.max_steps == 0:
            return "trainer.max_steps=0; raise it (or -1: as many as trainer.max_epochs take)"
        if trainer.limit_train_batches == 0:
            return f"trainer.limit_train_batches={trainer.limit_train_batches} takes no batch; raise it"
        batch_size = getattr(task_of(trainer), "batch_size", "?")
        return (
            f"data.batch_size={batch_size} is more than the training examples (a batch must be full); "
            "lower data.batch_size"
        )


def _check_training_hparams(h: Mapping) -> None:
    """Reject impossible training settings with a message naming the config key and the fix."""
    for key in ("lr", "warmup", "weight_decay"):
        value = h[key]
        require(
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
            f"model.{key}={value!r} must be a finite number",
        )
    require(h["lr"] > 0, f"model.lr={h['lr']} must be positive")
    require(h["warmup"] >= 0, f"model.warmup={h['warmup']} must be >= 0")
    require(h["weight_decay"] >= 0, f"model.weight_decay={h['weight_decay']} must be >= 0")
    require(
        h["max_iters"] is None or (isinstance(h["max_iters"], int) and h["max_iters"] > 0),
        f"model.max_iters={h['max_iters']!r} must be a positive integer (or null)",
    )
    require(
        len(h["betas"]) == 2 and all(0 <= b < 1 for b in h["betas"]),  # NaN fails both comparisons
        f"model.betas={h['betas']} must be two numbers in [0, 1)",
    )
    unknown = sorted(set(h["metrics"]) - set(METRICS))
    require(not unknown, f"model.metrics has unknown names {unknown}; choose from {list(METRICS)}")
    require(
        h["schedule"] in SCHEDULES,
        f"model.schedule={h['schedule']!r} is unknown; use {' or '.join(SCHEDULES)}",
    )
    require(
        h["weight_decay_on"] in DECAYED,
        f"model.weight_decay_on={h['weight_decay_on']!r} is unknown; use {' or '.join(DECAYED)}",
    )


def build_predictor(settings: Mapping, task: TaskDataModule) -> TransformerPredictor:
    """The predictor for the config's `model.*` settings on a task: the architecture keys go to the
    model's config, completed with what the task states (vocabulary, special tokens, positions); the
    others are training settings. A key that is neither is an error, and so is an architecture the task
    cannot train."""
    settings = dict(settings)
    stated = task.model_settings()
    training_keys = set(inspect.signature(TransformerPredictor).parameters) - {"net"}
    own_keys = set(ARCHITECTURE_KEYS) - set(stated) | {"max_len"}
    from_task = sorted(set(settings) & (set(stated) - {"max_len"}))
    if from_task:
        raise ConfigError(f"model.{from_task[0]} is set by the task ({type(task).__name__}), not in model.*")
    unknown = sorted(set(settings) - own_keys - training_keys)
    if unknown:
        known = ", ".join(sorted(own_keys | training_keys))
        raise ConfigError(f"model.{unknown[0]} is not a setting; model settings are {known}")
    net = {k: v for k, v in settings.items() if k in ARCHITECTURE_KEYS}
    training = {k: v for k, v in settings.items() if k in training_keys}
    check_arguments(TransformerPredictor, training, "model")
    task.check_architecture(net.get("arch", "encoder"))
    max_len = net.get("max_len") or stated["max_len"]
    require(
        stated["max_len"] <= max_len,
        f"sequence length {stated['max_len']} is longer than model.max_len={max_len} positions; "
        "raise model.max_len or shorten the sequences",
    )
    net.update({k: v for k, v in stated.items() if k != "max_len"}, max_len=max_len)
    check_values(typing.get_type_hints(ModelConfig), net, "model")
    return TransformerPredictor(net=net, **training)
