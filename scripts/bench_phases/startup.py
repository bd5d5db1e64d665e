"""`startup`: a tool's start-up without training: a fresh interpreter that loads `pretrained:reverse_2l4h`,
its task's examples and runs an analysis (head ablation): the median wall time of 5 runs (1 with --quick),
in-process from the first import, and whether Lightning was imported (it must not be).
"""

import statistics
import subprocess
import sys

from bench_phases import Context, register
from bench_phases.common import QUICK

ROWS = [
    (
        "start-up of an analysis (load pretrained:reverse_2l4h, 64 examples, head ablation; Lightning?)",
        "{:.2f} s ({})",
        ["startup_analysis_seconds", "startup_imports_lightning"],
    )
]

STARTUP_SCRIPT = """
import sys, time
start = time.perf_counter()
import transformer_lab
from transformer_lab.analysis import interventions
checkpoint = transformer_lab.load("pretrained:reverse_2l4h")
inputs, labels = checkpoint.examples(64)
interventions.ablate_heads(checkpoint.model, inputs, labels)
print(time.perf_counter() - start, any(m == "lightning" or m.startswith("lightning.") for m in sys.modules))
"""


@register("startup", rows=ROWS)
def bench_startup(context: Context) -> dict:
    """A tool's start-up without training: a fresh interpreter that loads `pretrained:reverse_2l4h`, its
    task's examples and runs an analysis (head ablation): the median wall time of 5 runs (1 with
    --quick), in-process from the first import, and whether Lightning was imported (it must not be)."""
    seconds, lightning = [], []
    for _ in range(1 if context.mode is QUICK else 5):
        out = subprocess.run(
            [sys.executable, "-c", STARTUP_SCRIPT], capture_output=True, text=True, check=True
        )
        value, loaded = out.stdout.split()
        seconds.append(float(value))
        lightning.append(loaded == "True")
    return {
        "startup_analysis_seconds": statistics.median(seconds),
        "startup_imports_lightning": any(lightning),
    }
