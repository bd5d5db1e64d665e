"""Phase 15 (`sae`).

What training a sparse autoencoder costs here (docs/features.md):

1. Throughput: activations per second of SAE training (`python train.py experiment=sae`, topk, expansion
   8, batch 1024, no validation) on `pretrained:shakespeare`'s residual stream (`blocks.3.hook_resid_post`,
   128 dimensions), the whole fit timed (FitTimer's fit_seconds: data and steps), with the activations
   * computed on the fly (the model runs on a batch of its task's windows, stops at the hook, and a
     shuffled buffer of 65,536 activations feeds the steps), and
   * read from the cache (`data.cache=true`: a file of float32 rows, built first by a run of one step,
     whose whole time is reported too).
2. Memory: the peak RSS of a run building a cache of N activations and training from it, and of one of
   4 N (2^20 and 2^22: 512 MB and 2 GB of activations), each in its own process. The cache is written
   batch by batch and read a batch of random rows at a time, so the peak stays flat (target: the larger
   run's peak within 100 MB of the smaller's) while the larger cache is several times the process's whole
   resident memory.

(--quick: 30 steps instead of 300; caches of 2^16 and 2^18 activations.)
"""

import json
import sys
import time

from bench_phases import Context, register
from bench_phases.common import QUICK, QUIET, peak_rss_of, progress

SOURCE = "pretrained:shakespeare"
HOOK = "blocks.3.hook_resid_post"
BATCH = 1024  # data.batch_size of experiment=sae: activations per step
STEPS = {"full": 300, "quick": 30}  # steps of the throughput runs
CACHES = {"full": (1 << 20, 1 << 22), "quick": (1 << 16, 1 << 18)}  # activations of the memory runs
MEMORY_STEPS = 20

ROWS = [
    (
        f"sae: training on {SOURCE}'s {HOOK}, on the fly / from the cache",
        "{:,.0f} / {:,.0f} activations/s",
        ["sae_on_the_fly_activations_per_s", "sae_cached_activations_per_s"],
    ),
    (
        "sae: a run building the cache of the throughput run (one step)",
        "{:.1f} s ({:,} activations)",
        ["sae_cache_build_seconds", "sae_small_cache_activations"],
    ),
    (
        "sae: peak RSS of a run from a cache 4x larger (2^22 vs 2^20 activations; --quick 2^18 vs 2^16)",
        "{:+.0f} MB ({:.0f} vs {:.0f} MB)",
        ["sae_cache_rss_growth_mb", "sae_large_cache_peak_rss_mb", "sae_small_cache_peak_rss_mb"],
    ),
    (
        "sae: the larger cache over that run's peak RSS",
        "{:.1f}x ({:.0f} MB of activations)",
        ["sae_large_cache_over_peak_rss", "sae_large_cache_mb"],
    ),
]
TARGETS = {"sae_cache_rss_growth_mb": ("<", 100.0)}


def train_sae(context: Context, name: str, steps: int, *overrides: str) -> tuple[dict, float]:
    """`python train.py experiment=sae` on SOURCE at HOOK in a subprocess, with FitTimer: its fit timing
    and its peak RSS in MB."""
    run = context.workdir / "sae" / name
    run.mkdir(parents=True, exist_ok=True)
    timing = run / "fit_timing.json"
    command = [
        sys.executable,
        "train.py",
        "experiment=sae",
        f"source={SOURCE}",
        f"hook={HOOK}",
        f"trainer.max_steps={steps}",
        "trainer.limit_val_batches=0",
        "test=false",
        f"hydra.run.dir={run / 'run'}",
        f"data.cache_dir={context.workdir / 'sae' / 'cache'}",
        QUIET,
        "+callbacks.fit_timer._target_=transformer_lab.training.callbacks.FitTimer",
        f"+callbacks.fit_timer.path={timing}",
        *([f"threads={context.threads}"] if context.threads else []),
        *overrides,
    ]
    log = run / "train.log"
    status, peak = peak_rss_of(command, log)
    if status != 0:
        sys.exit(f"error: the SAE run {name} failed (exit {status}): {log.read_text()[-2000:]}")
    return json.loads(timing.read_text()), peak


@register("sae", rows=ROWS, targets=TARGETS)
def bench_sae(context: Context) -> dict:
    """Phase 15 (`--phases sae`): SAE training's activations per second on the fly and from the cache,
    and the peak memory of runs from caches of N and 4 N activations (the module docstring)."""
    mode = "quick" if context.mode is QUICK else "full"
    steps, (small, large) = STEPS[mode], CACHES[mode]
    results: dict = {}
    progress(f"sae: on the fly, {steps} steps on {SOURCE} at {HOOK}")
    timing, _ = train_sae(context, "on_the_fly", steps)
    results["sae_on_the_fly_activations_per_s"] = steps * BATCH / timing["fit_seconds"]
    cached = ("data.cache=true", f"data.cache_tokens={small}")
    progress(f"sae: a cache of {small:,} activations, then {steps} steps from it")
    started = time.perf_counter()
    train_sae(context, "cache_build", 1, *cached)
    results["sae_cache_build_seconds"] = time.perf_counter() - started
    timing, _ = train_sae(context, "from_cache", steps, *cached)
    results["sae_cached_activations_per_s"] = steps * BATCH / timing["fit_seconds"]
    for size, count in (("small", small), ("large", large)):
        progress(f"sae: peak memory building and training from a cache of {count:,} activations")
        cache = context.workdir / "sae" / f"cache_{size}"
        _, peak = train_sae(
            context, f"memory_{size}", MEMORY_STEPS, "data.cache=true", f"data.cache_tokens={count}",
            f"data.cache_dir={cache}",
        )  # fmt: skip
        (file,) = cache.glob("activations-*/activations.bin")
        results |= {
            f"sae_{size}_cache_activations": count,
            f"sae_{size}_cache_mb": file.stat().st_size / 2**20,
            f"sae_{size}_cache_peak_rss_mb": peak,
        }
        file.unlink()  # 2 GB of activations: gone before the next size
    large_peak = results["sae_large_cache_peak_rss_mb"]
    results["sae_cache_rss_growth_mb"] = large_peak - results["sae_small_cache_peak_rss_mb"]
    results["sae_large_cache_over_peak_rss"] = results["sae_large_cache_mb"] / large_peak
    return results
