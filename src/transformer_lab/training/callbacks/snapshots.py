"""Snapshots: the model kept at log-spaced steps of a run, so every analysis can be run over time.

    <run>/checkpoints/snapshots/step_00000000.ckpt, step_00000001.ckpt, ..., step_00004000.ckpt

Each file holds what a shipped pretrained file holds (`checkpoint_io.SHIPPED_KEYS`: the config, the `net.`
weights, the task's record; no optimizer state), written atomically, so `load_model`,
`transformer_lab.load` and every tool read it like any checkpoint, and
`python -m transformer_lab.interpret ckpt_path=<run> analysis=dynamics` reads them all.
"""

import logging
import math
import shutil
from pathlib import Path

import lightning as L

from transformer_lab.errors import require
from transformer_lab.limits import parse_size, size_text
from transformer_lab.training.checkpoint_io import save_or_fail, shippable

log = logging.getLogger(__name__)

SPACINGS = ("log", "linear")
SNAPSHOT_OVERHEAD = 20_000  # bytes a snapshot file holds besides its weights: settings, task record, zip
FILE_PATTERN = "step_{step:08d}.ckpt"


def snapshot_name(step: int) -> str:
    """`step_00001234.ckpt`: the file name of the snapshot at optimisation step `step`."""
    return FILE_PATTERN.format(step=step)


def snapshot_steps(total: int, count: int, spacing: str = "log") -> list[int]:
    """The `count` distinct optimisation steps in [0, total] a run of `total` steps keeps, always with the
    last (and, for two or more, the first: the initial weights, step 0).

    log:    0, then count - 1 steps s_i ~ total^((i - 1) / (count - 2)), i = 1 .. count - 1 (from 1 to
            total, evenly spaced in log(step)), each moved up to stay above the one before;
    linear: round(i * total / (count - 1)), i = 0 .. count - 1.
    Every step when count > total.
    """
    if count <= 0 or total < 0:
        return []
    if count > total:
        return list(range(total + 1))
    if count == 1:
        return [total]
    if spacing == "linear":
        return [round(i * total / (count - 1)) for i in range(count)]
    steps = [0]
    logs = count - 1  # the log-spaced steps after 0, from 1 to total
    for i in range(1, count):
        target = round(total ** ((i - 1) / (logs - 1))) if logs > 1 else total
        lowest, highest = steps[-1] + 1, total - (count - 1 - i)  # room for the steps still to come
        steps.append(min(max(target, lowest), highest))
    return steps


def powers_of_two(count: int) -> list[int]:
    """0, 1, 2, 4, 8, ...: `count` log-spaced steps for a run whose length is not known in advance (at most
    64: 2**62 steps is beyond any run)."""
    return [0, *(2**i for i in range(min(count, 64) - 1))] if count > 0 else []


class Snapshots(L.Callback):
    """Keep the model at `count` steps of the run, `spacing` apart (`log`: dense early, where most
    changes happen, sparse late; `linear`: evenly), in `<dirpath>/step_{global_step:08d}.ckpt`.

    The steps are `snapshot_steps(total, count, spacing)` over the run's optimisation steps (trainer's
    max_steps, or its epochs x batches); step 0 is the initial weights, saved before training. A run
    whose length cannot be known (an endless dataset without max_steps) keeps steps 0, 1, 2, 4, 8, ...
    and its last. The schedule is saved in last.ckpt: a resumed run keeps the steps it already passed and
    continues with the same schedule (over its new length, if that changed), so no step is written twice
    and none is skipped. A run that stops before its planned end (early stopping, max_time) also keeps its
    last step. `count=0` (or `~callbacks.snapshots`) keeps none. Only rank 0 writes.

    `max_disk` (bytes, or `4MB`; None: no limit) bounds what they take on disk: when `count` snapshots of
    the model would take more, the run keeps as many as fit, spread log-evenly over it as `count` would
    be, and says so; a sweep of large models then cannot fill a disk. The experiments that study training
    over time (induction heads, grokking) raise it.
    """

    def __init__(self, dirpath: str, count: int = 32, spacing: str = "log", max_disk: object = None):
        require(
            isinstance(count, int) and not isinstance(count, bool) and count >= 0,
            f"callbacks.snapshots.count={count!r} must be an integer >= 0 (0 keeps no snapshots; "
            "~callbacks.snapshots removes the callback)",
        )
        require(
            spacing in SPACINGS,
            f"callbacks.snapshots.spacing={spacing!r} is unknown; use {' or '.join(SPACINGS)}",
        )
        self.dirpath = Path(dirpath)
        self.count = count
        self.spacing = spacing
        self.max_disk = parse_size(max_disk, "callbacks.snapshots.max_disk")
        self.steps: list[int] = []  # the schedule of this run
        self.saved: set[int] = set()  # the steps this process wrote
        self._restored: list[int] | None = None  # the schedule of the run this one resumes
        self._open_ended = False
        self.kept = count  # how many the run keeps: count, or fewer within max_disk

    # ------------------------------------------------------------------------------ the schedule
    def state_dict(self) -> dict:
        return {"steps": list(self.steps), "count": self.count, "spacing": self.spacing}

    def load_state_dict(self, state_dict: dict) -> None:
        steps = state_dict.get("steps")
        if isinstance(steps, list) and all(isinstance(s, int) for s in steps):
            self._restored = steps

    def affordable(self, weights: int) -> int:
        """How many snapshots of `weights` bytes each (and a few kB of settings) fit `max_disk`: `count`,
        or fewer."""
        if self.max_disk is None:
            return self.count
        return min(self.count, self.max_disk // (weights + SNAPSHOT_OVERHEAD))

    def schedule(self, trainer: L.Trainer, count: int) -> list[int]:
        """The steps this run keeps (`count` of them): its own schedule, after the steps the resumed run
        already passed."""
        total = trainer.estimated_stepping_batches
        self._open_ended = not math.isfinite(total)
        planned = (
            powers_of_two(count) if self._open_ended else snapshot_steps(int(total), count, self.spacing)
        )
        if self._restored is None:
            return planned
        done = trainer.global_step
        return [s for s in self._restored if s <= done] + [s for s in planned if s > done]

    def due(self, step: int) -> bool:
        """Whether a snapshot is kept at optimisation step `step`."""
        if step in self.saved:
            return False
        if self._open_ended:
            return step in self.steps or (len(self.saved) < self.kept and step & (step - 1) == 0)
        return step in self.steps

    # --------------------------------------------------------------------------------- writing
    def _active(self, trainer: L.Trainer) -> bool:
        return self.kept > 0 and not trainer.fast_dev_run and not trainer.sanity_checking

    def save(self, trainer: L.Trainer) -> Path:
        """Write the snapshot of this step (rank 0 only): what a shipped file keeps of a checkpoint."""
        step = trainer.global_step
        path = self.dirpath / snapshot_name(step)
        if trainer.is_global_zero:
            save_or_fail(shippable(weights_checkpoint(trainer)), path, step)
        self.saved.add(step)
        return path

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.count == 0:
            return
        weights = sum(t.numel() * t.element_size() for t in pl_module.state_dict().values())
        self.kept = self.affordable(weights)
        shown = trainer.is_global_zero and not trainer.fast_dev_run and not trainer.sanity_checking
        if self.kept < self.count and shown:
            spread = ", spread log-evenly over the run" if self.kept else ""
            log.info(
                f"Snapshots: {self.kept or 'none'} of {self.count} fit callbacks.snapshots.max_disk="
                f"{size_text(self.max_disk)} ({size_text(weights)} each){spread}; "
                "raise max_disk to study training over time (analysis=dynamics)"
            )
        self.steps = self.schedule(trainer, self.kept)
        if self._active(trainer) and trainer.is_global_zero:
            self._check_disk(trainer, pl_module)
        if self._active(trainer) and trainer.global_step == 0 and self.due(0):
            self.save(trainer)  # the initial weights

    def _check_disk(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Refuse, before the first one, snapshots that would not fit on the disk (a count in the
        thousands on a large model), in one line that names the sizes."""
        to_come = [s for s in self.steps if s >= trainer.global_step and s not in self.saved]
        weights = sum(t.numel() * t.element_size() for t in pl_module.state_dict().values())
        need = len(to_come) * weights
        folder = next(p for p in (self.dirpath, *self.dirpath.parents) if p.exists())
        free = shutil.disk_usage(folder).free
        require(
            need < free,
            f"callbacks.snapshots.count={self.count} keeps {len(to_come)} snapshots of "
            f"{size_text(weights)}: {size_text(need)}, more than the {size_text(free)} free on the disk "
            f"of {folder}; lower callbacks.snapshots.count (or 0: none)",
        )

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if self._active(trainer) and self.due(trainer.global_step):
            self.save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if self._active(trainer) and not trainer.interrupted and step not in self.saved and step > 0:
            self.save(trainer)  # stopped before the planned end (early stopping, max_time, endless data)


def disk_use(dirpath: str | Path) -> tuple[int, int]:
    """(number of snapshot files, their total bytes) in a snapshots folder."""
    files = list(Path(dirpath).glob("step_*.ckpt"))
    return len(files), sum(f.stat().st_size for f in files)


def weights_checkpoint(trainer: L.Trainer) -> dict:
    """The weights-only part of the checkpoint Lightning would write now, through public API: the module's
    weights and hyperparameters, the task's hyperparameters, and what the module's `on_save_checkpoint`
    adds (the file format and the task's record)."""
    module, task = trainer.lightning_module, getattr(trainer, "datamodule", None)
    contents = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "hparams_name": "kwargs",
        "pytorch-lightning_version": L.__version__,
    }
    if task is not None and task.hparams:
        contents["datamodule_hyper_parameters"] = dict(task.hparams)
    module.on_save_checkpoint(contents)
    return contents
