"""Files written all at once and as the user's umask says, and files read only when they are what they seem.

    write_atomically(path, lambda f: f.write(data))   # to a temporary file beside `path`, then renamed
    read_yaml(run / ".hydra" / "overrides.yaml")      # a run's file, made by whoever made the run
    with reading("data.path: corpus/a.parquet"):     # the one boundary for files from elsewhere
        ...                                           # any failure inside: one ConfigError naming the file

Everything a run directory holds may come from someone else (a run folder copied from a colleague, an
experiment file on a search path), so the readers here refuse, in one line naming the file, what would
hang, exhaust the machine or read elsewhere: a FIFO or a device (opened without blocking, then refused),
a symlink (never followed), a file larger than a run file can be, and YAML aliases (a 500-byte file whose
aliases expand to 10^9 nodes).
"""

import contextlib
import glob
import hashlib
import json
import math
import os
import re
import shutil
import stat
import struct
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import yaml

from transformer_lab import signals
from transformer_lab.errors import ConfigError, require
from transformer_lab.limits import require_memory, size_text

MAX_RUN_FILE = 16 * 2**20  # a run's config, overrides or metrics are kilobytes
MAX_REASON = 160  # characters of a library's own message kept in the one line


def first_line(exc: BaseException) -> str:
    """A library's message as a short phrase: its first line, spaces collapsed, cut at `MAX_REASON`."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[0].split()) if lines else type(exc).__name__
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


@contextmanager
def reading(what: str, failed: str = "cannot be read") -> Iterator[None]:
    """The one boundary for files from elsewhere: inside it, reading or parsing a file that a user or
    someone else made (a corpus, a tokenizer, a config, weights, a run's files) can fail only as a
    one-line ConfigError that names `what` (the file, and the key that named it).

    Libraries fail in their own ways on a bad file: `OSError: Corrupt snappy compressed data` (pyarrow),
    `SafetensorError`, `TypeError: unhashable type`, and the Rust libraries' `PanicException`, which
    derives from BaseException, so that `except Exception` misses it. Every one becomes `<what> <failed>
    (<the library's first line>)`; the program then ends as after any config error (exit 2, nothing left
    behind). Only what stops the program on purpose passes through: Ctrl-C, SIGTERM (`signals`), exit.
    MemoryError is named as what it is: the file asks for more memory than there is."""
    from transformer_lab.signals import Stop

    since = signals.received()
    try:
        yield
    except (ConfigError, KeyboardInterrupt, SystemExit, GeneratorExit, Stop):
        raise
    except MemoryError:
        raise ConfigError(f"{what} {failed}: it needs more memory than this machine has free") from None
    except RecursionError as exc:
        raise ConfigError(f"{what} {failed} (it is nested too deeply)") from exc
    except BaseException as exc:  # native libraries' panics are BaseExceptions
        signals.raise_pending(since)  # a signal the library turned into an error of its own: the signal
        kind = "the library under it panicked: " if type(exc).__name__ == "PanicException" else ""
        raise ConfigError(f"{what} {failed} ({kind}{first_line(exc)})") from exc


def default_mode() -> int:
    """The permissions a new file gets under this process's umask (mkstemp's own files get 0600, which
    would make a shared run directory unreadable to the others who share it)."""
    return 0o666 & ~_umask()


def write_atomically(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call `write(file)` on a temporary file in `path`'s folder, fsync it, give it the umask's
    permissions and rename it over `path`: a rename within one folder is atomic, so an interrupted or
    failed write (a killed process, a full disk) leaves the previous file intact and no temporary file;
    and a rename replaces a symlink at `path` instead of writing through it."""
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


def write_text(path: str | Path, text: str) -> Path:
    """`text` written to `path` all at once (`write_atomically`), never through a symlink."""
    return write_atomically(path, lambda f: f.write(text.encode()))


def write_figure(path: str | Path, figure: object, dpi: int = 100) -> Path:
    """A matplotlib figure saved to `path` all at once (`write_atomically`), in the format its suffix
    names (.png, .svg): an interrupted save leaves the previous figure, and no file half written."""
    path = Path(path)
    return write_atomically(path, lambda f: figure.savefig(f, format=path.suffix[1:] or "png", dpi=dpi))


MANIFEST = "transformer-lab-export.json"  # what an export wrote: its format and each file's sha256


def sha256_of(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path, kind: str, source: str) -> None:
    """Record in `folder` what this project wrote there: `kind` (the format), `source` (what it was made
    from) and each file's sha256, so that a later write knows its own earlier output (`own_folder`)."""
    files = {p.name: sha256_of(p) for p in sorted(folder.iterdir()) if p.name != MANIFEST}
    record = {"written_by": "transformer-lab", "format": kind, "source": source, "files": files}
    write_text(folder / MANIFEST, json.dumps(record, indent=1) + "\n")


def own_folder(out: Path, kind: str) -> str | None:
    """None if `out` holds exactly what this project wrote there as `kind` (its manifest's files, each a
    regular file with the sha256 it had), else what is wrong with it, in a few words."""
    entries = {p.name: p for p in out.iterdir()}
    if MANIFEST not in entries:
        names = sorted(entries)
        return f"holds {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}, which this did not write"
    try:
        record = json.loads(read_text(entries[MANIFEST]))
        files, written = record["files"], record["format"]
        require(isinstance(files, dict) and isinstance(written, str), "")
    except (ConfigError, ValueError, KeyError, TypeError):
        return f"holds a {MANIFEST} this did not write"
    if written != kind:
        return f"holds a to={written} export"
    for name, path in sorted(entries.items()):
        if name == MANIFEST:
            continue
        if name not in files or path.is_symlink() or not path.is_file():
            return f"holds {name}, which this did not write"
        if sha256_of(path) != files[name]:
            return f"holds {name} changed since this wrote it"
    return None


def require_replaceable(
    out: Path, key: str, kind: str, overwrite: bool = False, sources: tuple[Path, ...] = ()
) -> None:
    """A one-line ConfigError unless `out` may be replaced by a new folder of results of `kind`: missing,
    empty, or this project's own earlier output of that kind (`own_folder`: known by its manifest, not
    by its file names), or, with `overwrite`, any folder but a symlink. Never a folder that is, or holds,
    one of `sources` (what the results are made from: a model's own folder or run), whatever `overwrite`
    says. Checked before any work is done."""
    require(not out.is_symlink(), f"{key}={out} is a symlink; name a folder of its own to write into")
    here = out.resolve()
    for source in sources:
        found = source.resolve()
        require(
            not (found == here or here in found.parents),
            f"{key}={out} {'is' if found == here else 'holds'} {source}, which this is made from; write it "
            "to another folder (overwrite=true never replaces a model's own source)",
        )
    if out.exists() and not overwrite:
        require(out.is_dir(), f"{key}={out} is a file, not a folder; name a folder to write into")
        wrong = own_folder(out, kind) if any(out.iterdir()) else None
        require(
            wrong is None,
            f"{key}={out} {wrong}; choose a new or empty folder, or add overwrite=true to replace it whole",
        )


@contextmanager
def replacing_folder(
    out: Path, key: str, kind: str, overwrite: bool = False, sources: tuple[Path, ...] = ()
) -> Iterator[Path]:
    """A new, empty folder beside `out` to write a folder of results into; when the block ends without
    an error, it is renamed to `out` (replacing a previous one whole, `require_replaceable`; with
    `overwrite` whatever is there, its links removed, never followed). An error, Ctrl-C or SIGTERM inside
    removes it, so `out` is never half written: a library pointed at it finds the previous result or none,
    never a model without its vocabulary. Its files get the umask's permissions (as any new file; some
    libraries write theirs 0600). A folder left by a process that was killed (SIGKILL runs no cleanup) is
    removed at the next write."""
    require_replaceable(out, key, kind, overwrite, sources)
    prefix = f".{out.name}."
    for stale in out.parent.glob(f"{glob.escape(prefix)}*.tmp"):
        pid = stale.name.removeprefix(prefix).split(".")[0]
        if stale.is_dir() and not stale.is_symlink() and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]  # out= in folders to be made
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = out.parent / f"{prefix}{os.getpid()}.tmp"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        yield folder
        for path in folder.rglob("*"):  # the umask's permissions: some writers (safetensors) make 0600 files
            if path.is_file() and not path.is_symlink():
                os.chmod(path, default_mode())
        if out.exists():
            old = out.parent / f"{prefix}{os.getpid()}.old.tmp"
            os.rename(out, old)
            os.rename(folder, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(folder, out)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        for parent in made:  # the deepest first: what this made for out=, now empty
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def stale_temporary_files(folder: Path) -> list[Path]:
    """The temporary files `write_atomically` leaves when its process is killed mid-write (SIGKILL runs
    no cleanup): `.<name>.<random>.tmp`. Only the folder's owner, holding its lock, may remove them."""
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp") and p.is_file()]


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


def read_bytes(path: str | Path, max_bytes: int = MAX_RUN_FILE) -> bytes:
    """The bytes of a file someone else may have made: a one-line ConfigError, naming it, for a symlink,
    a FIFO, a device or a folder (none is opened in a way that could block), or a file over `max_bytes`."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist") from None
    except OSError as exc:  # ELOOP: the last part is a symlink (O_NOFOLLOW); EACCES; ...
        why = "it is a symlink, which a run file never is" if os.path.islink(path) else exc.strerror
        raise ConfigError(f"{path} cannot be read: {why}; replace it with the file itself") from None
    try:
        info = os.fstat(fd)
        require(
            stat.S_ISREG(info.st_mode),
            f"{path} is not a regular file (a folder, a pipe or a device); replace it with the file itself",
        )
        require(
            info.st_size <= max_bytes,
            f"{path} is {size_text(info.st_size)}, more than the {size_text(max_bytes)} a file of a run can "
            "be; it is not a file this wrote",
        )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
        require(len(data) <= max_bytes, f"{path} grew past {size_text(max_bytes)} while it was read")
        return data
    finally:
        os.close(fd)


def read_text(path: str | Path, max_bytes: int = MAX_RUN_FILE) -> str:
    """`read_bytes` as UTF-8 text (a file that is not text is a one-line error naming it)."""
    try:
        return read_bytes(path, max_bytes).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {exc.start}); replace it with the file itself"
        ) from None


class _NoAliases(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases: no file of a run needs them, and nested aliases
    make a file of a few hundred bytes expand to billions of nodes."""

    def compose_node(self, parent: object, index: object) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.YAMLError(f"an alias (*name) at line {mark.line + 1}: aliases are not read here")
        return super().compose_node(parent, index)


def read_yaml(path: str | Path, max_bytes: int = MAX_RUN_FILE) -> object:
    """A YAML file of a run or of a shared config, read as plain data (`read_text`, no aliases, no
    tags); a one-line ConfigError naming the file where it is not valid YAML."""
    text = read_text(path, max_bytes)
    try:
        return yaml.load(text, Loader=_NoAliases)  # a SafeLoader, without aliases
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            f"{path} is not valid YAML ({' '.join(str(problem).split())}{where}); fix or remove the file"
        ) from None


def read_json(path: str | Path, max_bytes: int = MAX_RUN_FILE) -> object:
    """A JSON file of a run (`read_text`); a one-line ConfigError naming it where it is not JSON."""
    try:
        return json.loads(read_text(path, max_bytes))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); fix or remove it"
        ) from None


# ---------------------------------------------------------------------- files torch.save wrote
MAX_PICKLE = 64 * 2**20  # a checkpoint's pickle holds its structure only (kilobytes): tensors are apart


def require_small_unpacked(file: Path) -> None:
    """Before torch reads the archive: its pickle at most `MAX_PICKLE`, and everything it would inflate
    into memory (the pickle, and any compressed member; stored tensors are memory-mapped) within what the
    machine has free, by the sizes the zip's directory states (a 1.7 MB file can inflate to 1.6 GB)."""
    try:
        with zipfile.ZipFile(file) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ConfigError(
            f"{file} is not a readable checkpoint (truncated, or not a torch file): {exc}"
        ) from None
    pickles = [m for m in members if m.filename.endswith("data.pkl")]
    require(
        all(m.file_size <= MAX_PICKLE for m in pickles),
        f"{file} is not a checkpoint this reads: its pickle unpacks to "
        f"{size_text(max(m.file_size for m in pickles))}, more than {size_text(MAX_PICKLE)} (a checkpoint's "
        "is kilobytes); it was not written by torch.save of a model",
    )
    inflated = sum(m.file_size for m in members if m in pickles or m.compress_type != zipfile.ZIP_STORED)
    require_memory(inflated, f"unpacking {file}", "it is not a checkpoint this machine can read")


def unpickling_refusal(path: Path, exc: Exception) -> ConfigError:
    """torch.load's refusal of a pickle that names code, as one clean line (torch's own message spans
    several lines with terminal colour codes)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text) or re.search(
        r"Unsupported operand \d+|Unsupported class [\w.]+", text
    )
    what = f"a reference to {found.group(1)}" if found and found.groups() else "objects other than tensors"
    return ConfigError(
        f"refusing to load {path}: it holds {what}, which unpickling would run (a checkpoint holds only "
        "tensors and plain values, and unpickling anything else could run code)"
    )


# ------------------------------------------------------------------------------ safetensors files
MAX_HEADER = 100 * 2**20  # safetensors' own limit on a header
DTYPE_BYTES = {  # every dtype of the safetensors format, by its size in bytes
    **{"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1},
    **{"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1},
}


def safetensors_header(path: Path, location: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A safetensors file's header, read and checked by hand before the library maps the file: name ->
    (dtype, shape), every tensor's bytes inside the file, one after the other (one-line ConfigErrors
    naming `location` otherwise). Every reader of safetensors files from elsewhere starts here."""
    require(path.exists(), f"{location}: the weights file {path.name} is missing")
    require_regular_file(path, "file", 1 << 50)
    size = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        require(len(prefix) == 8, f"{location}: {path.name} is not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", prefix)
        require(
            length <= min(MAX_HEADER, size - 8),
            f"{location}: {path.name} is not a safetensors file this reads: its header claims "
            f"{size_text(length)} (the file has {size_text(size)})",
        )
        try:
            header = json.loads(f.read(length))
        except ValueError as exc:
            raise ConfigError(f"{location}: {path.name} has a header that is not JSON ({exc})") from None
    require(isinstance(header, dict), f"{location}: {path.name}'s header is not a JSON object")
    out = {}
    spans = []
    data = size - 8 - length  # the bytes after the header: every tensor's, one after the other
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("dtype"), str)
            and isinstance(entry.get("shape"), list)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in entry["shape"])
            and isinstance(entry.get("data_offsets"), list)
            and len(entry["data_offsets"]) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in entry["data_offsets"])
        )
        require(
            ok,
            f"{location}: {path.name}'s header entry {key!r:.80} is not a tensor's (dtype, shape, offsets)",
        )
        dtype, shape, (start, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        require(
            dtype in DTYPE_BYTES,
            f"{location}: {path.name}'s tensor {key!r:.80} has the dtype {dtype!r:.20}, which is not a "
            "safetensors dtype",
        )
        require(
            0 <= start <= end <= data,
            f"{location}: {path.name}'s tensor {key!r:.80} lies outside the file (truncated?)",
        )
        require(
            end - start == math.prod(shape) * DTYPE_BYTES[dtype],
            f"{location}: {path.name}'s tensor {key!r:.80} spans {end - start} bytes, but its shape "
            f"{list(shape)} of {dtype} takes {math.prod(shape) * DTYPE_BYTES[dtype]}; the file is damaged",
        )
        spans.append((start, end, key))
        out[key] = (dtype, shape)
    position = 0
    for start, end, key in sorted(spans):
        require(
            start == position,
            f"{location}: {path.name}'s tensor {key!r:.80} "
            + ("shares bytes with another tensor" if start < position else "leaves a gap before it")
            + "; each tensor's bytes follow the last one's in a safetensors file: the file is damaged",
        )
        position = end
    require(
        position == data,
        f"{location}: {path.name} has {data - position} bytes after its last tensor; the file is damaged",
    )
    return out
