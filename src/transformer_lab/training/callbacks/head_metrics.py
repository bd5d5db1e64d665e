"""Every attention head watched while it learns: the per-head measures of `analysis.measures` logged."""

import logging

import lightning as L
from torch import Tensor

from transformer_lab import figures
from transformer_lab.analysis import measures
from transformer_lab.data.task import TaskDataModule
from transformer_lab.errors import require
from transformer_lab.training.callbacks.tensorboard import logger_when_due, tensorboard_logger
from transformer_lab.training.datamodule import task_of

log = logging.getLogger(__name__)


class HeadMetricsCallback(L.Callback):
    """Watch every attention head while it learns: after each `every_n_epochs`-th validation, log every
    measure of the registry (`transformer_lab.analysis.measures`) to TensorBoard (Scalars tab, `heads/`),
    per head (`L0H1`; an encoder-decoder's `E0H1`, `D0H1`, `X0H1`), e.g.:

    * `heads/entropy/<head>`: the mean entropy of its attention rows (`explain.attention_entropy`):
      log(T) while it reads everything evenly, falling as it learns where to look;
    * `heads/alignment/<head>`: where the task says where the information is (`TaskDataModule.alignment`:
      the mirror position for reverse, the positions holding the output digit for sort), the attention
      mass there (`explain.alignment_mass`); the step at which it jumps is when the head forms. For an
      encoder-decoder it is measured on the cross-attention;
    * the task's own measures (`TaskDataModule.measures`: induction and previous-token scores).

    All on the first `num_examples` validation examples. The measures that take a forward pass per head
    (`costly`: the accuracy with each head ablated) are logged once, at the end of training, with the
    head-ablation table as text and as an image (`heads/ablation`), on as many of those examples as their
    passes fit the time budget of `analysis=heads` (`analysis.budget`; at least 8; a line says when
    fewer: a 70 M-parameter model's 48 heads on 32 examples take minutes). Does nothing without a TensorBoard
    logger or a task, on other ranks than 0, and during the sanity check.
    """

    def __init__(self, every_n_epochs: int = 1, num_examples: int = 32, ablation: bool = True):
        require(
            isinstance(every_n_epochs, int) and every_n_epochs > 0,
            f"callbacks.head_metrics.every_n_epochs={every_n_epochs!r} must be a positive integer",
        )
        require(
            isinstance(num_examples, int) and num_examples > 0,
            f"callbacks.head_metrics.num_examples={num_examples!r} must be a positive integer",
        )
        self.every_n_epochs = every_n_epochs
        self.num_examples = num_examples
        self.ablation = ablation
        self._batch: tuple[tuple[Tensor, ...], Tensor] | None = None

    def _heads(self, task: TaskDataModule, pl_module: L.LightningModule) -> measures.Heads:
        """The model's heads on the fixed examples (taken once), on its device."""
        if self._batch is None:
            self._batch = task.examples(self.num_examples, split="val", exact=False)
        inputs, labels = self._batch
        device = pl_module.device
        return measures.Heads(pl_module.net, tuple(x.to(device) for x in inputs), labels.to(device), task)

    @staticmethod
    def _within_budget(heads: measures.Heads) -> measures.Heads:
        """The first of `heads`' examples that a pass per head ablated fits the time budget."""
        from transformer_lab.analysis.budget import examples_within

        passes = len(heads.layers) * heads.model.config.num_heads + 4
        usual = heads.labels.size(0)
        what, sets = "head ablation at the end of training", "callbacks.head_metrics.num_examples= sets it"
        count, line = examples_within(heads.model, heads.inputs, passes, usual, what, sets=sets)
        if line:
            log.info(line)
        if count == usual:
            return heads
        return measures.Heads(
            heads.model, tuple(x[:count] for x in heads.inputs), heads.labels[:count], heads.task
        )

    @staticmethod
    def _log(logger: object, heads: measures.Heads, chosen: list[measures.Measure], step: int) -> None:
        for name, table in heads.measure(chosen).items():
            for head, value in measures.entries(table, heads.model):
                logger.experiment.add_scalar(f"heads/{name}/{head}", value, global_step=step)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = logger_when_due(trainer, self.every_n_epochs)
        task = task_of(trainer)
        if logger is None or task is None:
            return
        cheap = [m for m in measures.applicable(task) if not m.costly]
        self._log(logger, self._heads(task, pl_module), cheap, trainer.global_step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = tensorboard_logger(trainer)
        task = task_of(trainer)
        if not self.ablation or logger is None or not trainer.is_global_zero or task is None:
            return
        heads = self._within_budget(self._heads(task, pl_module))
        costly = [m for m in measures.applicable(task) if m.costly]
        self._log(logger, heads, costly, trainer.global_step)
        result = heads.ablation()
        text = "\n".join([result.table(), *result.findings()])
        logger.experiment.add_text(
            "heads/ablation", "    " + text.replace("\n", "\n    "), trainer.global_step
        )
        logger.experiment.add_image(  # drawn as an array: no matplotlib start-up at the end of training
            "heads/ablation", figures.head_ablation_image(result), trainer.global_step, dataformats="HWC"
        )
