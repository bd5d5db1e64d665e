"""Sweeps through the CLI as a user runs them: a submitit_local grid, Optuna searches (an invalid trial,
resuming a stopped study), scripts/summarize.py on the directories they leave; the SLURM launcher and
debug overlays as configs."""

import csv
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, TINY_REVERSE, compose_train_config, load_script
from transformer_lab.cli import run
from transformer_lab.train import train

optuna.logging.set_verbosity(optuna.logging.WARNING)


def train_cli(*args: str) -> subprocess.CompletedProcess:
    """`python train.py ...` with one torch thread per process (submitit_local runs jobs side by side)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def job_dirs(sweep: Path) -> list[Path]:
    return sorted(p for p in sweep.iterdir() if (p / ".hydra").is_dir())


def load_study(sweep: Path) -> optuna.Study:
    return optuna.load_study(study_name="reverse", storage=f"sqlite:///{sweep}/optuna.db")


def optuna_search(sweep: Path, n_trials: int, *overrides: str) -> subprocess.CompletedProcess:
    return train_cli(
        "-m", "hparams_search=reverse_optuna", f"hydra.sweeper.n_trials={n_trials}",
        f"hydra.sweep.dir={sweep}", f"paths.log_dir={sweep.parent}", *TINY_REVERSE, *overrides,
    )  # fmt: skip


@pytest.fixture(scope="module")
def submitit_sweep(tmp_path_factory) -> Path:
    """`-m hydra/launcher=submitit_local model.num_heads=1,2`: two jobs, each a process of its own."""
    log_dir = tmp_path_factory.mktemp("submitit")
    launcher = "hydra/launcher=submitit_local"
    result = train_cli("-m", launcher, "model.num_heads=1,2", f"paths.log_dir={log_dir}", *TINY_REVERSE)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep,) = (log_dir / "multirun").iterdir()
    return sweep


def test_submitit_local_sweep_runs_every_job_in_its_own_directory(submitit_sweep):
    jobs = job_dirs(submitit_sweep)
    assert [j.name for j in jobs] == ["0", "1"]
    for job, heads in zip(jobs, ("1", "2"), strict=True):
        assert json.loads((job / "metrics.json").read_text())["global_step"] == 8
        assert f"model.num_heads={heads}" in (job / ".hydra" / "overrides.yaml").read_text()
    assert (submitit_sweep / ".submitit").is_dir()  # submitit's own logs of the two jobs


def test_optuna_search_records_an_invalid_trial_as_failed_and_goes_on(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    # Queue the second trial with 3 heads: model_dim (16, 32 or 64) is not divisible by 3.
    study = optuna.create_study(
        study_name="reverse", storage=f"sqlite:///{sweep}/optuna.db", direction="maximize"
    )
    with warnings.catch_warnings(category=optuna.exceptions.ExperimentalWarning, action="ignore"):
        for heads in (1, 3, 2):
            study.enqueue_trial({"model.num_heads": heads})

    result = optuna_search(sweep, 3, "model.num_heads=choice(1, 2, 3)")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Failed experiment: error: model.model_dim=" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr

    trials = load_study(sweep).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert [t.params["model.num_heads"] for t in trials] == [1, 3, 2]
    jobs = job_dirs(sweep)
    assert len(jobs) == 3 and not (jobs[1] / "metrics.json").exists()
    # The objective Optuna recorded is what train.py returned: the task's metric, val/acc.
    for trial, job in zip(trials, jobs, strict=True):
        if trial.state.name == "COMPLETE":
            assert trial.value == pytest.approx(json.loads((job / "metrics.json").read_text())["val/acc"])
    best = (sweep / "optimization_results.yaml").read_text()
    assert f"best_value: {max(t.value for t in trials if t.value is not None)}" in best


def test_stopped_optuna_search_resumes_in_its_sweep_directory(tmp_path):
    sweep = tmp_path / "sweep"
    first = optuna_search(sweep, 1)  # a search that stopped after one trial
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(load_study(sweep).trials) == 1

    resumed = optuna_search(sweep, 1)  # the same command again, on the same sweep dir
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    trials = load_study(sweep).trials
    assert [t.number for t in trials] == [0, 1] and all(t.state.name == "COMPLETE" for t in trials)
    jobs = job_dirs(sweep)  # the resumed trial got a new directory; the first one is untouched
    assert len(jobs) == 2 and all((j / "metrics.json").is_file() for j in jobs)
    values = [json.loads((j / "metrics.json").read_text())["val/acc"] for j in jobs]
    assert sorted(values) == sorted(t.value for t in trials)


def test_an_invalid_job_in_a_grid_sweep_is_a_one_line_error(tmp_path):
    result = train_cli("-m", "model.num_heads=3,5", f"paths.log_dir={tmp_path}", *TINY_REVERSE)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "error: model.model_dim=32 is not divisible by model.num_heads=3" in result.stderr


def test_summarize_ranks_the_runs_of_a_sweep(submitit_sweep, tmp_path, capsys):
    summarize = load_script("summarize")
    out_csv = tmp_path / "runs.csv"
    summarize.main([str(submitit_sweep), "--csv", str(out_csv)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("reverse: 2 run(s)") and "by val/acc (highest first)" in lines[0]
    header = lines[1].split()
    assert header[:2] == ["run", "model.num_heads"]  # the only override that differs
    assert {"val/acc", "val/loss", "test/acc", "test/seq_acc", "wall"} <= set(header)
    rows = list(csv.DictReader(out_csv.open()))
    accs = [json.loads((submitit_sweep / r["run"] / "metrics.json").read_text())["val/acc"] for r in rows]
    assert accs == sorted(accs, reverse=True) and len(rows) == 2
    assert [r["run"] for r in rows] == [line.split()[0] for line in lines[3:5]]


def test_summarize_lists_failed_runs_last_and_rejects_a_missing_directory(tmp_path, capsys):
    summarize = load_script("summarize")
    for name, metrics in (("0", {"val/loss": 0.5}), ("1", None), ("2", {"val/loss": 0.25})):
        run_dir = tmp_path / "sweep" / name
        (run_dir / ".hydra").mkdir(parents=True)
        (run_dir / ".hydra" / "config.yaml").write_text(
            "task_name: shakespeare\nmetric: val/loss\nmetric_mode: min\n"
        )
        (run_dir / ".hydra" / "overrides.yaml").write_text(f"- model.lr={name}e-3\n")
        if metrics is not None:
            (run_dir / "metrics.json").write_text(json.dumps({**metrics, "wall_time_s": 1.0}))
    summarize.main([str(tmp_path / "sweep")])
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in table[3:]] == ["2", "0", "1"]  # lowest val/loss first, failed last
    assert table[-1].endswith("no metrics.json")

    with pytest.raises(SystemExit) as exit_info:
        run(summarize.main, [str(tmp_path / "nope")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {tmp_path / 'nope'} is not a directory; pass a sweep directory such as "
        "saved_models/multirun/<date>_<time>, or saved_models"
    )


def test_slurm_launcher_runs_one_ddp_rank_per_device(tmp_path):
    """hydra/launcher=slurm sizes each SLURM job from the trainer: nodes x (tasks = GPUs) per node."""
    cfg = compose_train_config(
        tmp_path, "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "trainer=ddp", "trainer.devices=4",
        "trainer.num_nodes=2",
    )  # fmt: skip
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher.partition == "gpu" and launcher.nodes == 2
    assert launcher.tasks_per_node == 4 and launcher.gpus_per_node == 4


@pytest.mark.parametrize(
    ("overlay", "settings"),
    [
        ("fast_dev_run", {"trainer.fast_dev_run": True}),
        ("overfit", {"trainer.overfit_batches": 1, "trainer.max_steps": 300, "model.lr": 3e-3}),
        ("profiler", {"trainer.max_epochs": 1, "trainer.profiler.filename": "profile"}),
    ],
)
def test_debug_overlays_run_apart_from_real_runs(tmp_path, overlay, settings):
    cfg = compose_train_config(tmp_path, f"debug={overlay}")
    for key, value in settings.items():
        assert OmegaConf.select(cfg, key) == value
    assert cfg.hydra.run.dir.startswith(f"{tmp_path}/debug/")


def test_profiler_overlay_writes_its_report_into_the_run_directory(tmp_path):
    train(compose_train_config(tmp_path, "debug=profiler"))
    assert "FIT Profiler Report" in (tmp_path / "fit-profile.txt").read_text()


def test_fast_dev_run_keeps_only_its_log_and_metrics(tmp_path, caplog):
    """debug=fast_dev_run, as experiments.md says: no checkpoint and no TensorBoard log (so the run's last
    lines do not offer one), only train.log's place, metrics.json and .hydra/."""
    with caplog.at_level(logging.INFO, logger="transformer_lab"):
        train(compose_train_config(tmp_path, "debug=fast_dev_run"))
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("events.out.tfevents.*"))
    assert (tmp_path / "metrics.json").is_file()
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "Test: test/loss=" in said and "tensorboard --logdir" not in said and "best.ckpt" not in said
