"""The docs' examples are the code the tests run: the hook-point and analysis examples (docs/*.py) and
the "Add your own task" module (tests/toy_task/copy.py, trained by tests/test_own_task.py)."""

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, compose_train_config
from transformer_lab.train import train


def _python_block(page: str, starting_with: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    match = re.search(r"```python\n(" + re.escape(starting_with) + r".*?)```", text, re.S)
    assert match, f"no python block starting with {starting_with!r} in docs/{page}"
    return match.group(1)


def _code_lines(text: str) -> list[str]:
    """Lines of code without comments, docstrings, blank lines and the README's file-name comment."""
    text = re.sub(r'"""(.|\n)*?"""', "", text)
    lines = [line.split("  #")[0].rstrip() for line in text.splitlines()]
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _in_order(needles: list[str], haystack: list[str]) -> bool:
    position = 0
    for needle in needles:
        try:
            position = haystack.index(needle, position) + 1
        except ValueError:
            return False
    return True


def test_the_docs_hook_example_is_docs_hooks_example(tmp_path):
    block = _code_lines(_python_block("hooks.md", "import torch\n\nfrom transformer_lab import load_model\n"))
    script = _code_lines((ROOT / "docs" / "hooks_example.py").read_text())
    assert _in_order(block, script)
    train(compose_train_config(tmp_path, "model.num_layers=2", "model.num_heads=2", "test=false"))
    script, checkpoint = ROOT / "docs" / "hooks_example.py", tmp_path / "checkpoints" / "best.ckpt"
    result = subprocess.run(
        [sys.executable, str(script), str(checkpoint)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("EncoderClassifier 25 hook points: ['hook_embed', 'hook_pos_embed'")
    assert lines[1] == "pattern (1, 2, 16, 16)"
    assert [line.split(":")[0] for line in lines[3:]] == ["layer 2 without head 1", "layer 2 without head 2"]


@pytest.mark.parametrize("path", ["tests/toy_task/copy.py"])
def test_the_docs_task_is_the_task_the_tests_train(path):
    block = _code_lines(_python_block("own_task.md", "# src/transformer_lab/data/copy.py\n"))
    module = _code_lines((ROOT / path).read_text())
    assert _in_order(block, module), sorted(set(block) - set(module))


def test_the_docs_analysis_example_is_docs_interpret_example(tmp_path):
    block = _code_lines(
        _python_block("interpret.md", "import sys\n\nfrom transformer_lab import faithfulness")
    )
    script = _code_lines((ROOT / "docs" / "interpret_example.py").read_text())
    assert _in_order(block, script)
    overrides = ("model.num_layers=2", "model.num_heads=4", "data.test_size=256", "test=false")
    train(compose_train_config(tmp_path, *overrides))
    script, checkpoint = ROOT / "docs" / "interpret_example.py", tmp_path / "checkpoints" / "best.ckpt"
    result = subprocess.run(
        [sys.executable, str(script), str(checkpoint)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "acc with one head mean-ablated" in out and "without L1H0 and L1H2:" in out
    assert "accuracy read after the embedding and each block:" in out and "random" in out
