import hashlib
import os
from pathlib import Path

import pytest
import torch

from transformer_lab.data import ShakespeareDataModule, Tokenizer, shakespeare
from transformer_lab.data.shakespeare import SHAKESPEARE_SHA256, shipped_text
from transformer_lab.errors import ConfigError

REAL_PATH = shipped_text()


@pytest.fixture(scope="module")
def dm() -> ShakespeareDataModule:
    return ShakespeareDataModule(block_size=32, batch_size=8, val_batches=3)  # the shipped copy


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _small_dm(tmp_path: Path, text: str, **kwargs) -> ShakespeareDataModule:
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    return ShakespeareDataModule(path=str(path), sha256=None, cache_dir=str(tmp_path / "cache"), **kwargs)


# Tokenizer


def test_real_file_vocabulary_round_trip(dm):
    assert len(dm.vocab) == dm.model_settings()["vocab_size"] == 65 and dm.num_classes is None
    assert dm.vocab == sorted(dm.vocab) and dm.vocab[0] == "\n" and dm.vocab[1] == " "
    text = REAL_PATH.read_text(encoding="utf-8")[:1000]
    ids = dm.tokenizer.encode(text)
    assert ids.dtype == torch.long and ids.shape == (1000,)
    assert dm.tokenizer.decode(ids) == text
    assert dm.tokenizer.decode(ids.tolist()) == text
    assert torch.equal(ids, dm.data[:1000])


def test_tokenizer_from_saved_vocab_matches():
    built = Tokenizer.from_text("hello world")
    assert built.vocab == [" ", "d", "e", "h", "l", "o", "r", "w"]
    restored = Tokenizer(built.vocab)
    assert restored.encode("hello").tolist() == built.encode("hello").tolist() == [3, 2, 4, 4, 5]


def test_unknown_characters_are_listed():
    tok = Tokenizer.from_text("abc")
    with pytest.raises(ConfigError, match="not in the vocabulary") as info:
        tok.encode("abz\u00e9!")
    message = str(info.value)
    assert "'z'" in message and "'é'" in message and "'!'" in message
    assert "checkpoint's vocabulary" in message and "'abc'" in message
    assert "\n" not in message


def test_bad_saved_vocab():
    with pytest.raises(ConfigError, match="single characters"):
        Tokenizer(["a", "bc"])
    with pytest.raises(ConfigError, match="twice"):
        Tokenizer(["a", "a"])


# Batches and splits


def test_batches_are_shifted_windows_of_the_data(dm):
    torch.manual_seed(0)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (8, 32) and x.dtype == y.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])
    data = dm.train_data
    for row, start in enumerate(_starts_of(data, x)):  # y[:, t] is data[start + t + 1]
        assert torch.equal(y[row], data[start + 1 : start + 33])


def _starts_of(data: torch.Tensor, x: torch.Tensor) -> list[int]:
    """Where each row of x begins in data (the first match)."""
    starts = []
    for row in x:
        candidates = torch.arange(len(data) - x.size(1) + 1)
        for t, char in enumerate(row):  # keep the candidates that match one more character
            candidates = candidates[data[candidates + t] == char]
        starts.append(int(candidates[0]))
    return starts


def test_windows_index_directly():
    data = torch.arange(100)
    x, y = shakespeare.windows(data, torch.tensor([[0, 10], [90, 5]]), 4)
    assert x.shape == (2, 2, 4)
    assert x[1, 0].tolist() == [90, 91, 92, 93] and y[1, 0].tolist() == [91, 92, 93, 94]


def test_split_sizes(dm):
    n = len(REAL_PATH.read_text(encoding="utf-8"))
    assert len(dm.data) == n == 1_115_394
    assert len(dm.train_data) == int(0.9 * n) and len(dm.train_data) + len(dm.val_data) == n
    assert torch.equal(torch.cat([dm.train_data, dm.val_data]), dm.data)  # val starts where train ends


def test_val_batches_fixed_across_instances_and_test_reuses_them(dm):
    other = ShakespeareDataModule(path=str(REAL_PATH), block_size=32, batch_size=8, val_batches=3)
    torch.manual_seed(123)  # the global RNG must not matter
    first = list(dm.val_dataloader())
    torch.manual_seed(456)
    second = list(other.val_dataloader())
    tests = list(dm.test_dataloader())
    assert len(first) == len(second) == len(tests) == 3
    for (x1, y1), (x2, y2), (x3, y3) in zip(first, second, tests, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2) and torch.equal(x1, x3) and torch.equal(y1, y3)
    assert not torch.equal(first[0][0], first[1][0])
    val = dm.val_data
    for x, y in first:
        for start, row in zip(_starts_of(val, x), y, strict=True):
            assert torch.equal(row, val[start + 1 : start + 33])


def test_train_batches_reproducible_with_seed_and_fresh_each_epoch(dm):
    loader = dm.train_dataloader()
    assert len(loader) == 200
    torch.manual_seed(7)
    first = [b for _, b in zip(range(3), loader, strict=False)]
    torch.manual_seed(7)
    again = [b for _, b in zip(range(3), loader, strict=False)]
    later = next(iter(loader))
    for (x1, y1), (x2, y2) in zip(first, again, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(first[0][0], first[1][0])
    assert not torch.equal(first[0][0], later[0])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_epoch_length_is_batches_per_epoch(tmp_path, num_workers):
    text = "".join(chr(ord("a") + i % 26) + chr(ord("A") + i // 26 % 26) for i in range(2000))
    dm = _small_dm(tmp_path, text, block_size=8, batch_size=4, batches_per_epoch=5, num_workers=num_workers)
    batches = [x for x, _ in dm.train_dataloader()]
    assert len(batches) == 5
    assert len({tuple(x.flatten().tolist()) for x in batches}) == 5  # workers draw different windows


# The file: checksum, download, contents


def test_the_text_ships_inside_the_package_and_is_read_from_there():
    assert REAL_PATH.is_file() and REAL_PATH.parent.parent.name == "data"  # transformer_lab/data/
    assert hashlib.sha256(REAL_PATH.read_bytes()).hexdigest() == SHAKESPEARE_SHA256
    assert ShakespeareDataModule().path == REAL_PATH  # data.path=null (the default): that copy


def test_checksum_good_and_bad(tmp_path):
    path = tmp_path / "text.txt"
    path.write_bytes(b"some text\n" * 20)
    options = dict(path=str(path), block_size=8, cache_dir=str(tmp_path / "cache"))
    assert ShakespeareDataModule(sha256=_sha(b"some text\n" * 20), **options).data.numel() == 200
    assert ShakespeareDataModule(sha256=None, **options).vocab == sorted(set("some text\n"))
    wrong = "0" * 64
    with pytest.raises(ConfigError, match=f"expected {wrong}") as info:
        _ = ShakespeareDataModule(sha256=wrong, **options).vocab
    assert _sha(b"some text\n" * 20) in str(info.value) and str(path) in str(info.value)
    assert path.read_bytes() == b"some text\n" * 20  # a bad checksum never deletes the user's file


def test_a_missing_file_is_an_error_and_nothing_is_downloaded_or_created(tmp_path):
    path = tmp_path / "data" / "mine.txt"
    dm = ShakespeareDataModule(path=str(path), sha256=None)
    with pytest.raises(ConfigError, match=r"data\.path=.*mine\.txt does not exist"):
        _ = dm.vocab
    assert not path.parent.exists()


@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "folder"])
def test_special_files_are_refused_before_anything_is_read(tmp_path, special):
    if special == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)  # reading it would block forever
    elif special == "folder":
        path = tmp_path
    else:
        path = Path(special)  # reading it would fill the memory
    dm = ShakespeareDataModule(path=str(path), sha256=None)
    with pytest.raises(ConfigError, match=r"data\.path=.* (is not a regular file|is a folder)"):
        _ = dm.vocab


def test_empty_file(tmp_path):
    with pytest.raises(ConfigError, match=r"corpus\.txt is empty"):
        _ = _small_dm(tmp_path, "").vocab


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café au lait".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.txt is not UTF-8"):
        _ = ShakespeareDataModule(path=str(path), sha256=None, cache_dir=str(tmp_path / "cache")).vocab


# Arguments


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"block_size": 0}, "data.block_size=0 must be a positive integer"),
        ({"train_fraction": 1.5}, "data.train_fraction=1.5"),
        ({"train_fraction": 0}, "data.train_fraction=0"),
        ({"batch_size": -1}, "data.batch_size=-1 must be a positive integer"),
        ({"batches_per_epoch": 0}, "data.batches_per_epoch=0"),
        ({"val_batches": 2.5}, "data.val_batches=2.5"),
        ({"num_workers": -1}, "data.num_workers=-1"),
        ({"sha256": "abc"}, "data.sha256='abc'"),
    ],
)
def test_invalid_args(kwargs, key):
    with pytest.raises(ConfigError) as info:
        ShakespeareDataModule(**kwargs)
    assert key in str(info.value)


def test_block_size_must_fit_each_split(tmp_path):
    dm = _small_dm(tmp_path, "x" * 100, block_size=10, train_fraction=0.9)
    with pytest.raises(ConfigError, match=r"data.block_size=10 must be smaller than the val split \(10 "):
        _ = dm.vocab
    assert _small_dm(tmp_path, "x" * 100, block_size=9).vocab == ["x"]
