"""best.ckpt: the weights with the best validation score so far."""

import math
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Checkpoint

from transformer_lab.errors import require


class BestCheckpoint(Checkpoint):
    """Keep `<dirpath>/best.ckpt`: the weights with the best `monitor` value of all validations so far.

    It saves only right after a validation, with the weights that validation measured, so `best.ckpt`
    always holds weights whose score was measured (training that stops between validations does not
    touch it). Ties go to the newer weights: accuracy saturates (the reverse task reaches val/acc 1.0
    epochs before training ends, while its loss keeps falling), and the later model is the better one.
    """

    def __init__(self, dirpath: str, monitor: str, mode: str = "max"):
        require(mode in ("min", "max"), f"metric_mode={mode!r} must be min or max")
        self.path = f"{dirpath}/best.ckpt"
        self.monitor = monitor
        self.mode = mode
        self.best_model_path = ""
        self.best_model_score: float | None = None

    def _improves(self, score: float) -> bool:
        if not math.isfinite(score):
            return False
        best = self.best_model_score
        return best is None or (score >= best if self.mode == "max" else score <= best)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != "fit" or trainer.sanity_checking or trainer.fast_dev_run:
            return
        score = trainer.callback_metrics.get(self.monitor)
        require(
            score is not None,
            f"metric={self.monitor} was not logged by validation; choose one of "
            f"{sorted(k for k in trainer.callback_metrics if k.startswith('val/'))}",
        )
        score = float(score)  # validation already synchronised with the host
        if self._improves(score):
            trainer.save_checkpoint(self.path, weights_only=False)
            self.best_model_path, self.best_model_score = self.path, score

    def state_dict(self) -> dict:
        return {
            "monitor": self.monitor,
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """A resumed run keeps the best score of the run it continues, if that run is this one (the same
        best.ckpt, still there): nothing restored from a file decides which file is this run's best."""
        score = state_dict.get("best_model_score")
        if (
            state_dict.get("monitor") == self.monitor
            and state_dict.get("best_model_path") == self.path
            and Path(self.path).is_file()
            and isinstance(score, int | float)
        ):
            self.best_model_score, self.best_model_path = float(score), self.path
