"""Run a documentation page: its bash blocks' commands as a user would type them (training commands with
a few steps instead of thousands), and its Python blocks, in the page's order."""

import importlib
import itertools
import re
import shlex
from pathlib import Path

from tests.conftest import COMMON, compose_train_config, load_script
from transformer_lab.train import train

# A few steps of any task: 4 training batches, 2 validation and test batches.
FEW_STEPS = [
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.max_epochs=1",
    "trainer.max_steps=-1",
    *COMMON,
]


def page_steps(page: Path) -> list[tuple[str, str, str | None]]:
    """("bash", command, None) and ("python", code, the text block right after it or None), in order."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", page.read_text(), re.S)
    steps = []
    for i, (language, body) in enumerate(blocks):
        if language == "bash":
            for line in body.replace("\\\n", " ").splitlines():
                command = line.split(" #")[0].strip()
                if command.startswith("python "):
                    steps.append(("bash", command, None))
        elif language == "python":
            after = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1][0] == "text" else None
            steps.append(("python", body, after[1] if after else None))
    return steps


def run_training(args: list[str], tmp: Path) -> None:
    """`python train.py [-m] args` with a few steps: a sweep runs every combination of its comma-separated
    values, job i in <sweep dir>/i with the .hydra/overrides.yaml Hydra would write."""
    multirun = "-m" in args
    args = [a for a in args if a != "-m"]
    dirs = [a.partition("=")[2] for a in args if a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))]
    args = [a for a in args if not a.startswith("hydra.")]
    run_dir = tmp / (dirs[0] if dirs else "saved_models/run")
    if not multirun:
        train(compose_train_config(run_dir, *args, base=FEW_STEPS))
        return
    choices = [[f"{a.partition('=')[0]}={v}" for v in a.partition("=")[2].split(",")] for a in args]
    for job, overrides in enumerate(itertools.product(*choices)):
        job_dir = run_dir / str(job)
        train(compose_train_config(job_dir, *overrides, base=FEW_STEPS))
        (job_dir / ".hydra").mkdir(exist_ok=True)
        (job_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def run_command(command: str, tmp: Path) -> None:
    """`python train.py ...`, `python scripts/<name>.py ...` or `python -m <module> ...`, in-process, with
    the working directory (where their files go) being the caller's temporary one."""
    words = shlex.split(command)
    assert words[0] == "python", command
    if words[1] == "train.py":
        run_training(words[2:], tmp)
        return
    if words[1] == "-m":
        package = importlib.import_module(words[2])  # a package runs its __main__, a module itself
        main = getattr(package, "main", None) or importlib.import_module(f"{words[2]}.__main__").main
        main(words[3:])
        return
    script = re.fullmatch(r"scripts/(\w+)\.py", words[1])
    assert script, f"the page runs {words[1]}: teach this test how to run it"
    load_script(script.group(1)).main(words[2:])  # in the temporary working directory: so are its files
