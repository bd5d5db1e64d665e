"""Phase 12 (`intervals`).

Intervals: what `ci=0.95` (the tools' default) costs the other printed tables on
pretrained:reverse_2l4h with 256 examples (16 with --quick): head ablation, activation patching, the
logit lens and the deletion curves, each with ci=0 and with ci=0.95 (medians of 3 alternating rounds)
and their ratio (target < 2x: the intervals resample the per-example numbers, no forward pass).
"""

import statistics
import time

from bench_phases import Context, register
from bench_phases.common import QUICK, progress

ROWS = [
    (
        f"{name}: ci=0 vs ci=0.95 (reverse_2l4h, 256 examples)",
        "{:.2f}x ({:.3f} s -> {:.3f} s)",
        [f"ci_{name}_ratio", f"ci_{name}_s", f"ci_{name}_checked_s"],
    )
    for name in ("heads", "patching", "lens", "faithfulness")
]
TARGETS = {f"ci_{name}_ratio": ("<", 2.0) for name in ("heads", "patching", "lens", "faithfulness")}


@register("intervals", rows=ROWS, targets=TARGETS)
def bench_intervals(context: Context) -> dict:
    """What ci=0.95 costs each printed table (see the module docstring)."""
    from transformer_lab import load
    from transformer_lab.analysis import faithfulness, interventions, lens

    mode = context.mode
    count = 16 if mode is QUICK else 256
    progress(f"intervals: pretrained:reverse_2l4h, {count} examples")
    checkpoint = load("pretrained:reverse_2l4h")
    model, (inputs, labels) = checkpoint.model, checkpoint.examples(count)
    clean, corrupted = checkpoint.corrupted_pairs(count)
    tables = {
        "heads": lambda level: interventions.ablate_heads(model, inputs, labels, level=level),
        "patching": lambda level: interventions.activation_patching(model, clean, corrupted, level),
        "lens": lambda level: lens.lens_accuracy(model, inputs, labels, level),
        "faithfulness": lambda level: faithfulness.deletion_curves(model, inputs, labels, level=level),
    }
    out = {}
    for name, work in tables.items():
        times: dict[float, list[float]] = {0.0: [], 0.95: []}
        for _ in range(1 if mode is QUICK else 3):
            for level in times:  # alternating, so that a busy moment costs both alike
                started = time.perf_counter()
                work(level)
                times[level].append(time.perf_counter() - started)
        plain, checked = statistics.median(times[0.0]), statistics.median(times[0.95])
        out |= {f"ci_{name}_s": plain, f"ci_{name}_checked_s": checked, f"ci_{name}_ratio": checked / plain}
    return out
