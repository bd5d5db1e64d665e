"""docs/dynamics.md is run: every command of the page (training commands with a few steps), and every
output it shows compared with a fresh run, numbers to the tolerance the page states: the analysis of the
shipped snapshots at every test run; the two training runs (minutes each) under `pytest -m reproduce`.
Also the shipped series itself: 32 snapshots, each checked, the last one the model of the record."""

import re

import pytest
import torch

import transformer_lab
from tests.conftest import ROOT
from tests.pages import differences, page_steps, printed_by, run_command, shown_outputs
from transformer_lab import load_model, pretrained, snapshots
from transformer_lab.errors import ConfigError
from transformer_lab.training.callbacks.snapshots import snapshot_steps

PAGE = ROOT / "docs" / "dynamics.md"


def _outputs(training: bool) -> list[tuple[list[str], str, float]]:
    return [
        (commands, text, tolerance)
        for commands, text, tolerance in shown_outputs(PAGE)
        if any(command.split()[1] == "train.py" for command in commands) == training
    ]


def test_the_page_shows_its_figures_and_is_linked():
    text = PAGE.read_text()
    for image in re.findall(r"\]\((dynamics/[^)]+\.png)\)", text):
        assert (PAGE.parent / image).is_file(), image
    assert len(re.findall(r"\]\((dynamics/[^)]+\.png)\)", text)) == 2
    assert "(dynamics.md)" in (ROOT / "docs" / "labs.md").read_text()
    assert "docs/dynamics.md" in (ROOT / "README.md").read_text()
    assert len(_outputs(training=False)) >= 1 and len(_outputs(training=True)) == 2


def test_every_command_of_the_page_runs(tmp_path, monkeypatch):
    """(Those whose output the next test compares are run there.)"""
    monkeypatch.chdir(tmp_path)
    compared = {command for commands, _, _ in _outputs(training=False) for command in commands}
    for kind, code, _ in page_steps(PAGE):
        if kind == "bash" and "<" not in code and code not in compared:
            run_command(code, tmp_path)


def test_the_analysis_of_the_shipped_snapshots_is_what_the_page_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problems = []
    for commands, expected, tolerance in _outputs(training=False):
        problems += differences(expected, printed_by(commands, tmp_path, full=True), tolerance)
    assert not problems, "\n\n".join(problems)


@pytest.mark.reproduce
def test_the_two_reproductions_give_the_numbers_the_page_shows(tmp_path, monkeypatch):
    """python train.py experiment=induction_heads and experiment=grokking in full (minutes each), then
    their analysis over time, compared to the tolerance the page states."""
    monkeypatch.chdir(tmp_path)
    problems = []
    for commands, expected, tolerance in _outputs(training=True):
        problems += differences(expected, printed_by(commands, tmp_path, full=True), tolerance)
    assert not problems, "\n\n".join(problems)


def test_the_shipped_series_is_32_checked_snapshots_ending_with_the_model():
    found = snapshots.find("pretrained:induction_heads")
    record = pretrained.record("induction_heads")
    assert [s.step for s in found] == snapshot_steps(3000, 32) and len(record["snapshots"]["sha256"]) == 32
    assert sum(s.path.stat().st_size for s in found) == record["snapshots"]["size_bytes"] < 4e6
    assert found[-1].path == pretrained.path("induction_heads")  # load_model gives the final snapshot
    final, first = load_model("pretrained:induction_heads"), transformer_lab.load(found[0].path).model
    assert not final.config.mlp and final.config.num_layers == 2
    tokens = torch.arange(32).repeat(2)[None, :47]  # 0..31 and its first 15 again: the repeat is copied
    with torch.no_grad():
        copied = (final(tokens)[0, 32:46].argmax(-1) == tokens[0, 33:47]).float().mean()
        guessed = (first(tokens)[0, 32:46].argmax(-1) == tokens[0, 33:47]).float().mean()
    assert copied > 0.9 and guessed < 0.1  # 13 of the 14 repeated tokens; none before training


def test_a_damaged_snapshot_of_the_series_is_refused(tmp_path, monkeypatch):
    copy = tmp_path / "pretrained"
    (copy / "induction_heads").mkdir(parents=True)
    (copy / "models.json").write_text(pretrained.RECORDS.read_text())
    for snapshot in snapshots.find("pretrained:induction_heads"):
        (copy / "induction_heads" / snapshot.path.name).write_bytes(snapshot.path.read_bytes())
    damaged = copy / "induction_heads" / "step_00000001.ckpt"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    monkeypatch.setattr(pretrained, "DIRECTORY", copy)
    monkeypatch.setattr(pretrained, "RECORDS", copy / "models.json")
    with pytest.raises(ConfigError, match=r"'induction_heads''s snapshot .*step_00000001.ckpt has sha256"):
        snapshots.find("pretrained:induction_heads")
    assert load_model("pretrained:induction_heads") is not None  # the final weights are untouched
