"""docs/labs.md is run, in the page's order: every command of its bash blocks (training commands with a few
steps instead of thousands, files written under a temporary directory), and every Python block, whose
output must be the text block under it unless it reads a run that the page trains."""

import contextlib
import io
import re

from tests.conftest import ROOT
from tests.pages import page_steps, run_command

PAGE = ROOT / "docs" / "labs.md"


def test_the_page_has_an_answer_for_each_lab_question():
    text = PAGE.read_text()
    assert len(re.findall(r"^## \d\. ", text, re.M)) == 9
    assert text.count("**Answer.**") == 8  # the 8th section draws its answer
    steps = page_steps(PAGE)
    assert sum(kind == "bash" for kind, _, _ in steps) >= 20
    for image in re.findall(r"\]\((labs/[^)]+\.png)\)", text):
        assert (PAGE.parent / image).is_file(), image


def test_every_command_and_example_of_the_page_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what the page writes and reads (saved_models/, explain_out/, ...) is in tmp
    for kind, code, expected in page_steps(PAGE):
        if kind == "bash":
            run_command(code, tmp_path)
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(PAGE), "exec"), {})
        if expected is not None and "saved_models/" not in code:
            assert printed.getvalue() == expected, code
