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


_pending: list[BaseException] = []  # the signals received, as the exceptions they raised


def _raise(signum: int, frame: object) -> None:
    if signal.getsignal(signum) is _raise:  # else Lightning's handler runs and calls this one too
        _pending.append(Stop(signum))
        raise _pending[-1]


def _interrupt(signum: int, frame: object) -> None:
    """Ctrl-C: KeyboardInterrupt, as Python's own handler raises it, remembered."""
    _pending.append(KeyboardInterrupt())
    raise _pending[-1]


def received() -> int:
    """How many signals this process has received: pass it to `raise_pending` when a read begins."""
    return len(_pending)


def raise_pending(since: int) -> None:
    """Raise the last signal received since `received()` was `since`, if one came: for a reader whose
    library turned the exception a signal raised inside it into an error of its own (torch.load's
    unpickler reports "could not determine the shape ..."), so that the signal ends the command, not a
    wrong verdict on the file."""
    if len(_pending) > since:
        raise _pending[-1]


def install() -> None:
    """SIGTERM raises `Stop` from now on (in the main thread), unless the process was started with
    another handler for it (a launcher's, or SIGTERM ignored); both it and Ctrl-C are remembered
    (`raise_pending`)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, _raise):
        signal.signal(signal.SIGTERM, _raise)
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _interrupt):
        signal.signal(signal.SIGINT, _interrupt)
