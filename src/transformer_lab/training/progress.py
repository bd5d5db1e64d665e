"""Progress on the console while a run trains: Lightning's progress bar where someone watches it (a
terminal or a notebook), and one line per validation with its metrics everywhere (train.log too)."""

import logging
import sys
import time

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

log = logging.getLogger(__name__)


def interactive() -> bool:
    """Whether the console is watched live: a terminal, or a Jupyter kernel (tqdm draws widgets there)."""
    return sys.stdout.isatty() or "ipykernel" in sys.modules


def bar_only_where_watched(trainer: L.Trainer, requested: bool | None) -> None:
    """`trainer.enable_progress_bar=null` (the default): the bar on a terminal only. Written to a file or a
    pipe, its redraws are kilobytes of carriage returns per epoch; the validation lines say the same."""
    bar = trainer.progress_bar_callback
    if requested is None and isinstance(bar, ProgressBar) and not interactive():
        bar.disable()


class ValidationLog(L.Callback):
    """After every validation (not the sanity check): `epoch 2  step 1170  val/loss=...  (31 s)`, the
    metrics whose names start with one of `shown` (with `("train/", "val/")` the last training step's
    too)."""

    def __init__(self, shown: tuple[str, ...] = ("val/",)) -> None:
        self.started = time.perf_counter()
        self.shown = shown

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        values = {k: float(v) for p in self.shown for k, v in metrics.items() if k.startswith(p)}

        if not values:
            return
        text = "  ".join(f"{k}={v:.4f}" for k, v in values.items())
        line = f"epoch {trainer.current_epoch}  step {trainer.global_step}  {text}"
        line += f"  ({time.perf_counter() - self.started:.0f} s)"
        log.info(line)  # above the progress bar: console.ConsoleHandler


class CompactProgressBar(TQDMProgressBar):
    """Lightning's progress bar with one number after it, the training loss: with every logged metric
    after it the line outgrows an 80-column terminal, the bar shrinks to one character and each redraw
    wraps onto a new line. The per-validation line (ValidationLog) and TensorBoard show the rest."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, str]:
        loss = trainer.progress_bar_metrics.get("train/loss")
        return {} if loss is None else {"loss": f"{float(loss):.3f}"}
