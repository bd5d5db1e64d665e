"""Run a documentation page: its bash blocks' commands as a user would type them (training commands with
a few steps instead of thousands), and its Python blocks, in the page's order."""

import codecs
import importlib
import itertools
import re
import shlex
from pathlib import Path

from omegaconf import OmegaConf

from tests.conftest import COMMON, compose_train_config, load_script
from transformer_lab.train import train
from transformer_lab.training.progress import HEARTBEAT

# A few steps of any task: 4 training batches, 2 validation and test batches.
FEW_STEPS = [
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.max_epochs=1",
    "trainer.max_steps=-1",
    *COMMON,
]
# A training run as the page shows it, in full (only the progress bar off: the output is compared).
FULL = ["callbacks.progress_bar.refresh_rate=0"]


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


def run_training(args: list[str], tmp: Path, base: list[str] = FEW_STEPS) -> None:
    """`python train.py [-m] args` (with a few steps, unless `base` says otherwise): a sweep runs every
    combination of its comma-separated values (with a few steps, the first two of its seeds), job i in
    <sweep dir>/i; each run gets the .hydra/config.yaml and overrides.yaml Hydra would write."""
    multirun = "-m" in args
    args = [a for a in args if a != "-m"]
    dirs = [a.partition("=")[2] for a in args if a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))]
    args = [a for a in args if not a.startswith("hydra.")]
    run_dir = tmp / (dirs[0] if dirs else "saved_models/run")
    choices = [[f"{a.partition('=')[0]}={v}" for v in a.partition("=")[2].split(",")] for a in args]
    if base is FEW_STEPS:  # every seed of a sweep runs the same code: two keep its over-seeds tables
        choices = [c[:2] if c[0].startswith("seed=") else c for c in choices]
    jobs = list(itertools.product(*choices)) if multirun else [tuple(args)]
    for job, overrides in enumerate(jobs):
        job_dir = run_dir / str(job) if multirun else run_dir
        cfg = compose_train_config(job_dir, *overrides, base=base)
        train(cfg)
        (job_dir / ".hydra").mkdir(exist_ok=True)
        OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, job_dir / ".hydra" / "config.yaml")
        choices = OmegaConf.select(cfg, "hydra.runtime.choices") or {}  # the config groups each run picked
        OmegaConf.save({"hydra": {"runtime": {"choices": choices}}}, job_dir / ".hydra" / "hydra.yaml")
        (job_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def run_command(command: str, tmp: Path, full: bool = False) -> None:
    """`python train.py ...`, `python scripts/<name>.py ...` or `python -m <module> ...`, in-process, with
    the working directory (where their files go) being the caller's temporary one; training with a few
    steps, or in `full` as the page says."""
    # bash's $'...' (a newline as \n): decoded, then quoted as shlex reads it
    command = re.sub(
        r"\$'((?:[^'\\]|\\.)*)'", lambda m: shlex.quote(codecs.decode(m[1], "unicode_escape")), command
    )
    words = shlex.split(command)
    assert words[0] == "python", command
    if words[1] == "train.py":
        run_training(words[2:], tmp, base=FULL if full else FEW_STEPS)
        return

    if words[1] == "-m":
        package = importlib.import_module(words[2])  # a package runs its __main__, a module itself
        main = getattr(package, "main", None) or importlib.import_module(f"{words[2]}.__main__").main
        main(words[3:])
        return
    script = re.fullmatch(r"scripts/(\w+)\.py", words[1])
    assert script, f"the page runs {words[1]}: teach this test how to run it"
    load_script(script.group(1)).main(words[2:])  # in the temporary working directory: so are its files


# ------------------------------------------------------------------ the outputs a page shows
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
SECONDS = re.compile(r"-?\d+(?:\.\d+)? ?s\b|took [\d.]+ s")  # durations: machine-dependent, not compared
MARKER = r"<!-- output(?:, numbers within (?P<percent>[\d.]+)%)?(?:(?!-->).)*-->\s*"  # after the %: prose
OUTPUT = re.compile(
    r"```bash\n(?P<commands>(?:(?!```).)*)```(?:(?!```|<!--).)*"
    + MARKER
    + r"```text\n(?P<text>(?:(?!```).)*)```",
    re.S,
)


def shown_outputs(page: Path) -> list[tuple[list[str], str, float]]:
    """Every output a page shows: a bash block, then (after any prose without a code block)
    `<!-- output -->` (or `<!-- output, numbers within 2% -->` where threads move the last digits), then
    the ```text block the commands print: (the commands, the text, the relative tolerance of its
    numbers)."""
    found = []
    for match in OUTPUT.finditer(page.read_text()):
        commands = [
            line.split(" #")[0].strip()
            for line in match["commands"].replace("\\\n", " ").splitlines()
            if line.strip().startswith("python ")
        ]
        found.append((commands, match["text"], float(match["percent"] or 0) / 100))
    return found


PYTHON_OUTPUT = re.compile(
    r"```python\n(?P<code>(?:(?!```).)*)```\s*(?:" + MARKER + r")?```text\n(?P<text>(?:(?!```).)*)```",
    re.S,
)


def python_outputs(page: Path) -> list[tuple[str, str, float]]:
    """Every Python block followed by the text it prints: (the code, the text, the relative tolerance of
    its numbers: 2% where threads move last digits, or what a `<!-- output, numbers within N% -->`
    between them says where a figure moves more on another CPU's kernels)."""
    found = PYTHON_OUTPUT.finditer(page.read_text())
    return [(m["code"], m["text"], float(m["percent"] or 2) / 100) for m in found]


def differences(expected: str, actual: str, tolerance: float) -> list[str]:
    """Where the output differs from the text a page shows: lines in order (a line `...` on the page
    stands for any lines), words exactly, numbers equal or within `tolerance` (relative, and one unit of
    the last digit shown), durations and progress lines ignored."""

    def words(text: str) -> list[list[str]]:  # a table's rule (---  ----) is as wide as its cells
        text = re.sub(r"-{3,}", "---", SECONDS.sub("<s>", text))
        lines = [line for line in text.strip().splitlines() if line.strip()]
        return [line.split() for line in lines if not line.startswith(HEARTBEAT)]  # time-dependent

    got, want = words(actual), words(expected)

    def same(shown: list[str], printed: list[str]) -> bool:
        if len(shown) != len(printed):
            return False
        for a, b in zip(shown, printed, strict=True):
            numbers_a, numbers_b = NUMBER.findall(a), NUMBER.findall(b)
            if NUMBER.sub("#", a) != NUMBER.sub("#", b) or len(numbers_a) != len(numbers_b):
                return False
            for x, y in zip(numbers_a, numbers_b, strict=True):
                unit = 10 ** -len(x.partition(".")[2]) if "." in x else 1
                close = abs(float(x) - float(y)) <= tolerance * abs(float(x)) + 1.01 * unit
                if x != y and not (tolerance > 0 and close):
                    return False
        return True

    position = 0
    skipping = False
    for shown in want:
        if shown == ["..."]:
            skipping = True
            continue
        while skipping and position < len(got) and not same(shown, got[position]):
            position += 1
        if position >= len(got) or not same(shown, got[position]):
            near = " ".join(got[position]) if position < len(got) else "(nothing more)"
            return [f"shown: {' '.join(shown)}\nprinted: {near}\nwhole output:\n{actual}"]
        position, skipping = position + 1, False
    if position < len(got) and not skipping:
        return [f"printed more than shown, from: {' '.join(got[position])}\nwhole output:\n{actual}"]
    return []


def printed_by(commands: list[str], tmp: Path, full: bool) -> str:
    """What the commands print, run in-process in `tmp` (training commands in full, their console lines
    being the run's log lines, when `full`)."""
    import contextlib
    import io
    import logging

    from transformer_lab.training.console import ConsoleFilter, ConsoleFormatter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(ConsoleFormatter("%(message)s"))
    handler.addFilter(ConsoleFilter())
    logger = logging.getLogger("transformer_lab")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stdout(out):
            for command in commands:
                run_command(command, tmp, full)

    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return out.getvalue()


def unread_markers(page: Path) -> int:
    """How many `<!-- output ... -->` markers (at a line's start) of a page no output block reads (a
    marker between the wrong blocks): each one's output would go unchecked."""
    text = page.read_text()
    read = sum(
        "<!-- output" in m.group(0) for pattern in (OUTPUT, PYTHON_OUTPUT) for m in pattern.finditer(text)
    )
    return len(re.findall(r"^<!-- output", text, re.M)) - read
