"""End to end through Hydra's compose API: what `python train.py` does for the reverse task."""

import inspect
import json
import math

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import ROOT, TINY_REVERSE, compose_train_config, run_cli
from transformer_lab import ConfigError
from transformer_lab.train import train


def _scalars(run_dir) -> dict[str, list]:
    """Every scalar series the TensorBoard event files of a run hold, by tag."""
    series: dict[str, list] = {}
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            series.setdefault(tag, []).extend(acc.Scalars(tag))
    return series


def test_fast_dev_run(train_config, tmp_path):
    metrics = train(train_config("trainer.fast_dev_run=true"))
    assert metrics["global_step"] == 1
    assert 0 <= metrics["test/acc"] <= 1 and metrics["test/loss"] > 0
    assert json.loads((tmp_path / "metrics.json").read_text())["test/acc"] == metrics["test/acc"]


def test_run_directory_holds_checkpoints_metrics_and_tensorboard(train_config, tmp_path):
    metrics = train(train_config("trainer.max_epochs=2"))
    saved = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("val/loss", "val/acc", "val/seq_acc", "test/loss", "test/acc", "test/seq_acc", "wall_time_s"):
        assert saved[key] == metrics[key]
    assert saved["best_ckpt_path"] == str(tmp_path / "checkpoints" / "best.ckpt")
    assert saved["global_step"] == 16 and saved["device"] == "cpu"

    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 16  # the newest state, not the newest best
    assert last["hyper_parameters"]["net"]["vocab"] == ["<pad>", "<bos>", "<eos>", "<sep>", *"0123456789"]
    assert last["task"] == {
        "class": "transformer_lab.data.reverse.ReverseDataModule",
        "separator": " ",
        "label_rule": "reverse",
    }
    assert last["callbacks"]["BestCheckpoint"]["best_model_path"] == saved["best_ckpt_path"]

    scalars = _scalars(tmp_path)
    for tag in ("train/loss", "train/acc", "val/loss", "val/acc", "val/seq_acc", "test/acc", "train/lr"):
        assert tag in scalars, f"{tag} missing from TensorBoard (has {sorted(scalars)})"
    # Warmup 50, cosine over the trainer's 16 steps: lr(t) = 5e-4 * 0.5 (1 + cos(pi t / 16)) * t / 50.
    expected = [5e-4 * 0.5 * (1 + math.cos(math.pi * t / 16)) * t / 50 for t in range(3)]
    assert [e.value for e in scalars["train/lr"][:3]] == pytest.approx(expected, rel=1e-5)
    assert any(p.name.endswith("hparams.yaml") for p in tmp_path.iterdir())


def test_resume_continues_from_saved_step(tmp_path):
    first = compose_train_config(tmp_path / "first")
    train(first)
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 8

    resumed_dir = tmp_path / "resumed"
    metrics = train(compose_train_config(resumed_dir, f"ckpt_path={last}", "trainer.max_epochs=2"))
    assert metrics["global_step"] == 16
    steps = [e.step for e in _scalars(resumed_dir)["train/loss"]]
    assert steps[0] == 8 and steps[-1] == 15  # picked up at step 8, no step repeated
    final = torch.load(resumed_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["lr_schedulers"][0]["last_epoch"] == 16
    assert final["optimizer_states"][0]["state"][0]["step"].item() == 16


def test_override_changes_the_model(train_config, tmp_path):
    train(train_config("model.num_heads=4", "model.num_layers=2", "trainer.max_epochs=1", "seed=7"))
    hparams = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)["hyper_parameters"]
    assert hparams["net"]["num_heads"] == 4 and hparams["net"]["num_layers"] == 2


BAD_INPUTS = [
    (["model.model_dim=30", "model.num_heads=4"], "model.model_dim=30 is not divisible by model.num_heads=4"),
    (["model.num_layers=0"], "model.num_layers=0 must be a positive integer"),
    (["model.model_dim=-8"], "model.model_dim=-8 must be a positive integer"),
    (["model.lr=0"], "model.lr=0 must be positive"),
    (["model.lr=-0.1"], "model.lr=-0.1 must be positive"),
    (["data.batch_size=0"], "data.batch_size=0 must be a positive integer"),
    (["data.seq_len=0"], "data.seq_len=0 must be a positive integer"),
    (["model.dropout=1.0"], "model.dropout=1.0 must be in [0, 1)"),
    (["model.input_dropout=-0.1"], "model.input_dropout=-0.1 must be in [0, 1)"),
    (["model.max_len=8"], "sequence length 16 is longer than model.max_len=8"),
    (["seed=abc"], "seed='abc' must be an integer or null"),
    (["model.lr=fast"], "model.lr='fast' must be a number"),
    (["model.lr=inf"], "model.lr=inf must be a finite number"),
    (["model.weight_decay=nan"], "model.weight_decay=nan must be a finite number"),
    (
        ["model.rotary_base=inf", "model.positional_encoding=rotary"],
        "model.rotary_base=inf must be a number > 1",
    ),
    (["model.norm_eps=nan"], "model.norm_eps=nan must be a small positive number"),
    (["model.betas=[0.9,nan]"], "model.betas=[0.9, nan] must be two numbers in [0, 1)"),
    (["model.num_heads=two"], "model.num_heads='two' must be an integer"),
    (["data.batch_size=1.5"], "data.batch_size=1.5 must be an integer"),
    (["trainer.max_steps=ten"], "trainer.max_steps='ten' must be an integer"),
    (["trainer.val_check_interval=often"], "Invalid time format for `val_check_interval`: 'often'"),
    (["trainer.precision=17"], "trainer.precision=17 must be one of"),
    (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches=0 must be a positive integer"),
    (["trainer.check_val_every_n_epoch=0"], "trainer.check_val_every_n_epoch=0 must be a positive integer"),
    (["trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val=-1 must be at least 0 (0 or null: no"),
    (["trainer.val_check_interval=0"], "trainer.val_check_interval=0 must be a share of an epoch in (0, 1]"),
    (["trainer.limit_train_batches=0"], "no optimisation step to take: trainer.limit_train_batches=0 takes"),
    (["trainer.max_steps=0"], "no optimisation step to take: trainer.max_steps=0; raise it"),
    (["data.batch_size=1000"], "no optimisation step to take: data.batch_size=1000 is more than the"),
    (["+model.heads=4"], "model.heads is not a setting"),
    (
        ["task=sort", "model=encoder"],
        "model=encoder cannot learn SortDataModule's task; use model=encoder_decoder or model=decoder",
    ),
    (["data.min_seq_len=20"], "data.min_seq_len=20 must be an integer from 1 to data.seq_len=16"),
    (["ckpt_path=/nonexistent/last.ckpt"], "ckpt_path=/nonexistent/last.ckpt does not exist"),
    (["ckpt_path=pretrained:reverse"], "is a ready-made model: it holds weights but no optimizer state"),
    (["trainer.accelerator=cuda"], "no CUDA GPU is available"),
    (["trainer.accelerator=tpu9"], "trainer.accelerator=tpu9 is unknown"),
    (["trainer.accelerator=mps"], "trainer.accelerator=mps but Apple's MPS backend is not available"),
    (["model.warmup=-5"], "model.warmup=-5 must be >= 0"),
    (["model.weight_decay=-1"], "model.weight_decay=-1 must be >= 0"),
    (["model.betas=[0.9,1.5]"], "model.betas=[0.9, 1.5] must be two numbers in [0, 1)"),
    (["model.activation=swish"], "model.activation='swish': use relu or gelu"),
    (
        ["model.positional_encoding=alibi"],
        "model.positional_encoding='alibi': use sinusoidal, learned, none or rotary",
    ),
    (["model.num_kv_heads=3", "model.num_heads=2"], "model.num_kv_heads=3 must divide model.num_heads=2"),
    (["model=llama_style", "model.rotary_fraction=2"], "model.rotary_fraction=2 must be in (0, 1]"),
    (["data.num_categories=1"], "data.num_categories=1 must be an integer >= 2"),
    (["callbacks.last_checkpoint.every_n_train_steps=0"], "every_n_train_steps=0 must be a positive integer"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_INPUTS)
def test_bad_input_is_rejected_before_training(train_config, tmp_path, overrides, message):
    if ("cuda" in overrides[0] and torch.cuda.is_available()) or (
        "mps" in overrides[0] and torch.backends.mps.is_available()
    ):
        pytest.skip("this machine has that device")
    with pytest.raises(ConfigError) as error:
        train(train_config(*overrides))
    assert message in str(error.value)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.json").exists()


def test_an_unknown_task_is_a_one_line_error_listing_the_tasks(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"Could not find 'task/nope' Available options in 'task': .*reverse sae shakespeare",
    ):
        compose_train_config(tmp_path, "task=nope")


def test_cli_bad_input_prints_one_line_and_exits_nonzero(tmp_path):
    result = run_cli("train.py", "model.num_heads=3", f"paths.log_dir={tmp_path}", *TINY_REVERSE)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: model.model_dim=32 is not divisible by model.num_heads=3; "
        "choose model_dim as a multiple of num_heads"
    )
    result = run_cli("train.py", "task=nope", f"paths.log_dir={tmp_path}")
    assert result.returncode != 0 and "Could not find 'task/nope'" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_shows_config_and_help():
    job = run_cli("train.py", "--cfg", "job", "model.num_heads=4")
    assert job.returncode == 0
    assert "num_heads: 4" in job.stdout and "arch: encoder" in job.stdout
    help_text = run_cli("train.py", "--help")
    assert help_text.returncode == 0
    assert "== Configuration groups ==" in help_text.stdout
    (tasks,) = [line for line in help_text.stdout.splitlines() if line.startswith("task: ")]
    assert {"reverse", "sort", "shakespeare", "induction", "modular_addition"} <= set(tasks[6:].split(", "))


def test_multirun_gives_each_job_its_own_directory(tmp_path):
    result = run_cli("train.py", "-m", "model.num_heads=1,2", f"paths.log_dir={tmp_path}", *TINY_REVERSE)
    assert result.returncode == 0, result.stderr[-2000:]
    (sweep,) = (tmp_path / "multirun").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [j.name for j in jobs] == ["0", "1"]
    heads = []
    for job in jobs:
        assert json.loads((job / "metrics.json").read_text())["global_step"] == 8
        checkpoint = torch.load(job / "checkpoints" / "last.ckpt", weights_only=True)
        heads.append(checkpoint["hyper_parameters"]["net"]["num_heads"])
    assert heads == [1, 2]


def test_every_trainer_argument_is_an_override(train_config, tmp_path):
    """configs/trainer/default.yaml lists every Trainer argument (but the three train.py sets), so each is
    `trainer.<arg>=...` without a `+`; two that failed on the default task before now train."""
    listed = set(OmegaConf.load(ROOT / "configs" / "trainer" / "default.yaml")) - {"_target_"}
    arguments = set(inspect.signature(L.Trainer).parameters) - {"callbacks", "logger", "plugins"}
    assert listed == arguments
    metrics = train(
        train_config("trainer.max_steps=12", "trainer.val_check_interval=5", "trainer.max_epochs=null")
    )
    assert metrics["global_step"] == 12


def test_best_checkpoint_only_ever_holds_validated_weights(train_config, tmp_path):
    """Training stops at step 12, between validations (steps 8 and 16): best.ckpt keeps the weights of
    step 8, whose score was measured, and last.ckpt has step 12."""
    metrics = train(train_config("trainer.max_epochs=null", "trainer.max_steps=12", "test=false"))
    best = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)
    assert best["global_step"] == 8
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 12
    (validation,) = _scalars(tmp_path)["val/acc"]
    assert validation.step == 7 and metrics["best_score"] == pytest.approx(validation.value)


def test_resuming_a_finished_run_is_a_one_line_error(tmp_path):
    train(compose_train_config(tmp_path / "runs" / "reverse" / "first", "test=false"))
    again = compose_train_config(tmp_path / "second", "resume=auto", f"paths.log_dir={tmp_path / 'runs'}")
    with pytest.raises(ConfigError, match=r"finished training \(epoch 1, step 8\).*trainer\.max_epochs=2"):
        train(again)
    longer = compose_train_config(
        tmp_path / "third", "resume=auto", f"paths.log_dir={tmp_path / 'runs'}", "trainer.max_epochs=2"
    )
    assert train(longer)["global_step"] == 16


@pytest.mark.parametrize("override", ["model.num_heads=3", "seed=abc"])
def test_cli_config_error_leaves_no_run_directory(tmp_path, override):
    result = run_cli("train.py", override, f"paths.log_dir={tmp_path}", *TINY_REVERSE)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert list(tmp_path.iterdir()) == []  # no run directory, and no empty saved_models/reverse/ either
