"""Plumbing shared by the scripts: Hydra-style `key=value` arguments, device choice, one-line errors.

Nothing here imports torch at module level, so a script's `--help` and argument errors answer before
PyTorch is loaded (scripts parse their arguments first and import the heavy modules afterwards).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.errors import ConfigError, require

if TYPE_CHECKING:
    import torch

# What to do when the system refuses a path, by its error number; anything else: check the path.
PATH_FIXES = {
    errno.ENAMETOOLONG: "use a shorter path",
    errno.EACCES: "choose a place you may read and write",
    errno.EPERM: "choose a place you may read and write",
    errno.EROFS: "choose a place that is not read-only",
    errno.ENOSPC: "free some disk space or choose another disk",
    errno.EDQUOT: "free some disk space or choose another disk",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
}


def path_refused(exc: OSError) -> str:
    """What the system said about a path, and what to do: `File name too long; use a shorter path`."""
    return f"{exc.strerror or exc}; {PATH_FIXES.get(exc.errno, 'check the path')}"


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


MAX_PAIRS = 4096  # prompt pairs a pairs= file may hold
PROMPT_KEYS = ("clean", "corrupted", "answer", "wrong", "pairs")


def prompts(args: dict[str, str]) -> dict[str, list] | None:
    """A language model's clean and corrupted prompts from a tool's arguments (activation patching,
    circuits): clean= and corrupted= (one pair; answer= and wrong= name the next tokens compared), or
    pairs=<file.jsonl> (one JSON object a line: "clean", "corrupted", and "answer", "wrong" if wanted).
    None without them. As lists, for `Checkpoint.prompt_pairs`."""
    given = [k for k in PROMPT_KEYS if k in args]
    if not given:
        return None
    if "pairs" in args:
        require(
            given == ["pairs"], "pairs= holds the prompts; leave clean=, corrupted=, answer= and wrong= out"
        )
        from transformer_lab.files import read_text

        rows = []
        lines = [line for line in read_text(args["pairs"], 16 * 2**20).splitlines() if line.strip()]
        require(
            0 < len(lines) <= MAX_PAIRS,
            f"pairs={args['pairs']} holds {len(lines)} pairs; give 1 to {MAX_PAIRS}",
        )
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                raise ConfigError(f"pairs={args['pairs']} line {number} is not a JSON object") from None
            ok = isinstance(row, dict) and all(isinstance(row.get(k), str) for k in ("clean", "corrupted"))
            ok = ok and all(isinstance(row.get(k), str | None) for k in ("answer", "wrong"))
            ok = ok and set(row) <= {"clean", "corrupted", "answer", "wrong"}
            require(
                ok,
                f'pairs={args["pairs"]} line {number} must be {{"clean": "...", "corrupted": "...", '
                '"answer": "..." (optional), "wrong": "..." (optional)}',
            )
            rows.append(row)
        return {k: [row.get(k) for row in rows] for k in ("clean", "corrupted", "answer", "wrong")}
    require(
        "clean" in args and "corrupted" in args,
        'give both prompts: clean="..." corrupted="..." (of as many tokens), or pairs=<file.jsonl>',
    )
    return {k: [args.get(k)] for k in ("clean", "corrupted", "answer", "wrong")}


def ci_level(args: dict[str, str], examples: int) -> float:
    """`ci=`: the level of the printed intervals (default 0.95; 0: none) of a score over `examples`
    examples; too few for an interval give none, said in a line (`intervals.level_for`)."""
    from transformer_lab.analysis.intervals import level_for

    level, line = level_for(args.get("ci"), examples)
    if line:
        print(line)
    return level


def within_budget(
    model, probe: tuple, count: int, passes: int, what: str, seconds: float | None = None,
    sets: str = "num_examples= sets it",
) -> int:  # fmt: skip
    """How many of `count` examples `passes` forward passes each fit the time budget, at the cost
    `analysis.budget` estimates on `probe` (a few examples' inputs), said in a line when fewer."""
    from transformer_lab.analysis.budget import examples_within

    count, line = examples_within(model, probe, passes, count, what, seconds, sets)
    if line:
        print(line)
    return count


def output_file(text: str, key: str, example: str) -> Path:
    """`key=text` as a file to write, checked before any work is done: its folder exists and can be
    written, and it is not a folder itself."""
    require(text.strip() != "", f"{key}= is empty; name the file to write, e.g. {key}={example}")
    path = Path(text).expanduser()
    try:
        require(
            not path.is_dir(), f"{key}={text} is a folder; name a file in it, e.g. {key}={path / example}"
        )
        _require_writable(path.parent, key, text)
    except OSError as exc:  # a name too long, a symlink loop, ...
        raise ConfigError(f"{key}={text}: {path_refused(exc)}") from None
    return path


def is_file(text: str, key: str) -> bool:
    """Whether `key=text` names an existing file; a path the system refuses (a name too long, a symlink
    loop) is a ConfigError naming it, not an OSError half-way through the work."""
    try:
        return Path(text).expanduser().is_file()
    except OSError as exc:
        raise ConfigError(f"{key}={text}: {path_refused(exc)}") from None


def output_dir(text: str, key: str) -> Path:
    """`key=text` as a folder to write files into (created if missing), checked before any work is done:
    it, or the nearest folder above it that exists, can be written."""
    require(text.strip() != "", f"{key}= is empty; name a folder to write into")
    path = Path(text).expanduser()
    try:
        require(
            not path.exists() or path.is_dir(), f"{key}={text} is a file, not a folder; choose another {key}="
        )
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        _require_writable(existing, key, text)
    except OSError as exc:  # a name too long, a symlink loop, ...
        raise ConfigError(f"{key}={text}: {path_refused(exc)}") from None
    return path


def _require_writable(folder: Path, key: str, text: str) -> None:
    where = f"{key}={text}: the folder {folder}"
    require(folder.exists(), f"{where} does not exist; create it or choose another {key}=")
    require(folder.is_dir(), f"{where} is a file, not a folder; choose another {key}=")

    require(
        os.access(folder, os.W_OK | os.X_OK),
        f"{key}={text}: the folder {folder} is not writable; choose another {key}=",
    )


def starting(what: str) -> None:
    """A tool's first line on a terminal, before PyTorch loads (seconds on a laptop): what it is about to
    do, so the command answers at once (`Loading pretrained:shakespeare`). Not in a pipe or a log, where
    no one waits on it and a refusal stays the one line it is."""
    if sys.stderr.isatty():
        print(what, file=sys.stderr, flush=True)


def pick_device(name: str) -> torch.device:
    """`auto` (cuda, then mps, then cpu), or an explicit device that must be present. Also sets torch's
    threads for the tool (`limits.choose_threads`: the cores free now, unless OMP_NUM_THREADS says)."""
    import torch

    from transformer_lab.limits import choose_threads

    torch.set_num_threads(choose_threads()[0])
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
    """Call main(argv); a user mistake (ConfigError) prints `error: <message>` and exits 2, no traceback;
    a path the system refuses (too long, no permission, a full disk) one line naming it, exit 1; Ctrl-C
    one line, exit 130, and SIGTERM one line, exit 143 (`signals`), each after the `finally` clauses
    removed what was half made. Output piped into a reader that stops early (`| head`) ends quietly."""
    from transformer_lab import signals

    signals.install()
    try:
        main(argv)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: stopped by Ctrl-C", file=sys.stderr)
        sys.exit(130)
    except signals.Stop as stop:
        print(f"error: {stop}", file=sys.stderr)
        sys.exit(stop.exit_status)
    except BrokenPipeError:
        sys.stderr.close()  # nothing more can be written; keep Python from reporting the broken pipe
        sys.exit(0)
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{path_refused(error)}", file=sys.stderr)
        sys.exit(1)
