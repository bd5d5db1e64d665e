"""The ready-made models of transformer_lab.pretrained: each is shipped, loads with weights_only=True and
reproduces the test metrics models.json records for it (so a change to the model format or the
evaluation cannot silently break them); `pretrained:<name>` works wherever a checkpoint path does."""

import hashlib
import subprocess
import sys

import pytest
import torch

import transformer_lab
from tests.conftest import ROOT, run_cli
from transformer_lab import TransformerPredictor, load_model, pretrained
from transformer_lab.errors import ConfigError
from transformer_lab.nn import DecoderLM, EncoderClassifier, EncoderDecoder
from transformer_lab.training.checkpoint_io import SHIPPED_KEYS, shippable
from transformer_lab.training.evaluate import evaluate

SHIPPED = {
    "reverse": EncoderClassifier,
    "reverse_2l4h": EncoderClassifier,
    "sort": EncoderDecoder,
    "shakespeare": DecoderLM,
    "induction_heads": DecoderLM,  # and its 32 snapshots (tests/test_dynamics_page.py)
}
# What each model must reach whatever its record says, so a badly trained model cannot be recorded as fine:
# (metric, bound, higher is better).
GOOD_ENOUGH = {
    "reverse": ("test/seq_acc", 0.999, True),
    "reverse_2l4h": ("test/acc", 0.99, True),
    "sort": ("test/seq_acc", 0.99, True),
    "shakespeare": ("test/bpc", 2.8, False),  # nanoGPT's CPU setting reaches val loss ~1.88 nats = 2.71 bpc
    "induction_heads": ("test/acc", 0.9, True),  # the repeated tokens, copied by the induction heads
}
SIZES = {  # layers, heads
    "reverse": (1, 1),
    "reverse_2l4h": (2, 4),
    "sort": (2, 4),
    "shakespeare": (4, 4),
    "induction_heads": (2, 2),
}


def test_every_listed_model_is_shipped_and_all_are_a_few_mb():
    trained = [name for name in pretrained.names() if not pretrained.record(name).get("hand_built")]
    assert trained == list(SHIPPED)  # the hand-built answer keys: tests/test_answer_keys.py
    total = 0
    for name in SHIPPED:
        record, file = pretrained.record(name), pretrained.path(name)
        assert file == pretrained.DIRECTORY / record["file"]  # in a folder of its own: a series of snapshots
        assert file.stat().st_size == record["size_bytes"]
        assert hashlib.sha256(file.read_bytes()).hexdigest() == record["sha256"]
        assert record["test_metrics"] and set(record["headline"]) <= set(record["test_metrics"])
        total += file.stat().st_size
    assert total < 5e6


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_file_holds_weights_and_settings_only(name):
    checkpoint = torch.load(pretrained.path(name), map_location="cpu", weights_only=True)
    assert {"state_dict", "hyper_parameters", "task", "datamodule_hyper_parameters"} <= set(checkpoint)
    assert set(checkpoint) <= set(SHIPPED_KEYS)  # no optimizer, scheduler, loop or callback state
    assert checkpoint["state_dict"] and all(key.startswith("net.") for key in checkpoint["state_dict"])
    model = load_model(f"pretrained:{name}")
    assert type(model) is SHIPPED[name] and not model.training
    record = pretrained.record(name)
    assert (model.config.num_layers, model.config.num_heads) == SIZES[name]
    assert (record["architecture"], record["layers"], record["heads"]) == (model.config.arch, *SIZES[name])
    assert record["parameters"] == sum(p.numel() for p in model.parameters())
    assert transformer_lab.load(f"pretrained:{name}").tokenizer.vocab == model.vocab


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_model_reproduces_its_recorded_test_metrics(name):
    """On the first `check_batches` batches of the test split (seconds; the whole split, which
    scripts/pretrain.py measures and records as `test_metrics`, takes minutes for sort on a busy CPU)."""
    record = pretrained.record(name)
    assert record["check_batches"] == pretrained.CHECK_BATCHES
    measured = evaluate(name, limit_batches=record["check_batches"])
    recorded = record["check_metrics"]
    assert measured.keys() == recorded.keys() == record["test_metrics"].keys()
    for key, value in recorded.items():
        assert measured[key] == pytest.approx(value, abs=1e-4), key
    metric, bound, higher_is_better = GOOD_ENOUGH[name]
    for value in (measured[metric], record["test_metrics"][metric]):
        assert value >= bound if higher_is_better else value <= bound


def test_the_recorded_whole_split_metrics_are_what_train_py_printed_for_the_run():
    for name in SHIPPED:
        record = pretrained.record(name)
        assert record["train_test_metrics"].keys() == record["test_metrics"].keys()
        for key, value in record["train_test_metrics"].items():
            assert record["test_metrics"][key] == pytest.approx(value, abs=1e-4), (name, key)


def test_evaluate_measures_the_first_batches_of_the_test_split():
    """limit_batches=n is the first n batches: one batch of the reverse task's 128 sequences gives an
    accuracy that is a multiple of 1/128 per sequence."""
    one = evaluate("reverse_2l4h", limit_batches=1)
    assert one.keys() == {"test/acc", "test/loss", "test/seq_acc"}
    assert (one["test/seq_acc"] * 128) == pytest.approx(round(one["test/seq_acc"] * 128), abs=1e-4)


def test_a_shipped_model_answers_like_its_task():
    """The reverse model reverses a test sequence, the sort model sorts one (through the task rebuilt from
    the file's record), the language model writes the characters it was trained on."""
    (source,), labels = transformer_lab.load("pretrained:reverse").task.example(3, split="test")
    with torch.no_grad():
        assert torch.equal(load_model("pretrained:reverse")(source).argmax(-1), labels)
    sort = transformer_lab.load("pretrained:sort")
    output = sort.model.answer(sort.model.prompt(sort.encode("3 1 3 9 1 7 0")))[0].tolist()
    assert sort.decode(output[: output.index(sort.model.eos_id)]) == "0 1 3 7 9"
    model = load_model("pretrained:shakespeare")
    tokenizer = transformer_lab.load("pretrained:shakespeare").tokenizer
    text = tokenizer.decode(model.generate(tokenizer.encode("ROMEO:").unsqueeze(0), 40, temperature=0)[0])
    assert text.startswith("ROMEO:") and len(text) == 46


def test_lightning_restores_a_shipped_file_too():
    restored = TransformerPredictor.load_from_checkpoint(pretrained.path("reverse_2l4h"), weights_only=True)
    x = torch.randint(4, 14, (3, 16))
    with torch.no_grad():
        torch.testing.assert_close(restored.eval()(x), load_model("pretrained:reverse_2l4h")(x))


def test_an_unknown_name_is_a_one_line_error_naming_the_valid_ones():
    for location in ("pretrained:nope", "pretrained:"):
        with pytest.raises(ConfigError) as info:
            load_model(location)
        message = str(info.value)
        assert "\n" not in message and message.startswith("unknown pretrained model")
        assert all(name in message for name in SHIPPED) and pretrained.LIST_COMMAND in message
    with pytest.raises(ConfigError, match=r"does not exist.*pretrained:<name>"):
        transformer_lab.load(ROOT / "no-such.ckpt")


def test_shippable_keeps_the_model_and_drops_training_state(tmp_path):
    weights = torch.arange(12.0).reshape(3, 4)
    checkpoint = {
        "state_dict": {"net.embed.weight": weights[:, :2], "val_loss_mean.mean_value": torch.tensor(1.0)},
        "hyper_parameters": {"net": {"arch": "encoder"}, "lr": 1e-3},
        "task": {"class": "transformer_lab.data.reverse.ReverseDataModule", "separator": " "},
        "datamodule_hyper_parameters": {"seed": 0},
        "optimizer_states": [{"state": {0: {"exp_avg": torch.ones(3, 4)}}}],
        "lr_schedulers": [{}],
        "callbacks": {"BestCheckpoint": {}},
        "loops": {},
        "epoch": 3,
        "global_step": 10,
        "pytorch-lightning_version": "2.6.6",
    }
    stripped = shippable(checkpoint)
    assert set(stripped) == {
        "state_dict",
        "hyper_parameters",
        "format_version",
        "task",
        "datamodule_hyper_parameters",
        "pytorch-lightning_version",
    }
    assert list(stripped["state_dict"]) == ["net.embed.weight"]
    assert stripped["state_dict"]["net.embed.weight"].is_contiguous()
    torch.save(stripped, tmp_path / "m.ckpt")
    assert torch.load(tmp_path / "m.ckpt", weights_only=True)["hyper_parameters"]["lr"] == 1e-3


def test_a_shipped_file_with_flipped_bytes_is_refused_not_believed(tmp_path, monkeypatch):
    copy = tmp_path / "pretrained"
    copy.mkdir()
    (copy / "models.json").write_text(pretrained.RECORDS.read_text())
    for name in SHIPPED:
        (copy / pretrained.record(name)["file"]).parent.mkdir(exist_ok=True)
        (copy / pretrained.record(name)["file"]).write_bytes(pretrained.path(name).read_bytes())
    damaged = bytearray((copy / "reverse.ckpt").read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # one byte of the weights
    (copy / "reverse.ckpt").write_bytes(bytes(damaged))
    monkeypatch.setattr(pretrained, "DIRECTORY", copy)
    monkeypatch.setattr(pretrained, "RECORDS", copy / "models.json")
    with pytest.raises(
        ConfigError, match=r"'reverse' .* has sha256 [0-9a-f]{64}, not the [0-9a-f]{64} of its"
    ):
        load_model("pretrained:reverse")
    assert load_model("pretrained:reverse_2l4h") is not None  # the others are untouched


def test_the_list_shows_every_model_with_its_metrics_and_command():
    result = run_cli("-m", "transformer_lab.pretrained", timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in SHIPPED:
        (line,) = [line for line in lines if line.startswith(f"{name} ")]
        assert pretrained.headline(name) in line and line.endswith(pretrained.command(name))
    assert "test/bpc" in pretrained.headline("shakespeare") and "1.0000" in pretrained.headline("reverse")
    error = run_cli("-m", "transformer_lab.pretrained", "nope", timeout=60)
    assert error.returncode == 2 and error.stderr.startswith("error: unknown pretrained model 'nope'")
    assert len(error.stderr.strip().splitlines()) == 1


def test_the_list_and_the_retrain_script_answer_without_importing_torch():
    code = (
        "import sys, contextlib, io\n"
        "from transformer_lab.pretrained.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main([])\n"
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr
    help_text = run_cli("scripts/pretrain.py", "--help", timeout=60)
    assert help_text.returncode == 0 and "--from-run" in help_text.stdout
    error = run_cli("scripts/pretrain.py", "revers", timeout=60)
    assert error.returncode == 2 and error.stderr.startswith("error: unknown pretrained model 'revers'")


def test_sample_script_maps_a_source_with_a_pretrained_model():
    digits = "3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3"
    result = run_cli("scripts/sample.py", "ckpt_path=pretrained:reverse", f"source={digits}", timeout=180)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{digits} -> {' '.join(reversed(digits.split()))}"


@pytest.mark.parametrize("name", ["induction_heads", "shakespeare"])
def test_a_streamed_sample_reads_as_the_same_sample_printed_whole(name, capsys):
    """One sample is written token by token; tokens written apart ("3 4 5") stay apart. Greedy, so the
    two samples of the second call are the streamed one."""
    from transformer_lab.sample import main

    prompt = "3 4 5 6 3 4" if name == "induction_heads" else "ROMEO:"
    args = [f"ckpt_path=pretrained:{name}", f"prompt={prompt}", "max_new_tokens=12", "temperature=0"]
    main(args)
    streamed = capsys.readouterr().out
    main([*args, "num_samples=2"])
    whole = capsys.readouterr().out.split("\n", 1)[1].split("\n---------- sample 1")[0]
    assert streamed == whole + "\n" and streamed.startswith(prompt)
    assert len(transformer_lab.load(f"pretrained:{name}").tokenizer.split(streamed)) >= 12
