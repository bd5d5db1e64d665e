"""Adding a task takes one module and two configs, and no change to the package: a toy copy task,
defined under tests/toy_task/, trains through train.py's own code path."""

import json

import torch

from tests.conftest import COMMON, ROOT, compose_train_config, run_cli
from transformer_lab.train import train

SEARCH_PATH = f"hydra.searchpath=[file://{ROOT / 'tests' / 'toy_task' / 'configs'}]"


def test_a_task_from_test_files_alone_trains_with_fast_dev_run(tmp_path):
    cfg = compose_train_config(tmp_path, SEARCH_PATH, "task=copy", "trainer.fast_dev_run=true", base=COMMON)
    assert cfg.data._target_ == "tests.toy_task.copy.CopyDataModule"
    metrics = train(cfg)
    assert metrics["global_step"] == 1 and 0 <= metrics["test/acc"] <= 1
    assert json.loads((tmp_path / "metrics.json").read_text())["test/seq_acc"] == metrics["test/seq_acc"]


def test_the_toy_task_is_learned_and_its_checkpoint_records_it(tmp_path):
    settings = ["trainer.max_epochs=6", "model.lr=3e-3", "model.warmup=5"]
    cfg = compose_train_config(tmp_path, SEARCH_PATH, "task=copy", *settings, base=COMMON)
    metrics = train(cfg)
    assert metrics["test/acc"] > 0.9  # copying is easy: the token's own embedding suffices
    checkpoint = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)
    assert checkpoint["task"] == {"class": "tests.toy_task.copy.CopyDataModule", "separator": " "}
    assert checkpoint["hyper_parameters"]["net"]["max_len"] == 8


def test_the_command_line_finds_the_task_through_the_search_path(tmp_path):
    result = run_cli(
        "train.py", SEARCH_PATH, "task=copy", "trainer.fast_dev_run=true", f"paths.log_dir={tmp_path}"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "test/acc=" in result.stderr + result.stdout
