"""What a training run prints, and what it leaves to train.log.

The console says what a person needs: the device and run directory, the model in one line, progress,
each validation's metrics, the test result and where everything is. train.log keeps every record
(Lightning's own messages and warnings included). Hydra's logging config (`configs/hydra/default.yaml`)
puts `ConsoleFilter` and `ConsoleFormatter` on the console handler; this module imports no torch, so
that config costs nothing before a run starts.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformer_lab.nn import TokenModel

# The grades an SAE's run writes in metrics.json where its activations' features are known (docs/features.md).
SAE_GRADES = ("mmcs", "recovered_share", "previous_token_share", "previous_token_score")

# Messages of other libraries that are worth a line on the console at INFO level (all of them are in
# train.log): why training stopped (max_epochs, max_steps, max_time, early stopping).
CONSOLE_INFO = re.compile(r"`Trainer\.fit` stopped")

# Warnings that say nothing true about this project, each filtered by its exact message. Everything
# else a library warns about reaches the console and train.log.
KNOWN_WARNINGS = (
    # Lightning 2.6 walks batches with torch.utils._pytree.LeafSpec, which torch >= 2.10 deprecates;
    # nothing in this project can change it (it goes when Lightning stops using LeafSpec).
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    # Tiny Shakespeare's RandomWindowBatches defines __len__ (the epoch length Lightning schedules by)
    # and does split the epoch between DataLoader workers (get_worker_info), which is what this asks.
    (UserWarning, r"Your `IterableDataset` has `__len__` defined"),
    # The tasks' data are tensors in memory; worker processes cost more than they save for batches this
    # small (data.num_workers=N is there for other data).
    (UserWarning, r"The '\w+' does not have many workers which may be a bottleneck"),
)


# Lightning's advert, logged at every Trainer start when the package it advertises is not installed: not
# a fact about the run, so it goes to neither the console nor train.log.
ADVERT = re.compile(r"Tip: .*litlogger")
ADVERT_LOGGER = "lightning.pytorch.utilities.rank_zero"  # where Lightning's rank_zero_info logs it


# A warning as `warnings.formatwarning` (or Lightning's shorter variant) writes it:
# "<file>:<line>: [<Category>: ]<message>[\n  <source line>]"
WARNING_TEXT = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+): (?:(?P<category>[A-Z]\w*): )?(?P<message>.*)$", re.DOTALL
)


def ignore_known_noise() -> None:
    """Filter the warnings of KNOWN_WARNINGS, each by its message and category, and Lightning's advert."""
    for category, message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    logger = logging.getLogger(ADVERT_LOGGER)
    if not any(isinstance(f, DropAdvert) for f in logger.filters):
        logger.addFilter(DropAdvert())


class DropAdvert(logging.Filter):
    """Drops the records that match ADVERT."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ADVERT.search(record.getMessage())


def lightning_logs_to_root() -> None:
    """Send Lightning's log records through the logging config only (console filter, train.log): remove
    the stderr handlers `import lightning` puts on its loggers (which would print every INFO record a
    second time, as `INFO: ...`) and let their records propagate to the root logger (Lightning stops them
    when it is imported before logging is configured, as train.py's checks of the command line do). For
    the command line, where Hydra has configured logging."""
    import lightning  # noqa: F401  (its import adds the handlers)

    if logging.getLogger().handlers:
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                if type(handler) is logging.StreamHandler:
                    logger.removeHandler(handler)
            logger.propagate = True


class ConsoleFilter(logging.Filter):
    """Lets through: this project's messages, warnings and errors from anyone, and the few INFO
    messages of other libraries in CONSOLE_INFO. A record logged with `extra={"console": False}` goes to
    train.log only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "console", True):
            return False
        if record.levelno >= logging.WARNING or record.name.split(".")[0] == "transformer_lab":
            return True
        return bool(CONSOLE_INFO.search(record.getMessage()))


class ConsoleHandler(logging.StreamHandler):
    """The console's handler: each line is written above the progress bars (tqdm clears them, the line
    is written, they are redrawn), so a line logged while a bar is drawn, such as Lightning's
    "`Trainer.fit` stopped", does not start on the bar's line."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        with tqdm.external_write_mode(file=self.stream):
            super().emit(record)


class ConsoleFormatter(logging.Formatter):
    """The message alone (no time stamp or logger name: train.log has those); warnings and errors start
    with `warning:` / `error:`, and a Python warning ends with the place that raised it, shortened to
    the package's path (`[lightning/pytorch/loops/fit_loop.py:321]`) and without its source line."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record).rstrip()
        if record.name == "py.warnings":
            text = short_warning(text)
        if record.levelno >= logging.WARNING:
            text = f"{'warning' if record.levelno == logging.WARNING else 'error'}: {text}"
        return text


def short_warning(text: str) -> str:
    """`/.../site-packages/lightning/x.py:12: UserWarning: message\n  source` ->
    `message [lightning/x.py:12]`."""
    match = WARNING_TEXT.match(text)
    if match is None:
        return text
    lines = match["message"].rstrip().split("\n")
    if len(lines) > 1 and lines[-1].startswith("  "):  # the source line formatwarning appends
        lines = lines[:-1]
    where = match["file"].replace("\\", "/")
    where = where.rsplit("/site-packages/", 1)[-1] if "/site-packages/" in where else shown_path(where)
    category = f"{match['category']}: " if match["category"] not in (None, "UserWarning") else ""
    return f"{category}{chr(10).join(lines).rstrip()} [{where}:{match['line']}]"


def shown_path(path: Path | str) -> str:
    """`path` relative to the working directory when it is below it (shorter to read and to paste)."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def count(n: int) -> str:
    """1234 -> '1.2 K', 809152 -> '809 K', 12_345_678 -> '12.3 M'."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return str(n)


def model_summary(net: TokenModel) -> str:
    """One line: the model's class, its shape and its parameter count (shared weights counted once)."""
    total = sum(p.numel() for p in net.parameters())
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    shape = net.shape()
    params = f"{count(total)} parameters" + ("" if trainable == total else f" ({count(trainable)} trainable)")
    return f"Model: {type(net).__name__} ({shape}), {params}"


def run_summary(
    output_dir: Path, metrics: dict, best_ckpt: str | None, sae: bool = False, transcoder: bool = False
) -> list[str]:
    """The lines that end a run: its test metrics and where its files are, with the commands that open
    them (as `python -m transformer_lab.<tool>`: they work in a checkout and in an installed package).
    `sae`: a sparse dictionary's run (its answer keys' grades, and for an SAE, not a `transcoder`, the
    tools that read features)."""
    tests = "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k.startswith("test/"))
    run_dir = shown_path(output_dir)
    lines = [f"Test: {tests or 'skipped'}"]
    grades = [f"{k}={metrics[k]:.4f}" for k in SAE_GRADES if isinstance(metrics.get(k), int | float)]
    if grades:
        lines.append(f"Answer key: {'  '.join(grades)}")
    lines.append(f"Run directory: {run_dir}")
    lines.append(f"  metrics.json  {shown_path(output_dir / 'metrics.json')}")
    last = output_dir / "checkpoints" / "last.ckpt"
    if best_ckpt:
        score = metrics.get("best_score")
        scored = f" ({metrics['metric']}={score:.4f})" if isinstance(score, int | float) else ""
        lines.append(f"  best.ckpt     {shown_path(best_ckpt)}{scored}")
    elif last.is_file():  # stopped before its first validation: no best.ckpt, but the weights it reached
        lines.append(f"  last.ckpt     {shown_path(last)} (no validation ran, so there is no best.ckpt)")
    snapshots = output_dir / "checkpoints" / "snapshots"
    files = sorted(snapshots.glob("step_*.ckpt"))
    if files:
        size = sum(f.stat().st_size for f in files) / 1e6
        many = f"{len(files)} file{'s' * (len(files) != 1)}"
        lines.append(f"  snapshots     {shown_path(snapshots)}/ ({many}, {size:.1f} MB on disk)")
    if any(output_dir.rglob("events.out.tfevents.*")):  # none with fast_dev_run or ~logger
        lines.append(f"  TensorBoard   tensorboard --logdir {run_dir}")
    if transcoder:
        pass  # no tool reads a transcoder's run yet
    elif best_ckpt and sae:
        command = f"python -m transformer_lab.interpret analysis=features sae={shown_path(best_ckpt)}"
        lines.append(f"  Features      {command}")
    elif best_ckpt or last.is_file():
        explored = shown_path(best_ckpt or last)
        lines.append(f"  Explore       python -m transformer_lab.explore ckpt_path={explored}")
    if len(files) > 1:
        lines.append(
            f"  Over time     python -m transformer_lab.interpret ckpt_path={run_dir} analysis=dynamics"
        )
    return lines
