"""Phase 4 (`reverse`).

The reverse task: wall time of `python train.py` (the default config: train, then test) and its test/acc
(--quick: experiment=reverse_tiny, which does not reach 1.0).
"""

import time

from bench_phases import Context, register
from bench_phases.common import progress
from transformer_lab.training.compose import run_config
from transformer_lab.training.run import train

ROWS = [
    ("reverse: python train.py, wall time", "{:.1f} s", ["reverse_seconds_to_100"]),
    ("reverse: test/acc", "{:.4f}", ["reverse_test_acc"]),
]

TARGETS = {
    "reverse_test_acc": (">=", 1.0),
}


@register("reverse", rows=ROWS, targets=TARGETS)
def bench_reverse(context: Context) -> dict:
    """Phase 4: `python train.py` (the reverse task, default config): fit, then test the best checkpoint."""
    overrides = list(context.mode.reverse_overrides)
    progress(f"reverse: python train.py {' '.join(overrides)}".rstrip())
    cfg = run_config(context.workdir / "reverse", overrides)
    start = time.perf_counter()
    metrics = train(cfg)
    return {"reverse_seconds_to_100": time.perf_counter() - start, "reverse_test_acc": metrics["test/acc"]}
