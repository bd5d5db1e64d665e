"""Learning-rate schedules, stepped once per optimisation step (torch's LRScheduler: usable in any training
loop, Lightning's or your own; the figures draw them, `transformer_lab.figures.lr_schedule`)."""

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


class WarmupScheduler(LRScheduler):
    """What the schedules share: lr(t) = lr_0 * f(t), f the subclass's `get_lr_factor`, stepped once per
    optimisation step, after a linear warmup over `warmup` steps. Only the step count is checkpointed,
    not the settings (`settings`), which come from the config when a run resumes."""

    settings: tuple[str, ...] = ("warmup",)

    def __init__(self, optimizer: Optimizer, warmup: int):
        if warmup < 0:
            raise ValueError(f"warmup={warmup} must be >= 0")
        self.warmup = warmup
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        factor = self.get_lr_factor(self.last_epoch)
        return [base_lr * factor for base_lr in self.base_lrs]

    def get_lr_factor(self, epoch: int) -> float:
        """f(epoch); `epoch` counts optimisation steps (LambdaLR's naming)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        state = super().state_dict()
        for key in self.settings:
            state.pop(key, None)
        return state


class CosineWarmupScheduler(WarmupScheduler):
    """Linear warmup, then cosine decay to zero, stepped once per optimisation step.

    lr(t) = lr_0 * f(t),  f(t) = 0.5 * (1 + cos(pi * t / max_iters)) * min(1, t / warmup).

    Warmup keeps early Adam updates small while its second-moment estimates are still noisy, which
    post-norm Transformers need to train stably (Liu et al., 2020). Past `max_iters` the factor stays at
    its floor (0) instead of climbing back up the periodic cosine. Resuming with a longer
    `trainer.max_epochs` stretches the cosine over the new total instead of keeping the LR at zero.
    """

    settings = ("warmup", "max_iters")

    def __init__(self, optimizer: Optimizer, warmup: int, max_iters: int):
        if max_iters <= 0:
            raise ValueError(f"max_iters={max_iters} must be positive")
        self.max_iters = max_iters
        super().__init__(optimizer, warmup)

    def get_lr_factor(self, epoch: int) -> float:
        """f(epoch) as in the class docstring."""
        epoch = min(epoch, self.max_iters)
        factor = 0.5 * (1 + math.cos(math.pi * epoch / self.max_iters))
        if self.warmup > 0 and epoch <= self.warmup:
            factor *= epoch / self.warmup
        return factor


class ConstantWarmupScheduler(WarmupScheduler):
    """Linear warmup, then a constant learning rate, stepped once per optimisation step.

    lr(t) = lr_0 * min(1, t / warmup).

    Nanda et al. (2023) train their grokking models this way: after warmup the learning rate stays put,
    so the late generalisation is not an artefact of a schedule decaying to zero.
    """

    def get_lr_factor(self, epoch: int) -> float:
        """min(1, epoch / warmup)."""
        return min(1.0, epoch / self.warmup) if self.warmup > 0 else 1.0


SCHEDULES = ("cosine", "constant")  # model.schedule: CosineWarmupScheduler, ConstantWarmupScheduler


def warmup_scheduler(
    optimizer: Optimizer, schedule: str, warmup: int, max_iters: float | None
) -> LRScheduler:
    """The schedule `schedule` names: warmup over `warmup` steps, then constant, or cosine decay to 0 at
    `max_iters` (which must then be a finite, positive number of steps; a ValueError saying what to set)."""
    if schedule == "constant":
        return ConstantWarmupScheduler(optimizer, warmup=warmup)
    if schedule != "cosine":
        raise ValueError(f"model.schedule={schedule!r} is unknown; use {' or '.join(SCHEDULES)}")
    if max_iters is None or not math.isfinite(max_iters) or max_iters <= 0:
        raise ValueError("model.schedule=cosine needs its length: set model.max_iters or trainer.max_steps")
    return CosineWarmupScheduler(optimizer, warmup=warmup, max_iters=int(max_iters))
