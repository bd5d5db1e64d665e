"""Snapshots (training/callbacks/snapshots.py, transformer_lab.snapshots): the model kept at log-spaced
steps, each file loadable as a shipped model; a resumed run continues the schedule without writing a step
twice or skipping one; the one nearest a step; bad input as one line."""

import itertools
import logging

import pytest
import torch

import transformer_lab
from tests.conftest import TINY_REVERSE, compose_train_config, run_cli
from transformer_lab import load_model, snapshots
from transformer_lab.errors import ConfigError
from transformer_lab.nn import EncoderClassifier
from transformer_lab.train import train
from transformer_lab.training.callbacks import Snapshots
from transformer_lab.training.callbacks import snapshots as snapshots_module
from transformer_lab.training.callbacks.snapshots import snapshot_steps
from transformer_lab.training.checkpoint_io import SHIPPED_KEYS


def test_the_default_schedule_is_32_log_spaced_steps_from_0_to_the_end():
    steps = snapshot_steps(4000, 32)
    assert len(steps) == len(set(steps)) == 32 and steps == sorted(steps)
    assert steps[:2] == [0, 1] and steps[-1] == 4000
    # evenly spaced in log(step) where rounding does not crowd them: ratios of about 4000^(1/30) = 1.32
    ratios = [b / a for a, b in itertools.pairwise(steps[10:])]
    assert all(abs(r - 4000 ** (1 / 30)) < 0.05 for r in ratios)
    # early on the steps are consecutive: no two snapshots share a step
    assert steps[:6] == [0, 1, 2, 3, 4, 5]


def test_linear_spacing_small_runs_and_count_zero():
    assert snapshot_steps(100, 5, "linear") == [0, 25, 50, 75, 100]
    assert snapshot_steps(8, 32) == list(range(9))  # more snapshots than steps: every step
    assert snapshot_steps(8, 1) == [8] and snapshot_steps(8, 2) == [0, 8]
    assert snapshot_steps(8, 0) == []
    for total in range(1, 60):
        for count in range(1, 12):
            steps = snapshot_steps(total, count)
            assert len(set(steps)) == min(count, total + 1) and steps[-1] == total and steps == sorted(steps)


def test_snapshots_land_at_the_promised_steps_and_load_as_shipped_models(tmp_path):
    run = tmp_path / "run"
    train(compose_train_config(run, "callbacks.snapshots.count=5", "trainer.max_epochs=2"))  # 16 steps
    found = snapshots.find(run)
    assert [s.step for s in found] == snapshot_steps(16, 5) == [0, 1, 3, 6, 16]
    assert [s.path.name for s in found][-1] == "step_00000016.ckpt"
    for snapshot in found:
        contents = torch.load(snapshot.path, weights_only=True)
        assert set(contents) <= set(SHIPPED_KEYS) and "optimizer_states" not in contents
        assert all(key.startswith("net.") for key in contents["state_dict"])
        assert isinstance(load_model(str(snapshot.path)), EncoderClassifier)
    # the last snapshot is the final weights (last.ckpt's); the first, the initial ones, differ from them
    final = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    last = transformer_lab.load(found[-1].path)
    for key, value in last.weights.items():
        assert torch.equal(value, final[f"net.{key}"])
    first = transformer_lab.load(found[0].path).weights
    assert not torch.equal(first["embed.weight"], last.weights["embed.weight"])
    assert snapshots.nearest(run, 5).step == 6 and snapshots.nearest(run, 12).step == 16
    assert snapshots.nearest(run, 2).step == 1  # a tie goes to the earlier


def crash_at(step: int, monkeypatch) -> list[int]:
    """Make the next run fail right after optimisation step `step` (as a killed run would, with last.ckpt
    saved there), and record every snapshot step written from now on."""
    written: list[int] = []
    save, batch_end = Snapshots.save, Snapshots.on_train_batch_end

    def recording_save(self, trainer):
        written.append(trainer.global_step)
        return save(self, trainer)

    def crashing_batch_end(self, trainer, *args):
        batch_end(self, trainer, *args)
        if trainer.global_step == step:
            raise RuntimeError("the machine went down")

    monkeypatch.setattr(Snapshots, "save", recording_save)
    monkeypatch.setattr(Snapshots, "on_train_batch_end", crashing_batch_end)
    return written


def test_a_resumed_run_continues_the_schedule_without_duplicates_or_gaps(tmp_path, monkeypatch):
    run, settings = tmp_path / "run", ["callbacks.snapshots.count=10", "trainer.max_epochs=3"]  # 24 steps
    schedule = snapshot_steps(24, 10)
    written = crash_at(11, monkeypatch)
    with pytest.raises(RuntimeError, match="went down"):
        train(compose_train_config(run, *settings))
    assert written == [s for s in schedule if s <= 11]
    # the resumed run passes step 11 no more: it starts at 12
    train(compose_train_config(run, *settings, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"))
    assert written == schedule  # each step written once, in order, none skipped
    assert [s.step for s in snapshots.find(run)] == schedule


def test_a_run_resumed_for_longer_keeps_its_snapshots_and_spreads_the_rest_over_the_new_length(tmp_path):
    run = tmp_path / "run"
    train(compose_train_config(run, "callbacks.snapshots.count=5"))  # 8 steps: 0 1 2 4 8
    assert [s.step for s in snapshots.find(run)] == [0, 1, 2, 4, 8]
    last = run / "checkpoints" / "last.ckpt"
    train(
        compose_train_config(run, "callbacks.snapshots.count=5", "trainer.max_epochs=4", f"ckpt_path={last}")
    )
    longer = snapshot_steps(32, 5)  # 0 1 4 11 32
    assert [s.step for s in snapshots.find(run)] == [0, 1, 2, 4, 8, *(s for s in longer if s > 8)]


def test_count_zero_or_removing_the_callback_keeps_none(tmp_path):
    train(compose_train_config(tmp_path / "zero", "callbacks.snapshots.count=0"))
    train(compose_train_config(tmp_path / "off", "~callbacks.snapshots"))
    for name in ("zero", "off"):
        assert not (tmp_path / name / "checkpoints" / "snapshots").exists()
        assert (tmp_path / name / "checkpoints" / "best.ckpt").is_file()


def test_a_negative_count_is_a_one_line_error(tmp_path):
    result = run_cli("train.py", "callbacks.snapshots.count=-1", f"paths.log_dir={tmp_path}", *TINY_REVERSE)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: callbacks.snapshots.count=-1 must be an integer >= 0")
    with pytest.raises(ConfigError, match="spacing='cubic' is unknown; use log or linear"):
        Snapshots("x", spacing="cubic")


def test_snapshots_that_would_fill_the_disk_are_refused_before_the_first(tmp_path, monkeypatch):
    """A count in the thousands on a large model: the run stops at its start with one line naming the
    sizes; an open-ended run's schedule stays small whatever the count."""
    import shutil

    from transformer_lab.training.callbacks.snapshots import powers_of_two

    free = shutil.disk_usage(tmp_path)._replace(free=50_000)  # room for one snapshot of the tiny model
    monkeypatch.setattr(shutil, "disk_usage", lambda path: free)
    with pytest.raises(ConfigError) as refused:
        train(compose_train_config(tmp_path / "run", "callbacks.snapshots.count=1000"))
    message = str(refused.value)
    assert message.startswith("callbacks.snapshots.count=1000 keeps 9 snapshots of ") and "\n" not in message
    assert message.endswith("lower callbacks.snapshots.count (or 0: none)")
    assert "more than the 50.0 kB free on the disk" in message
    assert not list((tmp_path / "run" / "checkpoints" / "snapshots").glob("*.ckpt"))
    assert len(powers_of_two(10**9)) == 64 and powers_of_two(3) == [0, 1, 2]


def test_the_run_prints_the_disk_use_of_its_snapshots(tmp_path):
    result = run_cli("train.py", f"hydra.run.dir={tmp_path / 'run'}", *TINY_REVERSE)
    assert result.returncode == 0, result.stderr[-2000:]
    files = list((tmp_path / "run" / "checkpoints" / "snapshots").glob("step_*.ckpt"))
    megabytes = sum(f.stat().st_size for f in files) / 1e6
    assert len(files) == 9  # 8 steps and the initial weights
    line = next(line for line in result.stdout.splitlines() if "snapshots " in line)
    assert line.endswith(f"snapshots/ (9 files, {megabytes:.1f} MB on disk)")
    assert f"interpret ckpt_path={tmp_path / 'run'} analysis=dynamics" in result.stdout


def test_finding_snapshots_and_steps_outside_the_run_are_one_line_errors(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(ConfigError, match=r"has no snapshots \(checkpoints/snapshots/step_\*\.ckpt\)"):
        snapshots.find(tmp_path)
    with pytest.raises(ConfigError, match="pretrained:reverse has no snapshots"):
        snapshots.find("pretrained:reverse")
    folder = tmp_path / "checkpoints" / "snapshots"
    folder.mkdir()
    for step in (0, 10, 100):
        (folder / f"step_{step:08d}.ckpt").write_bytes(b"")
    assert [s.step for s in snapshots.find(tmp_path)] == [0, 10, 100]
    assert snapshots.nearest(tmp_path, 40).step == 10 and snapshots.nearest(tmp_path, 60).step == 100
    for step in (101, -1):
        with pytest.raises(ConfigError, match=rf"step={step} is beyond the run: .* use step=0\.\.100"):
            snapshots.nearest(tmp_path, step)
    assert len(snapshots.find(folder)) == 3  # the folder itself names them too


def test_step_folders_naming_the_same_step_are_refused(tmp_path):
    """Pythia-style step<N>/ folders: step0 and step00 are one step, which analysis=dynamics would have
    measured twice."""
    for name in ("step0", "step00", "step1000"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"holds step0 and step00, both step 0; keep one"):
        snapshots.hf_series(f"hf:{tmp_path}")
    (tmp_path / "step00" / "config.json").unlink()
    (tmp_path / "step00").rmdir()
    assert [s.step for s in snapshots.hf_series(f"hf:{tmp_path}")] == [0, 1000]


def test_a_disk_budget_thins_the_snapshots_log_evenly(tmp_path):
    """callbacks.snapshots.max_disk: a long run keeps as many snapshots as fit, spread as `count` would be."""
    budget = 200_000
    run = tmp_path / "run"
    train(compose_train_config(run, "trainer.max_epochs=5", f"callbacks.snapshots.max_disk={budget}"))
    files = sorted((run / "checkpoints" / "snapshots").glob("step_*.ckpt"))
    weights = sum(t.numel() * t.element_size() for t in load_model(files[-1]).state_dict().values())
    kept = budget // (weights + snapshots_module.SNAPSHOT_OVERHEAD)
    assert 2 <= kept < 9 and sum(f.stat().st_size for f in files) <= budget
    assert [f.name for f in files] == [snapshots_module.snapshot_name(s) for s in snapshot_steps(40, kept)]
    with pytest.raises(ConfigError, match="max_disk='lots' is not a size; write it as 500KB, 64MB or 2GB"):
        Snapshots("x", max_disk="lots")


def test_a_budget_no_snapshot_fits_says_so(tmp_path, caplog):
    """A model larger than the budget keeps no snapshot, and the run says why and what to raise."""
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        train(compose_train_config(run, "trainer.max_steps=3", "callbacks.snapshots.max_disk=1KB"))
    assert not list((run / "checkpoints").glob("snapshots/*.ckpt"))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Snapshots: ")]
    assert said and said[0].startswith("Snapshots: none of 32 fit callbacks.snapshots.max_disk=1.0 kB (")
    assert said[0].endswith("raise max_disk to study training over time (analysis=dynamics)")


def test_a_short_text_run_keeps_little_on_disk_by_default(tmp_path):
    """The default budget (4 MB): a 20-step run of the text task's default model (3 MB of weights) keeps
    one snapshot, not 21 (70 MB); a sweep of larger models cannot fill a disk."""
    (tmp_path / "c.txt").write_text("ROMEO: But soft, what light through yonder window breaks?\n" * 300)
    text = [
        "task=text",
        f"data.path={tmp_path / 'c.txt'}",
        "data.tokenizer=char",
        "data.block_size=16",
        "data.batch_size=4",
        f"data.cache_dir={tmp_path / 'cache'}",
        "trainer.max_steps=20",
        "trainer.limit_val_batches=1",
        "~callbacks.head_metrics",
        "~callbacks.text_samples",
        "~callbacks.attention_maps",
    ]
    train(compose_train_config(tmp_path / "run", base=[*text, "trainer.accelerator=cpu"]))
    files = list((tmp_path / "run" / "checkpoints" / "snapshots").glob("step_*.ckpt"))
    assert 0 < sum(f.stat().st_size for f in files) < 5e6
