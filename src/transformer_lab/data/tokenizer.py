"""Text <-> token ids: a fixed vocabulary of characters or words (`Tokenizer`), or a byte-level BPE
(`BPETokenizer`, Hugging Face `tokenizers`), with one way to show a token to a person (`display`).

Every tokenizer here answers the same calls: `encode(text)` (a LongTensor of ids), `decode(ids)`,
`encode_array(text)` (a numpy array, for tokenizing a corpus fast), `vocab` (each id's token string),
`display(ids)` (each token's text with its spaces, newlines and tabs made visible: what figures, tables
and the circuit summary show), `names()` (each id's name in a tool's output) and `fingerprint` (a hash
naming the tokenizer exactly: token files made by it are cached under it).

A byte-level BPE reads text as UTF-8 bytes, so it can encode any text at all. Its vocabulary starts as
the 256 bytes; training counts every adjacent pair of tokens in the corpus (inside words: the text is
first cut into words, each with its leading space) and *merges* the most frequent pair into one new token,
again and again until the vocabulary has `vocab_size` tokens. Each merge is a rule `a b -> ab`; encoding
applies the rules to a word in the order they were learned. GPT-2 writes a token's bytes as printable
characters (a space is `Ġ`), so `vocab` holds strings like `Ġthe`, which `display` shows as `␣the`.

A tokenizer made by someone else arrives as `tokenizer.json` text (a file, or a checkpoint's record of
its task): it is data, parsed by `tokenizers`' JSON reader (no code runs), after checks of its size and
structure; a bad one is a one-line ConfigError.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Collection, Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from transformer_lab.data import tokenizer_spec
from transformer_lab.errors import ConfigError, require
from transformer_lab.files import reading
from transformer_lab.limits import size_text

if TYPE_CHECKING:
    import tokenizers

END_OF_TEXT = "<|endoftext|>"  # the BPE's one special token: written between documents
MAX_TOKENIZER_JSON = 32_000_000  # characters: GPT-2's tokenizer.json is 1.4 MB, a 256 K vocabulary's ~20 MB
MAX_VOCAB = 1 << 22  # ModelConfig's bound on vocab_size (and well inside uint32 token ids)
MIN_BPE_VOCAB = 257 + 1  # the 256 bytes, <|endoftext|> and at least one merge
VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}  # as the figures mark a whitespace token
PAGE_TOKENIZER_BUDGET = 4_000_000  # characters of vocabulary and merges a page may hold (GPT-2's: 1.5 M)
METASPACE = "\u2581"  # "▁": a space, in the tokens of a SentencePiece-style BPE
LEGACY_METASPACE = [  # transformers' older Llama conversions: "▁" before the text, then spaces as "▁"
    {"type": "Prepend", "prepend": METASPACE},
    {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE},
]
BYTE_TOKEN = re.compile(r"<0x([0-9A-F]{2})>")  # byte fallback: one byte of a character the vocabulary lacks


def visible(text: str) -> str:
    """`text` with each space, newline, tab and carriage return shown as a mark (`" the"` -> `"␣the"`),
    and any other character that prints nothing as its escape (`"\x18"`)."""
    return "".join(VISIBLE.get(c) or (c if c.isprintable() else repr(c)[1:-1]) for c in text)


def _unknown_error(unknown: Sequence[str], what: str, known: str | None) -> ConfigError:
    listed = ", ".join(repr(c) for c in unknown[:20]) + (" ..." if len(unknown) > 20 else "")
    use = f"; use only {what} in the checkpoint's vocabulary: {known!r}" if known is not None else ""
    return ConfigError(f"the text contains {len(unknown)} {what} not in the vocabulary: {listed}{use}")


class _Vocabulary:
    """What every tokenizer here keeps: each id's token string (`_itos`), read as `vocab` and `len`."""

    _itos: list[str]

    @property
    def vocab(self) -> list[str]:
        """Each id's token string as the tokenizer writes it (a byte-level BPE: `Ġthe` for " the")."""
        return list(self._itos)

    def __len__(self) -> int:
        return len(self._itos)


class Tokenizer(_Vocabulary):
    """Maps each token string of a vocabulary to its index and back.

    `separator` says how tokens are written in text: "" for characters (Tiny Shakespeare: "ROMEO:" is six
    tokens), " " for tokens written apart ("3 1 3 9": four digits; any whitespace separates them).
    `Tokenizer.from_text(text)` builds a character vocabulary: the sorted set of the text's characters.
    """

    def __init__(self, vocab: Sequence[str], separator: str = ""):
        vocab = list(vocab)
        require(len(vocab) > 0, "the vocabulary is empty; build the tokenizer from a non-empty text")
        if separator == "":
            bad = [v for v in vocab if not (isinstance(v, str) and len(v) == 1)]
            require(not bad, f"vocabulary entries must be single characters, got {bad[:5]!r}")
        require(len(set(vocab)) == len(vocab), "the vocabulary lists a token twice; entries must be unique")
        self.separator = separator
        self.kind = "char" if separator == "" else "words"
        self._itos = vocab
        self._stoi = {token: i for i, token in enumerate(vocab)}

    @classmethod
    def from_text(cls, text: str) -> Tokenizer:
        return cls(sorted(set(text)), separator="")

    @property
    def eot_id(self) -> int | None:
        """The token written between documents: characters have none (documents simply follow)."""
        return None

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the tokenizer's kind and vocabulary: two tokenizers with it encode alike."""
        described = json.dumps({"kind": self.kind, "vocab": self._itos}, ensure_ascii=False)
        return hashlib.sha256(described.encode()).hexdigest()

    def split(self, text: str) -> list[str]:
        """The text's tokens as strings."""
        return list(text) if self.separator == "" else text.split()

    def _unknown(self, tokens: Iterable[str]) -> ConfigError:
        unknown = sorted(set(tokens) - self._stoi.keys())
        known = "".join(self._itos) if self.separator == "" else " ".join(self._itos)
        what = "character(s)" if self.separator == "" else "token(s)"
        return _unknown_error(unknown, what, known if len(known) <= 2000 else None)

    def encode(self, text: str) -> Tensor:
        """The text as a LongTensor of token ids, shape [number of tokens]."""
        tokens = self.split(text)
        if not self._stoi.keys() >= set(tokens):
            raise self._unknown(tokens)
        return torch.tensor([self._stoi[t] for t in tokens], dtype=torch.long)

    @cached_property
    def _codepoints(self) -> tuple[np.ndarray, np.ndarray]:
        points = np.array([ord(c) for c in self._itos], dtype=np.uint32)
        order = np.argsort(points)
        return points[order], order

    def encode_array(self, text: str) -> np.ndarray:
        """The text's ids as an int64 array, fast for characters (a lookup of every code point at once)."""
        if self.separator != "":
            return self.encode(text).numpy()
        points = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        known, order = self._codepoints
        where = np.minimum(np.searchsorted(known, points), len(known) - 1)
        found = known[where] == points
        if not found.all():
            raise self._unknown(chr(p) for p in np.unique(points[~found]).tolist())
        return order[where].astype(np.int64)

    def decode(self, ids: Tensor | Sequence[int], skip: Collection[int] = ()) -> str:
        """The text for a 1-D tensor or list of token ids, leaving out the ids in `skip` (e.g. padding)."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return self.separator.join(self._itos[i] for i in ids if i not in skip)

    def tokens(self, ids: Tensor | Sequence[int]) -> list[str]:
        """Each id's token string (for axis labels)."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return [self._itos[i] for i in ids]

    def display(self, ids: Tensor | Sequence[int]) -> list[str]:
        """Each id's token as a tool shows it: its text with spaces, newlines and tabs made visible."""
        return [visible(t) for t in self.tokens(ids)]

    def names(self) -> list[str]:
        """Each id's name in a tool's output (the circuit summary prints it with repr): the token itself."""
        return list(self._itos)


# GPT-2's map from bytes to printable characters: the byte-level BPE's tokens are strings of these.
def _bytes_to_unicode() -> dict[int, str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    shifted, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            shifted.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, shifted), strict=True))


BYTE_OF = {char: byte for byte, char in _bytes_to_unicode().items()}


class BPETokenizer(_Vocabulary):
    """A Hugging Face tokenizer (in practice the byte-level BPE `train_bpe` makes) behind the calls every
    tokenizer here answers. Built from `tokenizer.json` text (`BPETokenizer(text, where)`), checked:
    at most `MAX_TOKENIZER_JSON` characters, JSON whose token ids are 0..n-1 with n at most `MAX_VOCAB`.

    Text is always text: `<|endoftext|>` typed into a prompt or found in a corpus is encoded as its
    characters (the token itself is only written between documents), and no template adds tokens.
    """

    separator = ""

    def __init__(self, text: str, where: str = "the tokenizer"):
        from tokenizers import Tokenizer as HFTokenizer

        require(
            isinstance(text, str) and 0 < len(text) <= MAX_TOKENIZER_JSON,
            f"{where} is not a tokenizer this reads: "
            + (
                f"{size_text(len(text))} of JSON, more than the {size_text(MAX_TOKENIZER_JSON)} a tokenizer "
                "takes; use a smaller vocabulary"
                if isinstance(text, str) and text
                else "no tokenizer.json text"
            ),
        )
        try:
            spec = json.loads(text)
        except (ValueError, RecursionError) as exc:
            reason = str(exc)[:120]
            raise ConfigError(f"{where} is not valid JSON ({reason}); pass a tokenizer.json") from None
        model = spec.get("model") if isinstance(spec, dict) else None
        require(
            isinstance(model, dict) and isinstance(model.get("type"), str),
            f"{where} is not a tokenizer.json (no model with a type); pass one written by Hugging Face "
            "tokenizers (tokenizer.save)",
        )
        tokenizer_spec.check(spec, where)  # before tokenizers runs any of its regular expressions
        with reading(where, "is not a tokenizer.json tokenizers can read"):  # it may raise anything, or panic
            hf = HFTokenizer.from_str(text)
        vocab = hf.get_vocab(with_added_tokens=True)
        require(
            0 < len(vocab) <= MAX_VOCAB,
            f"{where} has {len(vocab)} tokens; a model here takes 1 to {MAX_VOCAB}: use a smaller vocabulary",
        )
        require(
            sorted(vocab.values()) == list(range(len(vocab))),
            f"{where} numbers its {len(vocab)} tokens with gaps or repeats; its ids must be 0 to "
            f"{len(vocab) - 1}",
        )
        hf.no_truncation()  # a saved truncation or padding setting would cut or pad every document
        hf.no_padding()
        hf.encode_special_tokens = True
        self._hf = hf
        self._spec = spec
        self.where = where
        self.json = hf.to_str()
        itos = [""] * len(vocab)
        for token, index in vocab.items():
            itos[index] = token
        self._itos = itos
        self.unused_rows = 0  # ids after the tokenizer's own (`padded`)
        self.kind = "bpe" if model["type"] == "BPE" else model["type"].lower()

    def padded(self, rows: int) -> BPETokenizer:
        """This tokenizer for a model of `rows` embedding rows, more than its tokens (hub models pad their
        vocabulary to a multiple of 64 or 128): the ids after its own are unused, named `<unused_i>`,
        never made by `encode` nor written by `decode`."""
        require(
            rows >= len(self._itos) - self.unused_rows,
            f"{self.where} has {len(self._itos)} tokens, more than the {rows} rows of its model's embedding; "
            "a token no row holds cannot be read",
        )
        out = copy.copy(self)
        own = len(self._itos) - self.unused_rows
        out._itos = self._itos[:own] + [unused_name(i) for i in range(own, rows)]
        out.unused_rows = rows - own
        out.__dict__.pop("_texts", None)
        return out

    @classmethod
    def from_file(cls, path: str | Path) -> BPETokenizer:
        """A tokenizer.json the user names (`data.tokenizer=<path>`): a regular file (a symlink to one is
        fine: the user named it), at most `MAX_TOKENIZER_JSON` bytes, UTF-8 JSON."""
        from transformer_lab.files import require_regular_file

        path = Path(path)
        require_regular_file(path, "data.tokenizer", MAX_TOKENIZER_JSON)
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"data.tokenizer={path} is not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            raise ConfigError(f"data.tokenizer={path} cannot be read: {exc.strerror or exc}") from None
        return cls(text, f"data.tokenizer={path}")

    @property
    def byte_level(self) -> bool:
        """Whether tokens are strings of GPT-2's byte characters (then any text can be encoded)."""
        decoder = self._spec.get("decoder") or {}
        return isinstance(decoder, dict) and decoder.get("type") == "ByteLevel"

    @cached_property
    def metaspace(self) -> dict[str, Any] | None:
        """How a SentencePiece-style BPE (Llama 2, Mistral, TinyLlama: words start with "▁", the first
        symbols are characters, bytes only as the fallback tokens "<0xE6>") writes text, or None for
        another kind: {"prepend": "always" (the Prepend normalizer of older conversions: "▁" before any
        text) | "if_missing" (the Metaspace pre-tokenizer: before a text that does not start with "▁")
        | "never", "split": words cut at each "▁" (Metaspace's `split`), or the whole text one word}."""
        spec, model = self._spec, self._spec["model"]
        if model.get("type") != "BPE" or self.byte_level:
            return None
        normalizer, pre = spec.get("normalizer"), spec.get("pre_tokenizer")
        if pre is None and normalizer == {"type": "Sequence", "normalizers": LEGACY_METASPACE}:
            return {"prepend": "always", "split": False}
        if normalizer is None and isinstance(pre, dict) and pre.get("type") == "Metaspace":
            if pre.get("replacement") != METASPACE:
                return None
            scheme = pre.get("prepend_scheme", "always" if pre.get("add_prefix_space", True) else "never")
            return {
                "prepend": "never" if scheme == "never" else "if_missing",
                "split": pre.get("split", True),
            }
        return None

    @property
    def eot_id(self) -> int | None:
        """The id of `<|endoftext|>`, written between documents (None if the vocabulary has none)."""
        return self._hf.token_to_id(END_OF_TEXT)

    @cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.json.encode()).hexdigest()

    @property
    def unk_id(self) -> int | None:
        unk = (self._spec.get("model") or {}).get("unk_token")
        return self._hf.token_to_id(unk) if isinstance(unk, str) else None

    def encode(self, text: str) -> Tensor:
        """The text as a LongTensor of token ids; a one-line error naming the characters the tokenizer
        cannot encode (never the case for a byte-level BPE)."""
        return torch.from_numpy(self.encode_array(text, check=True))

    def encode_array(self, text: str, check: bool = True) -> np.ndarray:
        """The text's ids as an int64 array (`check`: refuse characters the tokenizer cannot encode)."""
        with reading(f"the tokenizer of {self.where}", "failed on the text"):
            encoding = self._hf.encode(text, add_special_tokens=False)
        if not check or self.byte_level:
            return np.array(encoding.ids, dtype=np.int64)
        covered = np.zeros(len(text), dtype=bool)
        for (start, end), index in zip(encoding.offsets, encoding.ids, strict=True):
            if index != self.unk_id:
                covered[start:end] = True
        unknown = sorted({c for c, ok in zip(text, covered, strict=True) if not ok and not c.isspace()})
        if unknown:
            raise ConfigError(
                f"the text contains {len(unknown)} character(s) the tokenizer cannot encode: "
                + ", ".join(repr(c) for c in unknown[:20])
                + "; leave them out"
            )
        return np.array(encoding.ids, dtype=np.int64)

    def encode_many(self, texts: list[str], dtype: np.typing.DTypeLike = np.int64) -> list[np.ndarray]:
        """Several texts at once (the corpus, in pieces: tokenizers encodes them on every core), their ids
        as arrays of `dtype` (read straight into it: a token file's dtype needs no second copy)."""
        with reading(f"the tokenizer of {self.where}", "failed on the text"):
            encoded = self._hf.encode_batch_fast(texts, False)
        return [np.fromiter(e.ids, dtype=dtype, count=len(e)) for e in encoded]

    def decode(self, ids: Tensor | Sequence[int], skip: Collection[int] = ()) -> str:
        """The text of the ids (without those in `skip`); a character split between tokens whose other
        part is missing reads as U+FFFD."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        own = len(self._itos) - self.unused_rows  # an unused row writes nothing
        return self._hf.decode([i for i in ids if i not in skip and i < own], skip_special_tokens=False)

    @cached_property
    def _texts(self) -> list[str]:
        """Each token's own text: its bytes as UTF-8, a byte that is part of a character shown as \\xNN."""
        texts = []
        for index, token in enumerate(self._itos):
            if index >= len(self._itos) - self.unused_rows:
                texts.append(token)  # <unused_i>, as the vocabulary names it
            elif self.byte_level and all(c in BYTE_OF for c in token):
                data = bytes(BYTE_OF[c] for c in token)
                texts.append(data.decode("utf-8", errors="backslashreplace"))
            elif self.metaspace is not None:  # "▁the" is " the"; "<0xE6>" one byte of a character
                byte = BYTE_TOKEN.fullmatch(token)
                data = bytes([int(byte[1], 16)]) if byte else token.replace(METASPACE, " ").encode()
                texts.append(data.decode("utf-8", errors="backslashreplace"))
            else:
                texts.append(self._hf.decode([self._hf.token_to_id(token)], skip_special_tokens=False))
        return texts

    def tokens(self, ids: Tensor | Sequence[int]) -> list[str]:
        """Each id's token as axis labels show it (`display`)."""
        return self.display(ids)

    def display(self, ids: Tensor | Sequence[int]) -> list[str]:
        """Each id's token as a tool shows it: its text with spaces, newlines and tabs made visible
        (`Ġthe` -> `␣the`, `Ċ` -> `⏎`)."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return [visible(self._texts[i]) for i in ids]

    def names(self) -> list[str]:
        """Each id's name in a tool's output: `display` (a word's leading space is visible)."""
        return self.display(range(len(self._itos)))


def unused_name(index: int) -> str:
    """How an unused row of a padded vocabulary is named wherever a tool lists rows: `<unused_50277>`."""
    return f"<unused_{index}>"


def train_bpe(texts: Iterable[str], vocab_size: int) -> BPETokenizer:
    """A byte-level BPE of `vocab_size` tokens learned from `texts` (see the module docstring): GPT-2's
    pre-tokenizer and byte alphabet, `<|endoftext|>` as token 0, no normalisation."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    require(
        isinstance(vocab_size, int) and MIN_BPE_VOCAB <= vocab_size <= MAX_VOCAB,
        f"data.vocab_size={vocab_size!r} must be an integer from {MIN_BPE_VOCAB} (the 256 bytes, "
        f"{END_OF_TEXT} and a merge) to {MAX_VOCAB}",
    )
    hf: tokenizers.Tokenizer = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return BPETokenizer(hf.to_str(), "the trained BPE")


AnyTokenizer = Tokenizer | BPETokenizer


def tokenizer_from_record(record: dict, vocab: Sequence[str], where: str) -> AnyTokenizer:
    """The tokenizer a checkpoint's record of its task describes: its `tokenizer` (tokenizer.json text,
    checked; its vocabulary must be the model's), else the model's vocabulary written with the record's
    separator."""
    text = record.get("tokenizer")
    if text is None:
        return Tokenizer(vocab, record["separator"])
    require(isinstance(text, str), f"{where}: its task record's tokenizer must be tokenizer.json text")
    tokenizer = BPETokenizer(text, f"{where}'s tokenizer")
    if len(vocab) > len(tokenizer) and list(vocab[len(tokenizer) :]) == [
        unused_name(i) for i in range(len(tokenizer), len(vocab))
    ]:
        tokenizer = tokenizer.padded(len(vocab))  # a hub model's unused rows (ModelConfig.unused_rows)
    require(
        tokenizer.vocab == list(vocab),
        f"{where}: its tokenizer's vocabulary ({len(tokenizer)} tokens) is not the model's ({len(vocab)}); "
        "the file was not written by train.py",
    )
    return tokenizer


def page_tokenizer(tokenizer: AnyTokenizer, budget: int | None = None) -> dict[str, Any] | None:
    """What the live page needs to tokenize text as the model's tokenizer does (explorer/tokenizer.js):
    None for a tokenizer of characters or words (the page splits text itself); for a BPE the vocabulary
    and the merges (in the order learned), `{"kind": "byte_bpe", "vocab": [token by id], "merges":
    ["a b", ...], "chars": size}` for a byte-level one (GPT-2's pre-tokenizer, no normaliser) and
    `{"kind": "metaspace_bpe", ..., "prepend", "split", "byte_fallback", "unk", "fuse_unk"}` for a
    SentencePiece-style one (`BPETokenizer.metaspace`). Refused in one line: a tokenizer tokenizer.js
    does not implement, and one over `budget` characters (default PAGE_TOKENIZER_BUDGET; what to do: a
    smaller vocabulary, or the page without the model: live=false)."""
    if isinstance(tokenizer, Tokenizer):
        return None
    spec = tokenizer._spec
    model = spec["model"]
    pre = spec.get("pre_tokenizer") or {}
    plain_bpe = (
        model.get("type") == "BPE"
        and not model.get("dropout")
        and not model.get("continuing_subword_prefix")
        and not model.get("end_of_word_suffix")
        and not model.get("ignore_merges")
    )
    byte_level = (
        tokenizer.byte_level
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True)
        and not pre.get("add_prefix_space", False)
        and spec.get("normalizer") is None
        and not model.get("byte_fallback")
    )
    require(
        plain_bpe and (byte_level or tokenizer.metaspace is not None),
        f"the page tokenizes text with a byte-level BPE (GPT-2's pre-tokenizer, no normaliser) or a "
        f"SentencePiece-style one (Llama 2's); this model's tokenizer is a {model.get('type')} of another "
        "kind: write the page with live=false",
    )
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    payload: dict[str, Any] = {"kind": "byte_bpe", "vocab": tokenizer.vocab, "merges": merges}
    if not byte_level:
        payload |= tokenizer.metaspace | {
            "kind": "metaspace_bpe",
            "byte_fallback": bool(model.get("byte_fallback")),
            "unk": tokenizer.unk_id,
            "fuse_unk": bool(model.get("fuse_unk")),
        }
    budget = PAGE_TOKENIZER_BUDGET if budget is None else budget
    chars = len(json.dumps(payload, ensure_ascii=False))
    require(
        chars <= budget,
        f"the tokenizer's {len(tokenizer)} tokens and {len(merges)} merges take {chars / 1e6:.1f} MB in the "
        f"page, more than the {budget / 1e6:g} MB it may hold; train with a smaller data.vocab_size, or "
        "write the page without the model (live=false)",
    )
    return payload | {"chars": chars}
