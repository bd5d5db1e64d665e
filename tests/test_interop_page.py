"""docs/interop.md is run: every command and Python block of the page, in its order, in one temporary
folder (the exports the later steps open are the earlier steps' files), every output it shows compared
with a fresh run; every refusal its table shows is one a test asserts; the page is linked."""

import contextlib
import io
import re

import pytest

from tests.conftest import ROOT
from tests.pages import differences, page_steps, run_command, shown_outputs

PAGE = ROOT / "docs" / "interop.md"
TESTS = ("test_export.py", "test_hf_import.py", "test_files_from_elsewhere.py")


@pytest.mark.usefixtures("offline")
def test_every_step_of_the_page_runs_and_prints_what_it_shows(tmp_path, monkeypatch):
    for module in ("transformers", "onnxruntime", "tokenizers", "safetensors"):
        pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)
    shown = {tuple(commands): (text, tolerance) for commands, text, tolerance in shown_outputs(PAGE)}
    problems, compared = [], 0
    for kind, code, after in page_steps(PAGE):
        out = io.StringIO()  # what the step prints on stdout, as a terminal shows it
        with contextlib.redirect_stdout(out):
            if kind == "bash":
                run_command(code, tmp_path)
            else:
                exec(compile(code, str(PAGE), "exec"), {"__name__": "__main__"})
        expected, tolerance = shown.get((code,), (after, 0.0)) if kind == "bash" else (after, 0.0)
        if expected is not None:
            problems += differences(expected, out.getvalue(), tolerance)
            compared += 1
    assert not problems, "\n\n".join(problems)
    assert compared == len(shown) + 2 == 7  # the five outputs of commands and two of Python blocks
    assert (tmp_path / "tiny-gpt2.html").stat().st_size > 10_000


def test_every_refusal_the_page_shows_is_asserted_by_a_test():
    """Each row's message (the longest piece of it between placeholders and parentheses) is in a test."""
    page = PAGE.read_text()
    table = page.split("## What each format cannot hold")[1].split("\n## ")[0]
    lines = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| you")]
    cells = [line.rsplit(" | ", 1)[1] for line in lines]
    rows = [re.findall(r"`([^`]+)`", cell)[0] for cell in cells]
    assert len(rows) >= 9
    sources = "".join((ROOT / "tests" / name).read_text() for name in TESTS)
    for message in rows:
        pieces = re.split(r"\(|\)|\.\.\.|<folder>|;", message)
        longest = max((p.strip(" :/,") for p in pieces), key=len)
        assert longest in sources, (longest, message)


def test_the_page_is_linked_from_the_readme_and_the_troubleshooting_page():
    assert "(docs/interop.md)" in (ROOT / "README.md").read_text()
    assert "(interop.md)" in (ROOT / "docs" / "troubleshooting.md").read_text()
