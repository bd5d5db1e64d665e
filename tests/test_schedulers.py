import math

import pytest
import torch

from transformer_lab import CosineWarmupScheduler


def _scheduler(warmup=10, max_iters=100, lr=1.0):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    return CosineWarmupScheduler(optimizer, warmup=warmup, max_iters=max_iters)


def test_factor_at_key_steps():
    s = _scheduler(warmup=10, max_iters=100)
    assert s.get_lr_factor(0) == 0.0
    assert s.get_lr_factor(5) == pytest.approx(0.5 * (1 + math.cos(math.pi * 5 / 100)) * 0.5)
    assert s.get_lr_factor(10) == pytest.approx(0.5 * (1 + math.cos(math.pi * 10 / 100)))
    assert s.get_lr_factor(50) == pytest.approx(0.5)
    assert s.get_lr_factor(100) == pytest.approx(0.0)


def test_factor_stays_at_floor_after_max_iters():
    s = _scheduler(warmup=10, max_iters=100)
    assert [s.get_lr_factor(t) for t in (100, 150, 200, 1000)] == pytest.approx([0.0] * 4)


def test_optimizer_lr_follows_factor_when_stepped():
    s = _scheduler(warmup=4, max_iters=20, lr=0.1)
    lrs = []
    for _ in range(25):
        lrs.append(s.optimizer.param_groups[0]["lr"])
        s.optimizer.step()
        s.step()
    assert lrs[:5] == pytest.approx([0.1 * s.get_lr_factor(t) for t in range(5)])
    assert max(lrs) == pytest.approx(lrs[4])  # peak at the end of warmup
    assert lrs[20:] == pytest.approx([0.0] * 5)


def test_state_dict_keeps_step_not_schedule_length():
    s = _scheduler(warmup=10, max_iters=100)
    for _ in range(30):
        s.optimizer.step()
        s.step()
    resumed = _scheduler(warmup=10, max_iters=400)
    resumed.load_state_dict(s.state_dict())
    assert resumed.last_epoch == 30 and resumed.max_iters == 400


def test_invalid_arguments():
    with pytest.raises(ValueError, match="max_iters"):
        _scheduler(max_iters=0)
    with pytest.raises(ValueError, match="warmup"):
        _scheduler(warmup=-1)
