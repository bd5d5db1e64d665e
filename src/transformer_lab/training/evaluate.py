"""Measuring a checkpoint as train.py measures a run after training: its task's test split, through the
LightningModule's own test_step (the ready-made models' metrics in models.json come from here)."""

import logging
from pathlib import Path

import lightning as L

from transformer_lab.checkpoint import load
from transformer_lab.pretrained import PREFIX, is_pretrained, records
from transformer_lab.training.datamodule import LightningTask
from transformer_lab.training.predictor import TransformerPredictor


def evaluate(
    location: str | Path, data_path: str | Path | None = None, limit_batches: int | None = None
) -> dict[str, float]:
    """The test metrics of a checkpoint (a name, `pretrained:<name>` or a file): the TransformerPredictor
    rebuilt from its hyperparameters and weights, run by `Trainer.test` over the whole test split of the
    task rebuilt from its record (`limit_batches`: only its first batches, always the same ones;
    models.json's `check_metrics`). `data_path`: the task's data file, where it reads one the package does
    not ship (see `transformer_lab.checkpoint`)."""
    if isinstance(location, str) and not is_pretrained(location) and location in records():
        location = PREFIX + location
    checkpoint = load(location, data_path=data_path)
    task = checkpoint.task
    predictor = TransformerPredictor(**checkpoint.hyper_parameters)
    predictor.load_state_dict(checkpoint.contents["state_dict"])
    # Lightning's notes on the hardware ("GPU available: False", tips) are not results: keep them off screen.
    quiet = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            precision="32-true",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            limit_test_batches=1.0 if limit_batches is None else limit_batches,
        )
        results = trainer.test(predictor, datamodule=LightningTask(task), verbose=False)
    finally:
        quiet.setLevel(level)
    return {key: float(value) for key, value in sorted(results[0].items())}
