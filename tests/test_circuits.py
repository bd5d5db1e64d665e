"""transformer_lab.analysis.circuits: the graph's names on every architecture, edge patching that is exact
(nothing patched: the clean output; everything: the corrupted one), EAP equal to exact patching where the
model is linear, the scores and searches on a real model, what an analysis leaves behind, and the
one-line refusals."""

import pytest
import torch

from tests.linear_model import LinearModel
from transformer_lab.analysis import circuits
from transformer_lab.errors import ConfigError
from transformer_lab.nn import ModelConfig, build_model

V = 12


def _model(arch: str, norm_first: bool = True, **kw):
    torch.manual_seed(0)
    seq2seq = arch == "encoder_decoder"
    config = ModelConfig(
        arch=arch, vocab_size=V, model_dim=16, num_heads=2, num_layers=2, norm_first=norm_first,
        pad_id=0 if arch != "decoder" else None, bos_id=1 if seq2seq else None, eos_id=2 if seq2seq else None,
        max_len=10, **kw,
    )  # fmt: skip
    return build_model(config).eval()


def _pairs(arch: str, batch: int = 4):
    """Clean and corrupted batches (token 1 changed) with labels changed at the last output."""
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, V, (batch, 7), generator=generator)
    corrupted = tokens.clone()
    corrupted[:, 1] = 3 + (tokens[:, 1] - 2) % (V - 3)
    target = torch.randint(3, V, (batch, 5), generator=generator)
    clean = (tokens, target) if arch == "encoder_decoder" else (tokens,)
    bad = (corrupted, target) if arch == "encoder_decoder" else (corrupted,)
    labels = torch.full(clean[-1].shape, -100)
    labels[:, -1] = 4
    bad_labels = labels.clone()
    bad_labels[:, -1] = 5
    return (clean, labels), (bad, bad_labels)


ARCHS = ("encoder", "decoder", "encoder_decoder")


def test_the_graph_has_the_design_names_and_splits_q_k_v():
    g = circuits.graph(_model("decoder"))
    assert g.level == "edge"
    assert [n.name for n in g.nodes] == [
        "embed", "pos_embed", "blocks.0.attn.head.0", "blocks.0.attn.head.1", "blocks.0.mlp",
        "blocks.1.attn.head.0", "blocks.1.attn.head.1", "blocks.1.mlp", "logits",
    ]  # fmt: skip
    assert [n.label for n in g.nodes][2:5] == ["L0H0", "L0H1", "MLP0"]
    edges = g.edge_names()
    assert ("embed", "blocks.0.attn.head.1.k") in edges
    assert ("blocks.0.mlp", "blocks.1.attn.head.0.v") in edges
    assert ("blocks.1.attn.head.0", "blocks.1.mlp") in edges and ("blocks.1.mlp", "logits") in edges
    assert ("blocks.1.attn.head.0", "blocks.0.mlp") not in edges  # only forward
    # each input reads all written before it: layer 0's 6 head inputs 2 each, MLP 0 4, layer 1's 5 each,
    # MLP 1 7, the logits 8
    assert len(edges) == 6 * 2 + 4 + 6 * 5 + 7 + 8
    seq2seq = circuits.graph(_model("encoder_decoder"))
    names = [n.name for n in seq2seq.nodes]
    assert names[:2] == ["encoder.embed", "encoder.pos_embed"] and "encoder.output" in names
    assert [n.label for n in seq2seq.nodes if "cross" in n.name] == ["X0H0", "X0H1", "X1H0", "X1H1"]
    cross = [(s, d) for s, d in seq2seq.edge_names() if "cross_attn" in d and d[-1] in "kv"]
    assert {s for s, _ in cross} == {"encoder.output"} and len(cross) == 2 * 2 * 2
    assert ("decoder.blocks.0.attn.head.1", "decoder.blocks.0.cross_attn.head.0.q") in seq2seq.edge_names()
    assert ("encoder.blocks.1.mlp", "encoder.output") in seq2seq.edge_names()
    post = circuits.graph(_model("encoder", norm_first=False))
    assert post.level == "node" and post.edges == []
    assert [post.nodes[i].name for i in post.scored][:3] == ["embed", "pos_embed", "blocks.0.attn.head.0"]
    with pytest.raises(ConfigError, match="level=edge needs a pre-norm model"):
        circuits.graph(_model("encoder", norm_first=False), level="edge")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("norm_first", [True, False])
def test_nothing_patched_is_the_clean_run_and_everything_the_corrupted_one(arch, norm_first):
    model = _model(arch, norm_first)
    (clean, labels), (bad, bad_labels) = _pairs(arch)
    setup = circuits.prepare(model, clean, labels, (bad, bad_labels), metric="kl")
    units = setup.graph.units
    with torch.no_grad():
        none = setup.patcher.run(torch.zeros(1, units))
        every = setup.patcher.run(torch.ones(1, units))
        torch.testing.assert_close(none, model(*clean), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(every, model(*bad), atol=1e-5, rtol=1e-5)
        two = setup.patcher.run(torch.stack([torch.zeros(units), torch.ones(units)]))  # copies at once
    torch.testing.assert_close(two, torch.cat([none, every]), atol=1e-5, rtol=1e-5)
    assert setup.ablated_metric == pytest.approx(float(setup.metric(model(*bad).detach())[0]), abs=1e-5)


def linear_pairs() -> tuple:
    """LinearModel's batch (tokens, labels) and its corruption ((tokens,), labels): token 2 changed, and
    the answer at the last output."""
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 7, (5, 6), generator=generator)
    corrupted = tokens.clone()
    corrupted[:, 2] = (tokens[:, 2] + 1) % 7
    labels = torch.full((5, 6), -100)
    labels[:, -1] = 1
    bad_labels = labels.clone()
    bad_labels[:, -1] = 2
    return tokens, labels, ((corrupted,), bad_labels)


@pytest.mark.parametrize("ablation", ["corrupted", "zero"])  # (mean: every score is 0 for a linear mean)
def test_eap_is_exact_edge_patching_on_a_linear_model(ablation):
    model = LinearModel().eval()
    tokens, labels, ((corrupted,), bad_labels) = linear_pairs()
    setup = circuits.prepare(model, tokens, labels, ((corrupted,), bad_labels), "logit_diff", ablation)
    exact = circuits.score_patching(setup)
    assert exact.abs().max() > 0.05
    with torch.no_grad():  # every edge clean: the clean output; every edge patched: the ablated one
        units = setup.graph.units
        torch.testing.assert_close(setup.patcher.run(torch.zeros(1, units)), model(tokens), atol=1e-5, rtol=0)
        if ablation == "corrupted":
            torch.testing.assert_close(
                setup.patcher.run(torch.ones(1, units)), model(corrupted), atol=1e-5, rtol=0
            )
    torch.testing.assert_close(circuits.score_eap(setup), exact, atol=1e-5, rtol=0)
    torch.testing.assert_close(circuits.score_eap_ig(setup, steps=3), exact, atol=1e-5, rtol=0)
    # q and k read nothing here (frozen patterns): their edges score 0 under every method (to float
    # rounding: a patched batch of copies may sum in another order than the clean run, by machine)
    names = setup.graph.unit_names()
    query_key = [i for i, name in enumerate(names) if name.endswith((".q", ".k"))]
    assert query_key and exact[query_key].abs().max() < 1e-5


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("method", circuits.METHODS)
def test_every_method_on_a_real_model_leaves_no_hook_and_no_change(method):
    model = _model("decoder")
    (clean, labels), (bad, bad_labels) = _pairs("decoder", batch=6)
    before, names = _state(model), model.hook_names()
    result = circuits.discover(model, clean, labels, (bad, bad_labels), method=method, threshold=0.05)
    assert result.level == "edge" and result.scores.shape == (result.graph.units,)
    assert result.sizes[0] == 1 and result.sizes[-1] == result.graph.units
    assert result.curve[-1] == pytest.approx(1.0, abs=1e-4)  # every edge kept: the clean model
    if result.circuit is not None:
        assert (
            circuits.circuit_faithfulness(
                circuits.prepare(model, clean, labels, (bad, bad_labels)), result.circuit
            )
            >= 0.9
        )
    assert model.hook_names() == names and not model.training
    assert all(not m._forward_hooks and not m._backward_hooks for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    for key, value in _state(model).items():
        assert torch.equal(value, before[key]), key
    numbers = result.to_dict()
    keys = {"method", "metric", "level", "num_examples", "seconds", "nodes", "edges", "node_scores",
            "faithfulness", "circuit", "pruned", "verified", "warnings", "node_totals", "ci"}  # fmt: skip
    verified = not circuits.METHODS[method].exact  # the estimates' top 20 units are checked
    assert set(numbers) == keys | ({"verify_seconds", "method_alone"} if verified else set())
    assert numbers["verified"] == (20 if verified else 0) and numbers["node_scores"] == []
    assert sum("exact" in edge for edge in numbers["edges"]) == numbers["verified"]
    assert {"src", "dst", "score", "ci", "stability"} <= numbers["edges"][0].keys()


def test_eap_ig_agrees_with_patching_on_a_trained_model_at_node_level():
    """pretrained:reverse_2l4h (post-norm: nodes): eap_ig ranks the nodes as exact patching does (eap,
    a gradient at the clean input, misses the saturated embedding and MLP 0); all three put layer 2's
    head 2 first among the heads."""
    import transformer_lab

    checkpoint = transformer_lab.load("pretrained:reverse_2l4h")
    clean, bad = checkpoint.corrupted_pairs(32, position=0)
    setup = circuits.prepare(checkpoint.model, *clean, bad)
    assert setup.graph.level == "node" and setup.metric.name == "logit_diff"
    exact, eap, eap_ig = (
        circuits.score_patching(setup),
        circuits.score_eap(setup),
        circuits.score_eap_ig(setup),
    )
    rank = lambda x: x.abs().argsort().argsort().float()  # noqa: E731
    correlation = torch.corrcoef(torch.stack([rank(exact), rank(eap_ig)]))[0, 1]
    assert correlation > 0.9
    names = setup.graph.unit_names()
    heads = [i for i, name in enumerate(names) if ".head." in name]
    for scores in (exact, eap, eap_ig):
        assert names[max(heads, key=lambda i: abs(float(scores[i])))] == "blocks.1.attn.head.2"
    scores, kept = circuits.score_acdc(setup, threshold=0.01)
    assert kept.any() and (scores[~kept].abs() < 0.01 * abs(setup.clean_metric - setup.ablated_metric)).all()


def test_faithfulness_helpers():
    assert circuits.sizes_for(1) == [1]
    sizes = circuits.sizes_for(532)
    assert sizes[0] == 1 and sizes[-1] == 532 and sizes == sorted(set(sizes))
    assert circuits.area([1, 10, 100], [1.0, 1.0, 1.0], 100) == pytest.approx(1.0)
    truth = torch.tensor([True, False, False, True])
    assert circuits.roc_auc(torch.tensor([3.0, 1.0, -2.0, -5.0]), truth) == 1.0
    assert circuits.roc_auc(torch.tensor([0.0, 0.0, 0.0, 0.0]), truth) == 0.5


def test_the_refusals_are_one_line_and_name_the_fix():
    model = _model("decoder")
    (clean, labels), (bad, bad_labels) = _pairs("decoder")
    cases = [
        (dict(inputs=clean[0][:0], labels=labels[:0]), "num_examples=0"),
        (dict(method="nope"), r"method=nope is unknown; use method=eap \| eap_ig \| patching \| acdc"),
        (dict(metric="nope"), r"metric=nope is unknown; use metric=logit_diff \| logprob \| kl"),
        (dict(method="acdc", threshold=1.5), r"threshold=1.5 is out of range.*between 0 and 1"),
        (dict(corrupted=None), "ablation=corrupted needs corrupted inputs.*ablation=zero"),
        (
            dict(corrupted=None, ablation="zero", metric="logit_diff"),
            "metric=logit_diff needs a corruption.*use metric=logprob or metric=kl",
        ),
        (dict(method="patching", max_seconds=1e-9), r"method=patching would take about .* use method=eap"),
        (dict(ablation="half"), r"ablation=half is unknown; use ablation=corrupted \| zero \| mean"),
        (dict(method="eap", metric="kl"), "method=eap with metric=kl scores every edge 0.*use method=eap_ig"),
    ]
    for overrides, message in cases:
        args = dict(inputs=clean, labels=labels, corrupted=(bad, bad_labels)) | overrides
        with pytest.raises(ConfigError, match=message) as info:
            circuits.discover(model, args.pop("inputs"), args.pop("labels"), **args)
        assert "\n" not in str(info.value)


def test_without_a_corruption_zero_ablation_and_kl_still_work():
    model = _model("encoder", norm_first=False)
    (clean, labels), _ = _pairs("encoder")
    result = circuits.discover(model, clean, labels, None, metric="kl", ablation="zero")
    assert result.level == "node" and result.metric == "kl" and len(result.to_dict()["node_scores"]) == 8
    assert result.method == "eap_ig"  # the default with kl, whose gradient at the clean input is 0


def test_shakespeare_corruption_changes_one_character_and_keeps_the_answer():
    from transformer_lab.data.shakespeare import ShakespeareDataModule

    task = ShakespeareDataModule(block_size=32, batch_size=8, val_batches=2)
    (clean, labels), (bad, bad_labels) = task.corrupted_pairs(6, position=3)
    differs = (clean != bad).nonzero()
    assert differs[:, 0].tolist() == list(range(6)) and set(differs[:, 1].tolist()) == {32 - 1 - 3}
    assert torch.equal(labels, bad_labels) and (labels[:, :-1] == -100).all() and (labels[:, -1] >= 0).all()
    with pytest.raises(ConfigError, match="position=32 is not a place in the window"):
        task.corrupted_pairs(6, position=32)


@pytest.mark.parametrize("method", ["acdc", "patching"])
def test_a_method_of_one_pass_per_edge_estimates_its_time_and_refuses_past_the_limit(method):
    """acdc tests every edge in the worst case, as exact patching always does: both time one patched
    pass and refuse, before starting, what would take longer than the limit."""
    model = _model("decoder")
    (clean, labels), (bad, bad_labels) = _pairs("decoder")
    bound = "up to" if method == "acdc" else "about"
    # (how long: 0 s on an idle machine; a busy one takes seconds over 61 patched passes)
    with pytest.raises(ConfigError, match=rf"method={method} would take {bound} \d+ s here \(\d+ edges x "):
        circuits.discover(model, clean, labels, (bad, bad_labels), method=method, max_seconds=1e-9)
