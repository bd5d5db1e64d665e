"""task=text end to end on a corpus made in the test (several files, .txt / .jsonl / .parquet, UTF-8 with
non-ASCII text): a byte-level BPE trains, the model samples text, interpret runs heads and circuit in
tokens, and a second run reuses the cached token file. Also: Tiny Shakespeare is this task with its file;
DDP ranks draw different windows; the one-line refusals; and files from someone else (a tokenizer.json,
a checkpoint's tokenizer, a cache entry) that are malformed, huge, a FIFO or a symlink out of the cache."""

import json
import logging
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import transformer_lab
from tests.conftest import COMMON, compose_train_config, load_script
from tests.text_corpus import write_corpus
from transformer_lab.data import ShakespeareDataModule, TextDataModule
from transformer_lab.data import tokenizer as tokenizer_module
from transformer_lab.data.corpus import Corpus, split_text
from transformer_lab.data.tokenizer import BPETokenizer, train_bpe
from transformer_lab.errors import ConfigError
from transformer_lab.train import train

TINY_TEXT = [
    "task=text",
    "data.tokenizer=bpe",
    "data.vocab_size=512",
    "data.block_size=32",
    "data.batch_size=8",
    "data.batches_per_epoch=4",
    "data.val_batches=2",
    "model.model_dim=32",
    "model.num_heads=2",
    "model.num_layers=2",
    "trainer.max_steps=8",
    "callbacks.text_samples.max_new_tokens=20",
    "callbacks.snapshots.count=0",
    *COMMON,
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("text") / "corpus")


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory):
    """Two runs on the corpus with one cache: the first makes the tokenizer and the token file, the
    second finds them. Each run's log lines and metrics, and the token file's inode and mtime after each."""
    root = tmp_path_factory.mktemp("runs")
    cache = root / "cache"
    out = []
    logger = logging.getLogger("transformer_lab")
    for name in ("first", "second"):
        records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record, records=records: records.append(record.getMessage())
        logger.addHandler(handler)
        level = logger.level
        logger.setLevel(logging.INFO)
        try:
            cfg = compose_train_config(
                root / name, f"data.path={corpus}", f"data.cache_dir={cache}", base=TINY_TEXT
            )
            metrics = train(cfg)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        (tokens,) = cache.glob("tokens-*/tokens.bin")
        out.append((root / name, metrics, records, (tokens.stat().st_ino, tokens.stat().st_mtime_ns)))
    return out


def test_bpe_trains_and_the_second_run_reuses_the_cached_token_file(runs):
    (first_dir, first, first_log, first_file), (_, second, second_log, second_file) = runs
    assert first["global_step"] == second["global_step"] == 8
    assert 0 < first["val/loss"] < 2 * torch.log(torch.tensor(512.0)).item()
    made = [line for line in first_log if line.startswith("Tokens: ")]
    assert len(made) == 1 and "made in" in made[0] and "MB/s" in made[0] and "tokens/s" in made[0]
    assert any(line.startswith("Tokenizer: bpe, 512 tokens (built in") for line in first_log)
    reused = [line for line in second_log if line.startswith(("Tokens: ", "Tokenizer: "))]
    assert len(reused) == 2 and all("cached" in line for line in reused), reused
    assert first_file == second_file  # the same file, not rebuilt
    split = [line for line in first_log if line.startswith("val: ")]
    assert split == [line for line in second_log if line.startswith("val: ")]
    assert split[0].startswith("val: document") and "of 39" in split[0] and "% of the tokens" in split[0]
    # the tokenizer travels: in the run directory and in the checkpoint's record, as tokenizer.json text
    checkpoint = torch.load(first_dir / "checkpoints" / "best.ckpt", weights_only=True)
    record = checkpoint["task"]
    assert record["class"] == "transformer_lab.data.text.TextDataModule" and record["separator"] == ""
    assert json.loads(record["tokenizer"])["model"]["type"] == "BPE"
    assert (first_dir / "tokenizer.json").read_text() == record["tokenizer"]
    assert (
        checkpoint["datamodule_hyper_parameters"]["sha256"]
        == Corpus(checkpoint["datamodule_hyper_parameters"]["path"]).sha256
    )  # the checkpoint vouches for its corpus
    assert "cache_dir" not in checkpoint["datamodule_hyper_parameters"]


def test_sample_takes_text_and_prints_text(runs, capsys):
    sample = load_script("sample")
    ckpt = runs[0][0] / "checkpoints" / "best.ckpt"
    texts = []
    for seed in (3, 3, 4):
        sample.main([f"ckpt_path={ckpt}", "prompt=Naïve café 😀", "max_new_tokens=30", f"seed={seed}"])
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] != texts[2] and texts[0].startswith("Naïve café 😀")
    loaded = transformer_lab.load(ckpt)
    assert isinstance(loaded.tokenizer, BPETokenizer) and loaded.tokenizer.vocab == loaded.config.tokens
    assert loaded.decode(loaded.encode("Zürich 日本語 <|endoftext|>")) == "Zürich 日本語 <|endoftext|>"
    sample.main([f"ckpt_path={ckpt}", "prompt=Ωμέγα", "max_new_tokens=12", "num_samples=2"])
    assert capsys.readouterr().out.count("Ωμέγα") == 2


def test_interpret_heads_and_circuit_speak_in_tokens(runs, tmp_path, capsys):
    interpret = load_script("interpret")
    ckpt = runs[0][0]
    interpret.main([f"ckpt_path={ckpt}", "analysis=heads", "num_examples=16", f"out_dir={tmp_path}", "ci=0"])
    heads = capsys.readouterr().out
    assert "L0H0" in heads and "L1H1" in heads and (tmp_path / "heads.json").is_file()
    interpret.main(
        [f"ckpt_path={ckpt}", "analysis=circuit", "num_examples=8", "verify=2", "ci=0", f"out_dir={tmp_path}"]
    )
    circuit = capsys.readouterr().out
    assert "metric=logit_diff" in circuit and (tmp_path / "circuit.json").is_file()
    loaded = transformer_lab.load(ckpt)
    names = loaded.output_names
    assert len(names) == 512 and all(" " not in name for name in names)  # spaces shown as ␣
    assert any(name.startswith("␣") and len(name) > 2 for name in names)  # a word with its space
    ((clean,), _), ((corrupted,), _) = loaded.corrupted_pairs(8, position=1)
    changed = clean != corrupted
    assert changed.sum(1).tolist() == [1] * 8 and changed[:, -2].all()  # one token, one place before last
    assert not (corrupted[:, -2] == loaded.tokenizer.eot_id).any()  # by another token of text


def test_display_shows_each_token_with_its_spaces_visible(runs):
    task = transformer_lab.load(runs[0][0]).task
    ids = task.tokenizer.encode(" the café\n\tx")
    shown = task.display_tokens(ids)
    assert "".join(shown).replace("␣", " ").replace("⏎", "\n").replace("⇥", "\t") == " the café\n\tx"
    assert all(" " not in s and "\n" not in s for s in shown)
    first_byte = task.vocab.index("Ã")  # the first byte of é alone
    assert task.display_tokens([first_byte]) == ["\\xc3"]


def test_a_checkpoint_moved_away_from_its_corpus_reads_it_where_the_user_says(runs, corpus, tmp_path):
    ckpt = shutil.copy(runs[0][0] / "checkpoints" / "best.ckpt", tmp_path / "model.ckpt")
    moved = shutil.copytree(corpus, tmp_path / "elsewhere")
    shutil.move(corpus, tmp_path / "gone")
    try:
        with pytest.raises(ConfigError, match="pass data_path=<the data file> to use it"):
            transformer_lab.load(ckpt).examples(4)
        os.environ["TRANSFORMER_LAB_CACHE"] = str(tmp_path / "cache")
        inputs, labels = transformer_lab.load(ckpt, data_path=moved).examples(4)
        assert inputs[0].shape == labels.shape == (4, 32)
    finally:
        os.environ.pop("TRANSFORMER_LAB_CACHE", None)
        shutil.move(tmp_path / "gone", corpus)


# ------------------------------------------------------------------------------------ Shakespeare
def test_shakespeare_is_the_text_task_with_its_file_and_characters(tmp_path):
    options = dict(block_size=32, batch_size=8, val_batches=3, cache_dir=str(tmp_path))
    preset = ShakespeareDataModule(**options)
    text = TextDataModule(tokenizer="char", **options)  # data.path=null: the shipped file
    assert preset.vocab == text.vocab and len(preset.vocab) == 65
    assert preset.split_note == text.split_note == "val: the last 10% of the file (111.5 K tokens)"
    for a, b in zip(preset.val_dataloader(), text.val_dataloader(), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    torch.manual_seed(5)
    x1, _ = next(iter(preset.train_dataloader()))
    torch.manual_seed(5)
    x2, _ = next(iter(text.train_dataloader()))
    assert torch.equal(x1, x2)
    assert dict(preset.hparams).keys() == {
        "path",
        "block_size",
        "batch_size",
        "train_fraction",
        "num_workers",
        "batches_per_epoch",
        "val_batches",
        "sha256",
        "seed",
    }  # what pretrained:shakespeare's record holds


def test_ddp_ranks_draw_different_windows(corpus, tmp_path):
    task = TextDataModule(
        path=str(corpus), tokenizer="char", block_size=16, batch_size=4, cache_dir=str(tmp_path)
    )
    torch.manual_seed(0)  # DDP processes share the global seed
    rank0 = [batch for _, batch in zip(range(3), task.train_batches(rank=0), strict=False)]
    torch.manual_seed(0)
    rank1 = [batch for _, batch in zip(range(3), task.train_batches(rank=1), strict=False)]
    torch.manual_seed(0)
    again = [batch for _, batch in zip(range(3), task.train_batches(rank=0), strict=False)]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(rank0, again, strict=True))
    assert not any(torch.equal(a[0], b[0]) for a, b in zip(rank0, rank1, strict=True))


def test_pieces_are_cut_where_a_gpt2_tokenizer_cuts_anyway(corpus):
    text = (corpus / "story_00.txt").read_text()
    pieces = list(split_text(text, size=10_000))
    assert "".join(pieces) == text and len(pieces) > 10
    assert all(p.endswith("\n") and not p[: len(p) - 1].endswith(" ") for p in pieces[:-1])
    bpe = train_bpe([text[:200_000]], 400)
    whole = bpe.encode(text).tolist()
    assert [i for p in pieces for i in bpe.encode(p).tolist()] == whole  # the pieces' tokens: the text's


# ------------------------------------------------------------------------------------ refusals
def _refused(tmp_path: Path, **options) -> str:
    options.setdefault("cache_dir", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as info:
        _ = TextDataModule(block_size=8, **options).vocab
    message = str(info.value)
    assert "\n" not in message
    return message


def test_empty_corpus_binary_and_unreadable_files_are_refused_naming_them(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("")
    assert "is empty" in _refused(tmp_path, path=str(tmp_path / "empty"))
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "notes.md").write_text("words")
    assert "without .txt, .jsonl or .parquet files" in _refused(tmp_path, path=str(tmp_path / "none"))
    assert "matches no files" in _refused(tmp_path, path=str(tmp_path / "nothing" / "*.txt"))
    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"text": ""}\n{"text": ""}\n')
    assert "holds no text" in _refused(tmp_path, path=str(blank), tokenizer="char")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "good.txt").write_text("words " * 100)
    (mixed / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    message = _refused(tmp_path, path=str(mixed), tokenizer="char")
    assert "image.txt is binary, not text (a NUL byte at byte 8)" in message
    (mixed / "image.txt").write_bytes("caf\u00e9".encode("latin-1") * 50)
    assert "image.txt is not UTF-8 text (byte 3" in _refused(tmp_path, path=str(mixed), tokenizer="char")
    (mixed / "image.txt").unlink()
    os.mkfifo(mixed / "pipe.txt")
    assert "pipe.txt is not a regular file" in _refused(tmp_path, path=str(mixed))
    (mixed / "pipe.txt").unlink()
    (mixed / "loop.txt").symlink_to(mixed / "loop.txt")
    assert "loop.txt cannot be read" in _refused(tmp_path, path=str(mixed))


def test_jsonl_and_parquet_without_the_text_are_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\nnot json\n')
    assert "bad.jsonl line 2 is not JSON" in _refused(tmp_path, path=str(bad))
    bad.write_text('{"body": "fine"}\n')
    assert "has no field 'text' (it has: body); set data.text_key=" in _refused(tmp_path, path=str(bad))
    bad.write_text('{"text": 3}\n')
    assert "'text' is not a string (a number)" in _refused(tmp_path, path=str(bad))
    pq.write_table(pa.table({"body": ["a b c"]}), tmp_path / "p.parquet")
    assert "has no column 'text' (it has: body)" in _refused(tmp_path, path=str(tmp_path / "p.parquet"))
    (tmp_path / "q.parquet").write_bytes(b"PAR1 not really")
    assert "is not a readable parquet file" in _refused(tmp_path, path=str(tmp_path / "q.parquet"))


def test_a_vocabulary_that_does_not_fit_is_refused(tmp_path, corpus):
    assert "data.vocab_size=8388608 must be a positive integer of at most 4194304" in _refused(
        tmp_path, path=str(corpus), vocab_size=2**23
    )
    assert "data.vocab_size=100 must be an integer from 258" in _refused(
        tmp_path, path=str(corpus), vocab_size=100
    )
    assert "data.tokenizer=BPE is neither char nor bpe nor a tokenizer.json file" in _refused(
        tmp_path, path=str(corpus), tokenizer="BPE"
    )


# ------------------------------------------------------------------------- files from someone else
def _tokenizer_file(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "tokenizer.json"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def test_a_tokenizer_json_that_is_malformed_huge_or_a_fifo_is_refused(tmp_path, monkeypatch, corpus):
    small = train_bpe(["some text to learn a few merges from, some text"], 270)
    path = _tokenizer_file(tmp_path, small.json)
    task = TextDataModule(path=str(corpus), tokenizer=path, block_size=8, cache_dir=str(tmp_path / "c"))
    assert task.vocab == small.vocab  # a good one is used as it is
    cases = {
        "{not json": "is not valid JSON",
        '{"model": 3}': "is not a tokenizer.json (no model with a type)",
        '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "zz"]]}}': "tokenizers can read",
        "[" * 100_000 + "]" * 100_000: "is not valid JSON",
        json.dumps(
            json.loads(small.json)
            | {"added_tokens": [], "model": {"type": "BPE", "vocab": {"a": 0, "b": 5}, "merges": []}}
        ): "numbers its 2 tokens with gaps",
    }
    for text, expected in cases.items():
        assert expected in _refused(tmp_path, path=str(corpus), tokenizer=_tokenizer_file(tmp_path, text))
    path = _tokenizer_file(tmp_path, small.json)
    monkeypatch.setattr(tokenizer_module, "MAX_TOKENIZER_JSON", 1000)
    assert "more than the 1.0 kB this reads" in _refused(tmp_path, path=str(corpus), tokenizer=path)
    monkeypatch.undo()
    os.mkfifo(tmp_path / "fifo.json")
    assert "is not a regular file" in _refused(
        tmp_path, path=str(corpus), tokenizer=str(tmp_path / "fifo.json")
    )


def test_a_checkpoint_whose_tokenizer_is_not_data_or_not_the_models_is_refused(runs, tmp_path):
    checkpoint = torch.load(runs[0][0] / "checkpoints" / "best.ckpt", weights_only=True)
    marker = tmp_path / "ran"
    cases = {
        f"__import__('pathlib').Path({str(marker)!r}).touch()": "is not valid JSON",
        train_bpe(["other text entirely, other merges"], 300).json: r"is not the model's \(512\)",
    }
    for text, expected in cases.items():
        checkpoint["task"]["tokenizer"] = text
        torch.save(checkpoint, tmp_path / "bad.ckpt")
        with pytest.raises(ConfigError, match=expected):
            _ = transformer_lab.load(tmp_path / "bad.ckpt").tokenizer
    assert not marker.exists()  # the record's text is parsed as JSON, never run
    checkpoint["task"]["tokenizer"] = {"model": "BPE"}
    torch.save(checkpoint, tmp_path / "bad.ckpt")
    with pytest.raises(ConfigError, match=r"must be tokenizer\.json text, not dict"):
        transformer_lab.load(tmp_path / "bad.ckpt")


@pytest.fixture
def cached(tmp_path, corpus):
    """A cache holding the corpus's characters and token file (char: quick to make)."""
    cache = tmp_path / "cache"
    task = TextDataModule(path=str(corpus), tokenizer="char", block_size=8, cache_dir=str(cache))
    _ = task.vocab
    (entry,) = cache.glob("tokens-*")
    return (
        cache,
        entry,
        lambda: TextDataModule(path=str(corpus), tokenizer="char", block_size=8, cache_dir=str(cache)),
    )


def test_a_cache_entry_that_does_not_match_its_hash_is_rebuilt_and_says_so(cached, caplog):
    _, entry, task = cached
    data = bytearray((entry / "tokens.bin").read_bytes())
    data[100] ^= 1
    (entry / "tokens.bin").write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="transformer_lab"):
        rebuilt = task()
        _ = rebuilt.vocab
    assert "does not match its hash (tokens.bin does not match its sha256); rebuilding it" in caplog.text
    assert (entry / "tokens.bin").read_bytes() != bytes(data)
    (entry / "documents.bin").unlink()
    _ = task().vocab  # a missing file: rebuilt too
    assert (entry / "documents.bin").is_file()


def test_a_cache_entry_that_is_malformed_huge_a_fifo_or_a_symlink_out_is_refused(cached, tmp_path):
    _, entry, task = cached
    good = {name: (entry / name).read_bytes() for name in ("meta.json", "tokens.bin", "documents.bin")}

    def refused() -> str:
        with pytest.raises(ConfigError) as info:
            _ = task().vocab
        assert "\n" not in str(info.value)
        return str(info.value)

    def restore() -> None:
        for name, data in good.items():
            (entry / name).unlink(missing_ok=True)
            (entry / name).write_bytes(data)

    (entry / "meta.json").write_text("{not json")
    assert "meta.json is not JSON; remove" in refused()
    (entry / "meta.json").write_text('{"format": 1}')
    assert "meta.json is malformed" in refused()
    restore()
    meta = json.loads(good["meta.json"])
    meta["num_tokens"] = 10**12  # a file larger than the corpus can make
    (entry / "meta.json").write_text(json.dumps(meta))
    assert "claims 1000000000000 tokens, more than its corpus" in refused()
    restore()
    (entry / "tokens.bin").unlink()
    os.mkfifo(entry / "tokens.bin")
    assert "tokens.bin is not a regular file (a pipe or a device)" in refused()
    restore()
    outside = tmp_path / "outside.bin"
    outside.write_bytes(good["tokens.bin"])
    (entry / "tokens.bin").unlink()
    (entry / "tokens.bin").symlink_to(outside)
    assert "tokens.bin cannot be read: it is a symlink, which a cache entry never holds" in refused()
    restore()
    moved = shutil.move(entry, tmp_path / "moved_entry")
    entry.symlink_to(moved)
    assert f"data cache {entry} is a symlink (to {moved})" in refused()
    entry.unlink()
    shutil.move(moved, entry)
    # a forged entry, consistent with its meta.json, whose ids the vocabulary does not have
    forged = (torch.full((len(good["tokens.bin"]) // 2,), 60000, dtype=torch.int32)).numpy().astype("<u2")
    (entry / "tokens.bin").write_bytes(forged.tobytes())
    import hashlib

    meta = json.loads(good["meta.json"])
    meta["files"]["tokens.bin"]["sha256"] = hashlib.sha256(forged.tobytes()).hexdigest()
    (entry / "meta.json").write_text(json.dumps(meta))
    assert "holds token id 60000, outside the vocabulary" in refused()


def test_the_live_page_tokenizes_typed_text_as_python_does(runs, tmp_path, browser):
    """The page of a BPE model (Chromium): text typed in, non-ASCII included, becomes the ids Python's
    tokenizer gives, the page's logits for them equal PyTorch's, and tokens are labelled as the tools
    show them (a word's leading space visible)."""
    checkpoint = transformer_lab.load(str(runs[0][0]))
    page = tmp_path / "page.html"
    load_script("explore").main([f"ckpt_path={runs[0][0]}", f"out={page}"])
    tab = browser.new_page()
    try:
        tab.goto(page.as_uri())
        tab.wait_for_function(
            "window.transformerLab && (window.transformerLab.updates || 0) > 0", timeout=60_000
        )
        text = "Naïve ROMEO: the café, ﬁne!"
        ids = tab.evaluate("(text) => window.transformerLab.encode(text)", text)
        assert ids == checkpoint.tokenizer.encode(text).tolist()
        assert tab.evaluate("(text) => window.transformerLab.setInput(text)", text) is None  # no problem
        logits = torch.tensor(tab.evaluate("(ids) => window.transformerLab.forward(ids).logits", ids))
        with torch.no_grad():
            expected = checkpoint.model(torch.tensor([ids]))[0]
        assert (logits - expected).abs().max() <= 1e-4 * expected.abs().max()
        shown = tab.eval_on_selector_all(".hv-token", "gs => gs.map(g => g.textContent)")
        assert any("␣" in token for token in shown), shown
    finally:
        tab.close()


def test_a_tokenizer_too_large_for_the_page_is_refused_when_the_page_is_written(runs, tmp_path, monkeypatch):
    from transformer_lab.explorer import explore

    monkeypatch.setattr(tokenizer_module, "PAGE_TOKENIZER_BUDGET", 1000)
    page = tmp_path / "page.html"
    with pytest.raises(ConfigError, match=r"take .* MB in the page, more than the 0.001 MB .*live=false"):
        explore(transformer_lab.load(str(runs[0][0])), [1, 2, 3])
    assert not page.exists()


def test_a_piped_run_says_how_far_the_bpe_and_the_tokenizing_are(tmp_path, monkeypatch, caplog):
    """Written to a log or a pipe (no terminal, so no bar), a run says every few seconds how far training
    the BPE and tokenizing are, with the rate and the time left (here every update: EVERY=0)."""
    from transformer_lab import progress

    monkeypatch.setattr(progress, "EVERY", 0.0)
    write_corpus(tmp_path / "corpus", txt_files=4)
    caplog.set_level("INFO")
    task = TextDataModule(path=str(tmp_path / "corpus"), block_size=8, cache_dir=str(tmp_path / "cache"))
    _ = task.vocab
    lines = [r.getMessage() for r in caplog.records if r.name == "transformer_lab.progress"]
    reading = [line for line in lines if line.startswith("Reading the corpus for the BPE: ")]
    tokenizing = [line for line in lines if line.startswith("Tokenizing: ")]
    assert reading and tokenizing, lines
    line = r"Tokenizing: [\d.]+ of [\d.]+ MB \(\d+%\), [\d.]+ MB/s, \d+ s left, [\d.]+ [KM]? ?tokens/s"
    assert all(re.fullmatch(line, text) for text in tokenizing), tokenizing
    assert tokenizing[-1].split(" (")[1].startswith("100%")
    assert any(re.match(r"Trained the BPE of \d+ tokens in [\d.]+ s$", line) for line in lines), lines


@pytest.mark.parametrize("to", ["onnx", "transformer_lens"])
def test_every_export_of_a_bpe_model_carries_its_tokenizer(runs, tmp_path, monkeypatch, to, capsys):
    """The tokenizer.json of the model's own BPE goes into every export folder (huggingface's has it as
    transformers writes it): with it, text becomes the ids the exported model reads."""
    pytest.importorskip("onnxruntime" if to == "onnx" else "safetensors")
    monkeypatch.setenv("TRANSFORMER_LAB_CACHE", str(tmp_path / "cache"))
    best = runs[0][0] / "checkpoints" / "best.ckpt"
    load_script("export").main([f"ckpt_path={best}", f"to={to}", f"out={tmp_path / 'out'}"])
    assert "and tokenizer.json, the model's tokenizer" in capsys.readouterr().out
    from tokenizers import Tokenizer

    exported = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    checkpoint = transformer_lab.load(best)
    assert exported.encode("ROMEO: But soft").ids == checkpoint.tokenizer.encode("ROMEO: But soft").tolist()


def test_a_folder_saved_with_save_pretrained_names_its_tokenizer(runs, tmp_path, corpus):
    """data.tokenizer=<folder>: the tokenizer.json in it (a model saved with save_pretrained)."""
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(runs[0][0] / "tokenizer.json", folder / "tokenizer.json")
    cache = str(tmp_path / "c")
    task = TextDataModule(path=str(corpus), tokenizer=str(folder), block_size=8, cache_dir=cache)
    assert task.vocab == BPETokenizer.from_file(folder / "tokenizer.json").vocab
    (folder / "tokenizer.json").unlink()
    assert "is a folder without a tokenizer.json; name the file, or a folder saved with save_pretrained" in (
        _refused(tmp_path, path=str(corpus), tokenizer=str(folder))
    )
