"""The attention grid of one validation example, logged to TensorBoard after validations."""

import lightning as L
from torch import Tensor

from transformer_lab import figures
from transformer_lab.analysis import explain
from transformer_lab.errors import require
from transformer_lab.nn import GROUP_TITLES
from transformer_lab.training.callbacks.tensorboard import logger_when_due
from transformer_lab.training.datamodule import task_of


class AttentionMapCallback(L.Callback):
    """Log the attention grid (rows = layers, columns = heads) of one fixed validation example to
    TensorBoard as the image `attention/val_example`, after every `every_n_epochs`-th validation; for an
    encoder-decoder three grids, `attention/val_example/encoder`, `.../decoder` and `.../cross` (target
    rows, source columns). Ticks read `position token`, each layer has its own colour scale and bar; the
    grid is drawn straight into an array (`figures.attention_grid_image`, milliseconds; a matplotlib
    figure took about 2 s).

    The example is the task's first validation example without its padding, cut to its first
    `max_tokens` tokens so the figure stays readable and cheap (for a causal decoder the cut changes
    nothing before it). Does nothing without a TensorBoard logger or a task, on other ranks than 0, and
    during the sanity check.
    """

    def __init__(self, every_n_epochs: int = 1, max_tokens: int = 32):
        require(
            isinstance(every_n_epochs, int) and every_n_epochs > 0,
            f"callbacks.attention_maps.every_n_epochs={every_n_epochs!r} must be a positive integer",
        )
        self.every_n_epochs = every_n_epochs
        self.max_tokens = max_tokens
        self._example: tuple[Tensor, ...] | None = None

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = logger_when_due(trainer, self.every_n_epochs)
        task = task_of(trainer)
        if logger is None or task is None:
            return
        if self._example is None:
            inputs, _ = task.example(0, split="val")
            if task.pad_id is not None:
                inputs = tuple(x[:, x[0] != task.pad_id] for x in inputs)
            self._example = tuple(x[:, : self.max_tokens] for x in inputs)
        inputs = tuple(x.to(pl_module.device) for x in self._example)
        tokens = [task.tokenizer.tokens(x[0]) for x in inputs]
        net = pl_module.net
        groups = explain.grouped_maps(net, *inputs)
        for group, maps in groups.items():
            layers = [layer for layer in net.attention_layers() if layer.group == group]
            heading = GROUP_TITLES[group] + (figures.GRID_NOTES["self"] if group == "self" else "")
            title = f"{heading}. Validation example, epoch {trainer.current_epoch}"
            image = figures.attention_grid_image(
                maps,
                tokens[layers[0].keys],
                title=title,
                row_tokens=tokens[layers[0].queries],
                labels=[layer.label for layer in layers],  # L0, or E0 / D0 / X0: as the explorer names them
            )
            tag = "attention/val_example" + ("" if group == "self" else f"/{group}")
            logger.experiment.add_image(tag, image, global_step=trainer.global_step, dataformats="HWC")
