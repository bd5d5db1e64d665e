"""A task kept outside the package, as docs/own_task.md teaches (a module on PYTHONPATH, its configs on
Hydra's search path), trains through train.py's own code path, and every tool works on its checkpoint:
the page's copy task, and a task with more classes than tokens that defines corrupted_pairs."""

import json
import os
import re
import sys

import pytest
import torch

from tests.conftest import COMMON, ROOT, compose_train_config, load_script, run_cli, save_task_checkpoint
from transformer_lab import ConfigError, load
from transformer_lab.cli import run
from transformer_lab.train import train

TOY = ROOT / "tests" / "toy_task"
SEARCH_PATH = f"hydra.searchpath=[file://{TOY / 'configs'}]"
QUICK = ["model.num_layers=2", "model.num_heads=2", "model.lr=3e-3", "model.warmup=5"]


@pytest.fixture(scope="module")
def toy_on_path():
    """The toy tasks' folder on the Python path, as PYTHONPATH=tests/toy_task puts it."""
    sys.path.insert(0, str(TOY))
    yield
    sys.path.remove(str(TOY))
    for name in ("copy_task", "mirror_sum_task"):
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, toy_on_path) -> dict:
    """Each toy task trained briefly: its metrics and its run directory."""
    runs = {}
    for task, epochs in (("copy", 6), ("mirror_sum", 8)):
        run_dir = tmp_path_factory.mktemp(task)
        cfg = compose_train_config(
            run_dir, SEARCH_PATH, f"task={task}", f"trainer.max_epochs={epochs}", *QUICK, base=COMMON
        )
        runs[task] = (train(cfg), run_dir)
    return runs


def test_the_pages_task_is_learned_and_its_checkpoint_records_it(trained):
    metrics, run_dir = trained["copy"]
    assert metrics["test/acc"] > 0.9  # copying is easy: the token's own embedding suffices
    checkpoint = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    assert checkpoint["task"] == {"class": "copy_task.CopyDataModule", "separator": " "}
    assert checkpoint["hyper_parameters"]["net"]["max_len"] == 8 and checkpoint["format_version"] == 1


def test_more_classes_than_tokens_are_named_by_the_task(trained):
    ckpt = load(trained["mirror_sum"][1])
    assert ckpt.config.vocab_size == 5 and ckpt.config.num_classes == 9
    assert ckpt.output_names == [f"sum{s}" for s in range(9)]
    _, labels = ckpt.text_example("4 3 0 1 2 4")
    assert labels.tolist() == [[8, 5, 1, 1, 5, 8]]


def _ok(tool: str, args: list[str], capsys) -> str:
    load_script(tool).main(args)
    return capsys.readouterr().out


def _fails(tool: str, args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run(load_script(tool).main, args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("task", ["copy", "mirror_sum"])
def test_every_tool_works_on_a_task_kept_outside_the_package(trained, task, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_dir = trained[task][1]
    ckpt = f"ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}"
    text = "text=4 3 0 1 2 4" if task == "mirror_sum" else "text=3 1 4 1 5 9 2 6"

    out = _ok("explain", [ckpt, "index=1", "out_dir=explain_out"], capsys)
    assert "Wrote attention_grid.png" in out and (tmp_path / "explain_out" / "rollout.png").is_file()
    _ok("explain", [ckpt, text, "out_dir=explain_text"], capsys)
    for page, source in (("index.html", "index=2"), ("text.html", text)):
        _ok("explore", [ckpt, source, f"out={page}"], capsys)
        html = (tmp_path / page).read_text()
        assert bool(re.search(r"\"sum[0-8]\"", html)) == (task == "mirror_sum")  # its class names
    for analysis in ("heads", "patching", "lens", "faithfulness"):
        extra = ["num_examples=16"] + (["position=1"] if analysis == "patching" else [])
        out = _ok("interpret", [ckpt, f"analysis={analysis}", *extra, "out_dir=interpret_out"], capsys)
        numbers = json.loads((tmp_path / "interpret_out" / f"{analysis}.json").read_text())
        assert numbers and f"({analysis} took" in out
    heads = json.loads((tmp_path / "interpret_out" / "heads.json").read_text())
    assert 0 <= heads["baseline"] <= 1 and len(heads["ablated"]) == 2
    # sample fits tasks that write text or map a source; this one does neither, and says so
    assert "needs a sequence-to-sequence task" in _fails("sample", [ckpt, "source=1 2 3"], capsys)
    assert "does not continue text" in _fails("sample", [ckpt, "prompt=1 2"], capsys)


def test_the_command_line_finds_the_task_through_pythonpath_and_says_so_without_it(tmp_path):
    args = ["train.py", SEARCH_PATH, "task=copy", "trainer.fast_dev_run=true", f"paths.log_dir={tmp_path}"]
    env = {**os.environ, "PYTHONPATH": str(TOY)}
    result = run_cli(*args, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "test/acc=" in result.stderr + result.stdout
    missing = run_cli(*args)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert missing.stderr.startswith("error: data._target_=copy_task.CopyDataModule is not a task")
    assert "copy_task is not found" in missing.stderr and "PYTHONPATH" in missing.stderr


def test_a_task_module_beside_you_or_the_checkpoint_is_never_imported(tmp_path, monkeypatch):
    """A module of the right name in the current directory (where a shared file may have landed) or in
    a checkpoint's folder is not imported: nothing in it runs."""
    marker = tmp_path / "ran"
    (tmp_path / "evil_task.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformer_lab.data import TaskDataModule\n"
        "class EvilDataModule(TaskDataModule):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m` puts the current directory first
    with pytest.raises(ConfigError, match="evil_task is not found outside the current directory"):
        train(compose_train_config(tmp_path / "run", "data._target_=evil_task.EvilDataModule"))
    from transformer_lab.data import ReverseDataModule

    path = save_task_checkpoint(tmp_path / "shared.ckpt", ReverseDataModule())
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["task"]["class"] = "evil_task.EvilDataModule"
    torch.save(checkpoint, path)
    with pytest.raises(ConfigError, match="evil_task is not found"):
        _ = load(path).task
    assert not marker.exists()
