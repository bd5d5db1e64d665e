"""docs/text.md is run: its Python block (a folder of files made from the shipped Tiny Shakespeare) and every
command (training with a few steps); the corpus lines a run prints (files, tokenizer, token file, split)
are compared with the page at every test run; the page's whole outputs (a full run of experiment=text_small,
minutes) under `pytest -m reproduce`. Throughputs (MB/s, tokens/s) are the machine's and are not compared."""

import re

import pytest

from tests.conftest import ROOT
from tests.pages import differences, page_steps, printed_by, run_command, shown_outputs

PAGE = ROOT / "docs" / "text.md"
RATE = re.compile(r"[\d.]+ (?:MB/s|[KM] tokens/s|tokens/s)")
CORPUS_LINES = ("Corpus: ", "Tokenizer: ", "Tokens: ", "val: ")
BENCH = "scripts/bench.py"  # its text phase takes minutes (400 MB of text): the page quotes its figures


def _without_rates(text: str) -> str:
    """The text without throughputs, nor the line Lightning writes to the console (`Trainer.fit` stopped),
    which the in-process run's capture does not see."""
    lines = [line for line in text.splitlines() if not line.startswith("`Trainer.fit` stopped")]
    return RATE.sub("<rate>", "\n".join(lines))


def _make_the_folder(tmp_path) -> None:
    """The page's Python block: the folder of files every command reads."""
    (_, code, _), *_ = [step for step in page_steps(PAGE) if step[0] == "python"]
    exec(compile(code, str(PAGE), "exec"), {})


def test_the_page_is_linked_and_shows_its_outputs():
    text = PAGE.read_text()
    assert "docs/text.md" in (ROOT / "README.md").read_text()
    commands = [command for commands, _, _ in shown_outputs(PAGE) for command in commands]
    assert any("train.py experiment=text_small" in c for c in commands)
    assert "python -m transformer_lab.sample ckpt_path=saved_models/text_small" in text  # words: not compared
    assert any("transformer_lab.interpret" in c for c in commands)
    assert "python scripts/bench.py --phases text" in text  # the memory figures and how to measure them


def test_every_command_of_the_page_runs_and_prints_the_corpus_lines_it_shows(tmp_path, monkeypatch):
    """In the page's order, training with a few steps (all but the benchmark); the lines a run prints
    about its corpus are the page's (they do not depend on the number of steps)."""
    monkeypatch.chdir(tmp_path)
    _make_the_folder(tmp_path)
    ((train, *_), shown, _) = next(o for o in shown_outputs(PAGE) if "train.py" in o[0][0])
    printed = printed_by([train], tmp_path, full=False)
    expected = [line for line in shown.splitlines() if line.startswith(CORPUS_LINES)]
    got = [line for line in printed.splitlines() if line.startswith(CORPUS_LINES)]
    assert len(expected) == 4 and not differences(
        _without_rates("\n".join(expected)), _without_rates("\n".join(got)), 0
    )
    for kind, code, _ in page_steps(PAGE):
        if kind == "bash" and "<" not in code and code != train and BENCH not in code:
            run_command(code, tmp_path)
    assert (tmp_path / "saved_models" / "text_small" / "tokenizer.json").is_file()


@pytest.mark.reproduce
def test_the_page_shows_what_a_full_run_prints(tmp_path, monkeypatch):
    """python train.py experiment=text_small in full (minutes), then the analysis, compared
    with the page to the tolerance it states."""
    monkeypatch.chdir(tmp_path)
    _make_the_folder(tmp_path)
    problems = []
    for commands, expected, tolerance in shown_outputs(PAGE):
        printed = printed_by(commands, tmp_path, full=True)
        problems += differences(_without_rates(expected), _without_rates(printed), tolerance)
    assert not problems, "\n\n".join(problems)
