"""Plumbing shared by the scripts: Hydra-style `key=value` arguments, device choice, one-line errors.

Nothing here imports torch at module level, so a script's `--help` and argument errors answer before
PyTorch is loaded (scripts parse their arguments first and import the heavy modules afterwards).
"""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING

from transformer_lab.errors import ConfigError, require

if TYPE_CHECKING:
    import torch


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a mistake on the command line raised as a ConfigError: `run` prints it as one line,
    `error: ...`, and exits 2 (argparse's own exit status for usage errors), instead of usage + error."""

    def error(self, message: str) -> typing.NoReturn:
        raise ConfigError(f"{message}; see {self.prog} --help")


def parse_key_values(argv: list[str] | None, keys: dict[str, str], description: str) -> dict[str, str]:
    """Parse `key=value` tokens (as Hydra does); `--help` lists `keys` with their descriptions."""
    parser = ArgumentParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="keys:\n" + "\n".join(f"  {key:<15} {text}" for key, text in keys.items()),
    )
    parser.add_argument("args", nargs="*", metavar="key=value")
    values = {}
    for token in parser.parse_args(argv).args:
        key, sep, value = token.partition("=")
        require(
            bool(sep) and key in keys, f"unknown argument {token!r}; use {' '.join(k + '=...' for k in keys)}"
        )
        values[key] = value
    return values


def to_number(args: dict[str, str], key: str, kind: type, default: int | float | None) -> int | float | None:
    """args[key] as an int or float (`null`/`none` -> None), or `default` when absent."""
    if key not in args:
        return default
    text = args[key]
    if text.lower() in ("null", "none", ""):
        return None
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{key}={text} is not {'an integer' if kind is int else 'a number'}") from None


def pick_device(name: str) -> torch.device:
    """`auto` (cuda, then mps, then cpu), or an explicit device that must be present."""
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    require(name in ("cpu", "cuda", "mps"), f"device={name} is unknown; use auto, cpu, cuda or mps")
    require(
        name != "cuda" or torch.cuda.is_available(),
        "device=cuda but no CUDA GPU is available; use device=cpu",
    )
    require(
        name != "mps" or torch.backends.mps.is_available(),
        "device=mps but MPS is not available; use device=cpu",
    )
    return torch.device(name)


def run(main: Callable[[list[str] | None], None], argv: list[str] | None = None) -> None:
    """Call main(argv); a user mistake (ConfigError) prints `error: <message>` and exits 2, no traceback.
    Output piped into a reader that stops early (`| head`) ends the script quietly."""
    try:
        main(argv)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        sys.stderr.close()  # nothing more can be written; keep Python from reporting the broken pipe
        sys.exit(0)
