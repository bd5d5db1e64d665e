"""What a hostile or careless command line, config or file gets: one line, the right exit status, nothing
run, nothing absurd allocated, nothing saved lost (the cases of issue 23 not in test_preflight.py or
test_checkpoint.py)."""

import errno
import os
import resource
import subprocess
import sys

import pytest
import torch

from tests.conftest import COMMON, ROOT, TINY_REVERSE, compose_train_config, load_script
from transformer_lab import ConfigError
from transformer_lab.cli import run
from transformer_lab.errors import TrainingFailed
from transformer_lab.train import train
from transformer_lab.training.checkpoint_io import AtomicCheckpointIO, shippable


def test_a_full_disk_stops_training_in_one_line_and_keeps_the_last_good_file(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 1, "w": torch.ones(3)}, path)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("transformer_lab.training.checkpoint_io.torch.save", full)
    with pytest.raises(TrainingFailed) as info:
        io.save_checkpoint({"global_step": 2, "w": torch.zeros(3)}, path)
    assert str(info.value) == (
        f"cannot write {path} at step 2: No space left on device; the previous last.ckpt is kept; free some "
        f"space or make the folder writable, then resume with resume={tmp_path}"
    )
    assert torch.load(path, weights_only=True)["global_step"] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]  # no temporary file left


def test_a_read_only_checkpoint_folder_is_one_line_at_the_first_save(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("transformer_lab.files.tempfile.mkstemp", read_only)
    with pytest.raises(
        TrainingFailed, match=r"cannot write .*\.ckpt at step \d+: Permission denied; nothing"
    ):
        train(compose_train_config(tmp_path))


def test_a_file_size_limit_on_the_command_line_is_exit_1_and_one_line(tmp_path):
    def limit() -> None:  # 100 kB: smaller than a checkpoint of the tiny model
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    result = subprocess.run(
        [sys.executable, "train.py", "experiment=reverse_tiny", f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=limit,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot write") and "File too large; nothing was saved" in last
    assert "Traceback" not in result.stderr
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["task=shakespeare", "data.block_size=100000"],
            r"a training step \(data\.batch_size=32 sequences of 100000",
        ),
        (
            ["data.batch_size=10000000"],
            r"data\.batch_size=10000000 sequences of 16 tokens.* needs about .* GB",
        ),
        (["model.model_dim=100000"], r"model\.model_dim=100000 is more than this package's limit of 32768"),
        (["data.batch_size=300"], r"no optimisation step to take: data\.batch_size=300 is more than the"),
    ],
)
def test_what_cannot_fit_is_refused_before_the_first_step(tmp_path, overrides, message):
    base = COMMON if "task=shakespeare" in overrides else TINY_REVERSE
    with pytest.raises(ConfigError, match=message):
        train(compose_train_config(tmp_path, *overrides, base=base))

    assert not (tmp_path / "checkpoints").exists()


def test_resuming_from_a_file_without_training_state_is_one_line(tmp_path):
    train(compose_train_config(tmp_path / "first"))
    weights_only = tmp_path / "weights.ckpt"
    checkpoint = torch.load(tmp_path / "first" / "checkpoints" / "last.ckpt", weights_only=True)
    torch.save(shippable(checkpoint), weights_only)
    with pytest.raises(ConfigError, match=r"holds no training state .* it cannot be resumed"):
        train(compose_train_config(tmp_path / "second", f"ckpt_path={weights_only}"))
    broken = dict(checkpoint)
    state = broken["optimizer_states"][0]["state"]
    state[0] = {**state[0], "exp_avg": torch.zeros(3, 3)}  # a file whose optimizer state does not fit
    torch.save(broken, tmp_path / "bad_state.ckpt")
    with pytest.raises(ConfigError, match=r"optimizer state exp_avg of parameter 0 has shape \(3, 3\)"):
        train(compose_train_config(tmp_path / "third", f"ckpt_path={tmp_path / 'bad_state.ckpt'}"))


def test_resume_auto_names_an_unreadable_newest_run_and_the_newest_good_one(tmp_path):
    log_dir = tmp_path / "runs"
    train(compose_train_config(log_dir / "reverse" / "good", f"paths.log_dir={log_dir}"))
    bad = log_dir / "reverse" / "newer" / "checkpoints"
    bad.mkdir(parents=True)
    (bad / "last.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError) as info:
        train(compose_train_config(tmp_path / "x", f"paths.log_dir={log_dir}", "resume=auto"))
    message = str(info.value)
    assert message.startswith(f"resume=auto: the newest run's {bad / 'last.ckpt'} cannot be resumed")
    assert message.endswith(f"resume it with resume={log_dir / 'reverse' / 'good'}")


def test_an_unwritable_out_dir_is_refused_before_the_work(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    out_dir = tmp_path / "a_file" / "out"
    for tool, extra in (("interpret", ["analysis=heads"]), ("explain", [])):
        with pytest.raises(SystemExit) as exit_info:
            run(load_script(tool).main, ["ckpt_path=pretrained:reverse", *extra, f"out_dir={out_dir}"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: out_dir={out_dir}: the folder {tmp_path / 'a_file'} is a file")


LONG = "y" * 5000  # longer than any file name the system allows (255 bytes)


@pytest.mark.parametrize(
    "tool, argv, exit_code, start",
    [
        ("interpret", ["ckpt_path=pretrained:reverse", "analysis=heads", f"out_dir={LONG}"], 2, "out_dir="),
        ("explain", ["ckpt_path=pretrained:reverse", f"out_dir={LONG}/a"], 2, "out_dir="),
        ("explore", ["ckpt_path=pretrained:reverse", f"out={LONG}.html"], 2, "out="),
        ("export", ["ckpt_path=pretrained:reverse", "to=onnx", f"out={LONG}"], 2, "out="),
        ("interpret", [f"ckpt_path={LONG}", "analysis=dynamics"], 2, "ckpt_path="),
        ("interpret", [f"ckpt_path={LONG}", "analysis=heads"], 2, "checkpoint "),
        ("explore", [f"ckpt_path={LONG}"], 2, "ckpt_path="),
        ("summarize", [LONG], 1, LONG),
        ("curves", [LONG, "metric=val/loss"], 1, LONG),
    ],
)
def test_a_path_the_system_refuses_is_one_line_naming_it_with_the_fix(tool, argv, exit_code, start, capsys):
    """A name too long for the file system (or a symlink loop, no permission, a full disk): the tool's own
    check where it has one (exit 2), otherwise `cli.run`'s (exit 1); never a traceback."""
    with pytest.raises(SystemExit) as exit_info:
        run(load_script(tool).main, argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == exit_code and err.count("\n") == 1, err[-300:]
    assert err.startswith(f"error: {start}") and "File name too long" in err, err[-300:]
    assert err.rstrip().endswith(("use a shorter path", "cannot be read: File name too long")), err[-300:]


@pytest.mark.parametrize("key", ["hydra.run.dir", "resume", "ckpt_path"])
def test_train_refuses_a_path_the_system_refuses_in_one_line(key, tmp_path, monkeypatch, capsys):
    """train.py's command line is checked before Hydra runs (train.prepare): exit 2, one line, no run."""
    from transformer_lab import train as train_tool

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py", f"{key}={LONG}"])
    with pytest.raises(SystemExit) as exit_info:
        train_tool.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err[-300:]
    assert err.rstrip().endswith("File name too long; use a shorter path") and LONG in err
    assert list(tmp_path.iterdir()) == []  # no run directory


def test_summarize_skips_a_run_whose_files_are_damaged(tmp_path, capsys):
    from omegaconf import OmegaConf

    for name in ("good", "damaged"):
        cfg = compose_train_config(tmp_path / name)
        train(cfg)
        (tmp_path / name / ".hydra").mkdir()
        plain = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
        OmegaConf.save(plain, tmp_path / name / ".hydra" / "config.yaml")

    (tmp_path / "damaged" / ".hydra" / "config.yaml").write_text("model: [unclosed\n")
    load_script("summarize").main([str(tmp_path)])
    out, err = capsys.readouterr()
    assert "good" in out and "damaged" not in out
    damaged = tmp_path / "damaged"
    assert err.startswith(f"warning: skipping {damaged}: {damaged / '.hydra/config.yaml'} is not valid YAML")
