"""What the model writes, logged to TensorBoard's Text tab after validations."""

import lightning as L
import torch

from transformer_lab.data.task import TaskDataModule
from transformer_lab.errors import require
from transformer_lab.training.callbacks.tensorboard import logger_when_due
from transformer_lab.training.datamodule import task_of


class TextSampleCallback(L.Callback):
    """Log what the model writes to TensorBoard (Text tab, `samples/val`) after every
    `every_n_epochs`-th validation, so a run's output can be read as it improves.

    A language model continues a fixed `prompt` (seeded, so samples from different epochs differ only
    because the model changed). On a sequence-to-sequence task (a task with `generate`) the first
    `num_examples` validation examples are shown as source -> generated output, with the target. Does
    nothing for models that do not generate, without a TensorBoard logger, during the sanity check and
    on ranks other than 0.
    """

    def __init__(
        self,
        prompt: str = "\n",
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = 40,
        every_n_epochs: int = 1,
        seed: int = 0,
        num_examples: int = 5,
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
        self.num_examples = num_examples

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = logger_when_due(trainer, self.every_n_epochs)
        task, net = task_of(trainer), pl_module.net
        if logger is None or task is None or not net.generates:
            return
        if hasattr(task, "generate"):
            text = self._translations(task, net, pl_module.device)
        else:
            text = self._continuation(task, net, pl_module.device)
        # TensorBoard's text plugin renders Markdown: indent four spaces to keep line breaks as written.
        logger.experiment.add_text("samples/val", "    " + text.replace("\n", "\n    "), trainer.global_step)

    def _continuation(self, task: TaskDataModule, net: torch.nn.Module, device: torch.device) -> str:
        tokenizer = task.tokenizer
        prompt = tokenizer.encode(self.prompt).unsqueeze(0).to(device)
        generator = torch.Generator(device=device).manual_seed(self.seed)
        out = net.generate(prompt, self.max_new_tokens, self.temperature, self.top_k, generator=generator)
        return tokenizer.decode(out[0].cpu())

    def _translations(self, task: TaskDataModule, net: torch.nn.Module, device: torch.device) -> str:
        batch = next(iter(task.val_dataloader()))
        batch = tuple(t[: self.num_examples].to(device) for t in batch)
        sources, generated, expected = task.generate(net, batch)
        tokenizer, hidden = task.tokenizer, {task.pad_id}
        lines = []
        for source, output, target in zip(
            sources.tolist(), generated.tolist(), expected.tolist(), strict=True
        ):
            text = [tokenizer.decode(ids, skip=hidden) for ids in (source, output, target)]
            lines.append(
                f"{text[0]} -> {text[1]}   ({'right' if output == target else 'target: ' + text[2]})"
            )
        return "\n".join(lines)
