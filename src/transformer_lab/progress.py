"""Progress of a long step, where the user sees it: a bar on a terminal, a line every few seconds in a log.

    progress = Progress("Tokenizing", total=corpus.total_bytes, unit="MB", scale=1e6)
    for piece in pieces:
        ...
        progress.update(piece.nbytes)
    progress.close()            # Tokenizing: 200.0 MB in 64 s (3.1 MB/s)

On a terminal (stderr is a TTY) it is tqdm's bar. Written to a file or a pipe (a job's log, `| tee`), a
redrawn bar is kilobytes of carriage returns, and nothing at all is worse: a line every `EVERY` seconds
says how far it is, its rate and the time left,

    Tokenizing: 45.2 of 200.0 MB (23%), 3.1 MB/s, 50 s left

A run's lines go to its log (train.log) and its console through logging; a tool without logging set up
prints them to stderr. No torch here: the tools import this before anything heavy.
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger(__name__)
EVERY = 5.0  # seconds between two lines where no bar can be drawn


def say(line: str) -> None:
    """One line of progress: to the run's log and console where logging is set up (train.py), else to
    stderr (a tool)."""
    if logging.getLogger().hasHandlers():
        log.info(line)
    else:
        print(line, file=sys.stderr, flush=True)


class Progress:
    """Progress of `what` towards `total` units (None: unknown; counted only). `scale` divides the counts
    for display (bytes shown as MB: unit="MB", scale=1e6)."""

    def __init__(self, what: str, total: float | None = None, unit: str = "", scale: float = 1.0):
        self.what, self.total, self.unit, self.scale = what, total, unit, scale
        self.done = 0.0
        self.started = self.last = time.perf_counter()
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            scaled = 1 / scale if scale != 1.0 else False  # tqdm shows n * unit_scale
            self.bar = tqdm(
                total=total, desc=what, unit=unit or "it", unit_scale=scaled, file=sys.stderr, leave=False
            )

    def update(self, amount: float, note: str = "") -> None:
        """`amount` more units done; `note`: what the line or bar adds (`1.2 M tokens/s`)."""
        self.done += amount
        if self.bar is not None:
            self.bar.update(amount)
            if note:
                self.bar.set_postfix_str(note, refresh=False)
            return
        now = time.perf_counter()
        if now - self.last >= EVERY:
            self.last = now
            say(self.line(now, note))

    def line(self, now: float, note: str = "") -> str:
        """`Tokenizing: 45.2 of 200.0 MB (23%), 3.1 MB/s, 50 s left`."""
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        unit = f" {self.unit}" if self.unit else ""
        done = f"{self.done / self.scale:,.1f}" if self.scale != 1.0 else f"{self.done:,.0f}"
        if self.total:
            total = f"{self.total / self.scale:,.1f}" if self.scale != 1.0 else f"{self.total:,.0f}"
            left = (self.total - self.done) / rate if rate > 0 else float("inf")
            left_text = f", {left:.0f} s left" if left < float("inf") else ""
            text = f"{self.what}: {done} of {total}{unit} ({self.done / self.total:.0%})"
        else:
            text, left_text = f"{self.what}: {done}{unit}", ""
        per = f"{rate / self.scale:,.1f}{unit}/s" if self.scale != 1.0 else f"{rate:,.1f}{unit or ' it'}/s"
        return f"{text}, {per}{left_text}" + (f", {note}" if note else "")

    @property
    def elapsed(self) -> float:
        """Seconds since it started."""
        return time.perf_counter() - self.started

    def close(self, summary: str | None = None) -> None:
        """End the bar (a terminal's), then say `summary` if given (what was done, in how long)."""
        if self.bar is not None:
            self.bar.close()
        if summary is not None:
            say(summary)
