"""The run directory: claimed and locked before Hydra writes into it, and removed again after a config
mistake.

One run, one directory. `claim` creates it and takes an OS lock on it (`flock`: the kernel releases it
when the process ends, however it ends, so a killed run can be resumed at once); a second run into the
same directory is refused while the first holds it. A default, timestamped name that is taken (two runs
started in the same second) gets a suffix instead; an explicit `hydra.run.dir` that holds another run is
refused unless `resume=` continues it.

The ranks > 0 of a DDP run join the directory of rank 0: Lightning starts them as children of rank 0,
which names itself and its locked directory in `RANK_ENV`. A process is a joining rank only when that
holds (its parent is the process named, which still holds the lock on the directory it is told to
join), never because a variable such as `LOCAL_RANK` says so. A directory whose contents hold a symlink
is refused (a resumed run would write through it), and the temporary files of a save that was killed
are removed once the lock is held.
"""

import fcntl
import os
import shutil
import time
from pathlib import Path

import yaml

from transformer_lab.errors import ConfigError, require
from transformer_lab.files import read_yaml, stale_temporary_files, write_text

RUN_FILES = (".hydra", "checkpoints", "metrics.json", "train.log")  # what makes a directory hold a run
_held: list[int] = []  # the locked directories' descriptors, open for the life of the process
_created: set[Path] = set()  # the directories this process made (a refused run removes no other)


RANK_ENV = "TRANSFORMER_LAB_RUN_LOCK"  # "<pid>:<directory>" of the process that holds a run's lock
RANK_VARIABLES = ("LOCAL_RANK", "RANK", "NODE_RANK", "GROUP_RANK")  # what launchers set for ranks > 0
MAX_ENTRIES = 100_000  # a run directory holds a few hundred files


def joining_ddp_run(overrides: list[str]) -> bool:
    """Whether this process is a rank > 0 of a DDP run that its parent leads: the parent named itself in
    `RANK_ENV` and still holds the lock on the directory this process is told to join (`hydra.run.dir`).
    A rank variable in the environment without that (left over in a shell, set by hand) is refused."""
    pid, _, directory = os.environ.get(RANK_ENV, "").partition(":")
    given = [o.partition("=")[2].strip("'\"") for o in overrides if o.startswith("hydra.run.dir=")]
    joining = (
        pid == str(os.getppid())
        and bool(given)
        and Path(given[-1]).expanduser().resolve() == Path(directory)
        and _held_by_another(Path(directory))
    )
    ranks = {v: os.environ[v] for v in RANK_VARIABLES if os.environ.get(v, "0") not in ("", "0")}
    require(
        joining or not ranks,
        f"{', '.join(f'{k}={v}' for k, v in ranks.items())} is set in the environment, but this process was "
        "not started by a training run as one of its DDP ranks; unset it (Lightning starts the ranks of "
        "trainer=ddp itself)",
    )
    return joining


def _held_by_another(directory: Path) -> bool:
    """Whether another process holds the run lock on `directory` now."""
    if not directory.is_dir():
        return False
    fd = _lock(directory)
    if fd is None:
        return True
    os.close(fd)
    return False


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
            saved = any((candidate / "checkpoints" / n).is_file() for n in ("last.ckpt", "best.ckpt"))
            raise ConfigError(
                f"{candidate} holds another run; choose another hydra.run.dir, or continue that run with "
                f"resume={candidate}"
                if saved
                else f"{candidate} holds a run that stopped before saving any checkpoint (its train.log says "
                "how), so there is nothing to resume; remove the folder, or choose another hydra.run.dir"
            )
        if not taken:
            made = [p for p in (candidate, *candidate.parents) if not p.exists()]
            candidate.mkdir(parents=True, exist_ok=True)
            _created.update(path for path in made if path.is_dir())
            fd = _lock(candidate)
            if fd is not None and (resuming or not holds_run(candidate)):
                _held.append(fd)
                require_no_symlinks(candidate)
                for stale in stale_temporary_files(candidate / "checkpoints"):
                    stale.unlink()
                for stale in stale_temporary_files(candidate / "checkpoints" / "snapshots"):
                    stale.unlink()
                os.environ[RANK_ENV] = f"{os.getpid()}:{candidate.resolve()}"  # for the DDP ranks it starts
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


def require_no_symlinks(directory: Path) -> None:
    """A one-line error for a symlink anywhere inside a run directory (a run folder from someone else):
    a run writes its files in place (`train.log`, `metrics.json`, `.hydra/resumes.yaml`, its events), and
    would write through a link to wherever it points."""
    count = 0
    for parent, dirs, names in os.walk(directory):  # symlinked folders are listed, not entered
        count += len(dirs) + len(names)
        require(count <= MAX_ENTRIES, f"{directory} holds more than {MAX_ENTRIES} entries: it is not a run")
        for name in [*dirs, *names]:
            path = Path(parent) / name
            require(
                not path.is_symlink(),
                f"{path} is a symlink: a run directory holds only its own files, and the run would write "
                "through it; replace it with the file itself (or copy the run without links)",
            )


def release_all() -> None:
    """Give the locks back (a process that ends releases them anyway)."""
    while _held:
        os.close(_held.pop())
    if os.environ.get(RANK_ENV, "").startswith(f"{os.getpid()}:"):
        del os.environ[RANK_ENV]


def record_resume(directory: Path, command_line: list[str]) -> None:
    """Append this resumption's command line to `.hydra/resumes.yaml`, beside the run's first config."""
    record = directory / ".hydra" / "resumes.yaml"
    entries = read_yaml(record) if record.exists() else []
    require(
        isinstance(entries, list),
        f"{record} is not a list of resumptions; remove it (it only records how the run was resumed)",
    )
    entries.append({"at": time.strftime("%Y-%m-%d %H:%M:%S"), "overrides": list(command_line)})
    record.parent.mkdir(parents=True, exist_ok=True)
    write_text(record, yaml.safe_dump(entries, sort_keys=False))


def remove_unused_run_dir(output_dir: Path) -> None:
    """After a config error: remove the run directory made for this run if it holds nothing but Hydra's
    own files (`.hydra/`, the log) and, in a directory this process made, the TensorBoard files a fit
    writes as it starts (a mistake found then, such as a batch larger than the data), so a mistake leaves
    no run behind for summarize.py to list. A directory this process did not make keeps itself and its
    files (its `.hydra/` and log of this attempt go)."""
    if not output_dir.is_dir():
        return
    names = {p.name for p in output_dir.iterdir()}
    made_here = output_dir.resolve() in {p.resolve() for p in _created}
    starts = {n for n in names if made_here and (n.startswith("events.out.tfevents.") or n == "hparams.yaml")}
    if not names - starts <= {".hydra", "train.log"}:
        return
    for name in starts:
        (output_dir / name).unlink(missing_ok=True)
    shutil.rmtree(output_dir / ".hydra", ignore_errors=True)
    (output_dir / "train.log").unlink(missing_ok=True)
    for made in sorted(_created, key=lambda p: len(p.parts), reverse=True):  # the deepest first
        if made.is_dir() and not any(made.iterdir()):
            made.rmdir()  # made by this run and empty: also saved_models/<task>/ of a first, failed run
