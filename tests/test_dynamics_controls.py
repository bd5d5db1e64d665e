"""docs/dynamics.md's library of negative controls trained in full and analysed (`make reproduce`): no
event that a control does not name, the margins printed (its own file so that it trains beside the
page's other runs: dynamics_runs.py)."""

import contextlib
import io
import json

import pytest

import transformer_lab
from tests.conftest import load_script
from transformer_lab.analysis import controls

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
    """Every control of the page trained in full, then analysis=controls: no event that its control
    does not name, in any curve the analysis judges (the loss, the accuracy, the task's scores and each
    head's every measure of formation its task has); the table of margins printed."""
    for control in controls.CONTROLS:
        trained(f"controls/{control.name}")
    folder = trained.root / "saved_models" / "controls"
    out = trained.root / "controls_out"
    printed = io.StringIO()
    with contextlib.chdir(trained.root), contextlib.redirect_stdout(printed):
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
