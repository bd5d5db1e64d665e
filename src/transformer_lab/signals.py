"""SIGTERM ends every command as Ctrl-C does: one line, its own exit status, nothing half-made left behind.

Python turns Ctrl-C (SIGINT) into `KeyboardInterrupt`, which unwinds the program through its `finally`
and `except BaseException` clauses: temporary files and folders are removed, a run directory that holds
nothing yet is removed, and the entry point prints one line. SIGTERM (a scheduler's time limit, `kill`)
by default ends the process on the spot with none of that: a run directory is left without a
checkpoint, a temporary folder stays in the cache. `install()` makes SIGTERM raise `Stop` instead, so it
unwinds the same way; the entry points print `error: stopped by SIGTERM ...` and exit 143 (128 + 15, the
status of a process the signal ended).

While Lightning fits or tests, it installs its own SIGTERM handler, which saves last.ckpt and stops at
the end of a batch (`training.run` says how to resume), and calls the one it replaced (this one) too:
`Stop` is raised only while this handler is the process's own, so never inside a training step.
"""

from __future__ import annotations

import signal
import threading


class Stop(BaseException):
    """The process was asked to stop by SIGTERM. A BaseException, as KeyboardInterrupt is, so that no
    `except Exception` swallows it; `exit_status` is 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        self.signal_name = signal.Signals(signum).name
        self.exit_status = 128 + signum
        super().__init__(f"stopped by {self.signal_name}")


def _raise(signum: int, frame: object) -> None:
    if signal.getsignal(signum) is _raise:  # else Lightning's handler runs and calls this one too
        raise Stop(signum)


def install() -> None:
    """SIGTERM raises `Stop` from now on (in the main thread), unless the process was started with
    another handler for it (a launcher's, or SIGTERM ignored)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        _raise,
    ):
        signal.signal(signal.SIGTERM, _raise)
