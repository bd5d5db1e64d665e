"""docs/circuits.md is run: every command of its `<!-- output -->` blocks and every Python block, in a
temporary directory, their output compared with the text the page shows (numbers within the tolerance it
states; 2% for a Python block that states none: threads move last digits), and the figures it shows
exist. About a minute (exact patching of Shakespeare's 532 edges among it): in `make reproduce`, with the
page's training runs."""

import contextlib
import io
import re

import pytest

from tests.conftest import ROOT
from tests.pages import differences, printed_by, python_outputs, shown_outputs

PAGE = ROOT / "docs" / "circuits.md"


def prints_what_the_page_shows(code: str, expected: str, tolerance: float) -> list[str]:
    """A Python block run in-process; its output against the text block after it (numbers within the
    tolerance the page states, 2% by default)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(PAGE), "exec"), {})
    return [f"{code[:60]}...\n{p}" for p in differences(expected, printed.getvalue(), tolerance)]


def test_the_page_shows_its_figures_and_links():
    text = PAGE.read_text()
    for image in re.findall(r"\]\((circuits/[^)]+\.png)\)", text):
        assert (PAGE.parent / image).is_file(), image
    for page in ("interpret.md", "hooks.md", "labs.md", "performance.md"):
        assert f"]({page}" in text
    assert (
        "circuits.md" in (ROOT / "README.md").read_text()
        and "circuits.md" in (ROOT / "docs/labs.md").read_text()
    )


@pytest.mark.reproduce
def test_the_page_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problems = []
    for commands, expected, tolerance in shown_outputs(PAGE):
        if any(command.split()[1] == "train.py" for command in commands):
            continue  # trained in full: test_the_trained_runs_of_the_page_reproduce_its_numbers
        found = differences(expected, printed_by(commands, tmp_path, full=False), tolerance)
        problems += [f"{commands}\n{problem}" for problem in found]
    for code, expected, tolerance in python_outputs(PAGE):
        problems += prints_what_the_page_shows(code, expected, tolerance)
    assert not problems, "\n\n".join(problems)
    assert (tmp_path / "interpret_out" / "shakespeare" / "circuit.svg").is_file()


@pytest.mark.reproduce
def test_the_trained_runs_of_the_page_reproduce_its_numbers(tmp_path, monkeypatch):
    """The pre-norm reverse and sort models, trained in full (minutes: pytest -m reproduce), then their
    circuits, to the tolerance the page states."""
    monkeypatch.chdir(tmp_path)
    problems = []
    for commands, expected, tolerance in shown_outputs(PAGE):
        if any(command.split()[1] == "train.py" for command in commands):
            found = differences(expected, printed_by(commands, tmp_path, full=True), tolerance)
            problems += [f"{commands}\n{problem}" for problem in found]
    assert not problems, "\n\n".join(problems)
