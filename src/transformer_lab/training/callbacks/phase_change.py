"""The step of a phase change: where a validation metric changed fastest, printed at the end of the run."""

import logging

import lightning as L

from transformer_lab.analysis import events
from transformer_lab.analysis.events import DIRECTIONS, Change, detect
from transformer_lab.errors import require

log = logging.getLogger(__name__)


class PhaseChange(L.Callback):
    """Record `monitor` (a validation metric, e.g. `val/loss`) and the training loss after every
    validation, and at the end of training say whether the metric had a phase change in `direction`
    (`rise` or `fall`), by the rule of `analysis.events` (large on its range and on its scale, out of
    its chance region, beyond its noise, sudden and kept: induction heads forming, grokking), and where;
    or that it had none, with its largest move. Its scale comes from its name and the model's output
    classes (`events.metric_scale`: a loss in nats of log V, an accuracy 1 with chance 1 / V); the
    validations at which the training loss spiked are left out (`events.spikes`). The resolution is the
    validation interval (`trainer.val_check_interval`)."""

    def __init__(self, monitor: str = "val/loss", direction: str = "fall"):
        require(
            direction in DIRECTIONS,
            f"callbacks.phase_change.direction={direction!r} is unknown; use {' or '.join(DIRECTIONS)}",
        )
        self.monitor = monitor
        self.direction = direction
        self.history: list[tuple[int, float]] = []
        self.training_loss: dict[int, float] = {}  # step -> the training loss last logged by then
        self.outputs = 0  # the model's output classes (0: not known, the metric's own size is its scale)

    def state_dict(self) -> dict:
        return {
            "monitor": self.monitor,
            "history": [list(pair) for pair in self.history],
            "training_loss": [[step, value] for step, value in self.training_loss.items()],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict.get("monitor") == self.monitor:
            self.history = [(int(step), float(value)) for step, value in state_dict.get("history", [])]
            self.training_loss = {int(s): float(v) for s, v in state_dict.get("training_loss", [])}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = getattr(getattr(pl_module, "net", None), "config", None)
        self.outputs = getattr(config, "output_classes", 0) or 0

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != "fit" or trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is not None:
            self.history = [(s, v) for s, v in self.history if s < trainer.global_step]
            self.history.append((trainer.global_step, float(value)))
            loss = trainer.callback_metrics.get("train/loss")
            if loss is not None:
                self.training_loss[trainer.global_step] = float(loss)

    def scale(self) -> events.Scale | None:
        """The monitored metric's scale (None: unknown, its own largest value is used)."""
        return events.metric_scale(self.monitor, self.outputs) if self.outputs else None

    def spikes(self) -> list[int]:
        """The validations at which the training loss had spiked (`events.spikes`)."""
        steps = [s for s, _ in self.history if s in self.training_loss]
        if len(steps) < 3 or not self.outputs:
            return []
        losses = [self.training_loss[s] for s in steps]
        return events.spikes(steps, losses, events.nats(self.outputs).size)

    def change(self) -> Change | None:
        """The largest move of the monitored metric and whether it is a phase change (`events.detect`);
        None before three validations."""
        if len(self.history) < 3:
            return None
        steps, values = zip(*self.history, strict=True)
        return detect(self.monitor, list(steps), list(values), self.direction, self.scale(), self.spikes())

    def describe(self) -> str | None:
        """`Phase change: val/loss fell 3.41 -> 1.22 between steps 1000 and 1500 (...); half way at step
        1180`, or `No phase change: ...` with the largest move and the test it failed; None before three
        validations."""
        change = self.change()
        if change is None:
            return None
        text = change.describe()
        return f"Phase change: {text}" if change.event else text[0].upper() + text[1:]

    def record(self) -> dict | None:
        """For the run's metrics.json: {"curve", "step" (half way; None without a phase change), "what"}."""
        change = self.change()
        if change is None:
            return None
        return {"curve": self.monitor, "step": change.step if change.event else None, "what": self.describe()}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        text = self.describe()
        if text is not None and trainer.is_global_zero:
            log.info(text)
