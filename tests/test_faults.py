"""Faults: atomic checkpoints, kill -9 and resume, divergence, resume=, determinism."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import COMMON, ROOT, TINY_REVERSE, compose_train_config, run_cli
from transformer_lab import ConfigError, TransformerPredictor
from transformer_lab.errors import Terminated, TrainingDiverged
from transformer_lab.train import train
from transformer_lab.training.checkpoint_io import AtomicCheckpointIO


class _FailsToPickle:
    def __reduce__(self):
        raise RuntimeError("disk full")  # stands in for any failure in the middle of a save


def test_atomic_save_leaves_the_previous_checkpoint_intact(tmp_path):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 1, "w": torch.ones(3)}, path)
    with pytest.raises(RuntimeError, match="disk full"):
        io.save_checkpoint({"global_step": 2, "w": torch.zeros(1000), "bad": _FailsToPickle()}, path)
    assert torch.load(path, weights_only=True)["global_step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind


# Reverse 8 digits of 5 kinds to ~98% in 64 steps per epoch x 4 epochs; last.ckpt every 10 steps.
KILLABLE = [
    "data.seq_len=8",
    "data.num_categories=5",
    "model.model_dim=64",
    "model.num_heads=4",
    "model.warmup=20",
    "data.train_size=2048",
    "data.val_size=128",
    "data.test_size=256",
    "data.batch_size=32",
    "trainer.max_epochs=4",
    "model.lr=3e-3",
    "callbacks.last_checkpoint.every_n_train_steps=10",
    "~callbacks.attention_maps",
    *COMMON,
]


def _sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_and_wait_for_last_checkpoint(run_dir: Path, **popen_args) -> tuple[subprocess.Popen, Path]:
    """Start a long `python train.py` run in `run_dir`; return once it has written checkpoints/last.ckpt."""
    last = run_dir / "checkpoints" / "last.ckpt"
    env = {"OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin", "PYTHONFAULTHANDLER": "1"}
    args = [sys.executable, "train.py", *KILLABLE, f"hydra.run.dir={run_dir}", "trainer.max_epochs=40"]
    # Ctrl-C reaches the run as it would from a terminal: a command started in the background of a
    # non-interactive shell (`pytest ... &`, as CI may start it) inherits SIGINT ignored, and so would
    # every process it starts.
    proc = subprocess.Popen(args, cwd=ROOT, env=env, preexec_fn=_sigint_as_in_a_terminal, **popen_args)
    deadline = time.monotonic() + 120
    while not last.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    if not last.exists():
        proc.kill()
        pytest.fail(f"the run never wrote {last}")
    return proc, last


@pytest.mark.slow
def test_sigkill_then_resume_finishes_like_an_uninterrupted_run(tmp_path):
    killed_dir = tmp_path / "killed"
    proc, last = _start_and_wait_for_last_checkpoint(
        killed_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved_step = torch.load(last, weights_only=True)["global_step"]
    assert saved_step > 0 and not (killed_dir / "metrics.json").exists()

    resumed = train(compose_train_config(tmp_path / "resumed", f"ckpt_path={last}", base=KILLABLE))
    uninterrupted = train(compose_train_config(tmp_path / "uninterrupted", base=KILLABLE))
    assert resumed["global_step"] == uninterrupted["global_step"] == 256  # continued to the end, no repeats
    assert resumed["test/acc"] > 0.9 and abs(resumed["test/acc"] - uninterrupted["test/acc"]) < 0.05


@pytest.mark.slow
def test_ctrl_c_saves_last_checkpoint_and_says_how_to_resume(tmp_path):
    run_dir = tmp_path / "interrupted"
    proc, last = _start_and_wait_for_last_checkpoint(
        run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    first_step = torch.load(last, weights_only=True)["global_step"]
    # the event that says the run is past the first step checkpoint: it has written the next one
    deadline = time.monotonic() + 120
    while torch.load(last, weights_only=True)["global_step"] == first_step and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # where it hangs: faulthandler prints every thread's stack on SIGABRT
        proc.send_signal(signal.SIGABRT)
        output, _ = proc.communicate(timeout=30)
        pytest.fail(f"the run did not stop within 60 s of Ctrl-C:\n{output[-6000:]}")
    assert proc.returncode == 130, output[-2000:]  # 128 + SIGINT, as a shell reports Ctrl-C
    interrupted_step = torch.load(last, weights_only=True)["global_step"]
    assert interrupted_step > first_step
    assert f"Saved {last} at step {interrupted_step}; resume with resume={run_dir}" in output
    stopped = (
        f"error: stopped by Ctrl-C at step {interrupted_step} (last.ckpt holds step {interrupted_step}); "
    )
    assert f"{stopped}resume with resume={run_dir}" in output.splitlines()  # stdout and stderr: any order
    assert "Traceback" not in output


@pytest.fixture
def ctrl_c_as_in_a_terminal():
    """SIGINT raises KeyboardInterrupt, as in a terminal (pytest started in the background ignores it);
    restored afterwards (Lightning ignores SIGINT once it has handled one)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_stops_at_the_end_of_the_batch_and_twice_at_once(
    tmp_path, monkeypatch, capsys, ctrl_c_as_in_a_terminal, presses
):
    original = TransformerPredictor.training_step

    def pressed_during_step_3(self, batch, batch_idx):
        if self.global_step == 3:
            for _ in range(presses):
                signal.raise_signal(signal.SIGINT)
        return original(self, batch, batch_idx)

    monkeypatch.setattr(TransformerPredictor, "training_step", pressed_during_step_3)
    cfg = compose_train_config(tmp_path, "callbacks.last_checkpoint.every_n_train_steps=2")
    with pytest.raises(Terminated) as stopped:
        train(cfg)
    assert stopped.value.exit_status == 130
    # once: step 3 finishes (its optimizer step included) and the run stops after it; twice: inside it
    saved = 4 if presses == 1 else 3
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == saved
    out, err = capsys.readouterr()
    assert f"Saved {last} at step {saved}; resume with resume={tmp_path}" in out
    assert "Ctrl-C: stopping at the end of this batch (Ctrl-C again to stop at once)" in err
    assert str(stopped.value) == f"stopped by Ctrl-C at step {saved} (last.ckpt holds step {saved}); " + (
        f"resume with resume={tmp_path}"
    )
    assert not (tmp_path / "metrics.json").exists()


def test_ctrl_c_while_testing_stops_after_the_batch_without_metrics(
    tmp_path, monkeypatch, ctrl_c_as_in_a_terminal
):
    original = TransformerPredictor.test_step
    tested = []

    def pressed_during_the_first_test_batch(self, batch, batch_idx):
        tested.append(batch_idx)
        if batch_idx == 0:
            signal.raise_signal(signal.SIGINT)
        return original(self, batch, batch_idx)

    monkeypatch.setattr(TransformerPredictor, "test_step", pressed_during_the_first_test_batch)
    with pytest.raises(
        Terminated, match=r"^stopped by Ctrl-C while testing; training had finished"
    ) as stopped:
        train(compose_train_config(tmp_path))
    assert stopped.value.exit_status == 130 and tested == [0]  # the batch finished, the next never started
    assert (tmp_path / "checkpoints" / "last.ckpt").exists() and not (tmp_path / "metrics.json").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_the_first_checkpoint_leaves_no_run(
    tmp_path, monkeypatch, ctrl_c_as_in_a_terminal, signum
):
    """Ctrl-C and SIGTERM during the fit, before any checkpoint: one line, and the run directory goes, as
    when either comes before the fit (so the same command starts again, not refused as a stopped run)."""
    original = TransformerPredictor.validation_step

    def pressed_during_the_sanity_check(self, batch, batch_idx):
        if self.trainer.sanity_checking:
            signal.raise_signal(signum)
        return original(self, batch, batch_idx)

    monkeypatch.setattr(TransformerPredictor, "validation_step", pressed_during_the_sanity_check)
    run = tmp_path / "run"
    with pytest.raises(Terminated) as stopped:
        train(compose_train_config(run))
    cause = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    line = str(stopped.value)
    assert line.startswith(
        f"stopped by {cause} at step 0, before any checkpoint was saved; "
    ) and line.endswith("start the run again")
    assert not (run / ".hydra").exists() and not (run / "checkpoints").exists()  # train.py's own dir: gone


@pytest.mark.parametrize("where", ["transformer_lab.train.hydra_main", "transformer_lab.train.prepare"])
def test_ctrl_c_before_training_is_one_line_and_leaves_no_run(where, tmp_path, monkeypatch, capsys):
    from transformer_lab import train as train_tool

    def pressed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, pressed)
    monkeypatch.setattr(sys, "argv", ["train.py", *TINY_REVERSE, f"hydra.run.dir={tmp_path / 'run'}"])
    with pytest.raises(SystemExit) as stopped:
        train_tool.main()
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "error: stopped by Ctrl-C before training began; nothing was kept\n"
    assert list(tmp_path.iterdir()) == []  # no run directory left behind


def test_a_diverged_run_is_one_line_exit_1_naming_what_was_kept(tmp_path):
    result = run_cli(
        "train.py", "experiment=reverse_tiny", "model.lr=1e30", "model.warmup=0", f"hydra.run.dir={tmp_path}"
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert re.fullmatch(
        r"error: training diverged at step \d+: the loss became nan( between step 1 and step \d+)?; "
        r"last good checkpoint: none; lower model.lr or set trainer.gradient_clip_val\n",
        result.stderr.splitlines(keepends=True)[-1],
    )
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    original = TransformerPredictor.training_step

    def diverging(self, batch, batch_idx):  # the weights "explode" from step 5 on
        loss = original(self, batch, batch_idx)
        return loss * float("nan") if self.global_step >= 5 else loss

    monkeypatch.setattr(TransformerPredictor, "training_step", diverging)
    cfg = compose_train_config(tmp_path, "callbacks.last_checkpoint.every_n_train_steps=2")
    with pytest.raises(
        TrainingDiverged,
        match=r"^training diverged at step 6: the loss became nan; last good checkpoint: .*last.ckpt "
        r"\(step 4\)",
    ):
        train(cfg)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 4
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values())


@pytest.mark.filterwarnings("ignore:The number of training batches")
def test_a_non_finite_loss_is_read_lazily_and_reported_with_its_steps(tmp_path, monkeypatch):
    # No host read of the loss on ordinary steps (a GPU sync): with no step checkpoint and no logging
    # step before it, the divergence from step 4 on is found when validation starts, after step 8.
    original = TransformerPredictor.training_step
    steps_run = []

    def diverging(self, batch, batch_idx):
        steps_run.append(self.global_step)
        loss = original(self, batch, batch_idx)
        return loss * float("inf") if self.global_step >= 3 else loss  # then NaN weights, NaN losses

    monkeypatch.setattr(TransformerPredictor, "training_step", diverging)
    cfg = compose_train_config(
        tmp_path, "callbacks.last_checkpoint.every_n_train_steps=null", "trainer.log_every_n_steps=100"
    )
    with pytest.raises(TrainingDiverged, match=r"the loss became nan between step 1 and step 8; "):
        train(cfg)
    assert steps_run == list(range(8))
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()  # nothing saved after it diverged


@pytest.mark.filterwarnings("ignore:The number of training batches")
def test_a_crash_after_an_unread_divergence_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    original = TransformerPredictor.training_step

    def diverging_then_crashing(self, batch, batch_idx):
        if self.global_step == 5:
            raise RuntimeError("simulated crash")
        loss = original(self, batch, batch_idx)
        return loss * float("nan") if self.global_step >= 3 else loss

    monkeypatch.setattr(TransformerPredictor, "training_step", diverging_then_crashing)
    cfg = compose_train_config(
        tmp_path, "callbacks.last_checkpoint.every_n_train_steps=3", "trainer.log_every_n_steps=100"
    )
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 3
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values())


def test_resume_from_a_run_directory_and_auto(tmp_path):
    log_dir = tmp_path / "runs"
    first = log_dir / "reverse" / "first"
    train(compose_train_config(first, f"paths.log_dir={log_dir}"))
    by_dir = train(compose_train_config(tmp_path / "by_dir", f"resume={first}", "trainer.max_epochs=2"))
    assert by_dir["global_step"] == 16
    auto = compose_train_config(
        tmp_path / "auto", f"paths.log_dir={log_dir}", "resume=auto", "trainer.max_epochs=3"
    )
    assert train(auto)["global_step"] == 24

    with pytest.raises(ConfigError, match=r"has no checkpoints/last\.ckpt"):
        train(compose_train_config(tmp_path / "x", f"resume={tmp_path}"))
    with pytest.raises(ConfigError, match="resume=auto found no"):
        train(compose_train_config(tmp_path / "y", f"paths.log_dir={tmp_path / 'empty'}", "resume=auto"))
    with pytest.raises(ConfigError, match="either resume= or ckpt_path="):
        train(
            compose_train_config(
                tmp_path / "z", f"resume={first}", f"ckpt_path={first}/checkpoints/last.ckpt"
            )
        )


def test_resuming_into_another_model_is_refused(tmp_path):
    train(compose_train_config(tmp_path / "small"))
    last = tmp_path / "small" / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"model_dim=32 \(config: 64\)"):
        train(compose_train_config(tmp_path / "big", f"ckpt_path={last}", "model.model_dim=64"))
    with pytest.raises(ConfigError, match=r"vocab_size=14 \(config: 16\)"):
        train(compose_train_config(tmp_path / "vocab", f"ckpt_path={last}", "data.num_categories=12"))
    with pytest.raises(ConfigError, match=r"bias=True \(config: False\)"):
        train(compose_train_config(tmp_path / "nobias", f"ckpt_path={last}", "model.bias=false"))
    older = tmp_path / "older.ckpt"  # the format before the model config moved under "net"
    checkpoint = torch.load(last, weights_only=True)
    checkpoint["hyper_parameters"] = {**checkpoint["hyper_parameters"].pop("net"), "causal": False}
    torch.save(checkpoint, older)
    with pytest.raises(
        ConfigError, match=r"older\.ckpt was written by an older transformer-lab .* retrain it"
    ):
        train(compose_train_config(tmp_path / "old", f"ckpt_path={older}"))
    assert not (tmp_path / "big" / "checkpoints").exists()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(last.read_bytes()[:5000])
    with pytest.raises(ConfigError, match=r"truncated\.ckpt is not a readable checkpoint"):
        train(compose_train_config(tmp_path / "t", f"ckpt_path={truncated}"))


def test_same_seed_same_config_gives_identical_metrics(tmp_path, monkeypatch):
    """Whatever the machine's load: threads=auto would take 2 threads on an idle machine and 1 on a busy
    one, and the thread count changes the last digits of the sums (test/loss by 2e-7 here)."""
    from transformer_lab import limits

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    runs = []
    for i, idle in enumerate((2.0, 0.5)):
        monkeypatch.setattr(limits, "free_cores", lambda idle=idle: (idle, 2))
        overrides = ["trainer.deterministic=true", "seed=3", "trainer.max_epochs=2"]
        runs.append(train(compose_train_config(tmp_path / str(i), *overrides)))
    for run in runs:
        run.pop("wall_time_s"), run.pop("best_ckpt_path")
    assert runs[0] == runs[1]
    assert json.loads((tmp_path / "0" / "metrics.json").read_text())["val/loss"] == runs[0]["val/loss"]


def test_resuming_a_run_reads_its_own_settings_and_continues_in_its_directory(tmp_path):
    """The hint a stopped run prints works as printed, with the run's own model settings (no need to
    repeat them), in the same directory (TensorBoard shows one run), and .hydra/ keeps the first config."""
    run_dir = tmp_path / "run"
    settings = ["experiment=reverse_tiny", "model.num_heads=4", "model.num_layers=2"]
    first = run_cli("train.py", *settings, f"hydra.run.dir={run_dir}")
    assert first.returncode == 0, first.stderr[-2000:]
    config = (run_dir / ".hydra" / "config.yaml").read_text()
    for how in (f"resume={run_dir}", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"):
        epochs = 2 if how.startswith("resume") else 3
        resumed = run_cli("train.py", how, f"trainer.max_epochs={epochs}")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert json.loads((run_dir / "metrics.json").read_text())["global_step"] == 8 * epochs
    assert (run_dir / ".hydra" / "config.yaml").read_text() == config  # the first config, kept
    record = (run_dir / ".hydra" / "resumes.yaml").read_text()
    assert "trainer.max_epochs=2" in record and "trainer.max_epochs=3" in record
    assert not [p for p in tmp_path.iterdir() if p != run_dir]  # no second run directory
    refused = run_cli("train.py", f"resume={run_dir}", "trainer.max_epochs=9", "model.num_heads=2")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "model.num_heads=2: a resumed run keeps the settings of the run it continues" in refused.stderr
    elsewhere = run_cli("train.py", f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'other'}")
    assert elsewhere.returncode == 2 and "continues in its own directory" in elsewhere.stderr
