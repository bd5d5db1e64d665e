"""Phase 7 (`end_to_end`).

A whole run: `python train.py experiment=shakespeare_cpu` in a subprocess, as a
user runs it (its callbacks, validations, checkpoints, figures, samples, head metrics, the test), with
one more callback (`transformer_lab.training.callbacks.FitTimer`, with the `HookTimes` profiler)
measuring inside that run. The figure is the
whole fit's training tokens/s (from the start to the end of `trainer.fit`: training steps, the sanity
check, every validation with its callbacks, checkpoints, the end-of-training head ablation) over the
training steps' own tokens/s (`on_train_batch_start` -> `on_train_batch_end` summed: the bare loop's
time in the same run); start-up before the fit and the test after it are reported separately. Also
each callback hook's total time in that run. (--quick: 20 steps, validating every 10.)
"""

import json
import os
import subprocess
import sys
import time

from bench_phases import Context, register
from bench_phases.common import ROOT, progress

END_TO_END_COMMAND = ("train.py", "experiment=shakespeare_cpu")


ROWS = [
    (
        "whole run, python train.py experiment=shakespeare_cpu: fit / training steps, tokens/s",
        "{:,.0f} / {:,.0f} tokens/s",
        ["end_to_end_fit_tokens_per_s", "end_to_end_step_tokens_per_s"],
    ),
    ("whole run: fit tokens/s over training-step tokens/s", "{:.3f}", ["end_to_end_over_loop"]),
    (
        "whole run: snapshots' share of the fit (seconds; files, MB on disk)",
        "{:.2%} ({:.2f} s; {:.0f} files, {:.1f} MB)",
        [
            "end_to_end_snapshot_share",
            "end_to_end_snapshot_seconds",
            "end_to_end_snapshots",
            "end_to_end_snapshot_mb",
        ],
    ),
    (
        "whole run: start-up / fit / after the fit (test)",
        "{:.1f} / {:.1f} / {:.1f} s",
        ["end_to_end_startup_seconds", "end_to_end_fit_seconds", "end_to_end_after_fit_seconds"],
    ),
]

TARGETS = {
    "end_to_end_over_loop": (">=", 0.90),
    "end_to_end_snapshot_share": ("<", 0.02),
}


def end_to_end_table(results: dict) -> str:
    """Where the whole run's time went: the parts of the process, then each callback hook's total."""
    r = {k.removeprefix("end_to_end_"): v for k, v in results.items() if k.startswith("end_to_end_")}
    lines = [
        f"Whole run: python {' '.join(END_TO_END_COMMAND)} ({r['train_steps']} steps, "
        f"{r['validations']} validations)",
        "| part of the run | seconds | share of the fit |",
        "|---|---|---|",
        f"| start-up: interpreter, imports, config, data, model (before the fit) | "
        f"{r['startup_seconds']:.1f} | |",
        f"| the fit (on_fit_start -> on_fit_end) | {r['fit_seconds']:.1f} | 100% |",
        f"| - training steps (on_train_batch_start -> on_train_batch_end) | {r['step_seconds']:.1f} | "
        f"{r['step_seconds'] / r['fit_seconds']:.1%} |",
        f"| - validations, their callbacks included | {r['validation_seconds']:.1f} | "
        f"{r['validation_seconds'] / r['fit_seconds']:.1%} |",
        f"| - sanity check | {r['sanity_seconds']:.1f} | {r['sanity_seconds'] / r['fit_seconds']:.1%} |",
        f"| after the fit: test of best.ckpt, metrics, exit | {r['after_fit_seconds']:.1f} | |",
        "",
        "| callback hook (total over the run) | seconds | share of the fit |",
        "|---|---|---|",
    ]
    for hook, seconds in r["callback_seconds"].items():
        if seconds >= 0.005:
            lines.append(f"| {hook} | {seconds:.3f} | {seconds / r['fit_seconds']:.2%} |")
    return "\n".join(lines)


@register("end_to_end", rows=ROWS, targets=TARGETS, tables=(end_to_end_table,))
def bench_end_to_end(context: Context) -> dict:
    """Phase 7: `python train.py experiment=shakespeare_cpu` in a subprocess, a `FitTimer` measuring the
    fit from inside; the figure is the whole fit's tokens/s over its training steps' tokens/s."""
    mode, overrides, workdir, threads = context.mode, context.overrides, context.workdir, context.threads
    timing_path = workdir / "end_to_end" / "fit_timing.json"
    command = [
        sys.executable,
        *END_TO_END_COMMAND,
        *mode.end_to_end_overrides,
        *overrides,
        f"paths.log_dir={workdir / 'end_to_end'}",
        "+callbacks.fit_timer._target_=transformer_lab.training.callbacks.FitTimer",
        "+trainer.profiler._target_=transformer_lab.training.callbacks.HookTimes",
        f"+callbacks.fit_timer.path={timing_path}",
    ]
    env = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    progress(f"end_to_end: python {' '.join(command[1:])}")
    start = time.time()
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    end = time.time()
    if run.returncode != 0:
        sys.exit(f"error: the end-to-end run failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}")
    timing = json.loads(timing_path.read_text())
    (metrics_path,) = (workdir / "end_to_end").glob("*/*/metrics.json")
    metrics = json.loads(metrics_path.read_text())
    fit, steps, tokens = timing["fit_seconds"], timing["train_step_seconds"], timing["train_tokens"]
    # the snapshots (the Snapshots callback, on by default): their hooks' time in the fit, their files
    snapshot_seconds = sum(
        s for hook, s in timing["callback_seconds"].items() if hook.startswith("Snapshots.")
    )
    snapshot_files = list((metrics_path.parent / "checkpoints" / "snapshots").glob("step_*.ckpt"))
    return {
        "end_to_end_snapshot_share": snapshot_seconds / fit,
        "end_to_end_snapshot_seconds": snapshot_seconds,
        "end_to_end_snapshots": len(snapshot_files),
        "end_to_end_snapshot_mb": sum(f.stat().st_size for f in snapshot_files) / 1e6,
        "end_to_end_over_loop": steps / fit,  # (tokens / fit) / (tokens / steps)
        "end_to_end_fit_tokens_per_s": tokens / fit,
        "end_to_end_step_tokens_per_s": tokens / steps,
        "end_to_end_train_tokens": tokens,
        "end_to_end_train_steps": timing["train_steps"],
        "end_to_end_fit_seconds": fit,
        "end_to_end_step_seconds": steps,
        "end_to_end_outside_steps_seconds": fit - steps,
        "end_to_end_validation_seconds": timing["validation_seconds"],
        "end_to_end_validations": timing["validations"],
        "end_to_end_sanity_seconds": timing["sanity_seconds"],
        "end_to_end_startup_seconds": timing["fit_start_time"] - start,
        "end_to_end_after_fit_seconds": end - timing["fit_end_time"],
        "end_to_end_process_seconds": end - start,
        "end_to_end_val_loss": metrics.get("val/loss"),
        "end_to_end_test_loss": metrics.get("test/loss"),
        "end_to_end_callback_seconds": timing["callback_seconds"],
    }
