"""Lightning callbacks."""

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from transformer_lab import explain, plots
from transformer_lab.data.shakespeare import CharTokenizer
from transformer_lab.errors import require


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


class AttentionMapCallback(L.Callback):
    """Log the attention grid (rows = layers, columns = heads) of one fixed validation example to
    TensorBoard as the image `attention/val_example`, after every `every_n_epochs`-th validation.

    The example is the first row of the first validation batch, cut to its first `max_tokens` tokens so
    the figure stays readable and cheap (for a causal decoder the cut changes nothing before it). Does
    nothing without a TensorBoard logger or a datamodule, on other ranks than 0, and during the sanity check.
    """

    def __init__(self, every_n_epochs: int = 1, max_tokens: int = 32):
        require(
            isinstance(every_n_epochs, int) and every_n_epochs > 0,
            f"callbacks.attention_maps.every_n_epochs={every_n_epochs!r} must be a positive integer",
        )
        self.every_n_epochs = every_n_epochs
        self.max_tokens = max_tokens
        self._example: Tensor | None = None

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
        skip = (
            logger is None
            or trainer.datamodule is None
            or trainer.sanity_checking
            or not trainer.is_global_zero
        )
        if skip or trainer.current_epoch % self.every_n_epochs:
            return
        if self._example is None:
            x, _ = next(iter(trainer.datamodule.val_dataloader()))
            self._example = x[:1, : self.max_tokens]
        x = self._example.to(pl_module.device)
        with torch.no_grad():
            maps = explain.attention_maps(pl_module, x)
        vocab = pl_module.hparams.get("vocab") or [str(i) for i in range(pl_module.hparams.vocab_size)]
        tokens = [vocab[i] for i in x[0].tolist()]
        title = f"Validation example, epoch {trainer.current_epoch}"
        figure = plots.attention_grid(maps, tokens, title=title)
        logger.experiment.add_figure("attention/val_example", figure, global_step=trainer.global_step)


class TextSampleCallback(L.Callback):
    """Log a short sample from a fixed prompt to TensorBoard (Text tab, `samples/val`) after
    every `every_n_epochs`-th validation, so a run's writing can be read as it improves.

    Only for causal decoders with a vocabulary (language models); does nothing for encoders, without a
    TensorBoard logger, during the sanity check and on ranks other than 0. Seeded, so samples from
    different epochs differ only because the model changed.
    """

    def __init__(
        self,
        prompt: str = "\n",
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = 40,
        every_n_epochs: int = 1,
        seed: int = 0,
    ):
        require(
            isinstance(every_n_epochs, int) and every_n_epochs > 0,
            f"callbacks.text_samples.every_n_epochs={every_n_epochs!r} must be a positive integer",
        )
        require(len(prompt) > 0, "callbacks.text_samples.prompt is empty; use at least one character")
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_k = top_k
        self.every_n_epochs = every_n_epochs
        self.seed = seed

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
        vocab = pl_module.hparams.get("vocab")
        skip = logger is None or trainer.sanity_checking or not trainer.is_global_zero
        if (
            skip
            or not pl_module.hparams.get("causal")
            or vocab is None
            or trainer.current_epoch % self.every_n_epochs
        ):
            return
        tokenizer = CharTokenizer(vocab)
        idx = tokenizer.encode(self.prompt).unsqueeze(0).to(pl_module.device)
        generator = torch.Generator(device=pl_module.device).manual_seed(self.seed)
        out = pl_module.generate(idx, self.max_new_tokens, self.temperature, self.top_k, generator=generator)
        text = tokenizer.decode(out[0].cpu())
        # TensorBoard's text plugin renders Markdown: indent four spaces to keep line breaks as written.
        logger.experiment.add_text("samples/val", "    " + text.replace("\n", "\n    "), trainer.global_step)
