"""Per-head measures, registered once (transformer_lab.analysis.measures): every tool iterates the
registry, so a measure registered outside the package (tests/extensions/first_token.py) appears in
`interpret analysis=heads`, in `dynamics.json`, in the `heads/` TensorBoard scalars and in the explorer's
data, with no file of the package edited."""

import importlib
import json
import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import compose_train_config, fit_with_callback, load_script
from transformer_lab import load
from transformer_lab.analysis import measures
from transformer_lab.data import ReverseDataModule
from transformer_lab.errors import ConfigError
from transformer_lab.explorer import explore
from transformer_lab.train import train
from transformer_lab.training.callbacks import HeadMetricsCallback


@pytest.fixture
def first_token():
    """The measure of tests/extensions/first_token.py, registered for the test and removed after it."""
    module = importlib.reload(importlib.import_module("tests.extensions.first_token"))
    yield module
    measures.MEASURES.pop("first_token", None)


def test_the_measures_of_every_model_are_registered_once_with_a_direction_and_a_description():
    assert list(measures.MEASURES)[:3] == ["entropy", "alignment", "ablation"]
    for measure in measures.MEASURES.values():
        assert measure.direction in ("rise", "fall") and measure.description and measure.scale is not None
    assert [m.name for m in measures.applicable()] == ["entropy", "alignment", "ablation"]
    own = type("Own", (), {"measures": ("induction",)})()
    assert [m.name for m in measures.applicable(own)] == ["entropy", "alignment", "ablation", "induction"]
    with pytest.raises(ConfigError, match=r"measure \['nope'\] is unknown here; the measures are entropy"):
        measures.applicable(names=["nope"])
    with pytest.raises(ConfigError, match="direction='up' must be rise or fall"):
        measures.register("x", "up", "", scale=1.0)
    with pytest.raises(TypeError, match="scale"):  # every measure says its scale
        measures.register("x", "rise", "")
    with pytest.raises(ConfigError, match=r"measure x: scale=-1 must be a number >= 0 .* measures.UNIFORM"):
        measures.register("x", "rise", "", scale=-1)
    assert "x" not in measures.MEASURES


def test_each_measure_has_its_scale_and_its_chance_under_uniform_attention():
    """`measures.scales`: an attention score on 1 with the chance of a head attending uniformly to the
    keys it may see (queries zeroed: causal rows of the induction model), the entropy on that head's own
    entropy (log(t + 1) per row), the ablated accuracy with the chance of a uniform guess (1 / V)."""
    checkpoint = load("pretrained:induction_heads")
    inputs, labels = checkpoint.examples(16)
    heads = measures.Heads(checkpoint.model, inputs, labels, checkpoint.task)
    found = measures.scales(heads, measures.applicable(checkpoint.task))
    T = inputs[0].size(1)
    uniform_previous = sum(1 / (t + 1) for t in range(1, T)) / (T - 1)
    entropy = sum(math.log(t + 1) for t in range(T)) / T
    for layer in range(2):
        for head in range(2):
            previous, induction = found["previous_token"][layer][head], found["induction"][layer][head]
            assert previous.size == 1.0 and previous.chance == pytest.approx(uniform_previous, rel=1e-4)
            assert induction.size == 1.0 and 0.01 < induction.chance < 0.1
            scale = found["entropy"][layer][head]
            assert scale.size == scale.chance == pytest.approx(entropy, rel=1e-4)
            assert found["ablation"][layer][head].chance == pytest.approx(1 / 32)
    assert "alignment" not in found  # the induction task defines none
    trained = heads.measure()  # the trained heads are far from uniform: the scales read another pass
    assert max(v for row in trained["induction"] for v in row) > 0.5


def test_a_measure_computes_what_it_says_on_a_hand_made_pattern(first_token):
    """Known answers: a head that reads only the first token scores 1, a uniform head 1/T; the per-head
    loop gives [layer][head], the patterns of one forward pass shared by every measure."""
    checkpoint = load("pretrained:reverse_2l4h")
    inputs, labels = checkpoint.examples(8)
    heads = measures.Heads(checkpoint.model, inputs, labels, checkpoint.task)
    layer = heads.layers[0]
    T = inputs[0].size(1)
    first = torch.zeros(8, 4, T, T)
    first[..., 0] = 1.0
    uniform = torch.full((8, 4, T, T), 1.0 / T)
    table = heads.per_layer(
        lambda p, _: p[..., 0].mean(dim=(0, 2)), lambda lay: first if lay == layer else uniform
    )
    assert table[0] == [1.0] * 4 and table[1] == pytest.approx([1.0 / T] * 4)
    values = heads.measure()
    assert list(values) == ["entropy", "alignment", "ablation", "first_token"]
    assert len(values["first_token"]) == 2 and len(values["first_token"][0]) == 4
    patterns = heads.cache["run"][1]
    for i, lay in enumerate(heads.layers):
        pattern = patterns[f"{lay.name}.hook_pattern"]
        assert values["first_token"][i] == pytest.approx(pattern[..., 0].mean(dim=(0, 2)).tolist())
        mask = inputs[lay.queries] != checkpoint.model.pad_id
        entropy = -(pattern * pattern.clamp_min(1e-30).log()).sum(-1)
        expected = (entropy * mask[:, None]).sum(dim=(0, 2)) / mask.sum()
        assert values["entropy"][i] == pytest.approx(expected.tolist(), abs=1e-5)
    assert values["entropy"][0][0] <= math.log(T)


def test_an_outside_measure_appears_in_interpret_heads_and_heads_json(first_token, tmp_path, capsys):
    load_script("interpret").main(
        ["ckpt_path=pretrained:reverse_2l4h", "analysis=heads", f"out_dir={tmp_path}"]
    )
    printed = capsys.readouterr().out
    assert "  first_token  rise  attention mass on the first token (an attention sink)" in printed
    header = next(line for line in printed.splitlines() if line.startswith("head "))
    assert header.split() == ["head", "entropy", "alignment", "ablation", "first_token"]
    record = json.loads((tmp_path / "heads.json").read_text())
    assert (
        len(record["measures"]["first_token"]) == 2
        and record["measure_info"]["first_token"]["direction"] == "rise"
    )
    assert record["measures"]["ablation"] == record["ablated"]  # the table above, computed once
    assert (tmp_path / "measures.png").stat().st_size > 10_000


def test_an_outside_measure_appears_in_dynamics_json_over_snapshots(first_token, tmp_path):
    run = tmp_path / "run"
    cfg = compose_train_config(
        run, "trainer.max_epochs=1", "callbacks.snapshots.count=3", "~callbacks.head_metrics"
    )
    train(cfg)
    load_script("interpret").main([f"ckpt_path={run}", "analysis=dynamics", f"out_dir={tmp_path}"])
    record = json.loads((tmp_path / "dynamics.json").read_text())
    steps = len(record["steps"])
    assert steps == 3 and len(record["heads"]["first_token"]) == steps
    assert all(0 <= v <= 1 for snapshot in record["heads"]["first_token"] for row in snapshot for v in row)


def test_an_outside_measure_is_logged_under_heads_in_tensorboard(first_token, tmp_path):
    task = ReverseDataModule(
        arch="encoder", seq_len=6, train_size=64, val_size=32, test_size=32, batch_size=32
    )
    fit_with_callback(tmp_path, task, HeadMetricsCallback(num_examples=16), epochs=2)
    (events,) = tmp_path.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    assert {
        "heads/first_token/L0H0",
        "heads/first_token/L1H1",
        "heads/entropy/L0H0",
        "heads/ablation/L1H1",
    } <= tags
    assert len(accumulator.Scalars("heads/first_token/L0H0")) == 2  # every validation
    assert len(accumulator.Scalars("heads/ablation/L0H0")) == 1  # a pass per head: once, at the end


def test_an_outside_measure_is_in_the_explorer_page_data(first_token, tmp_path):
    page = explore(load("pretrained:reverse_2l4h"), [4, 5, 6, 7])
    data = json.loads(page.split('id="explorer-data">', 1)[1].split("</script>", 1)[0])
    items = {item["name"]: item for item in data["measures"]["items"]}
    assert list(items) == ["entropy", "alignment", "ablation", "first_token"]
    assert data["measures"]["layers"] == ["L0", "L1"] and data["measures"]["examples"] == 64
    assert items["first_token"]["description"] == "attention mass on the first token (an attention sink)"
    assert len(items["first_token"]["values"]) == 2 and len(items["first_token"]["values"][0]) == 4
