"""Progress on the console while a run trains: Lightning's progress bar where someone watches it (a
terminal or a notebook), one line per validation with its metrics everywhere (train.log too), and where
no bar is shown (output to a file or a pipe), a line at least every `EVERY` seconds between them (after
the step that would otherwise leave a longer gap: at every step when steps are that slow).

    epoch 2  step 1170  val/loss=0.0311  val/acc=1.0000  (78 s)              after each validation
    progress: step 120 of 3000  train/loss=2.3125  1.2 K tokens/s  about 4 min left   (no bar)
"""

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


EVERY = 30.0  # seconds between progress lines where no bar is shown
HEARTBEAT = "progress: "  # how such a line starts (a time-dependent line: the docs' comparisons skip it)


def _count(batch: object) -> tuple[int, str]:
    """How much a batch holds: token ids (a model's inputs), or activations (an SAE's rows)."""
    first = batch[0] if isinstance(batch, list | tuple) else batch
    if hasattr(first, "dtype") and not first.dtype.is_floating_point:
        return first.numel(), "tokens"
    return (len(first) if hasattr(first, "__len__") else 0), "activations"


class ValidationLog(L.Callback):
    """After every validation (not the sanity check): `epoch 2  step 1170  val/loss=...  (31 s)`, the
    metrics whose names start with one of `shown` (with `("train/", "val/")` the last training step's
    too)."""

    def __init__(self, shown: tuple[str, ...] = ("val/",)) -> None:
        self.started = self.said = self.last = time.perf_counter()
        self.shown = shown
        self.seen, self.first_step = 0, 0

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = self.said = self.last = time.perf_counter()
        self.seen, self.first_step = 0, trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        """Where no bar is shown: a line when another step like this one would leave `EVERY` seconds
        without one (its step of the total, this step's training loss, the pace, the time left at that
        pace)."""
        count, unit = _count(batch)
        self.seen += count
        now = time.perf_counter()
        step_took, self.last = now - self.last, now
        if interactive() or now - self.said + step_took < EVERY or not trainer.is_global_zero:
            return
        self.said = now
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        pace = self.seen / max(now - self.started, 1e-9)
        line = f"{HEARTBEAT}step {step}" + (f" of {int(total)}" if total < float("inf") else "")
        line += f"  train/loss={float(loss):.4f}" if hasattr(loss, "item") else ""
        line += f"  {_thousands(pace)} {unit}/s"
        done = step - self.first_step
        if total < float("inf") and done > 0:
            left = (now - self.started) / done * (total - step)
            line += f"  about {left / 60:.0f} min left" if left >= 90 else f"  about {left:.0f} s left"
        log.info(line)

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
        self.said = time.perf_counter()


class CompactProgressBar(TQDMProgressBar):
    """Lightning's progress bar with one number after it, the training loss: with every logged metric
    after it the line outgrows an 80-column terminal, the bar shrinks to one character and each redraw
    wraps onto a new line. The per-validation line (ValidationLog) and TensorBoard show the rest."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, str]:
        loss = trainer.progress_bar_metrics.get("train/loss")
        return {} if loss is None else {"loss": f"{float(loss):.3f}"}


def _thousands(value: float) -> str:
    """1234 -> 1.2 K, 2.5e6 -> 2.5 M."""
    for size, suffix in ((1e6, " M"), (1e3, " K")):
        if value >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:.0f}"
