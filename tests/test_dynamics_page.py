"""docs/dynamics.md is run: every command of the page (training commands with a few steps), and the
output of the analysis of the shipped snapshots compared with a fresh run, numbers to the tolerance the
page states. Under `pytest -m reproduce` (make reproduce, ~30 minutes) the page's seed sweeps in full,
checked against the ranges and orders the page lists: the one-layer control without an event, the
two-layer runs' phase change in its range, grokking's order in every seed. Also the shipped series
itself: 32 snapshots, each checked, the last one the model of the record."""

import contextlib
import io
import json
import os
import re
import shutil
import statistics
from pathlib import Path

import pytest
import torch

import transformer_lab
from tests.conftest import ROOT, load_script
from tests.pages import differences, page_steps, printed_by, run_command, shown_outputs
from transformer_lab import load_model, pretrained, snapshots
from transformer_lab.analysis import controls, events, grokking
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


# What make reproduce checks, as the page lists it (test_the_page_states_what_is_checked ties the two)
INDUCTION_STEPS = (800, 1600)  # the 2-layer runs' phase change, half way
GROKKING_STEPS = (2000, 4500)  # the held-out accuracy's phase change, half way
CHECKED = [
    "its final induction score below 0.1 and its test accuracy below 0.2 in every",
    "val/loss phase change in at least 4 of 5 seeds, half way between steps\n800 and 1600",
    "induction-score event in at least 4 of 5 seeds with its median half way between steps\n800 and 1600",
    "a final induction score above 0.5 in at least 4 of 5 seeds",
    "val/acc phase change in every seed, half way between steps 2000 and 4500",
    "an event of the held-out accuracy in every seed",
    "the Fourier sparsity out of its chance region by the snapshot where that event begins",
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


CONTROL_SEED = 1  # the seed of every control: the one-layer control is the one-layer sweep's seed-1 run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The page's training commands in full, each run once for the module's tests (the one-layer sweep
    serves the control test too): `trained(name)` -> the folder saved_models/<name>."""
    root = tmp_path_factory.mktemp("page")
    done: set[str] = set()

    def train_(name: str) -> Path:
        if name not in done:
            (command,) = [
                c
                for kind, c, _ in page_steps(PAGE)
                if "python train.py" in c and f"=saved_models/{name} " in c + " "
            ]  # the block that trains it (others analyse it)
            with _working_in(root):
                run_command(command, root, full=True)
            done.add(name)
        return root / "saved_models" / name

    train_.root = root
    return train_


@contextlib.contextmanager
def _working_in(folder: Path):
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _sweep(trained, name: str) -> tuple[list[dict], dict]:
    """The page's sweep into saved_models/<name> in full, then analysis=dynamics over it: (each run's
    metrics.json, dynamics.json)."""
    sweep = trained(name)
    out = trained.root / f"dynamics_{name}"
    with _working_in(trained.root):
        load_script("interpret").main([f"ckpt_path={sweep}", "analysis=dynamics", f"out_dir={out}"])
    runs = sorted(sweep.glob("[0-9]*/metrics.json"), key=lambda p: int(p.parent.name))
    return [json.loads(p.read_text()) for p in runs], json.loads((out / "dynamics.json").read_text())


def _within(step: float | None, span: tuple[int, int]) -> bool:
    return step is not None and span[0] <= step <= span[1]


@pytest.mark.reproduce
def test_the_control_has_no_phase_change_and_two_layers_have_one(trained):
    control, control_dynamics = _sweep(trained, "induction_control")
    assert len(control) == 5 and all(m["phase_change"]["step"] is None for m in control)
    assert control_dynamics["events"] == [] and all(m["test/acc"] < 0.2 for m in control)
    assert all(run["scores"]["induction"][-1] < 0.1 for run in control_dynamics["runs"].values())

    runs, dynamics = _sweep(trained, "induction_heads")
    assert sum(_within(m["phase_change"]["step"], INDUCTION_STEPS) for m in runs) >= 4
    (induction,) = [e for e in dynamics["events"] if e["curve"] == "induction"]
    assert induction["seeds"] >= 4 and _within(statistics.median(induction["steps"]), INDUCTION_STEPS)
    assert sum(run["scores"]["induction"][-1] > 0.5 for run in dynamics["runs"].values()) >= 4


@pytest.mark.reproduce
def test_grokking_forms_its_circuit_before_its_phase_change_in_every_seed(trained):
    """The held-out accuracy's event in every seed, and by the snapshot where it begins the Fourier
    sparsity has left its chance region: the circuit forms before the phase change shows it (a value at
    an event's step, not an order of half-way points, which only two events could give)."""
    runs, dynamics = _sweep(trained, "grokking")
    assert len(runs) == 3 and all(_within(m["phase_change"]["step"], GROKKING_STEPS) for m in runs)
    for name, run in dynamics["runs"].items():
        (acc,) = [e for e in run["events"] if e["curve"] == "acc"]
        begins = run["steps"].index(acc["start"])
        sparsity, scale = run["scores"]["fourier_sparsity"][begins], run["scales"]["fourier_sparsity"]
        assert sparsity >= scale["chance"] + events.CHANCE * scale["size"], name
    for run_dir in sorted((trained("grokking")).glob("[0-9]*")):
        checkpoint = transformer_lab.load(str(run_dir / "checkpoints" / "snapshots" / "step_00006000.ckpt"))
        found = grokking.key_frequencies(grokking.token_embeddings(checkpoint.model, checkpoint.task.p))
        assert 3 <= len(found) <= 12, (run_dir.name, found)


FORMATION = {
    "one_layer": {"induction", "previous_token"},
    "lr_tenth": {"induction", "previous_token"},
    "steps_600": {"induction", "previous_token"},
    "reverse": {"alignment"},
    "no_decay": set(),
    "shuffled_labels": set(),
}  # fmt: skip  (the measures of formation each control's task has)


@pytest.mark.reproduce
def test_no_control_has_an_event_and_the_margins_are_printed(trained, capsys):
    """Every control of the page trained in full (the one-layer control is the one-layer sweep's seed-1
    run, trained once), then analysis=controls: no event that its control does not name, in any curve
    the analysis judges (the loss, the accuracy, the task's scores and each head's every measure of
    formation its task has); the table of margins printed."""
    _sweep(trained, "induction_control")
    folder = trained.root / "saved_models" / "controls"
    shutil.copytree(trained("induction_control") / str(CONTROL_SEED), folder / "one_layer")
    for control in controls.CONTROLS[1:]:
        trained(f"controls/{control.name}")
    out = trained.root / "controls_out"
    printed = io.StringIO()
    with _working_in(trained.root), contextlib.redirect_stdout(printed):
        load_script("interpret").main([f"ckpt_path={folder}", "analysis=controls", f"out_dir={out}"])
    record = json.loads((out / "controls.json").read_text())
    assert list(record) == [control.name for control in controls.CONTROLS]
    for name, run in record.items():
        assert run["unexpected"] == [], (name, [e["what"] for e in run["unexpected"]])
        config = transformer_lab.load(str(folder / name)).config
        per_head = [c.split(" ", 1) for c in run["curves"] if c.split(" ", 1)[0][:1] in "LED" and " " in c]
        for measure in FORMATION[name]:
            count = sum(m == measure for _, m in per_head)
            assert count == config.num_layers * config.num_heads, (name, measure, count)
        assert {m for _, m in per_head} == FORMATION[name] and {"loss", "acc"} <= set(run["curves"]), name
    with capsys.disabled():
        print("\n" + printed.getvalue().split("Controls:", 1)[1])


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
