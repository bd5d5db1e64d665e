"""Opening a checkpoint from a stranger must not run code; configs instantiate only known classes."""

import re

import pytest
import torch

from tests.conftest import ROOT, compose_train_config, load_script
from transformer_lab import ConfigError, load_model
from transformer_lab.cli import run
from transformer_lab.train import train


class _WritesAMarker:
    """Unpickling this object calls open(marker, "w"): the file appears if the pickle is executed."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def malicious_checkpoint(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"payload": _WritesAMarker(marker)}}, path)
    return path, marker


def test_loading_a_malicious_checkpoint_runs_no_code(malicious_checkpoint):
    path, marker = malicious_checkpoint
    with pytest.raises(ConfigError, match=r"refusing to load .* could run code"):
        load_model(path)
    assert not marker.exists()


def test_resuming_from_a_malicious_checkpoint_runs_no_code(malicious_checkpoint, tmp_path):
    path, marker = malicious_checkpoint
    with pytest.raises(ConfigError, match="refusing to load"):
        train(compose_train_config(tmp_path / "run", f"ckpt_path={path}"))
    assert not marker.exists()


@pytest.mark.parametrize("script", ["sample", "explain"])
def test_scripts_refuse_a_malicious_checkpoint(malicious_checkpoint, script, capsys, tmp_path):
    path, marker = malicious_checkpoint
    with pytest.raises(SystemExit) as exit_info:
        run(
            load_script(script).main,
            [f"ckpt_path={path}", f"out_dir={tmp_path}"] if script == "explain" else [f"ckpt_path={path}"],
        )
    assert exit_info.value.code == 2 and "refusing to load" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer._target_=builtins.print", r"trainer\._target_=builtins\.print is not allowed"),
        ("callbacks.progress_bar._target_=os.system", r"callbacks\.progress_bar\._target_=os\.system is not"),
        ("callbacks.progress_bar._target_=torch.hub.load", r"_target_=torch\.hub\.load is not allowed"),
        ("+logger.evil._target_=torch.load", r"logger\.evil\._target_=torch\.load is not allowed"),
        ("data._target_=os.system", r"data\._target_=os\.system is not a task"),
        (
            "data._target_=lightning.pytorch.LightningDataModule",
            r"is not a task: .*lightning/pytorch/__init__\.py does not define a task class "
            r"LightningDataModule",
        ),
        ("+model._target_=builtins.print", r"model\._target_=builtins\.print is not allowed"),
    ],
)
def test_configs_may_only_instantiate_known_classes(tmp_path, override, message):
    """The allowlist names exact classes (a task may be any TaskDataModule); nothing else is called."""
    with pytest.raises(ConfigError, match=message):
        train(compose_train_config(tmp_path, override))


def test_no_eval_or_exec_of_strings_in_the_code():
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("src", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"(?<![\w.])(eval|exec)\(", line)
    ]
    assert offenders == []
