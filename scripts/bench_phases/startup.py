"""`startup`: a tool's start-up without training: a fresh interpreter that loads `pretrained:reverse_2l4h`,
its task's examples and runs an analysis (head ablation): the median wall time of 5 runs (1 with --quick),
in-process from the first import, and whether Lightning was imported (it must not be). And what a person
waits on a terminal before each entry point's first line (target: 2 s on a quiet machine), the command
run under a pseudo-terminal as in a shell, and the whole command's time to the end.
"""

import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time

from bench_phases import Context, register
from bench_phases.common import QUICK, ROOT

REVERSE = "ckpt_path=pretrained:reverse_2l4h"
ENTRY_POINTS = {  # entry point -> its command's arguments (a short, real use of each)
    "train": ["train.py", "trainer.max_steps=1", "test=false", "hydra.run.dir={tmp}/run"],
    "sample": ["-m", "transformer_lab.sample", "ckpt_path=pretrained:shakespeare", "prompt=ROMEO:"],
    "interpret": ["-m", "transformer_lab.interpret", REVERSE, "analysis=lens", "out_dir={tmp}/interpret"],
    "explain": ["-m", "transformer_lab.explain", REVERSE, "out_dir={tmp}/explain"],
    "explore": ["-m", "transformer_lab.explore", REVERSE, "out={tmp}/page.html"],
    "export": ["-m", "transformer_lab.export", REVERSE, "to=onnx", "out={tmp}/onnx"],
}
ROWS = [
    (
        "start-up of an analysis (load pretrained:reverse_2l4h, 64 examples, head ablation; Lightning?)",
        "{:.2f} s ({})",
        ["startup_analysis_seconds", "startup_imports_lightning"],
    ),
    *(
        (
            f"first line on a terminal: {name} (the whole command)",
            "{:.2f} s ({:.1f} s)",
            [f"startup_first_line_{name}_s", f"startup_whole_{name}_s"],
        )
        for name in ENTRY_POINTS
    ),
]
TARGETS = {f"startup_first_line_{name}_s": ("<", 2.0) for name in ENTRY_POINTS}

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


def first_line_seconds(arguments: list[str]) -> tuple[float, float]:
    """(seconds to the first byte the command writes, seconds to its end), run as `python <arguments>`
    with a pseudo-terminal for its stdout and stderr, as a person in a shell sees it."""
    leader, follower = pty.openpty()
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, *arguments], cwd=ROOT, stdout=follower, stderr=follower)
    os.close(follower)
    first = None
    while True:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the command ended and closed the terminal
                break
            if not data:
                break
            first = first if first is not None else time.perf_counter() - started
        elif child.poll() is not None:
            break
    child.wait()
    whole = time.perf_counter() - started
    os.close(leader)
    return (first if first is not None else whole), whole


@register("startup", rows=ROWS, targets=TARGETS)
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
    results = {
        "startup_analysis_seconds": statistics.median(seconds),
        "startup_imports_lightning": any(lightning),
    }
    for name, arguments in ENTRY_POINTS.items():
        firsts, wholes = [], []
        for _ in range(1 if context.mode is QUICK else 3):
            with tempfile.TemporaryDirectory() as tmp:
                first, whole = first_line_seconds([a.format(tmp=tmp) for a in arguments])
            firsts.append(first)
            wholes.append(whole)
        results[f"startup_first_line_{name}_s"] = statistics.median(firsts)
        results[f"startup_whole_{name}_s"] = statistics.median(wholes)
    return results
