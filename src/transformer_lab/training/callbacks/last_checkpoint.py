"""last.ckpt: the newest state of a run, to resume from."""

from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint

from transformer_lab.errors import TrainingFailed, require


class LastCheckpoint(Checkpoint):
    """Keep `<dirpath>/last.ckpt` current, to resume from: every `every_n_train_steps` optimisation steps,
    after every validation, at the end of training, and on an exception or Ctrl-C, so a run that dies at
    90% loses at most `every_n_train_steps` steps. Not after the loss diverged: the last good state stays.

    A `Checkpoint` subclass, so Lightning runs it after the other callbacks (and after BestCheckpoint,
    listed before it, whose state it then saves up to date). The save at the end of training records
    that training finished and after how many epochs (`finished_epochs`), so resuming a finished run
    under the same limits is refused in one line instead of writing a run that trains nothing.
    """

    def __init__(self, dirpath: str, every_n_train_steps: int | None = 200):
        require(
            every_n_train_steps is None or (isinstance(every_n_train_steps, int) and every_n_train_steps > 0),
            f"callbacks.last_checkpoint.every_n_train_steps={every_n_train_steps!r} must be a positive "
            "integer (or null: only after validation)",
        )
        self.path = f"{dirpath}/last.ckpt"
        self.every_n_train_steps = every_n_train_steps
        self.finished_epochs: int | None = None
        self.saved_step: int | None = None  # the global step of the last save

    def state_dict(self) -> dict:
        return {"finished_epochs": self.finished_epochs}

    def load_state_dict(self, state_dict: dict) -> None:
        pass  # a resumed run has not finished, whatever the run it resumes had done

    def _save(self, trainer: L.Trainer, again: bool = False) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        if self.saved_step == trainer.global_step and not again:
            return
        trainer.save_checkpoint(self.path, weights_only=False)
        self.saved_step = trainer.global_step

    def due(self, trainer: L.Trainer) -> bool:
        """Whether this training step is one that saves `last.ckpt`."""
        return bool(self.every_n_train_steps) and trainer.global_step % self.every_n_train_steps == 0

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if self.due(trainer):
            self._save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.finished_epochs = trainer.current_epoch
        self._save(trainer, again=True)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, TrainingFailed) or trainer.state.fn != "fit" or trainer.global_step == 0:
            return  # diverged, or the disk refused a save: the last good file stays as it is
        if not all(torch.isfinite(p).all() for p in pl_module.parameters()):
            return  # diverged since FiniteLossCheck last looked: keep the last good state
        self._save(trainer)
        if trainer.is_global_zero:
            run = Path(self.path).parent.parent
            print(f"Saved {self.path} at step {trainer.global_step}; resume with resume={run}")
