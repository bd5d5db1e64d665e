"""A corpus tokenized once into a file of token ids, read back as a memory map; and the cache that keeps
such files (and the tokenizers trained on a corpus) under the content hash of what made them.

Why a file and a map: nanoGPT's `prepare.py` writes a corpus's token ids to a flat `uint16` file; training
then reads windows of it through `np.memmap`, so the operating system brings in only the pages a batch
touches. Nothing holds the corpus in memory: a run on 400 MB of text needs no more memory than one on 20 MB,
and the text is tokenized once, not at every run.

A cache entry is a folder `<cache_dir>/<name>/` written whole (in a temporary folder, then renamed):

    tokens-<key>/tokens.bin      the ids, uint16 (a vocabulary of at most 65,536) or uint32, little-endian
    tokens-<key>/documents.bin   uint64 offsets: document i is tokens[offsets[i]:offsets[i + 1]]
                                  (a BPE writes <|endoftext|> after each document, inside its span)
    tokens-<key>/meta.json       what it is: format, key, sizes, each file's sha256, the corpus, the tokenizer
    bpe-<key>/tokenizer.json     a BPE trained on a corpus;  chars-<key>/vocab.json: a corpus's characters

`<key>` hashes the corpus's content (`Corpus.sha256`), the tokenizer (`fingerprint`) and the format, so an
edited corpus or another tokenizer gets a new entry and a stale one is never read. The cache may be shared or
tampered with, so an entry is read only when it is what it claims: a symlink, a FIFO or anything but a
folder of regular files is refused in one line (remove it); a file larger than its corpus can make is
refused; a file whose size or sha256 differs from its meta.json (an interrupted copy, a bad disk) is rebuilt,
saying so; a token id outside the vocabulary is refused. Nothing in a cache entry is ever executed: the files
are numbers and JSON.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from transformer_lab.data.corpus import Corpus, Piece
from transformer_lab.data.tokenizer import (
    MAX_TOKENIZER_JSON,
    AnyTokenizer,
    BPETokenizer,
    Tokenizer,
    train_bpe,
)
from transformer_lab.errors import ConfigError, require
from transformer_lab.limits import size_text
from transformer_lab.progress import Progress

log = logging.getLogger(__name__)

FORMAT = 2  # 2: words of more than corpus.MAX_RUN characters cut (a corpus without whitespace)
MAX_META = 1 << 20  # a meta.json is a few hundred bytes
READ_CHUNK = 1 << 22  # bytes per read when a file's sha256 is checked
ENCODE_CHARS = 1 << 20  # characters of text encoded per call of the tokenizer (on every core)
LONG_WORD_CHARS = 64  # words this long almost never repeat: the BPE trainer keeps each one it sees
LONG_WORD = re.compile(rf"\S{{{LONG_WORD_CHARS},}}")
MAX_LONG_WORDS = 2_000_000  # characters of such words the BPE learns from (~50 bytes of memory each)
DEFAULT_CACHE = Path("data") / "cache"  # relative to the working directory, as saved_models/ is


def default_cache_dir() -> Path:
    """Where prepared corpora go when no `data.cache_dir` is given (a task rebuilt from a checkpoint):
    $TRANSFORMER_LAB_CACHE, else data/cache/ in the working directory."""
    return Path(os.environ.get("TRANSFORMER_LAB_CACHE") or DEFAULT_CACHE)


class Stale(Exception):
    """A cache entry that is not what its meta.json says (its size or sha256): rebuilt."""


def dtype_for(vocab_size: int) -> np.dtype:
    """uint16 holds ids of a vocabulary up to 65,536 tokens; uint32 any vocabulary a model here takes."""
    require(vocab_size <= 2**32, f"a vocabulary of {vocab_size} tokens does not fit uint32 token ids")
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


# --------------------------------------------------------------------------------- cache entries
def _where(folder: Path, name: str = "") -> str:
    return f"data cache {folder / name if name else folder}"


def entry_exists(folder: Path) -> bool:
    """Whether the cache holds `folder`; a one-line ConfigError when something other than a folder is in
    its place (a symlink, perhaps out of the cache; a file; a FIFO)."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode):
        raise ConfigError(
            f"{_where(folder)} is a symlink (to {os.readlink(folder)}); a cache entry is a folder this "
            "wrote: remove the link"
        )
    require(
        stat.S_ISDIR(info.st_mode),
        f"{_where(folder)} is not a folder (a file, a pipe or a device); remove it and it is rebuilt",
    )
    return True


def open_member(folder: Path, name: str, max_bytes: int) -> int:
    """A file descriptor of `folder/name`, a regular file of at most `max_bytes` (never a symlink: opened
    with O_NOFOLLOW; never blocking: a FIFO is refused, not read); one-line ConfigErrors naming it."""
    path = folder / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise Stale(f"{name} is missing") from None
    except OSError as exc:
        why = "it is a symlink, which a cache entry never holds" if os.path.islink(path) else exc.strerror
        raise ConfigError(f"{_where(folder, name)} cannot be read: {why}; remove {folder}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ConfigError(
            f"{_where(folder, name)} is not a regular file (a pipe or a device); remove {folder}"
        )
    if info.st_size > max_bytes:
        os.close(fd)
        raise ConfigError(
            f"{_where(folder, name)} is {size_text(info.st_size)}, more than the {size_text(max_bytes)} its "
            f"corpus can make; it was not written by this cache: remove {folder}"
        )
    return fd


def file_sha256(fd: int, on_chunk: Callable[[bytes], None] | None = None) -> str:
    """The sha256 of an open file, read from its start in chunks (each also given to `on_chunk`)."""
    digest = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, READ_CHUNK):
        digest.update(chunk)
        if on_chunk is not None:
            on_chunk(chunk)
    return digest.hexdigest()


def read_meta(folder: Path, key: str) -> dict:
    """The entry's meta.json, checked to be this cache's and for `key` (else Stale: rebuilt)."""
    fd = open_member(folder, "meta.json", MAX_META)
    try:
        data = os.read(fd, MAX_META + 1)
    finally:
        os.close(fd)
    try:
        meta = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise ConfigError(f"{_where(folder, 'meta.json')} is not JSON; remove {folder}") from None
    files = meta.get("files") if isinstance(meta, dict) else None
    require(
        isinstance(files, dict)
        and all(
            isinstance(k, str)
            and isinstance(v, dict)
            and isinstance(v.get("sha256"), str)
            and isinstance(v.get("bytes"), int)
            for k, v in files.items()
        ),
        f"{_where(folder, 'meta.json')} is malformed (no file sizes and sha256s); remove {folder}",
    )
    if meta.get("format") != FORMAT or meta.get("key") != key:
        raise Stale("its meta.json names another corpus, tokenizer or format")
    return meta


def check_member(
    folder: Path, meta: dict, name: str, max_bytes: int, on_chunk: Callable[[bytes], None] | None = None
) -> int:
    """An open descriptor of a member whose size and sha256 are those meta.json records (else Stale)."""
    fd = open_member(folder, name, max_bytes)
    try:
        expected = meta["files"].get(name)
        if expected is None:
            raise Stale(f"its meta.json does not list {name}")
        if os.fstat(fd).st_size != expected["bytes"]:
            raise Stale(f"{name} is {os.fstat(fd).st_size} bytes, not the {expected['bytes']} recorded")
        if file_sha256(fd, on_chunk) != expected["sha256"]:
            raise Stale(f"{name} does not match its sha256")
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def locked(root: Path, name: str) -> Iterator[None]:
    """Hold `<root>/.<name>.lock` (flock): one process builds an entry while the others wait, then read it
    (DDP ranks, runs started together)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / f".{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        raise ConfigError(
            f"data.cache_dir={root} cannot be written ({exc.strerror or exc}); set data.cache_dir= (or "
            "$TRANSFORMER_LAB_CACHE) to a folder you may write to"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_entry(root: Path, name: str, key: str, write: Callable[[Path], dict]) -> dict:
    """Make the entry `<root>/<name>`: `write(folder)` fills a temporary folder and returns what meta.json
    says besides the files' sizes and sha256s; the folder is renamed into place (replacing a stale one).
    The caller holds the entry's lock, so a temporary folder of the same entry left by a write that was
    killed (SIGKILL runs no cleanup) is nobody's: it is removed first."""
    for stale in root.glob(f".{glob_escape(name)}.*.tmp"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}.", suffix=".tmp"))
    try:
        meta = {"format": FORMAT, "key": key, **write(tmp)}
        files = {}
        for member in sorted(p for p in tmp.iterdir()):
            fd = os.open(member, os.O_RDONLY)
            try:
                files[member.name] = {"bytes": os.fstat(fd).st_size, "sha256": file_sha256(fd)}
            finally:
                os.close(fd)
        meta["files"] = files
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        os.chmod(tmp, 0o755)
        target = root / name
        if entry_exists(target):
            shutil.rmtree(target)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def cached(
    root: Path,
    name: str,
    key: str,
    read: Callable[[Path, dict], object],
    build: Callable[[], Callable[[Path], dict]],
) -> tuple[object, bool, str | None]:
    """`read(folder, meta)` of the entry `name` if it is there and sound; else build it (`build()` returns
    the writer `write_entry` calls) and read that. Returns (what read gives, whether it was built, why)."""
    folder = root / name
    with locked(root, name):
        why = None
        if entry_exists(folder):
            try:
                return read(folder, read_meta(folder, key)), False, None
            except Stale as stale:
                why = str(stale)
                log.warning(f"data cache {folder} does not match its hash ({why}); rebuilding it")
        write_entry(root, name, key, build())
        return read(folder, read_meta(folder, key)), True, why


# ------------------------------------------------------------------------------------- tokenizers
def corpus_tokenizer(root: Path, kind: str, corpus: Corpus, vocab_size: int) -> tuple[AnyTokenizer, str]:
    """The tokenizer of `kind` (`char`: the corpus's characters; `bpe`: a byte-level BPE of `vocab_size`
    trained on it) from the cache, made and cached if it is not there; and a line saying which."""
    started = time.perf_counter()
    if kind == "bpe":
        key = f"bpe|{FORMAT}|{corpus.sha256}|{corpus.text_key}|{vocab_size}"
        key = hashlib.sha256(key.encode()).hexdigest()
        name = f"bpe-{key[:24]}"

        def read(folder: Path, meta: dict) -> BPETokenizer:
            fd = check_member(folder, meta, "tokenizer.json", MAX_TOKENIZER_JSON)
            try:
                text = file_text(fd, folder / "tokenizer.json")
            finally:
                os.close(fd)
            tokenizer = BPETokenizer(text, _where(folder, "tokenizer.json"))
            require(
                len(tokenizer) <= vocab_size,
                f"{_where(folder, 'tokenizer.json')} has {len(tokenizer)} tokens, not {vocab_size}; remove "
                f"{folder}",
            )
            return tokenizer

        def build() -> Callable[[Path], dict]:
            def write(folder: Path) -> dict:
                left_out = [0]
                reading = Progress("Reading the corpus for the BPE", corpus.total_bytes, "MB", 1e6)
                tokenizer = train_bpe(bpe_training_texts(corpus.pieces(), left_out, reading), vocab_size)
                reading.close(f"Trained the BPE of {len(tokenizer)} tokens in {reading.elapsed:.1f} s")
                (folder / "tokenizer.json").write_text(tokenizer.json)
                if left_out[0]:
                    log.info(
                        f"The BPE learned from the corpus but {count(left_out[0])} characters of words of "
                        f"{LONG_WORD_CHARS}+ characters, past the first {count(MAX_LONG_WORDS)} "
                        "(each such word is new to the trainer and costs it memory)"
                    )
                return {
                    "kind": "bpe",
                    "vocab_size": len(tokenizer),
                    "corpus_sha256": corpus.sha256,
                    "long_words_left_out": left_out[0],
                }

            return write

    else:
        key = hashlib.sha256(f"char|{corpus.sha256}|{corpus.text_key}".encode()).hexdigest()
        name = f"chars-{key[:24]}"

        def read(folder: Path, meta: dict) -> Tokenizer:
            fd = check_member(folder, meta, "vocab.json", MAX_META * 64)
            try:
                vocab = json.loads(file_text(fd, folder / "vocab.json"))
            except ValueError:
                raise ConfigError(f"{_where(folder, 'vocab.json')} is not JSON; remove {folder}") from None
            finally:
                os.close(fd)
            require(
                isinstance(vocab, list) and all(isinstance(c, str) for c in vocab),
                f"{_where(folder, 'vocab.json')} is not a list of characters; remove {folder}",
            )
            try:
                return Tokenizer(vocab, "")
            except ConfigError as exc:
                raise ConfigError(f"{_where(folder, 'vocab.json')}: {exc}; remove {folder}") from None

        def build() -> Callable[[Path], dict]:
            def write(folder: Path) -> dict:
                seen = np.zeros(0, dtype=np.uint32)
                for text in corpus.texts():
                    points = np.unique(np.frombuffer(text.encode("utf-32-le"), dtype="<u4"))
                    seen = np.union1d(seen, points)
                vocab = [chr(p) for p in seen.tolist()]
                require(vocab, f"data.path={corpus.path} holds no text (every document is empty)")
                (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
                return {"kind": "char", "vocab_size": len(vocab), "corpus_sha256": corpus.sha256}

            return write

    tokenizer, built, _ = cached(root, name, key, read, build)
    how = f"built in {time.perf_counter() - started:.1f} s" if built else "cached"
    return tokenizer, f"{kind}, {len(tokenizer)} tokens ({how}: {root / name})"


def bpe_training_texts(pieces: Iterator[Piece], left_out: list[int], progress: Progress) -> Iterator[str]:
    """The text the BPE trainer learns from: all of it, but the words of 64 or more characters past the
    first `MAX_LONG_WORDS` characters of them (each becomes a space; `left_out[0]` counts them). The
    trainer reads it as it counts words (`progress` shows how far), then learns the merges at the end,
    saying nothing until it is done: a line says so when the text is read.

    The trainer keeps every distinct word it sees, about 50 bytes per character. Words of prose repeat,
    so their count grows slowly with the corpus; words of 64+ characters (a corpus without whitespace,
    cut into words of `corpus.MAX_RUN`; URLs; base64) are nearly all distinct, and 200 MB of them would
    take 10 GB. So the merges of such text are learned from its first 2 M characters, and memory stays
    flat for any corpus; encoding still reads every character."""
    seen = 0
    for piece in pieces:
        text = piece.text
        if seen >= MAX_LONG_WORDS:
            kept = LONG_WORD.sub(" ", text)
            left_out[0] += len(text) - len(kept)
            text = kept
        else:
            seen += sum(len(word) for word in LONG_WORD.findall(text))
        progress.update(piece.nbytes)
        if text.strip():
            yield text
    read = f"{progress.done / 1e6:.1f} MB in {progress.elapsed:.0f} s"
    progress.close(f"Training the BPE: read {read}; learning the merges")


def file_text(fd: int, path: Path) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    data = b"".join(iter(lambda: os.read(fd, READ_CHUNK), b""))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"data cache {path} is not UTF-8 text; remove {path.parent}") from None


# ------------------------------------------------------------------------------------ token files
class TokenFile:
    """A cache entry's tokens, opened (see the module docstring): `num_tokens` ids of `dtype` in
    `tokens.bin`, read through `read(index)`, and `num_documents` documents' offsets. The file stays open
    (its descriptor), so what is read is what was checked, whatever happens to the path afterwards."""

    def __init__(self, folder: Path, meta: dict, fd: int, offsets: np.ndarray):
        self.folder = folder
        self.dtype = np.dtype(meta["dtype"])
        self.num_tokens = int(meta["num_tokens"])
        self.num_documents = int(meta["num_documents"])
        self.offsets = offsets
        self.meta = meta
        self._file = os.fdopen(fd, "rb")

    def tokens(self) -> np.ndarray:
        """The ids as a read-only memory map [num_tokens]. Map it per use and let it go: the pages it
        touched then leave the process's resident memory (a map kept for a whole run would count every
        page a run ever read; nanoGPT re-creates its map per batch for the same reason)."""
        if self.num_tokens == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(self._file, dtype=self.dtype, mode="r", shape=(self.num_tokens,))

    def read(self, index: np.ndarray) -> np.ndarray:
        """The ids at `index` (any shape of positions) as int64."""
        return self.tokens()[index].astype(np.int64)

    def __getstate__(self) -> dict:  # DataLoader workers started by spawn: reopened by path, checked
        state = self.__dict__.copy()
        state["_file"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        fd = open_member(self.folder, "tokens.bin", self.num_tokens * self.dtype.itemsize)
        self._file = os.fdopen(fd, "rb")


def token_file(root: Path, corpus: Corpus, tokenizer: AnyTokenizer) -> tuple[TokenFile, str]:
    """The corpus's tokens by `tokenizer`, from the cache or made now (with a progress bar on a terminal);
    and a line saying which, with the throughput of a build."""
    key = hashlib.sha256(
        f"tokens|{FORMAT}|{corpus.sha256}|{corpus.text_key}|{tokenizer.fingerprint}".encode()
    ).hexdigest()
    name = f"tokens-{key[:24]}"
    dtype = dtype_for(len(tokenizer))
    # every token stands for at least one byte of text, or is the one written after a document
    max_tokens = corpus.total_bytes * 2 + 1

    def read(folder: Path, meta: dict) -> TokenFile:
        require(
            meta.get("dtype") == dtype.str
            and isinstance(meta.get("num_tokens"), int)
            and isinstance(meta.get("num_documents"), int)
            and 0 <= meta["num_documents"] <= max_tokens,
            f"{_where(folder, 'meta.json')} is malformed (dtype, num_tokens, num_documents); remove {folder}",
        )
        require(
            meta["num_tokens"] <= max_tokens,
            f"{_where(folder, 'tokens.bin')} claims {meta['num_tokens']} tokens, more than its corpus of "
            f"{size_text(corpus.total_bytes)} can make; remove {folder}",
        )
        largest = [0]

        def scan(chunk: bytes) -> None:
            values = np.frombuffer(chunk, dtype=dtype)
            if values.size:
                largest[0] = max(largest[0], int(values.max()))

        fd = check_member(folder, meta, "tokens.bin", max_tokens * dtype.itemsize, scan)
        try:
            require(
                largest[0] < len(tokenizer),
                f"{_where(folder, 'tokens.bin')} holds token id {largest[0]}, outside the vocabulary of "
                f"{len(tokenizer)}; remove {folder}",
            )
            offsets_fd = check_member(folder, meta, "documents.bin", (max_tokens + 2) * 8)
            try:
                offsets = np.frombuffer(file_bytes(offsets_fd), dtype="<u8").astype(np.int64)
            finally:
                os.close(offsets_fd)
            require(
                len(offsets) == meta["num_documents"] + 1
                and offsets[0] == 0
                and offsets[-1] == meta["num_tokens"]
                and bool(np.all(np.diff(offsets) > 0)),
                f"{_where(folder, 'documents.bin')} does not list increasing document offsets; remove "
                f"{folder}",
            )
        except BaseException:
            os.close(fd)
            raise
        return TokenFile(folder, meta, fd, offsets)

    def build() -> Callable[[Path], dict]:
        def write(folder: Path) -> dict:
            return write_tokens(folder, corpus, tokenizer, dtype)

        return write

    started = time.perf_counter()
    tokens, built, _ = cached(root, name, key, read, build)
    documents = f"{tokens.num_documents} document{'s' * (tokens.num_documents != 1)}"
    empty = tokens.meta.get("empty_records", 0)
    if isinstance(empty, int) and empty > 0:
        documents += f" ({empty} record{'s' * (empty != 1)} without text skipped)"
    if not built:
        return tokens, f"{count(tokens.num_tokens)} tokens of {documents}, cached"
    seconds = max(time.perf_counter() - started, 1e-9)
    rate = tokens.meta["seconds"] or seconds
    return tokens, (
        f"{count(tokens.num_tokens)} tokens of {documents}, {dtype.name}, made in "
        f"{seconds:.1f} s ({corpus.total_bytes / rate / 1e6:.1f} MB/s, {count(tokens.num_tokens / rate)} "
        "tokens/s)"
    )


def file_bytes(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return b"".join(iter(lambda: os.read(fd, READ_CHUNK), b""))


def count(n: float) -> str:
    """1234 -> '1.2 K', 12_345_678 -> '12.3 M'."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f}"


def _batches(pieces: Iterator[Piece]) -> Iterator[list[Piece]]:
    """Pieces in groups of about ENCODE_CHARS characters (one tokenizer call each)."""
    group, size = [], 0
    for piece in pieces:
        group.append(piece)
        size += len(piece.text)
        if size >= ENCODE_CHARS:
            yield group
            group, size = [], 0
    if group:
        yield group


def write_tokens(folder: Path, corpus: Corpus, tokenizer: AnyTokenizer, dtype: np.dtype) -> dict:
    """Tokenize the corpus into `folder`'s tokens.bin and documents.bin, a group of pieces at a time
    (memory stays flat), showing its progress (a bar on a terminal, a line every few seconds in a log):
    bytes read, MB/s, tokens/s and the time left."""
    eot = tokenizer.eot_id
    started = time.perf_counter()
    num_tokens, num_documents = 0, 0
    progress = Progress("Tokenizing", total=corpus.total_bytes, unit="MB", scale=1e6)
    with open(folder / "tokens.bin", "wb") as tokens, open(folder / "documents.bin", "wb") as documents:
        documents.write(np.zeros(1, dtype="<u8").tobytes())
        for group in _batches(corpus.pieces()):
            if isinstance(tokenizer, BPETokenizer):
                encoded = tokenizer.encode_many([p.text for p in group], dtype)
            else:
                encoded = [tokenizer.encode_array(p.text) for p in group]
            for piece, ids in zip(group, encoded, strict=True):
                if piece.last and eot is not None:
                    ids = np.append(ids, eot)
                tokens.write(ids.astype(dtype, copy=False).tobytes())
                num_tokens += len(ids)
                if piece.last:
                    documents.write(np.array([num_tokens], dtype="<u8").tobytes())
                    num_documents += 1
            elapsed = max(time.perf_counter() - started, 1e-9)
            progress.update(sum(p.nbytes for p in group), f"{count(num_tokens / elapsed)} tokens/s")
    progress.close()
    require(
        num_tokens > 0,
        f"data.path={corpus.path} holds no text (every document is empty); point it at files with text",
    )
    return {
        "dtype": dtype.str,
        "num_tokens": num_tokens,
        "num_documents": num_documents,
        "seconds": round(time.perf_counter() - started, 3),
        "empty_records": corpus.empty_records,
        "corpus": corpus.path,
        "corpus_sha256": corpus.sha256,
        "tokenizer": tokenizer.fingerprint,
    }
