"""scripts/interpret.py on small checkpoints of every architecture: the JSON files and figures it writes,
its numbers against the analysis functions, and one-line errors."""

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import load_script, run_cli, save_task_checkpoint
from transformer_lab import interventions, load_model
from transformer_lab.cli import run
from transformer_lab.data import ReverseDataModule, SortDataModule

SMALL = dict(train_size=32, val_size=16, test_size=64, batch_size=16)
VOCAB = list("\n !:;?ABEIMORST")


@pytest.fixture(scope="module")
def script():
    return load_script("interpret")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("interpret")
    reverse, sort = ReverseDataModule(seq_len=6, **SMALL), SortDataModule(seq_len=6, **SMALL)
    variable = ReverseDataModule(arch="decoder", seq_len=5, min_seq_len=3, **SMALL)
    pre_norm = dict(norm_first=True, output_mlp=False)
    made = {
        "encoder": save_task_checkpoint(folder / "encoder.ckpt", reverse),
        "decoder": save_task_checkpoint(folder / "decoder.ckpt", variable, arch="decoder"),
        "encoder_decoder": save_task_checkpoint(
            folder / "encdec.ckpt", sort, arch="encoder_decoder", **pre_norm
        ),
    }
    text = dict(vocab=VOCAB, vocab_size=len(VOCAB), max_len=32, pad_id=None, bos_id=None, eos_id=None)
    lm = save_task_checkpoint(folder / "lm.ckpt", reverse, arch="decoder", **text, **pre_norm)
    checkpoint = torch.load(lm, weights_only=True)
    checkpoint["task"] = {"class": "transformer_lab.data.shakespeare.ShakespeareDataModule", "separator": ""}
    checkpoint.pop("datamodule_hyper_parameters")
    torch.save(checkpoint, lm)
    made["language_model"] = lm
    return made


def _json(folder: Path, name: str) -> dict:
    png = folder / f"{name}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    return json.loads((folder / f"{name}.json").read_text())


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder_decoder"])
def test_every_analysis_on_every_architecture(script, checkpoints, tmp_path, capsys, arch):
    path = checkpoints[arch]
    model = load_model(path)
    layers = len(interventions.attention_layers(model))
    for analysis in ("heads", "patching", "lens", "faithfulness"):
        script.main([f"ckpt_path={path}", f"analysis={analysis}", f"out_dir={tmp_path}", "num_examples=8"])
    out = capsys.readouterr().out

    heads = _json(tmp_path, "heads")
    assert heads["metric"] == "acc" and 0 <= heads["baseline"] <= 1
    assert len(heads["ablated"]) == layers and all(
        len(row) == model.config.num_heads for row in heads["ablated"]
    )
    assert "acc with one head zero-ablated" in out

    lens = _json(tmp_path, "lens")
    assert lens["metric"] == "acc" and len(lens["layers"]) == model.config.num_layers + 1
    task = ReverseDataModule if arch != "encoder_decoder" else SortDataModule
    inputs, labels = task(
        arch=arch,
        seq_len=6 if arch != "decoder" else 5,
        **({"min_seq_len": 3} if arch == "decoder" else {}),
        **SMALL,
    ).examples(8)
    with torch.no_grad():
        own = interventions.accuracy(model(*inputs), labels)
    assert lens["layers"][-1] == pytest.approx(own)  # the last reading is the model itself
    assert ("direct_logit_attribution" in lens) == (arch == "encoder_decoder")  # pre-norm, one Linear

    faithful = _json(tmp_path, "faithfulness")
    assert set(faithful["auc"]) == {"attention", "rollout", "gradient", "ablation", "random"}
    assert all(0 <= area <= 1 for area in faithful["auc"].values())

    patching = _json(tmp_path, "patching")
    assert len(patching["heads"]) == layers and patching["layers"] == interventions.attention_layers(model)
    assert set(patching["resid"]) == set(interventions.residual_hooks(model))
    for name, row in patching["resid"].items():
        if name.endswith("resid_pre") and name.startswith(("blocks.0.", "encoder.blocks.0.")):
            assert row[0] == pytest.approx(1.0, abs=1e-4)  # the changed token itself, before any layer


def test_head_set_and_mean_ablation(script, checkpoints, tmp_path, capsys):
    path = checkpoints["encoder"]
    script.main(
        [f"ckpt_path={path}", "analysis=heads", "method=mean", "heads=0.1,1.0", f"out_dir={tmp_path}"]
    )
    heads = _json(tmp_path, "heads")
    assert heads["method"] == "mean" and heads["set"]["names"] == ["L0H1", "L1H0"]
    assert "acc with L0H1, L1H0 ablated together" in capsys.readouterr().out


def test_language_model_text(script, checkpoints, tmp_path, capsys):
    path = checkpoints["language_model"]
    for analysis in ("lens", "faithfulness", "heads"):
        script.main(
            [f"ckpt_path={path}", f"analysis={analysis}", "text=ROMEO: IS IT SO?", f"out_dir={tmp_path}"]
        )
    lens = _json(tmp_path, "lens")
    assert len(lens["layers"]) == 3 and "direct_logit_attribution" in lens
    assert _json(tmp_path, "faithfulness")["fractions"][-1] == 1.0


def test_the_command_line(checkpoints, tmp_path):
    result = run_cli(
        "scripts/interpret.py", f"ckpt_path={checkpoints['encoder']}", "analysis=heads", f"out_dir={tmp_path}"
    )
    assert result.returncode == 0, result.stderr
    assert "Wrote heads.png and heads.json" in result.stdout and "heads took" in result.stdout


@pytest.mark.parametrize(
    ("which", "args", "message"),
    [
        (
            "encoder",
            ["analysis=heads", "heads=5.0"],
            "layer 5 is out of range: the model has attention layers 0 to 1",
        ),
        ("encoder", ["analysis=heads", "heads=0.7"], "head 7 is out of range: each layer has heads 0 to 1"),
        ("encoder", ["analysis=heads", "heads=first"], "heads=first is not a list of layer.head pairs"),
        ("encoder", ["analysis=heads", "num_examples=0"], "num_examples=0 must be a positive integer"),
        (
            "encoder",
            ["analysis=lens", "num_examples=999"],
            "num_examples=999 is more than the 64 test examples",
        ),
        ("encoder", ["analysis=circuits"], "analysis=circuits is unknown"),
        ("encoder", ["analysis=heads", "ci=high"], "ci=high must be a level between 0 and 1 such as 0.95"),
        ("encoder", ["analysis=lens", "ci=1"], "ci=1 must be a level between 0 and 1 such as 0.95"),
        ("encoder", ["analysis=heads", "method=half"], "method=half is unknown; use zero or mean"),
        ("encoder", ["analysis=lens", "method=mean"], "method= is for analysis=heads"),
        ("encoder", ["analysis=patching", "position=6"], "position=6 is not a source position; use 0 to 5"),
        ("encoder", ["analysis=lens", "text=1 2 3 4 5 6 7"], "text= has 7 tokens, more than the model's 6"),
        ("encoder", [], "missing analysis=...; use analysis=heads | patching | lens | faithfulness"),
    ],
)
def test_user_errors_are_one_line(script, checkpoints, tmp_path, capsys, which, args, message):
    with pytest.raises(SystemExit) as exit_info:
        run(script.main, [f"ckpt_path={checkpoints[which]}", "num_examples=8", *args, f"out_dir={tmp_path}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not list(tmp_path.iterdir())  # nothing written


def test_help(script, capsys):
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "analysis" in out and "heads | patching | lens | faithfulness" in out


def test_the_default_number_of_examples_fits_a_time_budget(monkeypatch, tmp_path, capsys):
    """Without num_examples=, heads and lens read as many examples as their passes fit in the budget on
    a laptop CPU, estimated from the model's size (here a budget so small that the fewest), and say so;
    num_examples= sets it. The same model gets the same default on any machine."""
    from transformer_lab.analysis import budget

    script = load_script("interpret")
    monkeypatch.setattr(budget, "SECONDS", 1e-9)
    script.main(["ckpt_path=pretrained:reverse_2l4h", "analysis=heads", f"out_dir={tmp_path}"])
    out = capsys.readouterr().out
    passes = 2 * 4 + 4  # each of the 8 heads removed, and the measures
    assert f"analysis=heads: {budget.FEWEST} examples, not 512 (about {passes} passes of " in out
    assert "MFLOP each, fit 1e-09 s on a laptop CPU; num_examples= sets it)" in out
    assert json.loads((tmp_path / "heads.json").read_text())  # the analysis ran on them
    script.main(
        ["ckpt_path=pretrained:reverse_2l4h", "analysis=lens", "num_examples=16", f"out_dir={tmp_path}"]
    )
    assert "examples, not" not in capsys.readouterr().out
    monkeypatch.setattr(budget, "SECONDS", 1e9)  # a fast machine: the usual 512
    script.main(["ckpt_path=pretrained:reverse_2l4h", "analysis=lens", f"out_dir={tmp_path}"])
    assert "examples, not" not in capsys.readouterr().out


def test_a_default_circuit_fits_its_budget_with_fewer_examples_then_fewer_checks(
    monkeypatch, tmp_path, capsys
):
    """Without num_examples= and verify=, analysis=circuit reads as many examples as its passes fit in its
    budget (at least the fewest an interval needs), then checks as many units as still fit, and says both;
    what is asked for runs as asked."""
    from transformer_lab import interpret_circuit
    from transformer_lab.analysis import budget

    script = load_script("interpret")
    monkeypatch.setattr(interpret_circuit, "SECONDS", 1e-9)
    script.main(["ckpt_path=pretrained:key_reverse", "analysis=circuit", f"out_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert f"analysis=circuit: {budget.FEWEST} examples, not 64 (about 50 passes of " in out
    assert f"analysis=circuit: verify=0, not 20 (one pass of the {budget.FEWEST} examples per unit" in out
    numbers = json.loads((tmp_path / "circuit.json").read_text())
    assert numbers["num_examples"] == budget.FEWEST and numbers["verified"] == 0 and numbers["ci"]
    script.main(["ckpt_path=pretrained:key_reverse", "analysis=circuit", "verify=3", f"out_dir={tmp_path}"])
    assert "verify=0" not in capsys.readouterr().out  # asked for: checked
    assert json.loads((tmp_path / "circuit.json").read_text())["verified"] == 3


def test_too_few_examples_give_no_interval_and_an_asked_one_is_refused(tmp_path, capsys):
    script = load_script("interpret")
    base = ["ckpt_path=pretrained:reverse_2l4h", "analysis=heads", "num_examples=4"]
    script.main([*base, f"out_dir={tmp_path}"])
    assert "(no intervals: 4 examples are too few for one; 8 or more give them)" in capsys.readouterr().out
    assert "ci" not in json.loads((tmp_path / "heads.json").read_text())
    with pytest.raises(SystemExit) as exit_info:
        run(script.main, [*base, "ci=0.9", f"out_dir={tmp_path / 'asked'}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "ci=0.9 needs at least 8 examples for an interval, and this analysis reads 4 examples" in err
    script.main([*base[:2], "num_examples=8", "ci=0.9", f"out_dir={tmp_path}"])
    assert json.loads((tmp_path / "heads.json").read_text())["ci"]["level"] == 0.9
