"""A corpus: the files `data.path` names, read as documents of text, a piece at a time.

    corpus = Corpus("stories/")            # a file, a folder (every .txt / .jsonl / .parquet below it) or
    corpus.sha256                          # a glob ("papers/**/*.jsonl"); its content hash
    for piece in corpus.pieces(): ...      # the text, in pieces of about 64 K characters, in order

A `.txt` file is one document; each line of a `.jsonl` file is one (the string under `data.text_key`), as is
each row of a `.parquet` file (the column `data.text_key`); a record whose text is null or empty is no
document, and is counted (`empty_records`, shown when the corpus is tokenized). Files are read in sorted
order and never whole: a piece is at most `PIECE_CHARS` characters, cut after a line break that a word
follows, where a GPT-2 style tokenizer would split anyway (a piece boundary then changes no token). A run
of more than `MAX_RUN` characters without whitespace (a file that is one long line of letters, base64,
DNA) is cut every `MAX_RUN` characters, so that no word a tokenizer sees is longer. Memory stays flat
however large the corpus is.

The files may come from anywhere, so each is read inside `files.reading` (any failure of a library under
it, a corrupt parquet page or a native panic, is one line naming the file), and refused in one line when it
cannot be text: a FIFO or a device (reading would block or never end), a file that cannot be opened, a NUL
byte (binary), bytes that are not UTF-8, a lone surrogate (`"\\ud800"` in a .jsonl string: no UTF-8 can
hold it), a .jsonl line that is not a JSON object (an array, a number, `null`) or whose text field is not a
string, a parquet file without the column. A corpus with no text at all is refused too.
"""

from __future__ import annotations

import codecs
import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from transformer_lab.errors import ConfigError, require
from transformer_lab.files import reading
from transformer_lab.limits import size_text

KINDS = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet"}
PIECE_CHARS = 1 << 16  # characters per piece: the tokenizer trainer buffers 256 pieces, so keep them small
READ_BYTES = 1 << 22  # bytes per read of a .txt file
MAX_LINE = 1 << 28  # a .jsonl line longer than 256 MB is not a document of text
MAX_HASHED_FILES = 1_000_000  # a glob matching more files than this is surely a mistake
LINE_START = re.compile(r"\n(?=\S)")  # a line break a word follows: a cut that changes no token
MAX_RUN = 256  # characters without whitespace that a piece may hold in a row (a word is never longer)
LONG_RUN = re.compile(rf"\S{{{MAX_RUN + 1},}}")
ASCII_SPACE = np.zeros(256, dtype=bool)  # the bytes that are whitespace: space, \t, \n, \v, \f, \r
ASCII_SPACE[list(b" \t\n\v\f\r")] = True


@dataclass(frozen=True)
class Piece:
    """Text of one document (`document`: its number, from 0), `last` when the document ends with it;
    `nbytes` is how many bytes of the files it stands for (for the throughput)."""

    text: str
    document: int
    last: bool
    nbytes: int


def split_text(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` in pieces of about `size` characters, each cut right after a line break followed by a
    non-space character (GPT-2's pre-tokenizer splits there too, so encoding the pieces gives the tokens
    of the whole). A text with no such break within 4 x `size` characters is cut at `size`. A run of
    more than `MAX_RUN` characters without whitespace is cut every `MAX_RUN` characters (`cut_long_runs`)."""
    start = 0
    while len(text) - start > size:
        cut = None
        for match in LINE_START.finditer(text, start + 1, start + size):
            cut = match.end()
        if cut is None:
            match = LINE_START.search(text, start + size, start + 4 * size)
            cut = match.end() if match else start + size
        yield from cut_long_runs(text[start:cut])
        start = cut
    if start < len(text):
        yield from cut_long_runs(text[start:])


def cut_long_runs(piece: str) -> Iterator[str]:
    """`piece`, cut inside each run of non-whitespace every `MAX_RUN` characters. A tokenizer reads each
    piece on its own, so no word it sees is longer than that: a corpus that is one long line of letters
    is then words of 256 characters, not of 64 K (the BPE trainer keeps about 50 bytes per character
    of every distinct word, and splits each word's merges over its length)."""
    if not may_have_long_run(piece):  # nearly every piece of prose: no regular expression needed
        yield piece
        return
    start = 0
    for run in LONG_RUN.finditer(piece):
        for cut in range(run.start() + MAX_RUN, run.end(), MAX_RUN):
            yield piece[start:cut]
            start = cut
    yield piece[start:]


def may_have_long_run(piece: str) -> bool:
    """False when `piece` surely has no run of more than `MAX_RUN` characters without whitespace: its
    UTF-8 bytes have no run of more than `MAX_RUN` bytes without ASCII whitespace. A character is one byte
    or more, and no character that is not whitespace has an ASCII whitespace byte, so a long run of
    characters is a longer run of bytes: the test never misses one (Unicode's other spaces only make it
    say True where `LONG_RUN` then finds nothing). In numpy it reads a byte in about 5 ns, a third of
    what the regular expression takes: the difference between tokenizing at the `tokenizers` library's
    speed or 10% below it (docs/performance.md)."""
    data = np.frombuffer(piece.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    if len(data) <= MAX_RUN:
        return False
    spaces = np.flatnonzero(ASCII_SPACE[data])
    runs = np.diff(spaces, prepend=-1, append=len(data)) - 1  # the bytes between neighbouring spaces
    return bool(runs.max() > MAX_RUN)


def is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


class Corpus:
    """The documents of `path` (see the module docstring); `text_key` names the text field of .jsonl
    lines and .parquet rows."""

    def __init__(self, path: str | Path, text_key: str = "text", what: str = "data.path"):
        self.path = str(path)
        self.text_key = text_key
        self.what = what
        self.skipped: list[Path] = []  # files of other kinds in a folder
        self.empty_records = 0  # .jsonl lines and .parquet rows whose text is null or empty, last reading
        self.files = self._find()
        self.total_bytes = sum(f.stat().st_size for f in self.files)

    # ------------------------------------------------------------------ which files
    def _find(self) -> list[Path]:
        path = Path(self.path)
        if is_glob(self.path):
            found = sorted(Path(p) for p in glob.glob(self.path, recursive=True) if not Path(p).is_dir())
            require(found, f"{self.what}={self.path} matches no files; check the pattern")
            for file in found:
                require(
                    file.suffix.lower() in KINDS,
                    f"{self.what}={self.path} matches {file}, which is not a .txt, .jsonl or .parquet file; "
                    "narrow the pattern",
                )
        else:
            try:
                exists = path.exists()
            except OSError as exc:
                raise ConfigError(f"{self.what}={path} cannot be read ({exc.strerror or exc})") from None
            require(exists, f"{self.what}={path} does not exist")
            if path.is_dir():
                found = []
                for folder, dirs, names in os.walk(path):  # symlinked folders are not followed
                    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                    for name in sorted(names):
                        file = Path(folder) / name
                        if name.startswith("."):
                            continue
                        (found if file.suffix.lower() in KINDS else self.skipped).append(file)
                require(
                    found,
                    f"{self.what}={path} is a folder without .txt, .jsonl or .parquet files; put your "
                    "text in such files",
                )
            else:
                found = [path]  # a file the user names is text whatever its name
        require(len(found) <= MAX_HASHED_FILES, f"{self.what}={self.path} matches {len(found)} files")
        for file in found:
            self._check_file(file, f"{self.what}={file}" if found == [path] else f"{self.what}: {file}")
        return found

    @staticmethod
    def _check_file(file: Path, named: str) -> None:
        """A regular file that can be opened (a symlink to one is fine: the user named the folder)."""
        try:
            info = file.stat()
        except OSError as exc:
            raise ConfigError(f"{named} cannot be read ({exc.strerror or exc})") from None
        require(
            stat.S_ISREG(info.st_mode),
            f"{named} is not a regular file (a device or a pipe); point data.path at text files",
        )
        try:
            fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise ConfigError(f"{named} cannot be read ({exc.strerror or exc})") from None
        os.close(fd)

    def kind(self, file: Path) -> str:
        return KINDS.get(file.suffix.lower(), "txt")

    # ------------------------------------------------------------------ what it holds
    @property
    def description(self) -> str:
        """`stories/: 12 files, 3.4 MB` (and the files of other kinds left out)."""
        files = f"{len(self.files)} file{'s' * (len(self.files) != 1)}"
        skipped = f"; left out {len(self.skipped)} of other kinds" if self.skipped else ""
        return f"{self.path}: {files}, {size_text(self.total_bytes)}{skipped}"

    @property
    def sha256(self) -> str:
        """The content hash of the corpus: a single file's sha256, or of several the sha256 of their
        kinds and sha256s in order (so a copy of the folder elsewhere has the same hash)."""
        if not hasattr(self, "_sha256"):
            require(self.total_bytes > 0, f"{self.what}={self.path} is empty; it holds no text")
            digests = []
            for file in self.files:
                with open(file, "rb") as f:
                    digests.append(hashlib.file_digest(f, "sha256").hexdigest())
            if len(self.files) == 1:
                self._sha256 = digests[0]
            else:
                listed = "".join(f"{self.kind(f)} {d}\n" for f, d in zip(self.files, digests, strict=True))
                self._sha256 = hashlib.sha256(listed.encode()).hexdigest()
        return self._sha256

    # ------------------------------------------------------------------ the text
    def pieces(self) -> Iterator[Piece]:
        """Every document's text in pieces, in order (documents without text are left out)."""
        document, self.empty_records = 0, 0
        for file in self.files:
            reader = {"txt": self._txt, "jsonl": self._jsonl, "parquet": self._parquet}[self.kind(file)]
            with reading(f"{self.what}: {file}"):
                for texts in reader(file):
                    yield from self._pieces_of(texts, document)
                    document += 1

    def texts(self) -> Iterator[str]:
        """The pieces' text alone (what a tokenizer trains on)."""
        for piece in self.pieces():
            yield piece.text

    @staticmethod
    def _pieces_of(texts: Iterator[tuple[str, int]], document: int) -> Iterator[Piece]:
        """A document's (text, bytes) parts as Pieces, the last one marked (a held-back part at a time)."""
        held: tuple[str, int] | None = None
        for text, nbytes in texts:
            if not text:
                continue
            if held is not None:
                yield Piece(held[0], document, False, held[1])
            held = (text, nbytes)
        if held is not None:
            yield Piece(held[0], document, True, held[1])

    def _txt(self, file: Path) -> Iterator[Iterator[tuple[str, int]]]:
        def parts() -> Iterator[tuple[str, int]]:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
            pending, offset = "", 0
            with open(file, "rb") as f:
                while True:
                    data = f.read(READ_BYTES)
                    final = not data
                    if b"\x00" in data:
                        at = offset + data.index(b"\x00")
                        raise ConfigError(
                            f"{self.what}: {file} is binary, not text (a NUL byte at byte {at}); remove it "
                            "from the corpus"
                        )
                    buffered = len(decoder.getstate()[0])  # bytes of a character begun in the last read
                    try:
                        pending += decoder.decode(data, final=final)
                    except UnicodeDecodeError as exc:
                        at = offset - buffered + exc.start
                        raise ConfigError(
                            f"{self.what}: {file} is not UTF-8 text (byte {at}: {exc.reason}); "
                            "save it as UTF-8 or remove it from the corpus"
                        ) from None
                    offset += len(data)
                    if final:
                        break
                    pieces = list(split_text(pending))
                    pending = pieces.pop() if pieces else ""
                    for piece in pieces:
                        yield piece, len(piece.encode())
            for piece in split_text(pending):
                yield piece, len(piece.encode())

        yield parts()

    def _jsonl(self, file: Path) -> Iterator[Iterator[tuple[str, int]]]:
        with open(file, "rb") as f:
            for number, line in enumerate(iter(lambda: f.readline(MAX_LINE + 1), b""), start=1):
                require(
                    len(line) <= MAX_LINE,
                    f"{self.what}: {file} line {number} is longer than {size_text(MAX_LINE)}; "
                    "split the document",
                )
                if not line.strip():
                    continue
                if b"\x00" in line:
                    raise ConfigError(
                        f"{self.what}: {file} is binary, not text (a NUL byte on line {number}); remove it"
                    )
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError) as exc:
                    reason = str(exc).split(":")[0] if isinstance(exc, ValueError) else "nested too deeply"
                    raise ConfigError(
                        f"{self.what}: {file} line {number} is not JSON ({reason}); each line of a .jsonl "
                        "file is one JSON object"
                    ) from None
                if not isinstance(record, dict):
                    raise ConfigError(
                        f"{self.what}: {file} line {number} is {_json_kind(record)}, not a JSON object; each "
                        f"line of a .jsonl file is one object with its text under {self.text_key!r}: fix or "
                        "remove the line"
                    )
                if self.text_key not in record:
                    keys = ", ".join(sorted(record)[:8])
                    raise ConfigError(
                        f"{self.what}: {file} line {number} has no field {self.text_key!r} (it has: {keys}); "
                        "set data.text_key= to the field holding the text"
                    )
                text = record[self.text_key]
                require(
                    isinstance(text, str) or text is None,
                    f"{self.what}: {file} line {number}: {self.text_key!r} is not a string "
                    f"({_json_kind(text)}); set data.text_key= to the field holding the text",
                )
                if not text:
                    self.empty_records += 1
                    continue
                _require_encodable(text, f"{self.what}: {file} line {number}'s {self.text_key!r}")
                yield ((piece, len(piece.encode())) for piece in split_text(text))

    def _parquet(self, file: Path) -> Iterator[Iterator[tuple[str, int]]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(file)
            schema = parquet.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            reason = " ".join(str(exc).split())[:120]
            raise ConfigError(f"{self.what}: {file} is not a readable parquet file ({reason})") from None
        if self.text_key not in schema.names:
            raise ConfigError(
                f"{self.what}: {file} has no column {self.text_key!r} (it has: "
                f"{', '.join(schema.names[:8])}); set data.text_key= to the column holding the text"
            )
        field = schema.field(self.text_key)
        require(
            pa.types.is_string(field.type) or pa.types.is_large_string(field.type),
            f"{self.what}: {file}'s column {self.text_key!r} holds {field.type}, not text; set "
            "data.text_key= to the column holding the text",
        )
        for batch in parquet.iter_batches(batch_size=1024, columns=[self.text_key]):
            for text in batch.column(0).to_pylist():  # a corrupt page: an OSError, made one line by `reading`
                if not text:
                    self.empty_records += 1
                    continue
                yield ((piece, len(piece.encode())) for piece in split_text(text))


def _json_kind(value: object) -> str:
    """How a JSON value is named in an error: `an array`, `null`, `a number`."""
    if value is None:
        return "null"
    kinds = {bool: "true or false", int: "a number", float: "a number", list: "an array", str: "a string"}
    return kinds.get(type(value), "an object")


def _require_encodable(text: str, where: str) -> None:
    """A one-line ConfigError for a string that holds a lone surrogate (JSON's `"\\ud800"` escape makes
    one): it is not text, and no UTF-8 file or tokenizer can hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{where} holds a lone surrogate ({text[exc.start]!a} at character {exc.start}), which is not "
            "text; fix the record (a JSON writer made it from broken UTF-16)"
        ) from None
