"""The docs' examples are the code the tests run: the hook-point and analysis examples (docs/*.py) and
the "Add your own task" module (tests/toy_task/copy_task.py, trained by tests/test_own_task.py)."""

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.pages import differences, page_steps, printed_by, run_command, shown_outputs, unread_markers


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


def _run(script: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / script)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_docs_hook_example_is_docs_hooks_example_and_prints_what_the_page_shows():
    block = _code_lines(_python_block("hooks.md", "import torch\n\nfrom transformer_lab import load_model\n"))
    script = _code_lines((ROOT / "docs" / "hooks_example.py").read_text())
    assert _in_order(block, script)
    page = (ROOT / "docs" / "hooks.md").read_text()
    shown = re.search(r"```python\nimport torch.*?```\n\n```\n(.*?)```", page, re.S).group(1)
    assert _run("hooks_example.py") == shown


@pytest.mark.parametrize("path", ["tests/toy_task/copy_task.py"])
def test_the_docs_task_is_the_task_the_tests_train(path):
    block = _code_lines(_python_block("own_task.md", "# my_tasks/copy_task.py\n"))
    module = _code_lines((ROOT / path).read_text())
    assert _in_order(block, module), sorted(set(block) - set(module))


def test_the_docs_analysis_example_is_docs_interpret_example():
    start = "import transformer_lab\nfrom transformer_lab.analysis"
    block = _code_lines(_python_block("interpret.md", start))
    script = _code_lines((ROOT / "docs" / "interpret_example.py").read_text())
    assert _in_order(block, script)
    out = _run("interpret_example.py")
    assert "acc with one head mean-ablated" in out and "without L1H0 and L1H2: 0.62" in out
    assert "restored by patching each head: [[0.01, 0.01, 0.02, 0.03], [0.1, 0.18, 0.32, 0.16]]" in out
    assert "accuracy read after the embedding and each block:" in out and "random" in out


def test_every_command_of_the_readme_works(tmp_path, monkeypatch):
    """The README's commands as a user types them (training with a few steps), in a temporary directory;
    `make`, `tensorboard` and `source` are the shell's."""
    monkeypatch.chdir(tmp_path)
    commands = [code for kind, code, _ in page_steps(ROOT / "README.md") if kind == "bash"]
    assert len(commands) >= 8
    for command in commands:
        run_command(command, tmp_path)
    assert (tmp_path / "explorer.html").stat().st_size > 10_000
    assert (tmp_path / "interpret_out" / "heads.json").is_file()
    assert (tmp_path / "explain_out" / "attention_grid.png").is_file()


OUTPUT_PAGES = ["labs.md", "interpret.md", "explain.md", "hooks.md", "pretrained.md", "architectures.md"]


def _checked(page: str, training: bool) -> list[tuple[list[str], str, float]]:
    """The outputs a page shows (see tests/pages.py), those that need a training run or those that do not."""
    return [
        (commands, text, tolerance)
        for commands, text, tolerance in shown_outputs(ROOT / "docs" / page)
        if any(command.split()[1] == "train.py" for command in commands) == training
    ]


def test_every_output_marker_of_the_docs_is_read():
    """A `<!-- output -->` marker between the wrong blocks, or holding `-->` early, would leave its
    output unchecked."""
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    assert {page.name: unread_markers(page) for page in pages if unread_markers(page)} == {}


@pytest.mark.parametrize("page", OUTPUT_PAGES)
def test_the_outputs_a_page_shows_are_what_its_commands_print(page, tmp_path, monkeypatch):
    """Every `<!-- output -->` block of a page (tools on the ready-made models: seconds each) is what its
    commands print now, numbers to the tolerance the page states."""
    monkeypatch.chdir(tmp_path)
    problems = []
    for commands, expected, tolerance in _checked(page, training=False):
        assert not any("<" in command for command in commands), commands  # runnable as shown
        found = differences(expected, printed_by(commands, tmp_path, full=True), tolerance)
        problems += [f"{page}: {commands}\n{problem}" for problem in found]
    assert not problems, "\n\n".join(problems)


@pytest.mark.reproduce
@pytest.mark.parametrize("page", OUTPUT_PAGES)
def test_the_training_runs_of_a_page_reproduce_its_numbers(page, tmp_path, monkeypatch):
    """The outputs that need a whole training run (minutes: `pytest -m reproduce`, which CI runs after
    the suite): trained in full, then compared to the tolerance the page states."""
    monkeypatch.chdir(tmp_path)
    problems = []
    for commands, expected, tolerance in _checked(page, training=True):
        found = differences(expected, printed_by(commands, tmp_path, full=True), tolerance)
        problems += [f"{page}: {commands}\n{problem}" for problem in found]
    assert not problems, "\n\n".join(problems)


def test_the_notebook_runs_and_shows_the_explorer_inline():
    """docs/tour.ipynb, executed headlessly as Jupyter would: every cell runs, the numbers it prints are
    the model's, and the last cell displays the explorer as an inline iframe."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(ROOT / "docs" / "tour.ipynb", as_version=4)
    assert not any(
        cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"
    )  # shipped clean
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": ROOT}}
    ).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    printed = ["".join(o.get("text", "") for o in cell.outputs) for cell in code]
    assert printed[0].startswith(
        "2 layers, 4 heads, model_dim 32 | 4 1 4 5 9 9 4 9 9 2 4 7 5 5 4 1 -> 1 4 5 5"
    )
    assert printed[1].startswith("(1, 4, 16, 16) - query 0 of L1H0 reads key 15")  # the mirror position
    assert printed[2].splitlines()[0] == "all heads 1.0" and printed[2].count("L") == 2
    (shown,) = [o for o in code[-1].outputs if o.output_type == "execute_result"]
    assert shown.data["text/html"].startswith("<iframe srcdoc=")
