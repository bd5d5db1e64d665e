"""What the benchmark's phases share: how much to measure (Mode: FULL, or QUICK for --quick), the progress
line, the middle half of the rounds, timing that waits for the GPU, and a command's own peak memory."""

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]  # the checkout: train.py runs from here

QUIET_BAR = "callbacks.progress_bar.refresh_rate=0"


@dataclass(frozen=True)
class Mode:
    """How much to measure: training rounds of `chunk` steps per contender, generation length, reverse run."""

    warmup_rounds: int
    rounds: int
    chunk: int
    new_tokens: int
    gen_rounds: int
    matmul_size: int
    reverse_overrides: tuple[str, ...]
    sort_overrides: tuple[str, ...]
    end_to_end_overrides: tuple[str, ...] = ()
    explorer_shape: tuple[int, int, int] = (8, 8, 256)  # layers, heads, tokens
    explorer_long: int = 512  # tokens of the long live page (6 layers x 8 heads, model_dim 128)
    explorer_sweep: int = 20  # test inputs per ready-made model in the parity sweep
    explorer_models: int | None = None  # how many ready-made models get a live page (None: every one)
    threads_overrides: tuple[str, ...] = (QUIET_BAR,)  # the busy-machine run: `python train.py` itself


QUIET = QUIET_BAR
FULL = Mode(2, 20, 25, 500, 5, 1024, (), ())
QUICK = Mode(
    1,
    2,
    5,
    60,
    1,
    512,
    ("experiment=reverse_tiny", QUIET),
    ("data.train_size=512", "data.val_size=64", "data.test_size=64", "trainer.max_epochs=1", QUIET),
    (
        "trainer.max_steps=20",
        "data.batches_per_epoch=10",
        "data.val_batches=2",
        "callbacks.text_samples.max_new_tokens=20",
        QUIET,
    ),
    explorer_shape=(2, 2, 32),
    explorer_long=64,
    explorer_sweep=2,
    explorer_models=2,
    threads_overrides=("experiment=reverse_tiny", QUIET),
)


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def quartiles(values: list[float]) -> list[float]:
    """[first, third] quartile: the middle half of the rounds, to judge a median against a target."""
    if len(values) < 2:
        return [values[0], values[0]]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return [q1, q3]


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a clock read after it measures the work itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, work: Callable[[], object]) -> float:
    """Seconds `work()` takes, GPU work included."""
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start


def peak_rss_of(command: list[str], log: Path) -> tuple[int, float]:
    """Run `command` from the checkout (output to `log`) and return its exit status and its own peak RSS in
    MB (wait4's rusage: this child's alone, not the most of every child so far as RUSAGE_CHILDREN would
    say)."""
    with open(log, "w") as out:
        child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: Popen must not wait again
    return child.returncode, usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
