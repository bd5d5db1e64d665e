"""scripts/explain.py and scripts/plots.py on tiny checkpoints made here: PNGs written, one-line errors."""

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from hydra import compose, initialize_config_module

from tests.conftest import load_script
from transformer_lab import TransformerPredictor
from transformer_lab.cli import run
from transformer_lab.data import ReverseDataModule
from transformer_lab.nn import ModelConfig
from transformer_lab.train import CONFIG_MODULE

ROOT = Path(__file__).resolve().parents[1]
PNGS = ("attention_grid", "head_mean_first", "head_mean_last", "rollout", "gradient_attention")
VOCAB = list("\n !:;?ABEIMORST")


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def explain_script() -> ModuleType:
    return load_script("explain")


@pytest.fixture(scope="module")
def plots_script() -> ModuleType:
    return load_script("plots")


@pytest.fixture(scope="module")
def encoder_ckpt(tmp_path_factory) -> Path:
    """What train.py saves for the reverse task, minus the optimizer: weights, model and task."""
    torch.manual_seed(0)
    datamodule = ReverseDataModule(seq_len=8, train_size=64, val_size=16, test_size=16, batch_size=16)
    net = ModelConfig(num_layers=2, num_heads=2, vocab=datamodule.vocab, max_len=8)
    model = TransformerPredictor(net=net.to_dict())
    path = tmp_path_factory.mktemp("encoder") / "best.ckpt"
    torch.save(
        {
            "state_dict": model.state_dict(),
            "hyper_parameters": dict(model.hparams),
            "datamodule_hyper_parameters": dict(datamodule.hparams),
            "task": {"class": "transformer_lab.data.reverse.ReverseDataModule", "separator": " "},
        },
        path,
    )
    return path


@pytest.fixture(scope="module")
def decoder_ckpt(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    net = ModelConfig(
        arch="decoder", vocab=VOCAB, max_len=32, num_heads=2, num_layers=2, norm_first=True, activation="gelu"
    )
    model = TransformerPredictor(net=net.to_dict())
    path = tmp_path_factory.mktemp("decoder") / "best.ckpt"
    task = {"class": "transformer_lab.data.shakespeare.ShakespeareDataModule", "separator": ""}
    torch.save(
        {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams), "task": task}, path
    )
    return path


def _assert_pngs(out_dir: Path, names) -> None:
    for name in names:
        png = out_dir / f"{name}.png"
        assert png.is_file() and png.stat().st_size > 5_000, f"{png} missing or empty"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("script", "args"), [("explain", []), ("plots", []), ("plots", ["lr_schedule"])])
def test_help(explain_script, plots_script, capsys, script, args):
    with pytest.raises(SystemExit) as exit_info:
        {"explain": explain_script, "plots": plots_script}[script].main([*args, "--help"])
    assert exit_info.value.code == 0 and "usage:" in capsys.readouterr().out


def test_explain_encoder_from_the_command_line(encoder_ckpt, tmp_path):
    result = _cli("scripts/explain.py", f"ckpt_path={encoder_ckpt}", "index=3", f"out_dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    _assert_pngs(tmp_path, PNGS)
    task = ReverseDataModule(seq_len=8, train_size=64, val_size=16, test_size=16)
    (tokens,), _ = task.example(3)
    assert f"input:  {' '.join(task.vocab[i] for i in tokens[0])}" in result.stdout
    table = result.stdout.split("gradient-attention\n")[1].splitlines()[:8]
    assert [int(line.split()[0]) for line in table] == list(range(8))  # one line per output position


def test_explain_decoder_text(explain_script, decoder_ckpt, tmp_path, capsys):
    explain_script.main([f"ckpt_path={decoder_ckpt}", "text=ROMEO:\nIS IT SO?", f"out_dir={tmp_path}"])
    _assert_pngs(tmp_path, PNGS)
    out = capsys.readouterr().out
    assert "input:  R O M E O : ⏎ I S ␣ I T ␣ S O ?" in out
    assert "     0 " in out and " | -" in out  # position 0 has no earlier input to rely on


@pytest.mark.parametrize(
    ("which", "args", "message"),
    [
        ("encoder", ["index=16"], "index=16 is not a test example; use an integer from 0 to 15"),
        ("encoder", ["index=two"], "index=two is not a test example"),
        ("encoder", ["text=1 2 x"], "1 token(s) not in the vocabulary: 'x'"),
        ("encoder", ["text=1 2", "index=3"], "pass either index= or text=, not both"),
        ("decoder", ["text="], "text= is empty"),
        ("decoder", ["text=ROMEO~"], "1 character(s) not in the vocabulary: '~'"),
        ("decoder", ["text=" + "A" * 33], "text= has 33 tokens, more than the model's 32 positions"),
        ("decoder", ["colour=red"], "unknown argument 'colour=red'"),
        ("missing", [], "does not exist"),
        ("corrupt", [], "corrupt.ckpt is not a readable checkpoint"),
        ("text", [], "notes.ckpt"),
    ],
)
def test_explain_user_errors_are_one_line(
    explain_script, encoder_ckpt, decoder_ckpt, tmp_path, capsys, which, args, message
):
    paths = {"encoder": encoder_ckpt, "decoder": decoder_ckpt, "missing": tmp_path / "nope.ckpt"}
    if which == "corrupt":
        paths[which] = tmp_path / "corrupt.ckpt"
        paths[which].write_bytes(encoder_ckpt.read_bytes()[:3000])
    if which == "text":
        paths[which] = tmp_path / "notes.ckpt"
        paths[which].write_text("hello\n")
    with pytest.raises(SystemExit) as exit_info:
        run(explain_script.main, [f"ckpt_path={paths[which]}", *args, f"out_dir={tmp_path}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not list(tmp_path.glob("*.png"))


def test_plots_positional_encoding_from_the_command_line(tmp_path):
    result = _cli("scripts/plots.py", "positional_encoding", "model_dim=16", f"out_dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    _assert_pngs(tmp_path, ["positional_encoding", "positional_encoding_curves"])


def test_plots_lr_schedule_of_a_task_names_each_config_s_figure(plots_script, tmp_path, capsys):
    plots_script.main(["lr_schedule", f"out_dir={tmp_path}"])
    _assert_pngs(tmp_path, ["lr_schedule"])
    for warmup in (20, 40):  # two configs: two figures, neither overwrites the other
        overrides = ["task=reverse", f"model.warmup={warmup}", "data.train_size=640"]
        plots_script.main(["lr_schedule", *overrides, f"out_dir={tmp_path}"])
        name = f"lr_schedule_task=reverse_model.warmup={warmup}_data.train_size=640"
        _assert_pngs(tmp_path, [name])
        assert f"{name}.png" in capsys.readouterr().out
    assert len(list(tmp_path.glob("lr_schedule*.png"))) == 3


def test_plots_training_steps_follow_the_trainer(plots_script):
    """640 samples / batch 128 = 5 steps per epoch x 10 epochs, unless max_steps or max_iters override."""
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=["task=reverse", "data.train_size=640"])
        capped = compose("train", overrides=["data.train_size=640", "trainer.max_steps=7"])
        fixed = compose("train", overrides=["model.max_iters=123"])
        by_steps = compose("train", overrides=["trainer.max_epochs=null", "trainer.max_steps=5000"])
    assert plots_script.training_steps(cfg) == 50
    assert plots_script.training_steps(capped) == 7
    assert plots_script.training_steps(by_steps) == 5000
    assert plots_script.training_steps(fixed) == 123


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["lr_schedule", "task=nope"], "Could not find 'task/nope'"),
        (["lr_schedule", "model.warmup=-1"], "model.warmup=-1 must be >= 0"),
        (["lr_schedule", "data.batch_size=0"], "data.batch_size=0 must be a positive integer"),
        (["positional_encoding", "model_dim=7"], "model_dim=7 must be even"),
        (["positional_encoding", "size=3"], "unknown argument 'size=3'"),
    ],
)
def test_plots_user_errors_are_one_line(plots_script, tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        run(plots_script.main, [*args, f"out_dir={tmp_path}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
