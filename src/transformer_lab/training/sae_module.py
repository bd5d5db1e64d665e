"""SAEModule: the LightningModule that trains a sparse dictionary: a sparse autoencoder
(`transformer_lab.nn.sae`) or a transcoder (`transformer_lab.nn.transcoder`).

Thin, as `TransformerPredictor` is: `.net` is the plain `SparseAutoencoder` or `Transcoder` (built from
the `sae` hyperparameters, its config as plain data: a transcoder's says what it writes, `d_out`); this
class adds the loss, its schedule, the decoder's unit norm, the dead features and the measures. Training
batches are activations [B, d_in] (an `ActivationTask`'s), a transcoder's the pairs [B, d_in + d_out] of
what it reads and what it writes; validation and test batches are the same, or the source model's own
batches `(*inputs, labels)`, on which the model-level measures are taken with the dictionary spliced in
(`analysis.sae_measures`).

Each step: the loss (`Dictionary.training_losses`: reconstruction, the kind's sparsity penalty with its
coefficient ramped up over `sparsity_warmup` steps, AuxK for the kinds that have it), Adam with the warmup
schedule, W_dec's gradient made orthogonal to its rows before the step and its rows set back to unit norm
after it. A feature that has not fired for `dead_window` steps is dead; kinds that resample (relu) do so
every `resample_every` steps (Bricken et al. 2023: the direction of an input the SAE reconstructs badly, a
small encoder, Adam's moments of them reset); AuxK gives them a gradient (topk, batchtopk); jumprelu's
thresholds move by their own gradient. The kind is asked, never named (`nn.sae_kinds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import Metric

from transformer_lab.analysis import sae_measures
from transformer_lab.data.activation_task import ActivationTask, mmcs
from transformer_lab.deprecated import renamed
from transformer_lab.errors import as_config_error, require
from transformer_lab.limits import require_memory, size_text
from transformer_lab.nn import sae_kinds
from transformer_lab.nn.dictionary import unit_rows
from transformer_lab.nn.schedules import SCHEDULES, warmup_scheduler
from transformer_lab.nn.transcoder import build_dictionary, dictionary_config
from transformer_lab.training.checkpoint_io import FORMAT_VERSION
from transformer_lab.training.config_checks import check_arguments
from transformer_lab.training.datamodule import task_of


class MeasureSums(Metric):
    """The sums of `analysis.sae_measures` as a torchmetrics state: added up over batches, and over DDP
    ranks when computed."""

    full_state_update = False

    def __init__(self, width: int, d_in: int, vocab: int = 0):
        super().__init__()
        self.names = list(sae_measures.empty_sums(width, d_in, vocab))
        for name, value in sae_measures.empty_sums(width, d_in, vocab).items():
            self.add_state(name, default=value, dist_reduce_fx="sum")

    def update(self, sums: dict[str, Tensor]) -> None:
        for name, value in sums.items():
            setattr(self, name, getattr(self, name) + value.to(self.device, torch.float64))

    def compute(self) -> dict[str, Tensor]:
        return {name: getattr(self, name) for name in self.names}


class SAEModule(L.LightningModule):
    """Trains `.net`, a SparseAutoencoder or a Transcoder (see the module docstring).

    sae: the SAE's config as a dict (kind, d_in, width, k, hook). l1_coefficient, l0_coefficient: the
    sparsity penalty's coefficient, under SAELens's name for the kind (relu: l1_coefficient, of sum f;
    jumprelu: l0_coefficient, of the L0; null: the kind's default); a kind without a penalty takes
    neither. sparsity_warmup: steps over which it rises linearly from 0. aux_k: AuxK's coefficient (topk,
    batchtopk). dead_window: steps without firing after which a feature counts as dead. resample_every:
    kinds that resample (relu): every this many steps (0: never). lr, betas, warmup, schedule (constant |
    cosine), max_iters: Adam and its learning-rate schedule."""

    def __init__(
        self,
        sae: dict,
        lr: float = 1e-3,
        betas: tuple[float, float] | list[float] = (0.9, 0.999),
        warmup: int = 100,
        schedule: str = "constant",
        max_iters: int | None = None,
        l1_coefficient: float | None = None,
        l0_coefficient: float | None = None,
        sparsity_warmup: int = 0,
        aux_k: float = 1 / 32,
        dead_window: int = 1000,
        resample_every: int = 0,
    ):
        super().__init__()
        with as_config_error():
            net = build_dictionary(dict(sae))
        config = net.config
        sae = config.to_dict()
        betas = [float(b) for b in betas]
        rule = config.rule
        own = "it has no penalty"
        if rule.coefficient:
            own = f"its sparsity coefficient is model.{rule.coefficient}"
        for name, value in (("l1_coefficient", l1_coefficient), ("l0_coefficient", l0_coefficient)):
            require(
                value is None or name == rule.coefficient,
                f"model.{name}={value} is not a setting of model.kind={config.kind}: {own}",
            )
        if rule.coefficient == "l1_coefficient" and l1_coefficient is None:
            l1_coefficient = rule.default_coefficient
        if rule.coefficient == "l0_coefficient" and l0_coefficient is None:
            l0_coefficient = rule.default_coefficient
        self.save_hyperparameters()
        _check_hparams(self.hparams)
        self.net = net
        self.register_buffer("steps_since_fired", torch.zeros(config.width, dtype=torch.long))
        self.grades: dict[str, float] = {}  # the answer keys' grades of the last test (metrics.json)
        self.histogram: dict | None = None  # the last test's feature-density histogram (metrics.json)
        self.val_sums = self.test_sums = None  # MeasureSums, made when the task is known

    # --------------------------------------------------------------------------------- the data
    @property
    def task(self) -> ActivationTask:
        task = task_of(self.trainer)
        require(isinstance(task, ActivationTask), "an SAE trains on an activation task (data=activations)")
        return task

    def setup(self, stage: str) -> None:
        task, config = self.task, self.net.config
        source = task.source_model
        vocab = 0
        if (
            source is not None
            and source.language_model
            and len(source.vocab) <= sae_measures.MAX_PREVIOUS_VOCAB
        ):
            vocab = len(source.vocab)
        self.val_sums = MeasureSums(config.width, self.net.d_out).to(self.device)
        self.test_sums = MeasureSums(config.width, self.net.d_out, vocab).to(self.device)

    def split(self, batch: Tensor) -> tuple[Tensor, Tensor | None]:
        """(what the dictionary reads, what it writes or None for an SAE) of a batch of rows."""
        d_in = self.net.config.d_in
        rows = batch.float()
        return (rows, None) if rows.size(-1) == d_in else (rows[..., :d_in], rows[..., d_in:])

    def on_fit_start(self) -> None:
        """A new run: the input scale s (mean norm of s x: sqrt(d_in)), a transcoder's output scale s_out
        (mean norm of s_out y: sqrt(d_out)) and b_dec (the mean of what it writes, scaled) from a sample
        of the training activations, the same on every DDP rank."""
        net = self.net
        if self.global_step > 0 or float(net.input_scale) != 1.0:
            return  # resumed, or set already
        x, y = self.split(self.task.scale_sample().to(self.device))

        def scale_of(rows: Tensor) -> float:
            return math.sqrt(rows.size(-1)) / float(rows.norm(dim=1).mean().clamp(min=1e-12))

        scales = (scale_of(x), scale_of(x if y is None else y))
        mean = ((x if y is None else y) * scales[1]).mean(0).cpu()
        scales, mean = self.trainer.strategy.broadcast((scales, mean), src=0)
        with torch.no_grad():
            net.input_scale.fill_(scales[0])
            net.output_scale.fill_(scales[1])  # an SAE's is its input scale: the same number
            net.b_dec.copy_(mean.to(self.device))

    # ----------------------------------------------------------------------------------- training
    @property
    def coefficient(self) -> float:
        """The kind's sparsity coefficient (0 for a kind without a penalty)."""
        name = self.net.kind.coefficient
        return 0.0 if name is None else self.hparams[name]

    def coefficient_now(self) -> float:
        """The sparsity coefficient at this step: ramped up linearly over `sparsity_warmup` steps."""
        warmup = self.hparams.sparsity_warmup
        ramp = 1.0 if warmup <= 0 else min(1.0, (self.global_step + 1) / warmup)
        return self.coefficient * ramp

    def dead(self) -> Tensor:
        """Bool [width]: the features that have not fired for `dead_window` steps."""
        return self.steps_since_fired >= self.hparams.dead_window

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        x, target = self.split(batch)
        losses = self.net.training_losses(x, self.coefficient_now(), self.hparams.aux_k, self.dead(), target)
        f = losses.pop("features")
        fired = (f > 0).any(dim=0)
        self.steps_since_fired += 1
        self.steps_since_fired[fired] = 0
        if self._logs_this_step():
            values = {f"{name}_loss" if name != "loss" else name: value for name, value in losses.items()}
            values["l0"] = (f > 0).sum(-1).float().mean()
            values["dead_feature_share"] = self.dead().float().mean()
            values["lr"] = torch.tensor(self.lr_schedulers().get_last_lr()[0])
            self.log_dict({f"train/{k}": v for k, v in values.items()}, prog_bar=True, batch_size=len(x))
        return losses["loss"]

    def on_train_batch_end(self, outputs: object, batch: Tensor, batch_idx: int) -> None:
        """After the step: every `resample_every` steps, resample the dead features (kinds that do)."""
        every = self.hparams.resample_every
        if every and self.net.kind.resamples and self.global_step % every == 0:
            self.log("train/resampled", float(self.resample(batch)), batch_size=len(batch))

    def _logs_this_step(self) -> bool:
        trainer = self.trainer
        every = trainer.log_every_n_steps
        return bool(trainer.fast_dev_run) or (every > 0 and (trainer.global_step + 1) % every == 0)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.net.remove_parallel_gradient()

    def optimizer_step(self, *args: object, **kwargs: object) -> None:
        super().optimizer_step(*args, **kwargs)
        self.net.normalize_decoder()

    @torch.no_grad()
    def resample(self, batch: Tensor) -> int:
        """Give each dead feature (on every DDP rank) the direction of the error of a row of this batch
        (rank 0's) drawn with probability proportional to its square; its encoder column that direction
        (a transcoder's: the direction of that row's input) at 0.2 of the live features' mean encoder
        norm; b_enc 0; Adam's moments of it zeroed. Returns how many were resampled."""
        steps = self.trainer.strategy.reduce(self.steps_since_fired.float(), reduce_op="min")
        dead = (steps >= self.hparams.dead_window).nonzero()[:, 0]
        x, target = self.split(self.trainer.strategy.broadcast(batch.cpu(), src=0).to(self.device))
        if len(dead) == 0:
            return 0
        net = self.net
        was_training = net.training
        net.eval()
        written, skip = net.encode(x) @ net.W_dec + net.b_dec, net.skip(x)
        written = written if skip is None else written + skip
        error = (x if target is None else target) * net.output_scale - written
        net.train(was_training)
        weights = error.pow(2).sum(-1)
        if float(weights.sum()) <= 0:
            return 0
        generator = torch.Generator(device=weights.device).manual_seed(self.global_step)
        picks = torch.multinomial(weights, len(dead), replacement=True, generator=generator)
        directions = unit_rows(error[picks])
        reads = directions if target is None else unit_rows(x[picks])
        alive = ~torch.isin(torch.arange(net.width, device=dead.device), dead)
        norm = net.W_enc[:, alive].norm(dim=0).mean() if bool(alive.any()) else torch.tensor(1.0)
        net.W_dec[dead] = directions
        net.W_enc[:, dead] = reads.t() * 0.2 * norm
        net.b_enc[dead] = 0.0
        self.steps_since_fired[dead] = 0
        optimizer = self.optimizers(use_pl_optimizer=False)
        for parameter, index in (
            (net.W_dec, (dead,)),
            (net.W_enc, (slice(None), dead)),
            (net.b_enc, (dead,)),
        ):
            state = optimizer.state.get(parameter, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key][index] = 0.0
        return len(dead)

    # ------------------------------------------------------------------------------- the measures
    def _measure_batch(self, batch: Tensor | tuple, sums: MeasureSums, previous: bool) -> None:
        """Add a batch's sums to `sums`: activations, or the source model's batch (*inputs, labels)."""
        net = self.net
        if isinstance(batch, Tensor):
            x, target = self.split(batch)
            f = net.encode(x)
            sums.update(sae_measures.activation_sums(x if target is None else target, net.write(x, f), f))
        else:
            *inputs, labels = batch
            source = self.task.source_model.to(self.device)
            sums.update(sae_measures.model_sums(source, net, tuple(inputs), labels, previous=previous))

    def validation_step(self, batch: Tensor | tuple, batch_idx: int) -> None:
        self._measure_batch(batch, self.val_sums, previous=False)

    def test_step(self, batch: Tensor | tuple, batch_idx: int) -> None:
        self._measure_batch(batch, self.test_sums, previous="previous" in self.test_sums.names)

    def objective(self, totals: dict[str, Tensor]) -> float:
        """The training loss of summed batches, at the full sparsity coefficient and without AuxK: the
        reconstruction's squared error in the scaled space, plus the coefficient times the kind's penalty
        (sum f or ||f||_0) per position."""
        n = float(totals["positions"])
        s = float(self.net.output_scale)
        loss = s * s * float(totals["squared_error"]) / n
        penalty = self.net.kind.penalty_sum
        if penalty is not None:
            loss += self.coefficient * float(totals[penalty]) / n
        return loss

    def _log_measures(self, stage: str, sums: MeasureSums) -> dict[str, Tensor]:
        totals = {k: v.cpu() for k, v in sums.compute().items()}
        sums.reset()
        if float(totals["positions"]) == 0:
            return totals
        values = sae_measures.measures(totals)
        values["loss"] = self.objective(totals)
        # every rank has the same totals (MeasureSums syncs them): averaging them changes nothing
        self.log_dict({f"{stage}/{k}": float(v) for k, v in values.items()}, sync_dist=True)
        return totals

    def on_validation_epoch_end(self) -> None:
        self._log_measures("val", self.val_sums)

    def on_test_epoch_end(self) -> None:
        totals = self._log_measures("test", self.test_sums)
        self.histogram = sae_measures.density_histogram(totals)
        self.grades = {}
        true = self.task.true_features()
        if true is not None:
            score, share = mmcs(true.to(self.net.W_dec), self.net.directions().detach())
            self.grades |= {"mmcs": score, "recovered_share": share}
        self.grades |= sae_measures.previous_token_grades(totals)
        for logger in self.loggers:
            experiment = getattr(logger, "experiment", None)
            if hasattr(experiment, "add_histogram"):
                experiment.add_histogram(
                    "test/log10_feature_density", sae_measures.log10_density(totals), self.global_step
                )

    # ---------------------------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The file format and the task's record (for an SAE of a model: its source and hook)."""
        checkpoint["format_version"] = FORMAT_VERSION
        task = task_of(self.trainer)
        if task is not None:
            checkpoint["task"] = task.record()

    def parameter_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """Every parameter, in the order the optimizer holds them (no weight decay)."""
        return list(self.parameters()), []

    def configure_optimizers(self) -> dict:
        h = self.hparams
        optimizer = torch.optim.Adam(self.parameters(), lr=h.lr, betas=tuple(h.betas))
        with as_config_error():
            scheduler = warmup_scheduler(
                optimizer, h.schedule, h.warmup, h.max_iters or self.trainer.estimated_stepping_batches
            )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _check_hparams(h: Mapping) -> None:
    for key in ("lr", "l1_coefficient", "l0_coefficient", "aux_k"):
        value = h[key]
        require(
            value is None or (isinstance(value, int | float) and not isinstance(value, bool) and value >= 0),
            f"model.{key}={value!r} must be a number >= 0",
        )
        require(value is None or math.isfinite(value), f"model.{key}={value!r} must be finite")
    require(h["lr"] > 0, f"model.lr={h['lr']} must be positive")
    for key in ("warmup", "sparsity_warmup", "dead_window", "resample_every"):
        value = h[key]
        require(isinstance(value, int) and value >= 0, f"model.{key}={value!r} must be an integer >= 0")
    require(h["dead_window"] > 0, "model.dead_window must be at least 1 step")
    require(
        len(h["betas"]) == 2 and all(0 <= b < 1 for b in h["betas"]),
        f"model.betas={h['betas']} must be two numbers in [0, 1)",
    )
    require(
        h["schedule"] in SCHEDULES,
        f"model.schedule={h['schedule']!r} is unknown; use {' or '.join(SCHEDULES)}",
    )
    require(
        h["max_iters"] is None or (isinstance(h["max_iters"], int) and h["max_iters"] > 0),
        f"model.max_iters={h['max_iters']!r} must be a positive integer (or null)",
    )


SHAPE_KEYS = (
    "kind",
    "expansion",
    "k",
    "bandwidth",
    "threshold",
    "skip",
)  # the dictionary's; the rest: training


def build_sae_module(settings: Mapping, task: ActivationTask) -> SAEModule:
    """The module for the config's `model.*` settings on an activation task: an SAE, or a transcoder
    where the task's rows pair what it reads with what it writes (`d_out` in its `model_settings`).
    `kind`, `expansion` (the width is expansion x the task's d_in), the kind's own settings (`k`,
    `bandwidth`, `threshold`: null or absent, the kind's default; a setting of another kind is ignored,
    so one sweep can cross kinds), a transcoder's `skip`, and the training settings of SAEModule. Widths
    the machine cannot hold are refused before anything is allocated."""
    kind = settings.get("kind") or sae_kinds.DEFAULT
    with as_config_error():
        rule = sae_kinds.get(kind)
        renames = {"l1": rule.coefficient, "l1_warmup": "sparsity_warmup"}  # their names until 0.1
        settings = renamed(dict(settings), renames, "model")
    training = {k: v for k, v in settings.items() if k not in SHAPE_KEYS}
    check_arguments(SAEModule, training, "model")
    require("sae" not in training, "model.sae is set from model.kind, model.expansion and model.k")
    expansion = settings.get("expansion", 8)
    require(
        isinstance(expansion, int) and not isinstance(expansion, bool) and expansion > 0,
        f"model.expansion={expansion!r} must be a positive integer (features per activation dimension)",
    )
    stated = task.model_settings()
    d_in, d_out = task.d_in, stated.get("d_out", task.d_in)
    skip = settings.get("skip") or False
    require(
        not skip or "d_out" in stated,
        "model.skip=true is a transcoder's (experiment=transcoder); an SAE writes what it reads",
    )
    width = expansion * d_in
    elements = width * (d_in + d_out) + width + d_out + (d_in * d_out if skip is True else 0)
    require_memory(
        4 * 4 * elements,  # weights, gradients, Adam's two moments: float32
        f"{'a transcoder' if 'd_out' in stated else 'an SAE'} of model.expansion={expansion} x d_in={d_in} = "
        f"{width} features "
        f"({size_text(16 * elements)} with its gradients and optimizer state)",
        "lower model.expansion",
    )
    config = {"kind": kind, "d_in": d_in, "width": width, "hook": task.hook}
    if "d_out" in stated:
        config |= {"d_out": d_out, "output_hook": stated["output_hook"], "skip": skip}
    config |= {key: settings[key] for key in rule.settings if settings.get(key) is not None}
    with as_config_error():
        config = dictionary_config(config).to_dict()
    return SAEModule(sae=config, **training)
