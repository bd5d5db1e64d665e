"""docs/dynamics.md is run: every command of the page (training commands with a few steps), and the
output of the analysis of the shipped snapshots compared with a fresh run, numbers to the tolerance the
page states. Under `pytest -m reproduce` (make reproduce) the page's induction sweeps in full, checked
against the ranges the page lists: the one-layer control without an event, the two-layer runs' phase
change in its range (grokking's sweep and the controls: test_dynamics_grokking.py and
test_dynamics_controls.py). Also the shipped series itself: 32 snapshots, each checked, the last one the
model of the record."""

import re
import statistics

import pytest
import torch

import transformer_lab
from tests.conftest import ROOT
from tests.dynamics_runs import CONTROL_SEED, INDUCTION_STEPS, PAGE, sweep, within
from tests.pages import differences, page_steps, printed_by, run_command, shown_outputs
from transformer_lab import load_model, pretrained, snapshots
from transformer_lab.analysis import controls
from transformer_lab.errors import ConfigError
from transformer_lab.training.callbacks.snapshots import snapshot_steps


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
    assert len(re.findall(r"\]\((dynamics/[^)]+\.png)\)", text)) == 4
    assert "(dynamics.md)" in (ROOT / "docs" / "labs.md").read_text()
    assert "docs/dynamics.md" in (ROOT / "README.md").read_text()
    # training is not the same bit for bit on another machine: its outputs are shown, not compared
    assert len(_outputs(training=False)) >= 1 and len(_outputs(training=True)) == 0


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


# What make reproduce checks, as the page lists it (the ranges: dynamics_runs.INDUCTION_STEPS, GROKKING_STEPS)
CHECKED = [
    "its final induction score below 0.1 and its test accuracy below 0.2 in every",
    "val/loss phase change in at least 4 of 5 seeds, half way between steps\n800 and 1600",
    "induction-score event in at least 4 of 5 seeds with its median half way between steps\n800 and 1600",
    "a final induction score above 0.5 in at least 4 of 5 seeds",
    "val/acc phase change in every seed, half way between steps 2000 and 4500",
    "an event of the held-out accuracy in every seed",
    "the Fourier sparsity more than ten standard deviations above that of 200 Gaussian embeddings",
    "between 3 and 12 key frequencies in the final embedding of every seed",
    "no event in any control that its control does not name",
]


def test_the_page_states_what_is_checked():
    text = PAGE.read_text()
    for phrase in CHECKED:
        assert " ".join(phrase.split()) in " ".join(text.split()), phrase


def test_the_page_trains_every_control_of_the_library():
    """Each control of `analysis.controls` is a command of the page (1 seed, at the lab's sizes) into
    saved_models/controls/<its name>, and the page analyses that folder."""
    commands = [c for kind, c, _ in page_steps(PAGE) if kind == "bash"]
    for control in controls.CONTROLS:
        where = f"hydra.run.dir=saved_models/controls/{control.name}"
        expected = f"python train.py {control.overrides} seed={CONTROL_SEED} threads=1 {where}"
        assert expected in commands, expected
    assert "python -m transformer_lab.interpret ckpt_path=saved_models/controls analysis=controls" in commands


@pytest.mark.reproduce
def test_the_control_has_no_phase_change_and_two_layers_have_one(trained):
    control, control_dynamics = sweep(trained, "induction_control")
    assert len(control) == 5 and all(m["phase_change"]["step"] is None for m in control)
    assert control_dynamics["events"] == [] and all(m["test/acc"] < 0.2 for m in control)
    assert all(run["scores"]["induction"][-1] < 0.1 for run in control_dynamics["runs"].values())

    runs, dynamics = sweep(trained, "induction_heads")
    assert sum(within(m["phase_change"]["step"], INDUCTION_STEPS) for m in runs) >= 4
    (induction,) = [e for e in dynamics["events"] if e["curve"] == "induction"]
    assert induction["seeds"] >= 4 and within(statistics.median(induction["steps"]), INDUCTION_STEPS)
    assert sum(run["scores"]["induction"][-1] > 0.5 for run in dynamics["runs"].values()) >= 4


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
