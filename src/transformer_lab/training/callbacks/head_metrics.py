"""Every attention head watched while it learns: entropy and task alignment per head, ablation at the end."""

import lightning as L
import torch
from torch import Tensor

from transformer_lab import figures
from transformer_lab.analysis import explain, interventions
from transformer_lab.data.task import TaskDataModule
from transformer_lab.errors import require
from transformer_lab.nn import evaluating
from transformer_lab.training.callbacks.tensorboard import logger_when_due, tensorboard_logger


class HeadMetricsCallback(L.Callback):
    """Watch every attention head while it learns: after each `every_n_epochs`-th validation, log to
    TensorBoard (Scalars tab, `heads/`), per head (`L0H1`; an encoder-decoder's `E0H1`, `D0H1`, `X0H1`):

    * `heads/entropy/<head>`: the mean entropy of its attention rows (`explain.attention_entropy`):
      log(T) while it reads everything evenly, falling as it learns where to look;
    * `heads/alignment/<head>`: where the task says where the information is (`TaskDataModule.alignment`:
      the mirror position for reverse, the positions holding the output digit for sort), the attention
      mass there (`explain.alignment_mass`); the step at which it jumps is when the head forms. For an
      encoder-decoder it is measured on the cross-attention.

    Both come from one forward pass on the first `num_examples` validation examples. At the end of
    training the head-ablation table of the same examples (`interventions.ablate_heads`) is logged as
    text and as an image (`heads/ablation`). Does nothing without a TensorBoard logger or a task, on
    other ranks than 0, and during the sanity check.
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
        self._batch: tuple[tuple[Tensor, ...], Tensor, Tensor | None] | None = None

    def _examples(
        self, task: TaskDataModule, device: torch.device
    ) -> tuple[tuple[Tensor, ...], Tensor, Tensor | None]:
        """The fixed examples (inputs, labels) and their alignment, taken once, on `device`."""
        if self._batch is None:
            inputs, labels = task.examples(self.num_examples, split="val", exact=False)
            self._batch = (inputs, labels, task.alignment(inputs, labels))
        inputs, labels, expected = self._batch
        moved = tuple(x.to(device) for x in inputs)
        return moved, labels.to(device), None if expected is None else expected.to(device)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = logger_when_due(trainer, self.every_n_epochs)
        task = trainer.datamodule
        if logger is None or not isinstance(task, TaskDataModule):
            return
        inputs, _, expected = self._examples(task, pl_module.device)
        net = pl_module.net
        with evaluating(net):
            _, patterns = net.run_with_cache(*inputs, names_filter=lambda name: name.endswith("hook_pattern"))
        values = {}
        for layer in net.attention_layers():
            pattern = patterns[f"{layer.name}.hook_pattern"]
            queries = inputs[layer.queries]
            query_mask = None if task.pad_id is None else queries != task.pad_id
            scalars = {"entropy": explain.attention_entropy(pattern, query_mask)}
            if expected is not None and layer.reads_source:
                scalars["alignment"] = explain.alignment_mass(pattern, expected)
            for kind, per_head in scalars.items():
                for head, value in enumerate(per_head):
                    values[f"heads/{kind}/{layer.head(head)}"] = value
        for tag, value in zip(
            values, torch.stack(list(values.values())).tolist(), strict=True
        ):  # one host read
            logger.experiment.add_scalar(tag, value, global_step=trainer.global_step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = tensorboard_logger(trainer)
        task = trainer.datamodule
        if (
            not self.ablation
            or logger is None
            or not trainer.is_global_zero
            or not isinstance(task, TaskDataModule)
        ):
            return
        inputs, labels, _ = self._examples(task, pl_module.device)
        result = interventions.ablate_heads(pl_module.net, inputs, labels)
        important = ", ".join(result.important()) or "none"
        text = f"{result.table()}\nheads whose removal costs more than 0.1 of the accuracy: {important}"
        logger.experiment.add_text(
            "heads/ablation", "    " + text.replace("\n", "\n    "), trainer.global_step
        )
        logger.experiment.add_image(  # drawn as an array: no matplotlib start-up at the end of training
            "heads/ablation", figures.head_ablation_image(result), trainer.global_step, dataformats="HWC"
        )
