"""`interpret analysis=circuit`: circuit.json exactly as specified, the figure (PNG and SVG), the summary,
the node level of a post-norm model said out loud, and one-line refusals (exit 2, nothing written)."""

import json

import pytest

from tests.conftest import load_script
from transformer_lab.cli import run
from transformer_lab.data import ReverseDataModule
from transformer_lab.data.task import TaskDataModule

KEYS = {"method", "metric", "level", "num_examples", "seconds", "nodes", "edges", "node_scores"}
KEYS |= {"faithfulness", "circuit", "pruned", "verified", "warnings", "ci"}  # (+ node_totals at edge level)


@pytest.fixture(scope="module")
def script():
    return load_script("interpret")


def test_an_answer_key_writes_its_circuit_and_grade(script, tmp_path, capsys):
    script.main(
        ["ckpt_path=pretrained:key_reverse", "analysis=circuit", "num_examples=32", f"out_dir={tmp_path}"]
    )
    out = capsys.readouterr().out
    numbers = json.loads((tmp_path / "circuit.json").read_text())
    assert set(numbers) == KEYS | {"answer_key_auc", "node_totals", "verify_seconds", "method_alone"}
    assert (numbers["method"], numbers["metric"], numbers["level"]) == ("eap", "logit_diff", "edge")
    assert numbers["num_examples"] == 32 and numbers["seconds"] > 0 and numbers["node_scores"] == []
    assert numbers["answer_key_auc"] == 1.0 and numbers["verified"] == 20 and numbers["warnings"] == []
    edges = numbers["edges"]
    assert all({"src", "dst", "score", "ci", "stability"} <= set(edge) for edge in edges)
    assert sum(set(edge) >= {"exact", "exact_ci"} for edge in edges) == 20
    chosen = sorted((edges[i]["src"], edges[i]["dst"]) for i in numbers["circuit"])
    assert chosen == [("blocks.1.attn.head.0", "logits"), ("embed", "blocks.1.attn.head.0.v")]
    sizes = [point["size"] for point in numbers["faithfulness"]]
    assert sizes[0] == 1 and sizes[-1] == len(edges) and sizes == sorted(sizes)
    assert numbers["faithfulness"][-1]["faithfulness"] == pytest.approx(1.0, abs=1e-4)
    assert (tmp_path / "circuit.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "circuit.svg").read_text().lstrip().startswith("<?xml")
    smallest = (
        "Smallest circuit reaching 0.9 faithfulness: 2 edges (the top 2 by |effect|, every one on a path "
        "from the inputs to the logits), faithfulness 1.000 [1.000, 1.000]; held by at least 95% of the "
        "resamples' circuits (each with its stability, the share that holds it), strongest first: "
    )
    assert smallest in out and "uncertain" not in out
    assert "L1H0 -> logits 1.00, embed -> L1H0.v 1.00" in out and "warning:" not in out
    # verified: what eap alone would have chosen is said beside it, the same two edges here
    assert "eap alone (its own ranking, no exact check) would have chosen 2 edges (the top 2), " in out
    assert numbers["method_alone"]["circuit"] == numbers["circuit"] and numbers["pruned"] == []
    assert "method=eap and metric=logit_diff are the defaults here" in out
    assert "Against the answer key's circuit: ROC AUC 1.0000" in out


def test_a_post_norm_model_says_it_is_scored_by_nodes(script, tmp_path, capsys):
    args = ["ckpt_path=pretrained:reverse_2l4h", "analysis=circuit", "method=acdc", "num_examples=16"]
    script.main([*args, "metric=kl", f"out_dir={tmp_path}"])
    out = capsys.readouterr().out
    numbers = json.loads((tmp_path / "circuit.json").read_text())
    assert set(numbers) == KEYS | {"verify_seconds", "method_alone"}
    assert numbers["level"] == "node" and numbers["edges"] == []
    assert [s["node"] for s in numbers["node_scores"]][:3] == ["embed", "pos_embed", "blocks.0.attn.head.0"]
    assert numbers["metric"] == "kl" and numbers["method"] == "acdc"
    assert "node level: this model is post-norm" in out
    if numbers["circuit"] is not None:
        assert all(
            numbers["nodes"][i] in [s["node"] for s in numbers["node_scores"]] for i in numbers["circuit"]
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["method=zero"],
            "method=zero is unknown for analysis=circuit; use method=eap | eap_ig | patching | acdc",
        ),
        (["metric=accuracy"], "metric=accuracy is unknown; use metric=logit_diff | logprob | kl"),
        (["ablation=noise"], "ablation=noise is unknown; use ablation=corrupted | zero | mean"),
        (["method=acdc", "threshold=2"], "threshold=2 is out of range"),
        (["method=acdc", "threshold=0"], "threshold=0 is out of range"),
        (["num_examples=0"], "num_examples=0 must be a positive integer"),
        (["steps=0"], "steps=0 must be an integer from 1 to 1000"),
        (["method=eap_ig", "steps=1000000000"], "steps=1000000000 must be an integer from 1 to 1000"),
        (["verify=-1"], "verify=-1 must be an integer >= 0: the top edges checked by exact patching"),
        (["verify=2.5"], "verify=2.5 is not an integer"),
        (["ci=2"], "ci=2 must be a level between 0 and 1"),
        (["method=eap", "metric=kl"], "method=eap with metric=kl scores every edge 0"),
        (["ablation=zero", "method=eap", "metric=kl"], "method=eap with metric=kl scores every edge 0"),
        (["heads=0.1"], "heads= is for analysis=heads, not analysis=circuit"),
    ],
)
def test_refusals_are_one_line(script, tmp_path, capsys, args, message):
    base = ["ckpt_path=pretrained:key_reverse", "analysis=circuit", "num_examples=8", f"out_dir={tmp_path}"]
    given = {a.split("=")[0] for a in args}
    with pytest.raises(SystemExit) as exit_info:
        run(script.main, [a for a in base if a.split("=")[0] not in given] + args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert not list(tmp_path.iterdir())


def test_exact_patching_of_a_large_model_says_how_long_and_suggests_eap(
    script, tmp_path, capsys, monkeypatch
):
    from transformer_lab.analysis import circuits

    original = circuits.discover  # the analysis, with a time limit of a microsecond
    monkeypatch.setattr(circuits, "discover", lambda *args, **kw: original(*args, **kw, max_seconds=1e-6))
    with pytest.raises(SystemExit) as exit_info:
        run(script.main, ["ckpt_path=pretrained:key_reverse", "analysis=circuit", "method=patching",
                          "num_examples=8", f"out_dir={tmp_path}"])  # fmt: skip
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "method=patching would take about" in err and "106 edges" in err and "use method=eap" in err


def test_a_task_without_a_corruption(script, tmp_path, capsys, monkeypatch):
    """Patching and the corrupted ablation refuse it in one line; zero ablation with kl runs."""
    monkeypatch.setattr(ReverseDataModule, "corrupted_pairs", TaskDataModule.corrupted_pairs)
    base = ["ckpt_path=pretrained:key_reverse", "num_examples=8", f"out_dir={tmp_path}"]
    for args, message in (
        (
            ["analysis=circuit"],
            "defines no corruption (inputs that differ in one token), which ablation=corrupted",
        ),
        (["analysis=patching"], "defines no corruption"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            run(script.main, [*base, *args])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err, err
    script.main([*base, "analysis=circuit", "ablation=zero", "metric=kl"])
    numbers = json.loads((tmp_path / "circuit.json").read_text())
    assert numbers["metric"] == "kl" and "answer_key_auc" not in numbers  # graded on its corruption only


def test_faithfulness_grades_the_explanations_of_an_answer_key(script, tmp_path, capsys):
    script.main(["ckpt_path=pretrained:key_reverse", "analysis=faithfulness", "num_examples=4",
                 f"out_dir={tmp_path}"])  # fmt: skip
    grades = json.loads((tmp_path / "faithfulness.json").read_text())["answer_key_auc"]
    assert set(grades) == {"attention", "rollout", "gradient", "ablation", "random"}
    assert grades["gradient"] == grades["ablation"] == 1.0 and grades["attention"] < 0.95
    assert "Against the answer key: ROC AUC" in capsys.readouterr().out
