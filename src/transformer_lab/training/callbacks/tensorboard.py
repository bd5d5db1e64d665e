"""When the figure callbacks write to TensorBoard."""

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger


def tensorboard_logger(trainer: L.Trainer) -> TensorBoardLogger | None:
    """The run's TensorBoard logger, if it has one."""
    return next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)


def logger_when_due(trainer: L.Trainer, every_n_epochs: int) -> TensorBoardLogger | None:
    """The run's TensorBoard logger if a figure or sample is due after this validation: on rank 0, not in
    the sanity check, every `every_n_epochs`-th epoch. None otherwise (or when there is no such logger)."""
    if trainer.sanity_checking or not trainer.is_global_zero or trainer.current_epoch % every_n_epochs:
        return None
    return tensorboard_logger(trainer)
