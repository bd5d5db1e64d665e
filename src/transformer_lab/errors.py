"""The one exception type for user mistakes: the entry points print its message as one line and exit 2."""


class ConfigError(ValueError):
    """A bad config value, path or argument. The message names the value and how to fix it."""


def require(condition: bool, message: str) -> None:
    """Raise ConfigError(message) unless `condition` holds."""
    if not condition:
        raise ConfigError(message)


class TrainingDiverged(ConfigError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""
