"""The one exception type for user mistakes: the entry points print its message as one line and exit 2."""

from collections.abc import Iterator
from contextlib import contextmanager


class ConfigError(ValueError):
    """A bad config value, path or argument. The message names the value and how to fix it."""


def require(condition: bool, message: str) -> None:
    """Raise ConfigError(message) unless `condition` holds."""
    if not condition:
        raise ConfigError(message)


class TrainingDiverged(ConfigError):
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
