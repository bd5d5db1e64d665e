"""Lightning callbacks."""

import json
import math
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from transformer_lab import explain, interventions, plots
from transformer_lab.data.task import TaskDataModule
from transformer_lab.errors import TrainingDiverged, require
from transformer_lab.nn import EncoderDecoder


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
        if state_dict.get("monitor") == self.monitor:
            self.best_model_score = state_dict.get("best_model_score")
            self.best_model_path = state_dict.get("best_model_path", "")


class LastCheckpoint(Checkpoint):
    """Keep `<dirpath>/last.ckpt` current, to resume from: every `every_n_train_steps` optimisation steps,
    after every validation, at the end of training, and on an exception or Ctrl-C, so a run that dies at
    90% loses at most `every_n_train_steps` steps. Not after the loss diverged: the last good state stays.

    A `Checkpoint` subclass, so Lightning runs it after the other callbacks (and after BestCheckpoint,
    listed before it, whose state it then saves up to date). The save at the end of training records
    that training finished and after how many epochs (`finished_epochs`), so resuming a finished run
    under the same limits is refused in one line instead of writing a run that trains nothing.
    """

    def __init__(self, dirpath: str, every_n_train_steps: int | None = 200):
        require(
            every_n_train_steps is None or (isinstance(every_n_train_steps, int) and every_n_train_steps > 0),
            f"callbacks.last_checkpoint.every_n_train_steps={every_n_train_steps!r} must be a positive "
            "integer (or null: only after validation)",
        )
        self.path = f"{dirpath}/last.ckpt"
        self.every_n_train_steps = every_n_train_steps
        self.finished_epochs: int | None = None
        self._saved_step: int | None = None

    def state_dict(self) -> dict:
        return {"finished_epochs": self.finished_epochs}

    def load_state_dict(self, state_dict: dict) -> None:
        pass  # a resumed run has not finished, whatever the run it resumes had done

    def _save(self, trainer: L.Trainer, again: bool = False) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        if self._saved_step == trainer.global_step and not again:
            return
        trainer.save_checkpoint(self.path, weights_only=False)
        self._saved_step = trainer.global_step

    def due(self, trainer: L.Trainer) -> bool:
        """Whether this training step is one that saves `last.ckpt`."""
        return bool(self.every_n_train_steps) and trainer.global_step % self.every_n_train_steps == 0

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if self.due(trainer):
            self._save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.finished_epochs = trainer.current_epoch
        self._save(trainer, again=True)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, TrainingDiverged) or trainer.state.fn != "fit" or trainer.global_step == 0:
            return
        if not all(torch.isfinite(p).all() for p in pl_module.parameters()):
            return  # diverged since FiniteLossCheck last looked: keep the last good state
        self._save(trainer)
        if trainer.is_global_zero:
            print(f"Saved {self.path} at step {trainer.global_step}; resume with ckpt_path={self.path}")


class FiniteLossCheck(L.Callback):
    """Stop training with a clear message when the training loss becomes NaN or infinite.

    Reading a GPU tensor on the host waits for the GPU to finish all queued work (a host-device sync), so
    the loss is not read every step. Each step adds it to a running sum on its device (NaN and inf survive
    a sum, so the sum is finite exactly when every loss in it was). The sum is read only where the host
    reads values anyway or must know before writing: on the steps Lightning logs (every
    `trainer.log_every_n_steps`), on the steps `LastCheckpoint` saves, before validation and at the end
    of training. These hooks run before the checkpoint callbacks', so diverged weights are never saved:
    `last.ckpt` keeps the last good state.
    """

    def __init__(self) -> None:
        self._loss_sum: Tensor | None = None  # training losses since the last read, summed on the device
        self._checked_step = 0  # the global step at which the sum was last read (and found finite)
        self._last_checkpoints: list[LastCheckpoint] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._loss_sum = torch.zeros((), device=pl_module.device)
        self._checked_step = trainer.global_step
        self._last_checkpoints = [c for c in trainer.checkpoint_callbacks if isinstance(c, LastCheckpoint)]

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, *args: object
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._loss_sum.add_(loss.detach())  # queued on the device: no host sync
        every = trainer.log_every_n_steps  # the steps Lightning writes metrics on (host reads anyway)
        logs = every > 0 and trainer.global_step % every == 0
        if logs or trainer.should_stop or any(c.due(trainer) for c in self._last_checkpoints):
            self._stop_if_diverged(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._stop_if_diverged(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_if_diverged(trainer)

    def _stop_if_diverged(self, trainer: L.Trainer) -> None:
        if self._loss_sum is None:
            return
        total = self._loss_sum.item()  # the one host read
        step = trainer.global_step
        if math.isfinite(total):
            self._loss_sum.zero_()
            self._checked_step = step
            return
        first = self._checked_step + 1
        when = f"at step {step}" if first == step else f"between step {first} and step {step}"
        last = self._last_checkpoints[0].path if self._last_checkpoints else "none"
        raise TrainingDiverged(
            f"training stopped: the loss became {total} {when}; "
            f"last good checkpoint: {last}; lower model.lr or set trainer.gradient_clip_val"
        )


def _tensorboard_logger_due(trainer: L.Trainer, every_n_epochs: int) -> TensorBoardLogger | None:
    """The run's TensorBoard logger if a figure or sample is due after this validation: on rank 0, not in
    the sanity check, every `every_n_epochs`-th epoch. None otherwise (or when there is no such logger)."""
    if trainer.sanity_checking or not trainer.is_global_zero or trainer.current_epoch % every_n_epochs:
        return None
    return next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)


class AttentionMapCallback(L.Callback):
    """Log the attention grid (rows = layers, columns = heads) of one fixed validation example to
    TensorBoard as the image `attention/val_example`, after every `every_n_epochs`-th validation; for an
    encoder-decoder three grids, `attention/val_example/encoder`, `.../decoder` and `.../cross` (target
    rows, source columns). Ticks read `position token`, each layer has its own colour scale and bar; the
    grid is drawn straight into an array (`plots.attention_grid_image`, milliseconds; a matplotlib
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
        logger = _tensorboard_logger_due(trainer, self.every_n_epochs)
        task = trainer.datamodule
        if logger is None or not isinstance(task, TaskDataModule):
            return
        if self._example is None:
            inputs, _ = task.example(0, split="val")
            if task.pad_id is not None:
                inputs = tuple(x[:, x[0] != task.pad_id] for x in inputs)
            self._example = tuple(x[:, : self.max_tokens] for x in inputs)
        inputs = tuple(x.to(pl_module.device) for x in self._example)
        tokens = [task.tokenizer.tokens(x[0]) for x in inputs]
        title = f"Validation example, epoch {trainer.current_epoch}"
        with torch.inference_mode():
            if isinstance(pl_module.net, EncoderDecoder):
                maps = explain.encoder_decoder_maps(pl_module.net, *inputs)
                source, target = tokens
                images = {
                    "attention/val_example/encoder": plots.attention_grid_image(
                        maps["encoder"], source, title=f"Encoder self-attention. {title}"
                    ),
                    "attention/val_example/decoder": plots.attention_grid_image(
                        maps["decoder"], target, title=f"Decoder self-attention. {title}"
                    ),
                    "attention/val_example/cross": plots.attention_grid_image(
                        maps["cross"], source, title=f"Cross-attention. {title}", row_tokens=target
                    ),
                }
            else:
                maps = explain.attention_maps(pl_module.net, *inputs)
                images = {"attention/val_example": plots.attention_grid_image(maps, tokens[0], title=title)}
        for tag, image in images.items():
            logger.experiment.add_image(tag, image, global_step=trainer.global_step, dataformats="HWC")


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
        logger = _tensorboard_logger_due(trainer, self.every_n_epochs)
        task, net = trainer.datamodule, pl_module.net
        if logger is None or not isinstance(task, TaskDataModule) or not hasattr(net, "generate"):
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
        logger = _tensorboard_logger_due(trainer, self.every_n_epochs)
        task = trainer.datamodule
        if logger is None or not isinstance(task, TaskDataModule):
            return
        inputs, _, expected = self._examples(task, pl_module.device)
        net = pl_module.net
        with torch.no_grad():
            _, patterns = net.run_with_cache(*inputs, names_filter=lambda name: name.endswith("hook_pattern"))
        values = {}
        for name, pattern in patterns.items():
            layer = name.removesuffix(".hook_pattern")
            queries = inputs[1] if name.startswith("decoder.") else inputs[0]
            query_mask = None if task.pad_id is None else queries != task.pad_id
            scalars = {"entropy": explain.attention_entropy(pattern, query_mask)}
            reads_input = ".cross_attn" in name if isinstance(net, EncoderDecoder) else True
            if expected is not None and reads_input:
                scalars["alignment"] = explain.alignment_mass(pattern, expected)
            for kind, per_head in scalars.items():
                for head, value in enumerate(per_head):
                    values[f"heads/{kind}/{interventions.head_label(layer, head)}"] = value
        for tag, value in zip(
            values, torch.stack(list(values.values())).tolist(), strict=True
        ):  # one host read
            logger.experiment.add_scalar(tag, value, global_step=trainer.global_step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
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
            "heads/ablation", plots.head_ablation_image(result), trainer.global_step, dataformats="HWC"
        )


class FitTimer(L.Callback):
    """Where a run's time goes (`scripts/bench.py --phases end_to_end` passes it as
    `+callbacks.fit_timer._target_=transformer_lab.callbacks.FitTimer`): writes `path` (JSON; default
    `<run dir>/fit_timing.json`) at the end of `trainer.fit` with

    * `fit_seconds`: from `on_fit_start` to `on_fit_end`: every training step, the sanity check, every
      validation, checkpoint, figure, sample and head metric, the end-of-training ablation;
    * `train_step_seconds`: the sum over training batches of `on_train_batch_start` -> `on_train_batch_end`
      (forward, backward, clipping, optimizer, the callbacks' per-step hooks that run before this one:
      the loop a hand-written training loop would run; fetching the batch is outside);
    * `train_tokens`: the tokens of those batches (the first tensor of each batch);
    * `sanity_seconds`, `validation_seconds` (fit's validations, their callbacks included), `validations`;
    * `callback_seconds`: `{"<Callback>.<hook>": seconds}` for every other callback's hooks that took any
      time (each hook is wrapped in a timer for the duration of the fit);
    * `fit_start_time`, `fit_end_time`: `time.time()` at both ends, to relate the fit to the whole process
      (start-up before, the test after).
    """

    HOOKS = (
        "on_train_start",
        "on_train_batch_start",
        "on_train_batch_end",
        "on_train_epoch_end",
        "on_validation_start",
        "on_validation_batch_end",
        "on_validation_epoch_end",
        "on_validation_end",
        "on_train_end",
        "on_save_checkpoint",
        "on_exception",
    )

    def __init__(self, path: str | None = None):
        self.path = path
        self.train_tokens = 0
        self.train_step_seconds = 0.0
        self.validation_seconds = 0.0
        self.sanity_seconds = 0.0
        self.validations = 0
        self.callback_seconds: dict[str, float] = {}
        self._times: dict[str, float] = {}
        self._unwrap: list[tuple[L.Callback, str]] = []

    def _now(self, pl_module: L.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # measure the queued work, not its launch
        return time.perf_counter()

    def _wrap(self, callback: L.Callback, hook: str) -> None:
        method = getattr(callback, hook)
        key = f"{type(callback).__name__}.{hook}"

        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.callback_seconds[key] = self.callback_seconds.get(key, 0.0) + time.perf_counter() - start

        setattr(callback, hook, timed)
        self._unwrap.append((callback, hook))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._times["fit_start"] = self._now(pl_module)
        self._times["fit_start_time"] = time.time()
        for callback in trainer.callbacks:
            if callback is self:
                continue
            for hook in self.HOOKS:  # only hooks the callback overrides
                if getattr(type(callback), hook, None) is not getattr(L.Callback, hook):
                    self._wrap(callback, hook)

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._times["sanity"] = self._now(pl_module)

    def on_sanity_check_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.sanity_seconds += self._now(pl_module) - self._times["sanity"]

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object, batch_idx: int
    ) -> None:
        first = batch[0] if isinstance(batch, list | tuple) else batch
        self.train_tokens += first.numel() if isinstance(first, Tensor) else 0
        self._times["step"] = self._now(pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: object) -> None:
        self.train_step_seconds += self._now(pl_module) - self._times["step"]

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._times["validation"] = self._now(pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self.validation_seconds += self._now(pl_module) - self._times["validation"]
            self.validations += 1

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fit_seconds = self._now(pl_module) - self._times["fit_start"]
        for callback, hook in self._unwrap:
            delattr(callback, hook)  # the class's method again
        self._unwrap = []
        if not trainer.is_global_zero:
            return
        timing = {
            "fit_seconds": fit_seconds,
            "train_step_seconds": self.train_step_seconds,
            "train_tokens": self.train_tokens,
            "train_steps": trainer.global_step,
            "sanity_seconds": self.sanity_seconds,
            "validation_seconds": self.validation_seconds,
            "validations": self.validations,
            "callback_seconds": dict(sorted(self.callback_seconds.items(), key=lambda kv: -kv[1])),
            "fit_start_time": self._times["fit_start_time"],
            "fit_end_time": time.time(),
        }
        path = Path(self.path or Path(trainer.default_root_dir) / "fit_timing.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(timing, indent=2) + "\n")
