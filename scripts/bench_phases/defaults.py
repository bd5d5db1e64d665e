"""`defaults`: what a default analysis and page cost on a text model of 5 M parameters.

`python train.py experiment=text_small` with the model made 256 wide, 6 layers of 8 heads (5.0 M parameters)
on Tiny Shakespeare, one step; then `interpret analysis=heads` and `explore` on its last.ckpt with no option
but the checkpoint (the defaults a new user gets: interpret reads as many examples as fit its time budget,
explore writes one checkpoint's page within 5 MB). Each whole command's wall time (target: 30 s on two
cores) and the page's size (target: 5 MB). (--quick: 128 wide, 2 layers.)
"""

import subprocess
import sys
import time

from bench_phases import Context, register
from bench_phases.common import QUICK, QUIET, ROOT, progress

MODEL = {
    "full": ["model.model_dim=256", "model.num_layers=6", "model.num_heads=8"],
    "quick": ["model.model_dim=128", "model.num_layers=2", "model.num_heads=4"],
}
ROWS = [
    (
        "a 5 M-parameter text model (--quick: 0.6 M): interpret analysis=heads with its defaults",
        "{:.1f} s ({:.0f} examples)",
        ["defaults_heads_seconds", "defaults_heads_examples"],
    ),
    (
        "the same model: explore with its defaults (one checkpoint's page), its time and size",
        "{:.1f} s, {:.1f} MB",
        ["defaults_explore_seconds", "defaults_explore_mb"],
    ),
]
TARGETS = {
    "defaults_heads_seconds": ("<", 30.0),
    "defaults_explore_seconds": ("<", 30.0),
    "defaults_explore_mb": ("<", 5.0),
}


def _timed(arguments: list[str]) -> tuple[float, str]:
    """(wall seconds, stdout) of `python <arguments>` from the checkout; the phase stops if it fails."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *arguments], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(arguments[:3])} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - started, done.stdout


@register("defaults", rows=ROWS, targets=TARGETS)
def bench_defaults(context: Context) -> dict:
    """A text model of 5 M parameters trained one step, then the default `interpret analysis=heads` and
    `explore` on it: each command's wall time, the examples interpret chose, the page's size."""
    workdir = context.workdir
    run = workdir / "defaults_run"
    size = "quick" if context.mode is QUICK else "full"
    progress(f"defaults: a text model ({' '.join(MODEL[size])}), one step")
    _timed(
        [
            "train.py",
            "experiment=text_small",
            *MODEL[size],
            "trainer.max_steps=1",
            "trainer.limit_val_batches=0",
            "test=false",
            f"data.cache_dir={workdir / 'defaults_cache'}",
            f"hydra.run.dir={run}",
            QUIET,
        ]
    )
    checkpoint = f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"
    progress("defaults: interpret analysis=heads, then explore, with their defaults")
    heads, printed = _timed(
        ["-m", "transformer_lab.interpret", checkpoint, "analysis=heads", f"out_dir={workdir / 'heads'}"]
    )
    chosen = [line for line in printed.splitlines() if line.startswith("analysis=heads: ")]
    examples = int(chosen[0].split()[1]) if chosen else 512  # "analysis=heads: 48 examples, not 512 (...)"
    page = workdir / "defaults_page.html"
    explore, _ = _timed(["-m", "transformer_lab.explore", checkpoint, f"out={page}"])
    return {
        "defaults_heads_seconds": heads,
        "defaults_heads_examples": examples,
        "defaults_explore_seconds": explore,
        "defaults_explore_mb": page.stat().st_size / 1e6,
    }
