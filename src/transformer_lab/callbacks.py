"""Lightning callbacks."""

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor


class BestCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that, when the monitored metric ties the best so far, keeps the newer checkpoint.

    Accuracy saturates: on the reverse task val/acc reaches 1.0 epochs before training ends, while the
    model keeps improving (its loss keeps falling). The stock callback keeps the first checkpoint to reach
    the best value; this one keeps the latest.
    """

    def check_monitor_top_k(self, trainer: L.Trainer, current: Tensor | None = None) -> bool:
        if current is not None and self.save_top_k == 1 and self.best_k_models:
            best = self.best_k_models[self.kth_best_model_path]
            if bool(current.to(best.device) == best):
                return trainer.strategy.reduce_boolean_decision(True)
        return super().check_monitor_top_k(trainer, current)
