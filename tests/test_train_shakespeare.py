"""The shakespeare task end to end: training through Hydra, metrics, TensorBoard text, scripts/sample.py."""

import json
import math
import shutil

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import COMMON, ROOT, compose_train_config, load_script, run_cli
from transformer_lab import ConfigError, TransformerPredictor
from transformer_lab.cli import run
from transformer_lab.nn import ModelConfig
from transformer_lab.train import train

TINY_SHAKESPEARE = [
    "task=shakespeare",
    "data.block_size=32",
    "data.batch_size=8",
    "data.batches_per_epoch=4",
    "data.val_batches=2",
    "model.model_dim=32",
    "model.num_heads=2",
    "model.num_layers=1",
    "trainer.max_steps=8",
    "callbacks.text_samples.max_new_tokens=20",
    *COMMON,
]


def test_fast_dev_run(tmp_path):
    metrics = train(compose_train_config(tmp_path, "trainer.fast_dev_run=true", base=TINY_SHAKESPEARE))
    assert metrics["global_step"] == 1
    assert 0 < metrics["test/loss"] < 10


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.path=/nope/input.txt", "data.sha256=null"], "data.path=/nope/input.txt does not exist"),
        (["data.path={other_text}"], "set data.sha256=null to skip the check"),
        (["data.train_fraction=1.5"], "data.train_fraction=1.5"),
        (
            ["data.block_size=300", "model.max_len=256"],
            "sequence length 300 is longer than model.max_len=256",
        ),
        (["model=encoder"], "model=encoder cannot learn ShakespeareDataModule's task; use model=decoder"),
    ],
)
def test_bad_data_input(tmp_path, overrides, message):
    other_text = tmp_path / "other.txt"
    other_text.write_text("not Shakespeare\n" * 100)
    overrides = [o.format(other_text=other_text) for o in overrides]
    with pytest.raises(ConfigError) as error:
        train(compose_train_config(tmp_path / "run", *overrides, base=TINY_SHAKESPEARE))
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.fixture(scope="module")
def shakespeare_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("shakespeare_run")
    metrics = train(compose_train_config(run_dir, base=TINY_SHAKESPEARE))
    return run_dir, metrics


def test_language_model_metrics(shakespeare_run):
    run_dir, metrics = shakespeare_run
    assert metrics["global_step"] == 8 and metrics["metric"] == "val/loss"
    assert math.log(65) * 0.8 < metrics["val/loss"] < math.log(65) * 1.2  # 8 steps: near uniform guessing
    assert metrics["val/bpc"] == pytest.approx(metrics["val/loss"] / math.log(2), rel=1e-5)
    assert metrics["val/ppl"] == pytest.approx(math.exp(metrics["val/loss"]), rel=1e-4)
    assert metrics["test/bpc"] == pytest.approx(metrics["test/loss"] / math.log(2), rel=1e-5)
    assert json.loads((run_dir / "metrics.json").read_text())["val/ppl"] == metrics["val/ppl"]


def test_vocabulary_and_context_are_saved_in_the_checkpoint(shakespeare_run):
    run_dir, _ = shakespeare_run
    checkpoint = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    net = checkpoint["hyper_parameters"]["net"]
    text = (ROOT / "data" / "tinyshakespeare" / "input.txt").read_text()
    assert net["vocab"] == sorted(set(text)) and net["vocab_size"] == 65
    assert net["max_len"] == 32 and net["arch"] == "decoder"
    assert checkpoint["task"]["separator"] == ""


def test_metric_names_are_those_of_every_task(shakespeare_run):
    run_dir, _ = shakespeare_run
    tags = set()
    for events in run_dir.glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    assert {"train/loss", "train/acc", "train/lr", "val/loss", "val/acc", "val/bpc", "val/ppl"} <= tags
    assert not [t for t in tags if t.startswith("train/lr/")]


def test_validation_logs_a_text_sample_to_tensorboard(shakespeare_run):
    run_dir, _ = shakespeare_run
    samples = []
    for events in run_dir.glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events), size_guidance={"tensors": 0})
        acc.Reload()
        if "samples/val/text_summary" in acc.Tags()["tensors"]:
            samples += acc.Tensors("samples/val/text_summary")
    assert [s.step for s in samples] == [4]  # every 2nd validation from the first (every 4 batches)
    text = samples[-1].tensor_proto.string_val[0].decode()
    assert len(text.replace("\n    ", "\n").strip()) >= 20


@pytest.fixture(scope="module")
def sample_script():
    return load_script("sample")


def test_sample_same_seed_same_text(shakespeare_run, sample_script, capsys):
    ckpt = shakespeare_run[0] / "checkpoints" / "best.ckpt"
    args = [f"ckpt_path={ckpt}", "prompt=ROMEO:", "max_new_tokens=40", "temperature=0.8", "top_k=40"]
    texts = []
    for seed in (7, 7, 8):
        sample_script.main([*args, f"seed={seed}"])
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] != texts[2]
    assert texts[0].startswith("ROMEO:") and len(texts[0]) == len("ROMEO:") + 40 + 1


def test_sample_without_the_data_file(shakespeare_run, tmp_path):
    """The vocabulary comes from the checkpoint: sampling works where no data/ directory exists."""
    ckpt = shutil.copy(shakespeare_run[0] / "checkpoints" / "best.ckpt", tmp_path / "model.ckpt")
    script = ROOT / "scripts" / "sample.py"
    result = run_cli(str(script), f"ckpt_path={ckpt}", "prompt=KING:", "max_new_tokens=30", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("KING:") and not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["prompt=ROMEO~#"], "2 character(s) not in the vocabulary: '#', '~'"),
        (["prompt="], "prompt= is empty"),
        (["temperature=-1"], "temperature=-1.0 must be >= 0"),
        (["top_k=abc"], "top_k=abc is not an integer"),
        (["max_new_tokens=-5"], "max_new_tokens=-5 must be an integer from 0 to 100000"),
        (["max_new_tokens=1000000000"], "max_new_tokens=1000000000 must be an integer from 0 to 100000"),
        (["num_samples=10000000"], "num_samples=10000000 must be an integer from 1 to 1000"),
        (["colour=red"], "unknown argument 'colour=red'"),
        (["seed=-1"], "seed=-1 is out of range; use an integer from 0 to 4294967295"),
        (["seed=99999999999999999999999"], "seed=99999999999999999999999 is out of range"),
    ],
)
def test_sample_bad_arguments(shakespeare_run, sample_script, capsys, args, message):
    ckpt = shakespeare_run[0] / "checkpoints" / "best.ckpt"
    with pytest.raises(SystemExit) as exit_info:
        run(sample_script.main, [f"ckpt_path={ckpt}", *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert message in err, err


def test_sample_bad_checkpoints(sample_script, tmp_path, capsys):
    encoder = TransformerPredictor(net=ModelConfig(arch="encoder", vocab_size=10).to_dict())
    task = {"class": "transformer_lab.data.reverse.ReverseDataModule", "separator": " "}
    checkpoint = {"state_dict": encoder.state_dict(), "hyper_parameters": dict(encoder.hparams), "task": task}
    torch.save(checkpoint, tmp_path / "enc.ckpt")
    old_format = {"state_dict": {}, "hyper_parameters": {"vocab_size": 65, "causal": True}}
    torch.save(old_format, tmp_path / "old.ckpt")
    (tmp_path / "broken.ckpt").write_bytes(b"PK\x03\x04 not really a checkpoint")
    cases = {
        tmp_path / "missing.ckpt": "does not exist",
        tmp_path / "broken.ckpt": "is not a readable checkpoint",
        tmp_path / "enc.ckpt": "(an encoder model of Reverse) does not continue text; give it source=",
        tmp_path / "old.ckpt": "written by an older transformer-lab",
    }
    for path, message in cases.items():
        with pytest.raises(SystemExit):
            run(sample_script.main, [f"ckpt_path={path}"])
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err, err
