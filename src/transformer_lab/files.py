"""Files written all at once and as the user's umask says, and files read only when they are what they seem.

write_atomically(path, lambda f: f.write(data))   # to a temporary file beside `path`, then renamed
"""

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from transformer_lab.errors import require
from transformer_lab.limits import size_text


def default_mode() -> int:
    """The permissions a new file gets under this process's umask (mkstemp's own files get 0600, which
    would make a shared run directory unreadable to the others who share it)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call `write(file)` on a temporary file in `path`'s folder, fsync it, give it the umask's
    permissions and rename it over `path`: a rename within one folder is atomic, so an interrupted or
    failed write (a killed process, a full disk) leaves the previous file intact and no temporary file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, default_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def require_regular_file(path: Path, what: str, max_bytes: int) -> None:
    """A one-line ConfigError unless `path` is a regular file (not a folder, a device such as /dev/zero,
    a FIFO that would block forever, or a symlink loop) of at most `max_bytes`."""
    try:
        is_file = path.is_file()
    except OSError as exc:  # a symlink loop, a path too long, ...
        require(False, f"{what}={path} cannot be read ({exc.strerror or exc}); point it at a file")
    require(path.exists(), f"{what}={path} does not exist")
    require(not path.is_dir(), f"{what}={path} is a folder; point it at a file")
    require(is_file, f"{what}={path} is not a regular file (a device or a pipe); point it at a file")
    size = path.stat().st_size
    require(
        size <= max_bytes,
        f"{what}={path} is {size_text(size)}, more than the {size_text(max_bytes)} this reads; use a "
        "smaller file",
    )
