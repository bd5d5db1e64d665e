"""docs/features.md is run: every command of its `<!-- output -->` blocks (the SAE trained in full first)
and its Python table of every kind on every answer key, in a temporary directory, their output compared
with what the page shows (numbers within the tolerance each block states: 2% where only threads move
them, more where a figure moves with the CPU's kernels, as the page says). Minutes of training: in
`make reproduce`."""

import contextlib
import io
import re

import pytest

from tests.conftest import ROOT
from tests.pages import differences, printed_by, python_outputs, shown_outputs

PAGE = ROOT / "docs" / "features.md"


def test_the_page_links_and_names_what_exists():
    text = PAGE.read_text()
    for page in ("circuits.md", "hooks.md", "explorer.md", "interop.md", "training.md", "experiments.md"):
        assert f"]({page}" in text
    assert "features.md" in (ROOT / "README.md").read_text()
    for path in re.findall(
        r"`((?:nn|data|training|analysis|interop|explorer|figures)/[\w/]+\.(?:py|js))`", text
    ):
        assert (ROOT / "src" / "transformer_lab" / path).is_file(), path
    assert (ROOT / "scripts" / "bench_phases" / "sae.py").is_file()


@pytest.mark.reproduce
def test_the_page_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problems = []
    for commands, expected, tolerance in shown_outputs(PAGE):
        found = differences(expected, printed_by(commands, tmp_path, full=True), tolerance)
        problems += [f"{commands}\n{problem}" for problem in found]
    for code, expected, tolerance in python_outputs(PAGE):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(PAGE), "exec"), {})
        problems += differences(expected, printed.getvalue(), tolerance)
    assert not problems, "\n\n".join(problems)
