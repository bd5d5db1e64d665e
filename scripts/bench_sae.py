"""Benchmark phase `sae`: what training a sparse autoencoder costs here (scripts/bench.py --phases sae,
once the registry of phases takes it; standalone: `python scripts/bench_sae.py [--quick] [--json FILE]`).

1. Throughput: activations per second of SAE training (`python train.py experiment=sae`, topk, expansion
   8, batch 1024, no validation) on `pretrained:shakespeare`'s residual stream (`blocks.3.hook_resid_post`,
   128 dimensions), the whole fit timed (FitTimer's fit_seconds: data and steps), with the activations
   * computed on the fly (the model runs on a batch of its task's windows, stops at the hook, and a
     shuffled buffer of 65,536 activations feeds the steps), and
   * read from the cache (`data.cache=true`: a memory-mapped file of float32 rows, built first; its build
     rate is reported too).
2. Memory: the peak RSS of a run training from a cache of N activations and of one of 4 N (2^20 and 2^22:
   512 MB and 2 GB of activations; --quick: 2^16 and 2^18), each building its cache and training from it
   in its own process. The cache is written batch by batch and read through a memory map per batch, so
   the peak stays flat (target: the larger run's peak within 100 MB of the smaller's) while the larger
   cache is several times the process's whole resident memory.

`bench_sae(quick, workdir) -> dict` is the phase; `TARGETS` its targets (checked on the full run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "pretrained:shakespeare"
HOOK = "blocks.3.hook_resid_post"
TARGETS = {"sae_cache_rss_growth_mb": ("<", 100.0)}
SETTINGS = {  # steps of the throughput runs; cache sizes (activations) of the memory runs
    "quick": {"steps": 30, "cache": (1 << 16, 1 << 18)},
    "full": {"steps": 300, "cache": (1 << 20, 1 << 22)},
}
QUIET = "hydra.job_logging.root.level=WARNING"


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _peak_rss_of(command: list[str], log: Path) -> tuple[int, float]:
    """Run `command` (output to `log`); its exit status and its own peak RSS in MB (wait4's rusage)."""
    with open(log, "w") as out:
        child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)


def _train(workdir: Path, name: str, steps: int, *overrides: str) -> tuple[dict, float]:
    """`python train.py experiment=sae ...` in a subprocess with FitTimer: its fit timing and peak RSS."""
    run = workdir / name
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
        f"data.cache_dir={workdir / 'cache'}",
        QUIET,
        "+callbacks.fit_timer._target_=transformer_lab.training.callbacks.FitTimer",
        f"+callbacks.fit_timer.path={timing}",
        *overrides,
    ]
    status, peak = _peak_rss_of(command, run / "train.log")
    if status != 0:
        sys.exit(
            f"error: the SAE run {name} failed (exit {status}): {(run / 'train.log').read_text()[-2000:]}"
        )
    return json.loads(timing.read_text()), peak


def bench_sae(quick: bool, workdir: Path) -> dict:
    """The phase (the module docstring): its figures as a flat dict."""
    settings = SETTINGS["quick" if quick else "full"]
    steps, batch = settings["steps"], 1024
    results: dict = {}
    progress(f"sae: on the fly, {steps} steps on {SOURCE} at {HOOK}")
    timing, _ = _train(workdir, "on_the_fly", steps)
    results["sae_on_the_fly_activations_per_s"] = steps * batch / timing["fit_seconds"]
    small, large = settings["cache"]
    progress(f"sae: a cache of {small} activations, then {steps} steps from it")
    started = time.perf_counter()
    _train(workdir, "cache_build", 1, "data.cache=true", f"data.cache_tokens={small}")
    results["sae_cache_build_seconds"] = time.perf_counter() - started
    timing, _ = _train(workdir, "from_cache", steps, "data.cache=true", f"data.cache_tokens={small}")
    results["sae_cached_activations_per_s"] = steps * batch / timing["fit_seconds"]
    peaks = {}
    for count in (small, large):
        progress(f"sae: peak memory building and training from a cache of {count} activations")
        cache = workdir / f"cache_{count}"
        _, peak = _train(
            workdir, f"memory_{count}", 20, "data.cache=true", f"data.cache_tokens={count}",
            f"data.cache_dir={cache}",
        )  # fmt: skip
        peaks[count] = peak
        (entry,) = cache.glob("activations-*/activations.bin")
        results[f"sae_cache_{count}_mb"] = entry.stat().st_size / 2**20
        results[f"sae_cache_{count}_peak_rss_mb"] = peak
    results["sae_cache_rss_growth_mb"] = peaks[large] - peaks[small]
    results["sae_large_cache_over_peak_rss"] = results[f"sae_cache_{large}_mb"] / peaks[large]
    return results


def table(results: dict) -> str:
    lines = ["SAE training on pretrained:shakespeare's residual stream (blocks.3.hook_resid_post):"]
    lines.append(f"  on the fly         {results['sae_on_the_fly_activations_per_s']:12,.0f} activations/s")
    lines.append(f"  from the cache     {results['sae_cached_activations_per_s']:12,.0f} activations/s")
    sizes = sorted(int(k.split("_")[2]) for k in results if k.endswith("_peak_rss_mb"))
    for count in sizes:
        lines.append(
            f"  cache of {count:>9,} ({results[f'sae_cache_{count}_mb']:7.0f} MB): peak RSS "
            f"{results[f'sae_cache_{count}_peak_rss_mb']:6.0f} MB"
        )
    growth = results["sae_cache_rss_growth_mb"]
    lines.append(f"  peak RSS growth, 4x the cache: {growth:+.0f} MB (target < 100)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: about a minute")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_sae_") as folder:
        results = bench_sae(args.quick, Path(folder))
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if not args.quick:
        for key, (comparison, threshold) in TARGETS.items():
            value = results[key]
            met = value < threshold if comparison == "<" else value >= threshold
            print(f"{key} = {value:.3g}: target {comparison} {threshold} {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
