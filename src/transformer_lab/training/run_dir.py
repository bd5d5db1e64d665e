"""The run directory: claimed and locked before Hydra writes into it, and removed again after a config
mistake.

One run, one directory. `claim` creates it and takes an OS lock on it (`flock`: the kernel releases it
when the process ends, however it ends, so a killed run can be resumed at once); a second run into the
same directory is refused while the first holds it. A default, timestamped name that is taken (two runs
started in the same second) gets a suffix instead; an explicit `hydra.run.dir` that holds another run is
refused unless `resume=` continues it. The ranks > 0 of a DDP run join the directory of rank 0.
"""

import fcntl
import os
import shutil
import time
from pathlib import Path

import yaml

from transformer_lab.errors import ConfigError, require

RUN_FILES = (".hydra", "checkpoints", "metrics.json", "train.log")  # what makes a directory hold a run
_held: list[int] = []  # the locked directories' descriptors, open for the life of the process
_created: set[Path] = set()  # the directories this process made (a refused run removes no other)


def joining_ddp_run(overrides: list[str]) -> bool:
    """Whether this process is a rank > 0 of a DDP run, started by Lightning into rank 0's directory."""
    return any(o.startswith("hydra.job.name=train_ddp_process_") for o in overrides) or os.environ.get(
        "LOCAL_RANK", "0"
    ) not in ("", "0")


def holds_run(directory: Path) -> bool:
    return directory.is_dir() and any((directory / name).exists() for name in RUN_FILES)


def _require_writable(directory: Path) -> None:
    existing = directory
    while not existing.exists():
        existing = existing.parent
    require(
        existing.is_dir() and os.access(existing, os.W_OK | os.X_OK),
        f"cannot create the run directory {directory}: {existing} is not a writable directory; set "
        "paths.log_dir to a writable place",
    )


def _lock(directory: Path) -> int | None:
    """An exclusive lock on the directory, or None if another process holds it."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def claim(directory: Path, explicit: bool, resuming: bool) -> Path:
    """Create and lock the run (or sweep) directory; return the one claimed (`directory`, or, for a
    default name that is taken, `directory_1`, `directory_2`, ...)."""
    _require_writable(directory)
    candidate = directory
    for attempt in range(1, 1000):
        taken = holds_run(candidate) and not resuming
        if taken and explicit:
            raise ConfigError(
                f"{candidate} holds another run; choose another hydra.run.dir, or continue that run with "
                f"resume={candidate}"
            )
        if not taken:
            made = [candidate, *(p for p in candidate.parents if not p.exists())]
            candidate.mkdir(parents=True, exist_ok=True)
            _created.update(path for path in made if path.is_dir())
            fd = _lock(candidate)
            if fd is not None and (resuming or not holds_run(candidate)):
                _held.append(fd)
                return candidate
            if fd is not None:
                os.close(fd)  # another run took it between the look and the lock
            elif explicit or resuming:
                raise ConfigError(
                    f"{candidate} is in use by a training run that is still going; wait for it to end "
                    "(or stop it), or choose another directory"
                )
        candidate = directory.with_name(f"{directory.name}_{attempt}")
    raise ConfigError(f"no free run directory next to {directory}; choose one with hydra.run.dir=")


def release_all() -> None:
    """Give the locks back (a process that ends releases them anyway)."""
    while _held:
        os.close(_held.pop())


def record_resume(directory: Path, command_line: list[str]) -> None:
    """Append this resumption's command line to `.hydra/resumes.yaml`, beside the run's first config."""
    record = directory / ".hydra" / "resumes.yaml"
    entries = yaml.safe_load(record.read_text()) if record.is_file() else []
    entries = entries if isinstance(entries, list) else []
    entries.append({"at": time.strftime("%Y-%m-%d %H:%M:%S"), "overrides": list(command_line)})
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(yaml.safe_dump(entries, sort_keys=False))


def remove_unused_run_dir(output_dir: Path) -> None:
    """After a config error: remove the run directory made for this run if it holds nothing but Hydra's
    own files (`.hydra/`, the log), so a mistake leaves no run behind for summarize.py to list. A
    directory this process did not make keeps itself (its `.hydra/` and log of this attempt go)."""
    if not output_dir.is_dir() or not {p.name for p in output_dir.iterdir()} <= {".hydra", "train.log"}:
        return
    shutil.rmtree(output_dir / ".hydra", ignore_errors=True)
    (output_dir / "train.log").unlink(missing_ok=True)
    for made in sorted(_created, key=lambda p: len(p.parts), reverse=True):  # the deepest first
        if made.is_dir() and not any(made.iterdir()):
            made.rmdir()  # made by this run and empty: also saved_models/<task>/ of a first, failed run
