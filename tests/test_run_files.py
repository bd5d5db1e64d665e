"""A run folder, a checkpoint or a series of snapshots made by someone else: nothing in them hangs a tool,
exhausts the machine, writes through a link or ends in a traceback (transformer_lab.files, run_files,
training.run_dir, checkpoint)."""

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, compose_train_config, load_script, run_cli, save_task_checkpoint
from tests.test_scripts_summarize import make_run
from transformer_lab import ConfigError, load
from transformer_lab.data import ReverseDataModule
from transformer_lab.files import read_json, read_yaml
from transformer_lab.train import prepare, train
from transformer_lab.training import run_dir

TINY = ["experiment=reverse_tiny"]
# a 500-byte file whose aliases expand to 9^9 (387 million) nodes
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.fixture(autouse=True)
def released():
    yield
    run_dir.release_all()


@pytest.fixture
def bad_file(tmp_path):
    """A file someone else left where a run file belongs: its kind (`alias`, `fifo`, `link`, `huge`,
    `invalid`) -> the path, made at `path`."""

    def make(path: Path, kind: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            path.unlink()
        if kind == "alias":
            path.write_text(ALIAS_BOMB)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "link":
            (tmp_path / "victim").write_text("the user's own file\n")
            path.symlink_to(tmp_path / "victim")
        elif kind == "huge":
            with open(path, "wb") as f:
                f.truncate(17 * 2**20)  # sparse: no disk used
        elif kind == "invalid":
            path.write_text("a: [unclosed\n")
        return path

    return make


KINDS = {
    "alias": "an alias",
    "fifo": "is not a regular file",
    "link": "it is a symlink",
    "huge": "more than the 16.8 MB a file of a run can be",
    "invalid": "is not valid YAML",
}


@pytest.mark.parametrize("kind", KINDS)
def test_the_reader_of_run_files_refuses_what_would_hang_or_exhaust_it(tmp_path, bad_file, kind):
    path = bad_file(tmp_path / "file.yaml", kind)
    with pytest.raises(ConfigError, match=KINDS[kind]) as info:
        read_yaml(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert read_yaml(_written(tmp_path / "ok.yaml", "a: [1, 2]\n")) == {"a": [1, 2]}
    with pytest.raises(ConfigError, match="is not valid JSON"):
        read_json(_written(tmp_path / "m.json", "{"))
    with pytest.raises(ConfigError, match="is not a regular file"):
        read_yaml("/dev/zero")


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _stopped_run(tmp_path: Path) -> Path:
    """A run folder as a stopped run leaves it: its overrides, a last.ckpt (never read by prepare)."""
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- experiment=reverse_tiny\n")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"PK")
    return run


@pytest.mark.parametrize(
    "name", [".hydra/overrides.yaml", ".hydra/resumes.yaml", "metrics.json", "train.log", "checkpoints/x"]
)
@pytest.mark.parametrize("kind", ["alias", "link", "invalid"])
def test_resuming_a_run_folder_from_someone_else(tmp_path, bad_file, name, kind):
    """resume=<run> reads the run's own files with the reader above and refuses a folder holding a link
    (the run would write through it): one line naming the file, nothing written, nothing lost."""
    run = _stopped_run(tmp_path)
    path = bad_file(run / name, kind)
    before = sorted((p.relative_to(run), p.is_symlink()) for p in run.rglob("*"))
    if kind == "link":
        message = "is a symlink"
    elif name.endswith(".yaml"):
        message = KINDS[kind]
    else:
        prepare([f"resume={run}"])  # only a run's YAML files are read: any other content is its own
        return
    with pytest.raises(ConfigError, match=message) as info:
        prepare([f"resume={run}"])
    assert str(path) in str(info.value)
    assert sorted((p.relative_to(run), p.is_symlink()) for p in run.rglob("*")) == before
    if kind == "link":
        assert (tmp_path / "victim").read_text() == "the user's own file\n"


def test_a_resume_removes_the_temporary_files_of_a_killed_save(tmp_path):
    """kill -9 in the middle of a save leaves `.last.ckpt.<random>.tmp`: the next start, holding the
    run's lock, removes it (and no other file)."""
    run = _stopped_run(tmp_path)
    (run / "checkpoints" / "snapshots").mkdir()
    stale = [
        run / "checkpoints" / ".last.ckpt.k2j4h.tmp",
        run / "checkpoints" / "snapshots" / ".s.ckpt.x.tmp",
    ]
    for path in stale:
        path.write_bytes(b"half a checkpoint")
    prepare([f"resume={run}"])
    assert not any(p.exists() for p in stale)
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == b"PK"


@pytest.mark.parametrize(
    ("name", "kind"),
    [(".hydra/config.yaml", "alias"), (".hydra/overrides.yaml", "alias"), ("metrics.json", "fifo"),
     (".hydra/hydra.yaml", "huge"), ("metrics.json", "link")],
)  # fmt: skip
def test_summarize_and_curves_name_a_run_file_they_cannot_read(tmp_path, bad_file, capsys, name, kind):
    run = tmp_path / "sweep" / "0"
    make_run(run, ["model.num_heads=2"], {"val/acc": 0.5})
    make_run(tmp_path / "sweep" / "1", ["model.num_heads=4"], {"val/acc": 0.7})
    bad_file(run / name, kind)
    summarize = load_script("summarize")
    with pytest.raises(ConfigError, match=f"{run} cannot be read: {run / name}"):
        summarize.main([str(run)])  # one run: its problem is the answer
    summarize.main([str(tmp_path / "sweep")])  # a sweep: the others are still worth a table
    out, err = capsys.readouterr()
    assert err.startswith(f"warning: skipping {run}: {run / name} ") and err.count("\n") == 1
    assert "1 run(s) under" in out
    if name == ".hydra/overrides.yaml":  # curves labels each run by its overrides, and reads its events
        from torch.utils.tensorboard import SummaryWriter

        curves = load_script("curves")
        with SummaryWriter(run) as writer:
            writer.add_scalar("train/loss", 1.0, 0)
        with pytest.raises(ConfigError, match=f"{run / name} is not valid YAML"):
            curves.main([str(run)])
        os.mkfifo(run / "events.out.tfevents.2")
        with pytest.raises(ConfigError, match=r"events\.out\.tfevents\.2 is not a regular file"):
            curves.main([str(run)])


def test_a_checkpoint_that_inflates_to_more_than_it_could_hold_is_refused_before_reading(tmp_path):
    """A 1.7 MB file whose pickle entry is deflated from 1.6 GB: the zip's directory states the size,
    checked before torch reads a byte of it (here 200 MB, past the pickle's 64 MiB limit)."""
    small = save_task_checkpoint(tmp_path / "small.ckpt", ReverseDataModule(seq_len=4, num_categories=3))
    bomb = tmp_path / "bomb.ckpt"
    with zipfile.ZipFile(small) as source, zipfile.ZipFile(bomb, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("data.pkl"):
                out.writestr(info.filename, data + b"\0" * (200 * 2**20), compress_type=zipfile.ZIP_DEFLATED)
            else:
                out.writestr(info, data)
    assert bomb.stat().st_size < 2_000_000
    with pytest.raises(ConfigError, match=r"its pickle unpacks to 209\.7 MB, more than 67\.1 MB"):
        load(bomb)
    result = run_cli("-m", "transformer_lab.sample", f"ckpt_path={bomb}", "source=1 2")
    assert result.returncode == 2 and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_non_finite_weights_are_named_by_every_tool(tmp_path):
    path = save_task_checkpoint(tmp_path / "nan.ckpt", ReverseDataModule(seq_len=4, num_categories=3))
    contents = torch.load(path, weights_only=True)
    contents["state_dict"]["net.blocks.0.mlp.fc_in.weight"][0, 0] = float("nan")
    torch.save(contents, path)
    with pytest.raises(ConfigError, match=r"holds non-finite weights \(net\.blocks\.0\.mlp\.fc_in\.weight "):
        load(path)
    for tool, argument in (("explore", f"out={tmp_path / 'x.html'}"), ("sample", "source=1 2")):
        result = run_cli("-m", f"transformer_lab.{tool}", f"ckpt_path={path}", argument)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: ") and "non-finite weights" in result.stderr
        assert result.stderr.count("\n") == 1
    assert not (tmp_path / "x.html").exists()


def test_a_task_record_naming_the_abstract_task_class_is_refused(tmp_path):
    path = save_task_checkpoint(tmp_path / "abstract.ckpt", ReverseDataModule(seq_len=4, num_categories=3))
    contents = torch.load(path, weights_only=True)
    contents["task"]["class"] = "transformer_lab.data.task.TaskDataModule"
    torch.save(contents, path)
    with pytest.raises(ConfigError, match="is not a task: it does not define vocab and max_len"):
        load(path).examples(2)


def test_a_series_with_a_snapshot_of_another_model_names_that_file(tmp_path):
    folder = tmp_path / "run" / "checkpoints" / "snapshots"
    folder.mkdir(parents=True)
    task = ReverseDataModule(seq_len=4, num_categories=3, test_size=8)
    for step in (0, 10):
        save_task_checkpoint(folder / f"step_{step:08d}.ckpt", task)
    save_task_checkpoint(folder / "step_00000005.ckpt", task, model_dim=16)
    from transformer_lab.analysis import dynamics

    with pytest.raises(ConfigError, match=r"step_00000005\.ckpt is a snapshot of another model than the run"):
        dynamics.over_snapshots(str(tmp_path / "run"), count=8)
    with pytest.raises(ConfigError, match=r"ckpt_path=.*/nowhere does not exist"):
        dynamics.over_snapshots(str(tmp_path / "nowhere"), count=8)


def test_the_csv_logger_on_the_allowlist_works_to_the_end(tmp_path):
    cfg = compose_train_config(
        tmp_path,
        "+logger.csv._target_=lightning.pytorch.loggers.CSVLogger",
        "+logger.csv.save_dir=${paths.output_dir}",
        "+logger.csv.name=csv",
    )
    metrics = train(cfg)
    rows = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text()
    assert "test/acc" in metrics and "hp/test_acc" in rows.splitlines()[0]
    assert (tmp_path / "csv" / "version_0" / "hparams.yaml").is_file()


def test_sigterm_saves_last_checkpoint_and_exits_143_saying_how_to_resume(tmp_path):
    """As a scheduler's time limit ends a job: last.ckpt saved, one line, exit 143, no metrics.json (a
    sweep or `train && next` must not take it as finished)."""
    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONFAULTHANDLER": "1"}
    args = [sys.executable, "train.py", *TINY, "trainer.max_epochs=1000", f"hydra.run.dir={run}",
            "callbacks.last_checkpoint.every_n_train_steps=5",
            "callbacks.progress_bar.refresh_rate=0"]  # fmt: skip
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    try:
        while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.terminate()  # SIGTERM
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    step = torch.load(last, weights_only=True)["global_step"]
    assert err.count("\n") == 1 and err.startswith(f"error: stopped by SIGTERM at step {step} ")
    assert f"resume with resume={run}" in err and not (run / "metrics.json").exists()
    assert f"Saved {last} at step {step}" in out
