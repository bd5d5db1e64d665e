"""Progress on the console while a run trains: Lightning's progress bar where someone watches it (a
terminal or a notebook), and one line per validation with its metrics everywhere (train.log too)."""

import logging
import sys
import time

import lightning as L
from lightning.pytorch.callbacks import ProgressBar
from tqdm import tqdm

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
    """After every validation (not the sanity check): `epoch 2  step 1170  val/loss=...  (31 s)`."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        values = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if not values:
            return
        text = "  ".join(f"{k}={v:.4f}" for k, v in values.items())
        line = f"epoch {trainer.current_epoch}  step {trainer.global_step}  {text}"
        line += f"  ({time.perf_counter() - self.started:.0f} s)"
        with tqdm.external_write_mode(file=sys.stdout):  # a line above the bar, not inside it
            log.info(line)
