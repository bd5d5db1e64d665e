"""The exceptions the entry points print as one line, `error: <message>`, without a traceback:

ConfigError       a user's mistake (a value, a path, an argument, a file made by someone else): exit 2,
                  before anything is run
TrainingFailed    a run that could not go on (the loss diverged, the disk is full): exit 1, with what
                  was kept
Terminated        a run asked to stop (SIGTERM: a scheduler's time limit, `kill`; or Ctrl-C): last.ckpt
                  saved, exit 143 or 130 (128 + the signal's number, as a process the signal ended),
                  saying how to resume
"""

from collections.abc import Iterator
from contextlib import contextmanager


class ConfigError(ValueError):
    """A bad config value, path or argument. The message names the value and how to fix it."""


def require(condition: bool, message: str) -> None:
    """Raise ConfigError(message) unless `condition` holds."""
    if not condition:
        raise ConfigError(message)


class TrainingFailed(RuntimeError):
    """Training stopped on a failure that is not a config mistake; the message says what was kept."""


class Terminated(RuntimeError):
    """The run stopped on a signal (SIGTERM, or SIGINT: Ctrl-C) after saving last.ckpt; the message says
    how to resume it. `exit_status` is 128 + the signal's number, as for a process the signal ended."""

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class TrainingDiverged(TrainingFailed):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""


@contextmanager
def as_config_error() -> Iterator[None]:
    """Inside: a ValueError (what `transformer_lab.nn`, pure PyTorch, raises for a bad argument) becomes
    a ConfigError, printed as one line. Wrap only calls that take the user's values."""
    try:
        yield
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(str(exc)) from exc
