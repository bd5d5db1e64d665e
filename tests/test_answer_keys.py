"""The hand-built answer keys (transformer_lab.pretrained.answer_keys): shipped and listed as hand-built,
rebuilt bit for bit, solving their tasks, and grading the circuit methods (ROC AUC >= 0.99 for eap,
eap_ig, acdc and patching on every key; the recorded circuit alone faithful to >= 0.99; the distractors
harmless) and the explanations."""

import pytest
import torch

import transformer_lab
from tests.conftest import load_script, run_cli
from transformer_lab import pretrained
from transformer_lab.analysis import circuits, faithfulness
from transformer_lab.pretrained import answer_keys

KEYS = list(answer_keys.KEYS)


@pytest.fixture(scope="module", params=KEYS)
def key(request):
    return answer_keys.KEYS[request.param], transformer_lab.load(f"pretrained:{request.param}")


def test_shipped_listed_as_hand_built_and_rebuilt_bit_for_bit(key):
    spec, checkpoint = key
    record = pretrained.record(spec.name)
    assert record["hand_built"] and pretrained.command(spec.name).startswith("hand-built: ")
    assert record["circuit"]["edges"] == spec.circuit and record["circuit"]["mechanism"] == spec.mechanism
    assert set(spec.circuit) <= set(spec.mechanism)
    assert record["parameters"] == sum(p.numel() for p in checkpoint.model.parameters())
    rebuilt = spec.model().state_dict()
    for name, value in checkpoint.model.state_dict().items():
        assert torch.equal(value, rebuilt[name]), name
    # the file scripts/pretrain.py writes for it holds what is shipped, weights and task record alike
    written = load_script("pretrain").answer_key_contents(spec)
    assert written["task"] == checkpoint.contents["task"] and written.keys() == checkpoint.contents.keys()
    for name, value in checkpoint.contents["state_dict"].items():
        assert torch.equal(value, written["state_dict"][name]), name
    g = circuits.graph(checkpoint.model)
    assert g.level == "edge" and set(spec.mechanism) <= set(g.unit_names())


def test_each_solves_its_task(key):
    spec, checkpoint = key
    inputs, labels = checkpoint.examples(256)
    with torch.no_grad():
        predicted = checkpoint.model(*inputs).argmax(-1)
    counted = labels != -100
    assert counted.sum() > 256 and bool((predicted == labels)[counted].all())
    if checkpoint.model.num_inputs == 2:  # the encoder-decoder writes the whole target itself too
        _, generated, expected = checkpoint.task.generate(checkpoint.model, (*inputs, labels))
        assert torch.equal(generated, expected)
    assert pretrained.record(spec.name)["test_metrics"]["test/acc"] == 1.0


@pytest.mark.parametrize("method", circuits.METHODS)
def test_every_method_finds_the_circuit(key, method):
    spec, checkpoint = key
    clean, corrupted = checkpoint.corrupted_pairs(48)
    result = circuits.discover(checkpoint.model, *clean, corrupted, method=method, truth=spec.circuit)
    assert result.answer_key_auc >= 0.99
    assert sorted(result.graph.unit_names()[e] for e in result.circuit) == sorted(spec.circuit)


@pytest.mark.parametrize("metric", ["logit_diff", "kl"])
def test_the_recorded_circuit_alone_is_faithful_and_the_distractors_are_harmless(key, metric):
    spec, checkpoint = key
    clean, corrupted = checkpoint.corrupted_pairs(48)
    setup = circuits.prepare(checkpoint.model, *clean, corrupted, metric=metric)
    names = setup.graph.unit_names()
    kept = circuits.truth_mask(setup.graph, spec.circuit).nonzero()[:, 0].tolist()
    assert circuits.circuit_faithfulness(setup, kept) >= 0.99
    touching = torch.tensor(  # every edge into or out of a distractor head, patched at once
        [
            any(name.startswith(f"{head} ") or f"-> {head}." in name for head in spec.distractors)
            for name in names
        ]
    )
    with torch.no_grad():
        patched = setup.patcher.run(touching.float()[None])
        clean_logits = checkpoint.model(*clean[0])
    counted = clean[1] != -100
    assert torch.equal(patched.argmax(-1)[counted], clean_logits.argmax(-1)[counted])
    moved = float(setup.metric(patched)[0]) - setup.clean_metric
    assert abs(moved) < 0.01 * abs(setup.clean_metric - setup.ablated_metric)


def test_the_explanations_are_graded_against_the_key(key):
    """Gradient-weighted attention and occlusion find the positions each key reads; the raw attention of
    the last layer, averaged over its heads, is misled by the sharp distractors."""
    _, checkpoint = key
    inputs, labels = checkpoint.examples(4)
    grades = faithfulness.alignment_auc(
        checkpoint.model, inputs, labels, checkpoint.task.alignment(inputs, labels)
    )
    assert grades["gradient"] == grades["ablation"] == 1.0
    assert grades["attention"] < 0.9 and 0.3 < grades["random"] < 0.7


def test_the_list_shows_the_keys_as_hand_built():
    result = run_cli("-m", "transformer_lab.pretrained", timeout=60)
    lines = result.stdout.splitlines()
    for name in KEYS:
        (line,) = [line for line in lines if line.startswith(f"{name} ")]
        assert line.endswith(f"hand-built: {pretrained.BUILD_COMMAND} {name}")
