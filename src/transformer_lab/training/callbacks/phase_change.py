"""The step of a phase change: where a validation metric changed fastest, printed at the end of the run."""

import logging

import lightning as L

from transformer_lab.analysis.dynamics import DIRECTIONS, steepest_change
from transformer_lab.errors import require

log = logging.getLogger(__name__)


class PhaseChange(L.Callback):
    """Record `monitor` (a validation metric, e.g. `val/loss`) after every validation, and at the end of
    training print where it rose or fell (`direction`) fastest per unit of log(step): the phase change of
    a run whose metric sits on a plateau and then moves suddenly (induction heads forming, grokking).
    The resolution is the validation interval (`trainer.val_check_interval`)."""

    def __init__(self, monitor: str = "val/loss", direction: str = "fall"):
        require(
            direction in DIRECTIONS,
            f"callbacks.phase_change.direction={direction!r} is unknown; use {' or '.join(DIRECTIONS)}",
        )
        self.monitor = monitor
        self.direction = direction
        self.history: list[tuple[int, float]] = []

    def state_dict(self) -> dict:
        return {"monitor": self.monitor, "history": [list(pair) for pair in self.history]}

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict.get("monitor") == self.monitor:
            self.history = [(int(step), float(value)) for step, value in state_dict.get("history", [])]

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != "fit" or trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is not None:
            self.history = [(s, v) for s, v in self.history if s < trainer.global_step]
            self.history.append((trainer.global_step, float(value)))

    def describe(self) -> str | None:
        """`val/loss fell fastest between steps 3000 and 3500 (3.41 -> 1.22): phase change at step
        3500`, or None before two validations."""
        if len(self.history) < 2:
            return None
        steps, values = zip(*self.history, strict=True)
        i = steepest_change(list(steps), list(values), self.direction)
        if i is None:
            return None
        verb = "fell" if self.direction == "fall" else "rose"
        return (
            f"{self.monitor} {verb} fastest between steps {steps[i - 1]} and {steps[i]} "
            f"({values[i - 1]:.3f} -> {values[i]:.3f}): phase change at step {steps[i]}"
        )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        text = self.describe()
        if text is not None and trainer.is_global_zero:
            log.info(f"Phase change: {text}")
