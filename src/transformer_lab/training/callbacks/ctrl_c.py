"""Ctrl-C stops a run between two batches, never inside one."""

import signal
import sys
import threading

import lightning as L


class StopOnCtrlC(L.Callback):
    """Turn the first Ctrl-C into a request that the run honours at the end of the current batch.

    Python raises `KeyboardInterrupt` wherever the main thread happens to be: inside `optimizer.step`
    (last.ckpt would then hold half-stepped weights) or inside a library's lock (TensorBoard's writer
    queue can lose the wake-up of its thread, and closing the logger then waits for the writer's
    120 s flush interval). So the first Ctrl-C only sets a flag and says so; the run raises
    `KeyboardInterrupt` itself at the end of the training, validation or test batch, where Lightning's
    handling (the callbacks' `on_exception`: last.ckpt; loggers closed) sees a consistent state;
    `training.run` then ends the run with one line saying how to resume, exit status 130. A second
    Ctrl-C stops at once, as Python would. Always on (`build_trainer`): it is how a run answers Ctrl-C,
    not a feature to configure. A process that ignores SIGINT (a background job) or has its own handler
    keeps it.
    """

    def __init__(self) -> None:
        self.requested = False
        self.stopped = False  # whether Ctrl-C stopped the run (training.run turns that into one line)
        self._installed = False
        self._says = True  # DDP: rank zero says it, once

    def _ask(self, signum: int, frame: object) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the second Ctrl-C: at once
        if self._says:
            print(
                "\nCtrl-C: stopping at the end of this batch (Ctrl-C again to stop at once)", file=sys.stderr
            )

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.requested = False
        self._says = trainer.is_global_zero
        in_main_thread = threading.current_thread() is threading.main_thread()
        if in_main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._ask)
            self._installed = True

    def _stop_if_asked(self, *args: object) -> None:
        if self.requested:
            self.requested = False
            raise KeyboardInterrupt

    on_train_batch_end = on_validation_batch_end = on_test_batch_end = on_train_end = _stop_if_asked

    def _restore(self) -> None:
        if self._installed and signal.getsignal(signal.SIGINT) == self._ask:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        self._installed = False

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.stopped = isinstance(exception, KeyboardInterrupt)
        self._restore()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore()
