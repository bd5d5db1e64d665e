"""Files from elsewhere, behind one boundary (`files.reading`): corpora, tokenizers, hf: folders.

Every hostile file is built here; each must end in one line naming it (a ConfigError, exit 2 from a tool),
never in a library's traceback, and nothing may be left behind.
"""

import json
import re
import struct
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, load_script
from tests.test_hf_import import copy_folder, gpt2_folder
from transformer_lab.cli import run
from transformer_lab.data import TextDataModule
from transformer_lab.data import tokens as tokens_module
from transformer_lab.data.corpus import LONG_RUN, MAX_RUN, Corpus, cut_long_runs, split_text
from transformer_lab.data.tokenizer import BPETokenizer, train_bpe
from transformer_lab.data.tokenizer_spec import risky_regex
from transformer_lab.errors import ConfigError
from transformer_lab.files import reading
from transformer_lab.progress import Progress

ROMEO = "ROMEO:\nBut soft, what light through yonder window breaks?\n"


def one_line(call) -> str:
    """The message of the ConfigError `call()` raises: one line."""
    with pytest.raises(ConfigError) as refused:
        call()
    message = str(refused.value)
    assert "\n" not in message and len(message) < 600, message
    return message


def read_corpus(path: Path) -> list[str]:
    return [piece.text for piece in Corpus(path).pieces()]


# --------------------------------------------------------------------------------- the boundary
class PanicException(BaseException):
    """What pyo3 raises for a Rust panic: a BaseException, which `except Exception` misses."""


@pytest.mark.parametrize(
    "failure",
    [OSError("Corrupt snappy compressed data"), TypeError("unhashable type: 'list'"), PanicException("boom")],
)
def test_any_failure_inside_the_boundary_is_one_line_naming_the_file(failure):
    def fail():
        with reading("data.path: corpus/a.parquet"):
            raise failure

    message = one_line(fail)
    assert message.startswith("data.path: corpus/a.parquet cannot be read (")
    assert str(failure) in message
    for passes in (KeyboardInterrupt(), SystemExit(2)):  # what stops the program on purpose passes

        def stop(passes=passes):
            with reading("x"):
                raise passes

        with pytest.raises(type(passes)):
            stop()


# --------------------------------------------------------------------------------- corpora
def test_a_lone_surrogate_in_a_jsonl_line_is_refused_naming_it(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "fine"}\n{"text": "ROMEO \\ud800 speaks"}\n')
    message = one_line(lambda: read_corpus(corpus))
    assert "c.jsonl line 2's 'text' holds a lone surrogate ('\\ud800' at character 6)" in message


@pytest.mark.parametrize("line, kind", [("[1, 2]", "an array"), ("null", "null"), ("3", "a number")])
def test_a_jsonl_line_that_is_not_an_object_is_refused(tmp_path, line, kind):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(f'{{"text": "document {i}"}}\n' for i in range(300)) + line + "\n")
    message = one_line(lambda: read_corpus(corpus))
    assert f"c.jsonl line 301 is {kind}, not a JSON object" in message
    assert "each line of a .jsonl file is one object with its text under 'text'" in message


def test_records_without_text_are_counted_and_said(tmp_path, caplog):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "ROMEO: hi"}\n{"text": null}\n{"text": ""}\n{"text": "JULIET: hello"}\n')
    reader = Corpus(corpus)
    assert [p.text for p in reader.pieces()] == ["ROMEO: hi", "JULIET: hello"]
    assert reader.empty_records == 2
    caplog.set_level("INFO")
    task = TextDataModule(path=str(corpus), tokenizer="char", block_size=2, cache_dir=str(tmp_path / "c"))
    task.verbose = True
    _ = task.vocab
    tokens, line = tokens_module.token_file(tmp_path / "c", Corpus(corpus), task.tokenizer)
    assert tokens.num_documents == 2 and "2 documents (2 records without text skipped), cached" in line


def corrupt_parquet(path: Path, text_type: str = "string") -> Path:
    """A parquet file whose footer is intact but whose data page is not (snappy bytes overwritten)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [f"ROMEO {i}: " + "but soft what light " * 20 for i in range(2000)]
    pq.write_table(pa.table({"text": pa.array(rows, type=text_type)}), path, compression="snappy")
    data = bytearray(path.read_bytes())
    middle = len(data) // 3
    data[middle : middle + 2000] = bytes(range(256)) * 7 + bytes(208)
    path.write_bytes(bytes(data))
    return path


def test_a_parquet_with_a_corrupt_page_and_an_intact_footer_is_one_line(tmp_path):
    path = corrupt_parquet(tmp_path / "c.parquet")
    message = one_line(lambda: read_corpus(path))
    assert message.startswith(f"data.path: {path} cannot be read (")


def test_a_parquet_string_that_is_not_utf8_is_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    broken = pa.array([b"ROMEO \xff\xfe speaks"], type=pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": broken}), tmp_path / "b.parquet")
    message = one_line(lambda: read_corpus(tmp_path / "b.parquet"))
    assert message.startswith(f"data.path: {tmp_path / 'b.parquet'} cannot be read (")


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_bytes_that_are_not_utf8_are_refused_in_every_text_format(tmp_path, suffix):
    path = tmp_path / f"c{suffix}"
    body = b"ROMEO \xed\xa0\x80 speaks"  # a surrogate written as UTF-8: not UTF-8 at all
    path.write_bytes(body if suffix == ".txt" else b'{"text": "' + body + b'"}\n')
    message = one_line(lambda: read_corpus(path))
    assert str(path) in message and ("not UTF-8" in message or "lone surrogate" in message)


# --------------------------------------------------------------------------------- text without spaces
def test_text_without_whitespace_is_cut_into_words_of_bounded_length():
    text = "abc" * 10_000 + "\nROMEO: But soft, what light\n"
    pieces = list(split_text(text))
    assert "".join(pieces) == text
    assert max(len(p) for p in pieces) <= MAX_RUN + len("\nROMEO: But soft, what light\n")
    prose = ROMEO * 2000  # no word is long: cut only after a line break, into pieces of ~64 K
    pieces = list(split_text(prose))
    assert "".join(pieces) == prose and len(pieces) == 2 and len(pieces[0]) > 65_000


def test_the_quick_test_for_long_words_misses_none():
    """cut_long_runs skips its regular expression where the bytes show no long run: on words of every
    length around MAX_RUN, of one-byte, multi-byte and surrogate-pair characters, between ASCII and
    Unicode spaces (U+3000, U+001C, which are whitespace to Python but no ASCII space byte), the cuts
    are the regular expression's own."""
    import random

    rng = random.Random(0)
    letters = ["a", "é", "東", "🙂", "\x1c", "\u3000", " ", "\n", "\t"]
    for _ in range(300):
        words = ["".join(rng.choices(letters[:4], k=rng.choice([1, MAX_RUN - 1, MAX_RUN, MAX_RUN + 1, 700])))
                 for _ in range(rng.randint(1, 4))]  # fmt: skip
        text = "".join(w + rng.choice(letters[4:]) for w in words)
        expected = [m.end() for m in LONG_RUN.finditer(text)]
        pieces = list(cut_long_runs(text))
        assert "".join(pieces) == text
        assert all(len(w) <= MAX_RUN for p in pieces for w in p.split())
        assert (len(pieces) > 1) == bool(expected)


def test_the_bpe_learns_from_a_bounded_share_of_words_that_never_repeat(tmp_path, monkeypatch):
    monkeypatch.setattr(tokens_module, "MAX_LONG_WORDS", 2000)
    letters = "".join(chr(97 + (i * 7919) % 26) for i in range(60_000))  # one long line, no spaces
    (tmp_path / "c.txt").write_text(letters)
    left_out = [0]
    pieces, reading = Corpus(tmp_path / "c.txt").pieces(), Progress("Reading")
    fed = "".join(tokens_module.bpe_training_texts(pieces, left_out, reading))
    assert left_out[0] > 50_000 and len(fed.replace(" ", "")) < 3000
    cache = str(tmp_path / "cache")
    task = TextDataModule(path=str(tmp_path / "c.txt"), vocab_size=300, block_size=8, cache_dir=cache)
    assert task.tokenizer.decode(task.data.tolist()).replace("<|endoftext|>", "") == letters  # every letter


def test_a_killed_cache_write_leaves_nothing_for_good(tmp_path):
    (tmp_path / "c.txt").write_text(ROMEO * 50)
    cache = tmp_path / "cache"
    task = TextDataModule(path=str(tmp_path / "c.txt"), tokenizer="char", cache_dir=str(cache))
    _ = task.vocab
    entry = next(p for p in cache.iterdir() if p.name.startswith("tokens-"))
    stale = cache / f".{entry.name}.x1y2.tmp"
    stale.mkdir()
    (stale / "tokens.bin").write_bytes(b"\0" * 64)  # as SIGKILL left it
    import shutil

    shutil.rmtree(entry)  # the entry must be made again: its writer cleans up first
    _ = TextDataModule(path=str(tmp_path / "c.txt"), tokenizer="char", cache_dir=str(cache)).vocab
    assert not stale.exists() and entry.is_dir()


# --------------------------------------------------------------------------------- tokenizer.json
def bpe_json() -> dict:
    return json.loads(train_bpe([ROMEO * 20], 300).json)


def split(pattern: str) -> dict:
    """A `Split` pre-tokenizer on a regular expression."""
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


@pytest.mark.parametrize(
    "part, step, says",
    [
        ("pre_tokenizer", split("(a+)+$"), "a repeated group"),
        (
            "pre_tokenizer",
            {"type": "Sequence", "pretokenizers": [split("(x|xy)*z"), BYTE_LEVEL]},
            "a repeated",
        ),
        (
            "normalizer",
            {"type": "Replace", "pattern": {"Regex": "(\\w)\\1"}, "content": "x"},
            "a backreference",
        ),
        ("pre_tokenizer", {"type": "Magic"}, "'Magic' is not one this reads"),
    ],
)
def test_a_tokenizer_whose_regex_could_run_without_end_is_refused_when_read(part, step, says, tmp_path):
    spec = bpe_json() | {part: step}
    message = one_line(lambda: BPETokenizer(json.dumps(spec), "data.tokenizer=t.json"))
    assert message.startswith("data.tokenizer=t.json: its ") and says in message
    (tmp_path / "t.json").write_text(json.dumps(spec))  # the same through a training config
    message = one_line(
        lambda: TextDataModule(tokenizer=str(tmp_path / "t.json"), cache_dir=str(tmp_path / "c")).vocab
    )
    assert says in message


def test_the_patterns_of_known_tokenizers_pass():
    gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
    llama3 = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
        r"\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    assert risky_regex(gpt2) is None and risky_regex(llama3) is None
    spec = bpe_json() | {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(llama3), BYTE_LEVEL]}}
    assert BPETokenizer(json.dumps(spec)).decode(BPETokenizer(json.dumps(spec)).encode(ROMEO)) == ROMEO
    for fine in ("(ab)+", "a{2,}b{3}", "(a{2})+", r"\(a+\)+", "[(+]+"):
        assert risky_regex(fine) is None, fine
    for bad in ("(a|a)*", "(a?)+", "((a+)b)*", r"(a)\1"):
        assert risky_regex(bad) is not None, bad


def test_a_native_panic_while_encoding_is_one_line(monkeypatch):
    """The last net: a panic of the tokenizers library itself (its regex engine's retry limit) on a
    pattern the check does not know to be dangerous is one line too."""
    from transformer_lab.data import tokenizer_spec

    monkeypatch.setattr(tokenizer_spec, "check", lambda spec, where: None)
    spec = bpe_json() | {"pre_tokenizer": split("(a+)+$")}
    tokenizer = BPETokenizer(json.dumps(spec), "data.tokenizer=t.json")
    message = one_line(lambda: tokenizer.encode("a" * 5000 + "!"))
    assert message.startswith("the tokenizer of data.tokenizer=t.json failed on the text (")


# --------------------------------------------------------------------------------- hf: folders
@pytest.fixture(scope="module")
def gpt2(transformers, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    gpt2_folder(transformers, folder)
    return folder


def sample_refused(folder: Path, capsys) -> str:
    """The one line `sample ckpt_path=hf:<folder>` prints, exit status 2."""
    with pytest.raises(SystemExit) as exit_status:
        run(load_script("sample").main, [f"ckpt_path=hf:{folder}", "prompt=a"])
    assert exit_status.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("activation_function", ["gelu"], 'config.json: activation_function=["gelu"] must be a string'),
        ("n_embd", "32", 'n_embd="32" must be an integer'),
        ("n_embd", True, "n_embd=true must be an integer"),
        ("layer_norm_epsilon", "1e-5", 'layer_norm_epsilon="1e-5" must be a number'),
        ("tie_word_embeddings", "yes", 'tie_word_embeddings="yes" must be true or false'),
        ("model_type", ["gpt2"], 'model_type=["gpt2"] must be a string'),
        ("architectures", "GPT2LMHeadModel", 'architectures="GPT2LMHeadModel" must be a list'),
    ],
)
def test_a_config_value_of_the_wrong_type_is_one_line(gpt2, tmp_path, capsys, key, value, says):
    folder = copy_folder(gpt2, tmp_path / "types")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {key: value}))
    assert says in sample_refused(folder, capsys)


def rewrite_header(path: Path, change) -> None:
    """model.safetensors with its header changed by `change(header)`, the tensors' bytes kept."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    change(header)
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length :])


def test_every_tensor_span_of_a_safetensors_header_is_checked(gpt2, tmp_path, capsys):
    folder = copy_folder(gpt2, tmp_path / "spans")
    original = (folder / "model.safetensors").read_bytes()
    name = "transformer.h.0.ln_1.weight"

    def eight_bytes(header):
        start = header[name]["data_offsets"][0]
        header[name]["data_offsets"] = [start, start + 8]

    rewrite_header(folder / "model.safetensors", eight_bytes)
    assert f"tensor '{name}' spans 8 bytes, but its shape [32] of F32 takes 128" in sample_refused(
        folder, capsys
    )

    def same_bytes(header):
        header[name]["data_offsets"] = header["transformer.h.0.ln_1.bias"]["data_offsets"]

    (folder / "model.safetensors").write_bytes(original)
    rewrite_header(folder / "model.safetensors", same_bytes)
    assert "shares bytes with another tensor" in sample_refused(folder, capsys)

    (folder / "model.safetensors").write_bytes(original + b"\0" * 16)
    assert "has 16 bytes after its last tensor" in sample_refused(folder, capsys)

    def unknown_dtype(header):
        header[name]["dtype"] = "F24"

    (folder / "model.safetensors").write_bytes(original)
    rewrite_header(folder / "model.safetensors", unknown_dtype)
    assert "has the dtype 'F24', which is not a safetensors dtype" in sample_refused(folder, capsys)


def test_a_tokenizer_in_an_hf_folder_is_checked_before_it_runs(gpt2, tmp_path, capsys):
    folder = copy_folder(gpt2, tmp_path / "regex")
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["pre_tokenizer"] = split("(a+)+$")
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    assert "which holds a repeated group" in sample_refused(folder, capsys)


# --------------------------------------------------------------------------------- a run
def test_a_bad_file_met_while_training_leaves_no_run_behind(tmp_path, monkeypatch, capsys):
    from transformer_lab import train as train_tool

    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "fine text here"}\n{"text": "ROMEO \\ud800 speaks"}\n')
    run_dir = tmp_path / "run"
    argv = ["train.py", "task=text", f"data.path={corpus}", "data.tokenizer=char", "data.block_size=4"]
    monkeypatch.setattr(
        sys, "argv", [*argv, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}"]
    )
    with pytest.raises(SystemExit) as stopped:
        train_tool.main()
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: data.path: ") and "lone surrogate" in err and err.count("\n") == 1
    assert not run_dir.exists()


def test_every_row_of_the_troubleshooting_section_is_asserted_by_a_test():
    """docs/troubleshooting.md's rows for files from elsewhere, writes and signals: each row's message
    shares a stretch of 20 characters or more with a test's assertion."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    section = page.split("## Files from elsewhere, writes and signals")[1].split("\n## ")[0]
    lines = [row for row in section.splitlines() if row.startswith("| ") and "--" not in row]
    tests = "".join(
        (ROOT / "tests" / name).read_text().replace("\\\\", "\\")
        for name in (
            "test_files_from_elsewhere.py",
            "test_signals.py",
            "test_export.py",
            "test_hub_folders.py",
            "test_sae_interop.py",
            "test_snapshots.py",
            "test_faults.py",
        )
    )
    assert len(lines) >= 14
    for row in lines[1:]:
        message = re.search(r"`([^`]+)`", row.split(" | ", 1)[1]).group(1)
        assert any(message[i : i + 20] in tests for i in range(len(message) - 19)), message
