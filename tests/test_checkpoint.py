"""transformer_lab.load: one object for a checkpoint's model, task and examples, and the one place that
checks a file someone else made, before anything large is allocated or any code runs."""

import os
import resource
import stat

import pytest
import torch

import transformer_lab
from tests.conftest import ROOT, compose_train_config, save_task_checkpoint
from transformer_lab import ConfigError, load, load_model
from transformer_lab.checkpoint import Checkpoint
from transformer_lab.data import ReverseDataModule, ShakespeareDataModule, SortDataModule
from transformer_lab.data.shakespeare import SHAKESPEARE_SHA256
from transformer_lab.nn import EncoderClassifier
from transformer_lab.train import train

SMALL = dict(train_size=64, val_size=32, test_size=32, batch_size=16)


@pytest.fixture
def reverse_file(tmp_path):
    return save_task_checkpoint(tmp_path / "reverse.ckpt", ReverseDataModule(seq_len=6, **SMALL))


def _edited(path, tmp_path, edit, name="edited.ckpt"):
    checkpoint = torch.load(path, weights_only=True)
    edit(checkpoint)
    torch.save(checkpoint, tmp_path / name)
    return tmp_path / name


def test_the_object_has_the_model_the_task_and_their_examples(reverse_file):
    ckpt = load(reverse_file)
    assert isinstance(ckpt, Checkpoint) and isinstance(ckpt.model, EncoderClassifier)
    assert not ckpt.model.training and ckpt.config.arch == "encoder" and ckpt.task_name == "Reverse"
    assert isinstance(ckpt.task, ReverseDataModule) and ckpt.output_names == ckpt.model.vocab
    (tokens,), labels = ckpt.example(3)
    assert tokens.shape == labels.shape == (1, 6) and torch.equal(labels, tokens.flip(-1))
    (batch,), labels = ckpt.examples(8)
    assert batch.shape == (8, 6)
    assert ckpt.decode(ckpt.encode("1 2 3")) == "1 2 3"
    _, labels = ckpt.text_example("1 2 3 4 5 6")
    assert ckpt.decode(labels[0]) == "6 5 4 3 2 1"
    ((clean,), _), ((corrupted,), _) = ckpt.corrupted_pairs(4, position=2)
    assert (clean != corrupted).sum(dim=1).tolist() == [1, 1, 1, 1]
    assert load_model(reverse_file).config == ckpt.config  # the one-line way to just the model


def test_analysis_functions_take_the_object_and_a_bare_tensor(reverse_file):
    from transformer_lab.analysis import interventions, lens

    ckpt = load(reverse_file)
    (tokens,), labels = ckpt.examples(8)
    assert len(lens.logit_lens(ckpt, tokens)) == ckpt.config.num_layers + 1
    assert interventions.ablate_heads(ckpt, tokens, labels).ablated
    with pytest.raises(TypeError, match="source and target"):
        sort = load("pretrained:sort")
        interventions.ablate_heads(sort, tokens, labels)


def test_the_four_shipped_files_and_an_old_format_file_still_load(tmp_path):
    for name in transformer_lab.pretrained.names():
        ckpt = load(f"pretrained:{name}")
        assert ckpt.example(0)[1].numel()
        # the four first shipped files are from before format_version; files added since carry it
        assert ckpt.format_version == (0 if name in ("reverse", "reverse_2l4h", "sort", "shakespeare") else 1)


def test_a_run_directory_loads_its_best_checkpoint(tmp_path):
    train(compose_train_config(tmp_path))
    ckpt = load(tmp_path)
    assert ckpt.file == tmp_path / "checkpoints" / "best.ckpt" and ckpt.format_version == 1
    assert load(tmp_path / "checkpoints" / "last.ckpt").global_step == 8


def test_paths_that_are_not_checkpoint_files_are_named_for_what_they_are(tmp_path):
    with pytest.raises(ConfigError, match=r"docs is a folder, not a checkpoint"):
        load(ROOT / "docs")
    loop = tmp_path / "loop.ckpt"
    os.symlink(loop, loop)
    with pytest.raises(ConfigError, match="cannot be read: Too many levels of symbolic links"):
        load(loop)
    fifo = tmp_path / "pipe.ckpt"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load(fifo)
    with pytest.raises(ConfigError, match=r"nope\.ckpt does not exist"):
        load(tmp_path / "nope.ckpt")


def test_the_pickle_refusal_is_one_clean_line(tmp_path):
    class Code:
        def __reduce__(self):
            return (print, ("ran",))

    torch.save({"state_dict": {}, "hyper_parameters": {"x": Code()}}, tmp_path / "evil.ckpt")
    with pytest.raises(ConfigError) as info:
        load(tmp_path / "evil.ckpt")
    message = str(info.value)
    assert message.startswith("refusing to load") and "a reference to print" in message
    assert "\n" not in message and "\x1b" not in message


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.__setitem__("state_dict", [1, 2]), "state_dict must map names to tensors"),
        (lambda c: c["hyper_parameters"].__setitem__("net", [1]), "written by an older transformer-lab"),
        (lambda c: c.__setitem__("task", ["x"]), "task must be a mapping"),
        (lambda c: c.__setitem__("task", {"class": 3}), "its task record must name a class"),
        (lambda c: c["hyper_parameters"]["net"].__setitem__("heads", 4), "has a key this version does not"),
        (lambda c: c["hyper_parameters"]["net"].__setitem__("num_heads", "4"), "num_heads='4' must be a"),
        (lambda c: c["state_dict"].pop("net.embed.weight"), "has no weight net.embed.weight"),
        (
            lambda c: c["state_dict"].__setitem__("net.embed.weight", torch.zeros(3, 3)),
            r"weight net\.embed\.weight has shape \(3, 3\) in the file but the config makes \(14, 32\)",
        ),
        (lambda c: c["state_dict"].__setitem__("net.evil", torch.zeros(1)), "has a weight net.evil that"),
    ],
)
def test_every_field_is_checked_with_a_one_line_error(reverse_file, tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message) as info:
        load(_edited(reverse_file, tmp_path, edit))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"), [("max_len", 20_000_000), ("dim_feedforward", 20_000_000), ("model_dim", 1 << 20)]
)
def test_absurd_sizes_are_refused_before_anything_is_allocated(reverse_file, tmp_path, key, value):
    """A 150 kB file whose config says max_len=2e7 would make a 5 GB positional table: refused from the
    config alone (the model is only ever built on the meta device first)."""
    path = _edited(reverse_file, tmp_path, lambda c: c["hyper_parameters"]["net"].__setitem__(key, value))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError, match=rf"model\.{key}={value} is more than this package's limit"):
        load(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # kB: nothing large


def test_a_model_too_large_for_the_memory_is_refused_with_the_estimate(reverse_file, tmp_path, monkeypatch):
    monkeypatch.setattr("transformer_lab.limits.available_memory", lambda: 10_000)
    with pytest.raises(ConfigError, match=r"the model of .* needs about .* kB, more than the 10\.0 kB"):
        load(reverse_file)


def test_a_task_record_builds_only_the_split_a_tool_needs(tmp_path, monkeypatch):
    path = save_task_checkpoint(
        tmp_path / "big.ckpt", ReverseDataModule(seq_len=6, train_size=3_000_000, val_size=8, test_size=8)
    )
    drawn = []
    original = ReverseDataModule.draw

    def counting(self, size, generator):
        drawn.append(size)
        return original(self, size, generator)

    monkeypatch.setattr(ReverseDataModule, "draw", counting)
    load(path).example(0)
    assert drawn == [8]  # the test split only: no 3 million training sequences for one example
    huge = save_task_checkpoint(tmp_path / "huge.ckpt", ReverseDataModule(seq_len=6, test_size=10**10))
    with pytest.raises(ConfigError, match=r"the test split of data\.test_size=10000000000 examples needs"):
        load(huge).example(0)


def test_a_record_cannot_make_the_tools_read_a_file_it_names(tmp_path):
    task = ShakespeareDataModule(block_size=8)
    path = save_task_checkpoint(tmp_path / "text.ckpt", task, arch="decoder", model_dim=32)

    def naming(target, checksum):
        return lambda c: c["datamodule_hyper_parameters"].update(path=str(target), sha256=checksum)

    pointed = _edited(path, tmp_path, naming("/etc/passwd", None), "passwd.ckpt")
    with pytest.raises(ConfigError, match=r"reads its data from /etc/passwd.*pass data_path="):
        load(pointed).example(0)
    made_up = _edited(path, tmp_path, naming(tmp_path / "new" / "input.txt", None), "mkdir.ckpt")
    with pytest.raises(ConfigError, match="pass data_path="):
        load(made_up).example(0)
    assert not (tmp_path / "new").exists()  # nothing created, nothing downloaded
    shipped = _edited(path, tmp_path, naming("/anywhere/input.txt", SHAKESPEARE_SHA256), "shipped.ckpt")
    assert load(shipped).example(0)[1].numel()  # the package's own copy of the text whose sha256 it records
    own = tmp_path / "own.txt"
    own.write_text(ShakespeareDataModule().path.read_text())
    assert load(pointed, data_path=own).example(0)[1].numel()  # a file the user names


def test_a_shipped_file_is_verified_against_its_registry(tmp_path, monkeypatch):
    # see tests/test_pretrained.py for flipped bytes; a listed file that is missing is named
    monkeypatch.setattr(transformer_lab.pretrained, "DIRECTORY", tmp_path)
    with pytest.raises(ConfigError, match=r"is listed but its file .* is missing"):
        load("pretrained:reverse")


def test_checkpoints_are_readable_as_the_umask_says(tmp_path):
    old = os.umask(0o022)
    try:
        train(compose_train_config(tmp_path))
    finally:
        os.umask(old)
    for name in ("best.ckpt", "last.ckpt"):
        mode = stat.S_IMODE((tmp_path / "checkpoints" / name).stat().st_mode)
        assert mode == 0o644, oct(mode)  # mkstemp alone would leave 0600: unreadable to a shared group


def test_sort_examples_and_sources(tmp_path):
    path = save_task_checkpoint(tmp_path / "sort.ckpt", SortDataModule(seq_len=6, **SMALL))
    ckpt = load(path)
    (source, target), labels = ckpt.text_example("3 1 3")
    assert ckpt.decode(source[0]) == "3 1 3" and ckpt.decode(labels[0]) == "1 3 <eos>"
    assert ckpt.decode(target[0]) == "<bos> 1 3"


def test_a_file_that_is_no_checkpoint_is_named_as_such(tmp_path):
    """A text file, an empty file or a pipe where a checkpoint belongs: one line that says what to pass,
    without torch's own message (which spoke of mmap and _use_new_zipfile_serialization)."""
    from transformer_lab.checkpoint import read

    text, empty, pipe = tmp_path / "notes.ckpt", tmp_path / "empty.ckpt", tmp_path / "pipe.ckpt"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    empty.write_bytes(b"")
    os.mkfifo(pipe)
    for path in (text, empty):
        with pytest.raises(ConfigError) as refused:
            transformer_lab.load(path)
        message = str(refused.value)
        assert message.startswith(f"{path} is not a readable checkpoint: not the zip archive torch.save")
        assert message.endswith("a run directory or pretrained:<name>") and "mmap" not in message
    with pytest.raises(ConfigError, match="is not a regular file"):
        read(pipe)  # as resume=auto reads every run's last.ckpt: a pipe must not block it
