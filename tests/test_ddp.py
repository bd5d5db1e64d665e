"""Lightning's DDP through `python train.py trainer=ddp`: two CPU processes (gloo), one run directory."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.conftest import ROOT, TINY_REVERSE, compose_train_config
from transformer_lab import ConfigError, TransformerPredictor
from transformer_lab.train import train


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One tiny reverse run on 2 CPU processes; each process gets one torch thread."""
    log_dir = tmp_path_factory.mktemp("ddp")
    result = subprocess.run(
        [sys.executable, "train.py", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
         f"paths.log_dir={log_dir}", *TINY_REVERSE],
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return log_dir, result


def test_ddp_run_writes_one_run_directory_from_rank_zero(ddp_run):
    log_dir, _ = ddp_run
    (run_dir,) = (log_dir / "reverse").iterdir()  # rank 1 made no directory of its own
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in (run_dir / "train_ddp_process_1.log").read_text()
    assert sorted(p.name for p in log_dir.iterdir()) == ["reverse"]

    metrics = json.loads((run_dir / "metrics.json").read_text())
    # 256 training sequences, batch 32, split over 2 ranks: 4 optimisation steps in the epoch.
    assert metrics["global_step"] == 4 and metrics["device"] == "cpu"
    assert 0 <= metrics["test/acc"] <= 1 and metrics["best_ckpt_path"] == str(
        run_dir / "checkpoints/best.ckpt"
    )
    assert {p.name for p in (run_dir / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt", "snapshots"}
    # rank 0 alone wrote the snapshots: the initial weights and each of the 4 steps, one file each
    assert sorted(p.name for p in (run_dir / "checkpoints" / "snapshots").iterdir()) == [
        f"step_{step:08d}.ckpt" for step in range(5)
    ]
    # Rank 0 alone saved the config, wrote TensorBoard events (one process id) and train.log;
    # rank 1 logs to its own file.
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    writers = {p.name.split(".")[-2] for p in run_dir.glob("events.out.tfevents.*")}
    assert len(writers) == 1
    assert "Test: test/loss=" in (run_dir / "train.log").read_text()
    assert "Test: test/loss=" not in (run_dir / "train_ddp_process_1.log").read_text()


def test_ddp_metrics_are_averaged_over_both_ranks(ddp_run):
    """Each rank tests half of the 64 test sequences; the reported test/acc must be that of all 64."""
    log_dir, _ = ddp_run
    (run_dir,) = (log_dir / "reverse").iterdir()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    datamodule = instantiate(cfg.data)
    datamodule.setup("test")
    model = TransformerPredictor.load_from_checkpoint(
        run_dir / "checkpoints" / "best.ckpt", weights_only=True
    )
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in datamodule.test_dataloader():
            correct += (model(x).argmax(-1) == y).sum().item()
            total += y.numel()
    assert metrics["test/acc"] == pytest.approx(correct / total, abs=1e-6)


def test_script_ddp_inside_a_local_sweep_is_refused(tmp_path):
    """Lightning's `ddp` re-runs the command line for rank 1: inside `-m` that would be the whole sweep."""
    cfg = compose_train_config(
        tmp_path, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "hydra.mode=MULTIRUN"
    )
    with pytest.raises(ConfigError, match="cannot start its processes inside a local sweep"):
        train(cfg)
    assert not (tmp_path / "checkpoints").exists()
