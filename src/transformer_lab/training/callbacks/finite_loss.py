"""Stop a run whose loss became NaN or infinite, before anything saves its weights."""

import math
from pathlib import Path

import lightning as L
import torch
from torch import Tensor

from transformer_lab.errors import TrainingDiverged
from transformer_lab.training.callbacks.last_checkpoint import LastCheckpoint


class FiniteLossCheck(L.Callback):
    """Stop training with a clear message when the training loss becomes NaN or infinite.

    Reading a GPU tensor on the host waits for the GPU to finish all queued work (a host-device sync), so
    the loss is not read every step. Each step adds it to a running sum on its device (NaN and inf survive
    a sum, so the sum is finite exactly when every loss in it was). The sum is read only where the host
    reads values anyway or must know before writing: on the steps Lightning logs (every
    `trainer.log_every_n_steps`), on the steps `LastCheckpoint` saves, before validation and at the end
    of training. These hooks run before the checkpoint callbacks', so diverged weights are never saved:
    `last.ckpt` keeps the last good state.
    """

    def __init__(self) -> None:
        self._loss_sum: Tensor | None = None  # training losses since the last read, summed on the device
        self._checked_step = 0  # the global step at which the sum was last read (and found finite)
        self._last_checkpoints: list[LastCheckpoint] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._loss_sum = torch.zeros((), device=pl_module.device)
        self._checked_step = trainer.global_step
        self._last_checkpoints = [c for c in trainer.checkpoint_callbacks if isinstance(c, LastCheckpoint)]

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, *args: object
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._loss_sum.add_(loss.detach())  # queued on the device: no host sync
        every = trainer.log_every_n_steps  # the steps Lightning writes metrics on (host reads anyway)
        logs = every > 0 and trainer.global_step % every == 0
        if logs or trainer.should_stop or any(c.due(trainer) for c in self._last_checkpoints):
            self._stop_if_diverged(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._stop_if_diverged(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_if_diverged(trainer)

    def _stop_if_diverged(self, trainer: L.Trainer) -> None:
        if self._loss_sum is None:
            return
        total = self._loss_sum.item()  # the one host read
        step = trainer.global_step
        if math.isfinite(total):
            self._loss_sum.zero_()
            self._checked_step = step
            return
        first = self._checked_step + 1
        between = "" if first == step else f" between step {first} and step {step}"
        last = self._last_checkpoints[0] if self._last_checkpoints else None
        if last is not None and last.saved_step is not None:
            kept = f"{last.path} (step {last.saved_step})"
        else:
            kept = last.path if last is not None and Path(last.path).is_file() else "none"
        raise TrainingDiverged(
            f"training diverged at step {step}: the loss became {total}{between}; last good checkpoint: "
            f"{kept}; lower model.lr or set trainer.gradient_clip_val"
        )
