"""Phase 9 (`threads`).

Threads: where a second thread starts to pay (the median step time of decoders
from 10 K to 3 M parameters with one thread and with one per core: the speed-up against the work of a
step, parameters x tokens), and `python train.py` on a busy machine (one busy process per core in the
background) with the default `threads=auto` against `threads=1` (target: at most 1.5x), and with a
thread per core, torch's own default, for what auto avoids.
(--quick: the two smallest sizes, and experiment=reverse_tiny.)
"""

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from bench_phases import Context, register
from bench_phases.common import QUICK, ROOT, progress
from transformer_lab.nn import build_model

ROWS = [
    (
        "busy machine (a busy process per core): python train.py, threads=auto / threads=1",
        "{:.2f} ({:.0f} s / {:.0f} s)",
        ["busy_auto_over_one_thread", "busy_auto_seconds", "busy_one_thread_seconds"],
    ),
    (
        "busy machine: python train.py, a thread per core (torch's own default) / threads=1",
        "{:.2f} ({:.0f} s)",
        ["busy_every_core_over_one_thread", "busy_every_core_seconds"],
    ),
]

TARGETS = {
    "busy_auto_over_one_thread": ("<", 1.5),
}


THREAD_SIZES = (  # (model_dim, layers, tokens per sequence, sequences per batch): small to shakespeare_cpu
    (32, 1, 16, 128),
    (64, 2, 32, 64),
    (128, 4, 64, 12),
    (128, 4, 64, 64),
    (256, 4, 128, 32),
)


@contextmanager
def busy_cores() -> Iterator[int]:
    """One busy process per core in the background (a laptop with other programs, a shared machine)."""
    count = os.cpu_count() or 1
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0)  # let the load show in /proc/stat
        yield count
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def step_seconds(config: dict, tokens: int, batch: int, threads: int, steps: int) -> float:
    """Median seconds of a training step (forward, backward, AdamW) of a decoder of these sizes."""
    torch.set_num_threads(threads)
    model = build_model(dict(arch="decoder", vocab_size=65, max_len=tokens, **config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(65, (batch, tokens))
    times = []
    for _ in range(steps + 2):
        start = time.perf_counter()
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def threads_table(results: dict) -> str:
    """Where a second thread pays: each decoder's training step with one thread and with one per core."""
    many = next(key for key in results["thread_sizes"][0] if key.endswith("_threads_s"))
    lines = [
        f"| decoder (model_dim, layers, tokens, batch) | parameters | step, 1 thread | step, {many[:-10]} "
        "threads | speed-up |",
        "|---|---|---|---|---|",
    ]
    for size in results["thread_sizes"]:
        lines.append(
            f"| {size['decoder']} | {size['parameters']:,} | {size['one_thread_s'] * 1e3:.1f} ms | "
            f"{size[many] * 1e3:.1f} ms | {size['speedup']:.2f}x |"
        )
    return "\n".join(lines)


@register("threads", rows=ROWS, targets=TARGETS, tables=(threads_table,))
def bench_threads(context: Context) -> dict:
    """Phase 9: where a second thread starts to pay (a quiet machine: the step time of a range of model
    sizes with 1 and with every core's thread), and a run on a busy machine (one busy process per core)
    with threads=auto, the default, against threads=1."""
    mode, workdir = context.mode, context.workdir
    results: dict = {"thread_sizes": []}
    cores = os.cpu_count() or 1
    before = torch.get_num_threads()
    for dim, layers, tokens, batch in THREAD_SIZES[: 2 if mode is QUICK else None]:
        config = dict(model_dim=dim, num_layers=layers, num_heads=4, norm_first=True, output_mlp=False)
        params = sum(
            p.numel()
            for p in build_model(dict(arch="decoder", vocab_size=65, max_len=tokens, **config)).parameters()
        )
        one = step_seconds(config, tokens, batch, 1, mode.rounds * 5)
        many = step_seconds(config, tokens, batch, cores, mode.rounds * 5)
        results["thread_sizes"].append(
            {
                "decoder": f"d={dim} L={layers} T={tokens} B={batch}",
                "parameters": params,
                "work": params * tokens * batch,
                "one_thread_s": one,
                f"{cores}_threads_s": many,
                "speedup": one / many,
            }
        )
        progress(f"threads: d={dim} L={layers} T={tokens} B={batch}: x{one / many:.2f} with {cores} threads")
    torch.set_num_threads(before)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    seconds = {}
    with busy_cores():
        results["busy_load_average"] = os.getloadavg()[0]
        for name, extra in (("auto", []), ("one", ["threads=1"]), ("every_core", [f"threads={cores}"])):
            command = [
                sys.executable,
                "train.py",
                *mode.threads_overrides,
                *extra,
                f"paths.log_dir={workdir / name}",
            ]
            progress(f"threads: busy machine, python {' '.join(command[1:])}")
            start = time.perf_counter()
            run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
            seconds[name] = time.perf_counter() - start
            if run.returncode != 0:
                sys.exit(f"error: the busy-machine run failed: {run.stderr.strip()[-2000:]}")
    results.update(
        busy_auto_seconds=seconds["auto"],
        busy_one_thread_seconds=seconds["one"],
        busy_auto_over_one_thread=seconds["auto"] / seconds["one"],
        busy_every_core_seconds=seconds["every_core"],
        busy_every_core_over_one_thread=seconds["every_core"] / seconds["one"],
    )
    return results
