"""Where a run's time goes: the end-to-end benchmark's measurements, taken inside the run itself.

`scripts/bench.py --phases end_to_end` runs `python train.py experiment=shakespeare_cpu` with
`+callbacks.fit_timer._target_=transformer_lab.training.callbacks.FitTimer` and
`trainer.profiler._target_=transformer_lab.training.callbacks.HookTimes`.
"""

import json
import time
from collections import defaultdict
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.profilers import Profiler
from torch import Tensor

from transformer_lab.files import write_text


class HookTimes(Profiler):
    """A Lightning profiler that only adds up the time of every action it is told about: Lightning wraps
    each callback hook it calls in `profile("[Callback]<name>.<hook>")`, so `seconds` ends up holding
    every callback hook's total time, without touching the callbacks."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = defaultdict(float)
        self._started: dict[str, float] = {}

    def start(self, action_name: str) -> None:
        self._started[action_name] = time.perf_counter()

    def stop(self, action_name: str) -> None:
        started = self._started.pop(action_name, None)
        if started is not None:
            self.seconds[action_name] += time.perf_counter() - started

    def callback_seconds(self, skip: str = "") -> dict[str, float]:
        """`{"<Callback>.<hook>": seconds}`, the largest first, without the callback named `skip`."""
        hooks = {
            name.removeprefix("[Callback]"): seconds
            for name, seconds in self.seconds.items()
            if name.startswith("[Callback]") and not name.startswith(f"[Callback]{skip}")
        }
        return dict(sorted(hooks.items(), key=lambda kv: -kv[1]))


class FitTimer(L.Callback):
    """Writes `path` (JSON; default `<run dir>/fit_timing.json`) at the end of `trainer.fit` with

    * `fit_seconds`: from `on_fit_start` to `on_fit_end`: every training step, the sanity check, every
      validation, checkpoint, figure, sample and head metric, the end-of-training ablation;
    * `train_step_seconds`: the sum over training batches of `on_train_batch_start` -> `on_train_batch_end`
      (forward, backward, clipping, optimizer, the callbacks' per-step hooks that run before this one:
      the loop a hand-written training loop would run; fetching the batch is outside);
    * `train_tokens`: the tokens of those batches (the first tensor of each batch);
    * `sanity_seconds`, `validation_seconds` (fit's validations, their callbacks included), `validations`;
    * `callback_seconds`: `{"<Callback>.<hook>": seconds}` for every other callback's hooks, when the run's
      profiler is `HookTimes` (empty otherwise);
    * `fit_start_time`, `fit_end_time`: `time.time()` at both ends, to relate the fit to the whole process
      (start-up before, the test after).
    """

    def __init__(self, path: str | None = None):
        self.path = path
        self.train_tokens = 0
        self.train_step_seconds = 0.0
        self.validation_seconds = 0.0
        self.sanity_seconds = 0.0
        self.validations = 0
        self._times: dict[str, float] = {}

    def _now(self, pl_module: L.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # measure the queued work, not its launch
        return time.perf_counter()

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._times["fit_start"] = self._now(pl_module)
        self._times["fit_start_time"] = time.time()

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
        if not trainer.is_global_zero:
            return
        profiler = trainer.profiler
        hooks = profiler.callback_seconds(skip=self.state_key) if isinstance(profiler, HookTimes) else {}
        timing = {
            "fit_seconds": fit_seconds,
            "train_step_seconds": self.train_step_seconds,
            "train_tokens": self.train_tokens,
            "train_steps": trainer.global_step,
            "sanity_seconds": self.sanity_seconds,
            "validation_seconds": self.validation_seconds,
            "validations": self.validations,
            "callback_seconds": hooks,
            "fit_start_time": self._times["fit_start_time"],
            "fit_end_time": time.time(),
        }
        path = Path(self.path or Path(trainer.default_root_dir) / "fit_timing.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(timing, indent=2) + "\n")
