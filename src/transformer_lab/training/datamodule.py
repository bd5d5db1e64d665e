"""A task as Lightning's datamodule: what the Trainer reads batches through while it trains.

A task (`transformer_lab.data.TaskDataModule`) is plain Python, so the tools load and analyse it without
Lightning; training wraps it here. The wrapper hands the task's batches to the Trainer, the Trainer to the
task (`task.trainer`, e.g. for a DDP rank's share of the data), and the task's hyperparameters to
Lightning, which stores them in every checkpoint (`datamodule_hyper_parameters`).

    trainer.fit(model, datamodule=LightningTask(ReverseDataModule()))
"""

from typing import Any

import lightning as L

from transformer_lab.data.task import TaskDataModule


class LightningTask(L.LightningDataModule):
    """`task` as a LightningDataModule (see the module docstring)."""

    def __init__(self, task: TaskDataModule):
        super().__init__()
        self.task = task
        self.save_hyperparameters(dict(task.hparams))

    def setup(self, stage: str) -> None:
        self.task.trainer = self.trainer
        self.task.setup(stage)

    def train_dataloader(self) -> Any:
        return self.task.train_dataloader()

    def val_dataloader(self) -> Any:
        return self.task.val_dataloader()

    def test_dataloader(self) -> Any:
        return self.task.test_dataloader()


def task_of(trainer: L.Trainer) -> TaskDataModule | None:
    """The task a Trainer trains on (through its `LightningTask`), or None."""
    datamodule = getattr(trainer, "datamodule", None)
    return datamodule.task if isinstance(datamodule, LightningTask) else None
