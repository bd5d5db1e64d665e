"""An SAE run in the tools: `sae=<run>` read as a file from elsewhere and spliced into the model it was
trained on (refused for any other), and `interpret analysis=features`: densities, top examples, the
tokens a feature promotes, the loss when it is ablated, each against its own computation."""

import json

import pytest
import torch
import torch.nn.functional as F

import transformer_lab
from tests.conftest import COMMON, compose_train_config, load_script
from transformer_lab import ConfigError
from transformer_lab.analysis.features import analyse_features
from transformer_lab.nn import IGNORE_INDEX
from transformer_lab.nn.sae import SparseAutoencoder
from transformer_lab.sae_checkpoint import load_sae
from transformer_lab.train import train

HOOK = "blocks.0.hook_attn_out"
SOURCE = "pretrained:induction_heads"
TINY_SAE = [
    "experiment=sae", f"source={SOURCE}", f"hook={HOOK}", "threads=1", *COMMON, "trainer.max_steps=60",
    "trainer.val_check_interval=60", "data.val_examples=16", "data.test_examples=32", "data.buffer=4096",
    "data.batch_size=256", "model.k=6", "model.expansion=4",
]  # fmt: skip


@pytest.fixture(scope="module")
def sae_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("sae_run")
    train(compose_train_config(run, base=TINY_SAE))
    return run


def test_an_sae_run_is_read_and_spliced_into_its_model(sae_run):
    run = load_sae(sae_run)
    assert isinstance(run.sae, SparseAutoencoder) and run.hook == HOOK and run.record["location"] == SOURCE
    original = transformer_lab.load(SOURCE)
    (tokens,), _ = original.examples(16)
    with torch.no_grad():
        clean = original.model(tokens)
        spliced = run.model(tokens)
    torch.testing.assert_close(spliced, clean, atol=1e-5, rtol=1e-5)  # the error term keeps the output
    assert f"{HOOK}.sae.hook_sae_acts_post" in run.model.hook_names()


def test_another_model_is_refused(sae_run, tmp_path):
    other = transformer_lab.load(SOURCE).contents
    state = dict(other["state_dict"])
    state["net.blocks.1.attn.o_proj.weight"] = state["net.blocks.1.attn.o_proj.weight"] + 0.01  # same shapes
    torch.save({**other, "state_dict": state}, tmp_path / "changed.ckpt")
    with pytest.raises(ConfigError, match=r"is not the model the SAE .* was trained on"):
        load_sae(sae_run, source=str(tmp_path / "changed.ckpt")).model  # noqa: B018
    with pytest.raises(ConfigError, match=r"is not the model the SAE"):
        load_sae(sae_run, source="pretrained:shakespeare").source  # noqa: B018


def test_the_two_kinds_of_checkpoint_are_not_confused(sae_run, tmp_path):
    with pytest.raises(
        ConfigError, match=r"is a sparse autoencoder \(an SAE run\), not a model; pass it as sae="
    ):
        transformer_lab.load(sae_run)
    with pytest.raises(ConfigError, match="is not an SAE run"):
        load_sae("pretrained:induction_heads")
    synthetic = tmp_path / "synthetic"
    steps = ["trainer.max_steps=5", "trainer.val_check_interval=5", "data.val_size=64", "data.test_size=64"]
    train(compose_train_config(synthetic, *steps, base=["experiment=sae_synthetic", "threads=1", *COMMON]))
    with pytest.raises(ConfigError, match="activations of no model"):
        load_sae(synthetic).model  # noqa: B018


def test_a_tampered_sae_file_is_refused(sae_run, tmp_path):
    contents = torch.load(sae_run / "checkpoints" / "best.ckpt", weights_only=True)
    contents["state_dict"]["net.W_dec"] = torch.zeros(3, 3)
    torch.save(contents, tmp_path / "bad.ckpt")
    with pytest.raises(ConfigError, match=r"weight net.W_dec has shape \(3, 3\)"):
        load_sae(tmp_path / "bad.ckpt")
    contents = torch.load(sae_run / "checkpoints" / "best.ckpt", weights_only=True)
    contents["hyper_parameters"]["sae"]["k"] = 10**6
    torch.save(contents, tmp_path / "bad_k.ckpt")
    with pytest.raises(ConfigError, match=r"model.k=1000000 is more than the SAE's width"):
        load_sae(tmp_path / "bad_k.ckpt")


def features_of(run, tokens, labels, **options):
    """`analyse_features` of an SAE run on its source's examples, as the tool calls it."""
    source = run.source
    return analyse_features(
        run.model, run.sae, (tokens,), labels, source.task.display_tokens, source.output_names, **options
    )


def test_features_are_measured_as_they_say(sae_run):
    run = load_sae(sae_run)
    (tokens,), labels = run.source.examples(32)
    model, sae = run.model, run.sae
    result = features_of(run, tokens, labels, count=4)
    with torch.no_grad():
        _, cache = transformer_lab.load(SOURCE).model.run_with_cache(tokens, names_filter=HOOK)
        f = sae.encode(cache[HOOK])
    density = (f > 0).double().mean(dim=(0, 1))
    torch.testing.assert_close(torch.tensor(result.density, dtype=torch.float64), density)
    most = f.sum(dim=(0, 1)).topk(4).indices.tolist()
    assert [r.index for r in result.reports] == most
    for report in result.reports:
        i = report.index
        assert report.max_activation == pytest.approx(float(f[..., i].max()), rel=1e-5)
        best = report.examples[0]
        assert best["activation"] == pytest.approx(float(f[best["example"], best["position"], i]), rel=1e-5)
        # through the unembedding: W_dec[i] / s times the output layer's weights
        logits = ((sae.W_dec[i] / sae.input_scale) @ model.unembed.weight.t()).detach()
        assert report.promoted[0][0] == run.source.output_names[int(logits.argmax())]
        assert report.promoted[0][1] == pytest.approx(float(logits.max()), rel=1e-5)
        # ablated by hand: the activation at the hook moves by -f_i W_dec[i] / s
        moved = cache[HOOK] - f[..., i, None] * sae.W_dec[i] / sae.input_scale

        def replace(activation, point, moved=moved):
            return moved

        with torch.no_grad():
            base = transformer_lab.load(SOURCE).model
            clean = F.cross_entropy(base(tokens).flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
            ablated = F.cross_entropy(
                base.run_with_hooks(tokens, fwd_hooks=[(HOOK, replace)]).flatten(0, 1),
                labels.flatten(),
                ignore_index=IGNORE_INDEX,
            )
        assert report.ablation == pytest.approx(float(ablated - clean), abs=1e-5)


def test_features_read_in_chunks_what_they_read_at_once(sae_run, monkeypatch):
    """The logits go in chunks of examples (a 50 K vocabulary's logits of every example at once are
    gigabytes): one example at a time gives the same loss, densities, examples and ablations."""
    from transformer_lab.analysis import features

    run = load_sae(sae_run)
    (tokens,), labels = run.source.examples(32)
    whole = features_of(run, tokens, labels, count=3)
    monkeypatch.setattr(features, "MEMORY", 1)  # one example a chunk
    chunked = features_of(run, tokens, labels, count=3)
    # batches of 1 and of 32 take other kernels: values within float32's rounding, not bit for bit
    assert chunked.loss == pytest.approx(whole.loss, rel=1e-5)
    assert chunked.density == pytest.approx(whole.density, abs=1.5 / chunked.positions)  # a position at most
    for a, b in zip(chunked.reports, whole.reports, strict=True):
        assert a.index == b.index and a.ablation == pytest.approx(b.ablation, abs=1e-5)
        assert [(e["example"], e["position"]) for e in a.examples] == [
            (e["example"], e["position"]) for e in b.examples
        ]
        assert [e["activation"] for e in a.examples] == pytest.approx([e["activation"] for e in b.examples])


def test_a_dead_feature_changes_nothing(sae_run):
    """The control: a feature that never fires has density 0, no example, and its ablation moves the loss
    by exactly 0."""
    run = load_sae(sae_run)
    (tokens,), labels = run.source.examples(32)
    with torch.no_grad():
        run.sae.b_enc[0] = -1e6  # feature 0 can never fire
    result = features_of(run, tokens, labels, chosen=[0])
    report = result.reports[0]
    assert report.density == 0 and report.examples == [] and report.ablation == 0


def test_interpret_analysis_features(sae_run, tmp_path, capsys):
    interpret = load_script("interpret")
    interpret.main(
        [f"sae={sae_run}", "analysis=features", "num_examples=32", "features=1,2", f"out_dir={tmp_path}"]
    )
    out = capsys.readouterr().out
    assert f"features at {HOOK}" in out and "feature 1:" in out and "promotes" in out
    saved = json.loads((tmp_path / "features.json").read_text())
    assert [r["index"] for r in saved["reports"]] == [1, 2] and len(saved["density"]) == 4 * 48
    assert (tmp_path / "features.png").is_file()
    for argv, message in (
        (
            ["analysis=features", f"ckpt_path={SOURCE}"],
            "analysis=features reads an SAE's features: pass sae=",
        ),
        ([f"sae={sae_run}", "analysis=lens"], "sae= is for analysis=features or circuit"),
        (
            [f"sae={sae_run}", "analysis=features", "features=a"],
            "features=a is not a list of feature numbers",
        ),
        (
            [f"sae={sae_run}", "analysis=features", "features=999"],
            "features=999 is not a feature: use 0 to 191",
        ),
        (
            [f"sae={sae_run}", "analysis=features", "ckpt_path=pretrained:shakespeare"],
            "is not the model the SAE",
        ),
    ):
        with pytest.raises(ConfigError, match=message):
            interpret.main([*argv, f"out_dir={tmp_path}"])


# ------------------------------------------------------------------------------ circuits over features
def test_patching_features_moves_the_activation_by_their_decoder_directions(sae_run):
    """The feature graph's patcher against the activation patched by hand: features i and j replaced by
    their corrupted values and the error by its own, the model's activation at the hook is clean_x +
    sum (f' - f) W_dec / s + (error' - error); patching every unit is the corrupted run."""
    from transformer_lab.analysis import circuits
    from transformer_lab.interpret_circuit import active_features

    run = load_sae(sae_run)
    clean, corrupted = run.source.corrupted_pairs(16)
    chosen = active_features(run, clean, corrupted)
    graph = circuits.feature_graph(run.model, HOOK, chosen)
    assert graph.features and graph.units == len(chosen) + 1
    setup = circuits.prepare(run.model, *clean, corrupted, metric="logit_diff", graph=graph)
    mask = torch.zeros(2, graph.units)
    mask[0, :2] = 1  # the first two features
    mask[1, -1] = 1  # the error term
    found = setup.evaluate(mask)
    base, sae = transformer_lab.load(SOURCE).model, run.sae
    with torch.no_grad():
        _, cache = base.run_with_cache(clean[0][0], names_filter=HOOK)
        _, cache_c = base.run_with_cache(corrupted[0][0], names_filter=HOOK)
        x, x_c = cache[HOOK], cache_c[HOOK]
        f, f_c = sae.encode(x), sae.encode(x_c)
        moved = x.clone()
        for i in chosen[:2]:
            moved += (f_c[..., i] - f[..., i])[..., None] * sae.W_dec[i] / sae.input_scale
        error, error_c = x - sae(x), x_c - sae(x_c)
        for k, activation in enumerate((moved, x + error_c - error)):
            logits = base.run_with_hooks(clean[0][0], fwd_hooks=[(HOOK, lambda a, p, v=activation: v)])
            assert float(found[k]) == pytest.approx(float(setup.metric(logits)), rel=1e-4, abs=1e-4)
    everything = setup.evaluate(torch.ones(1, graph.units))
    assert float(everything[0]) == pytest.approx(setup.ablated_metric, rel=1e-4, abs=1e-4)


def test_interpret_circuit_over_features(sae_run, tmp_path, capsys):
    interpret = load_script("interpret")
    interpret.main(
        [
            f"sae={sae_run}",
            "analysis=circuit",
            "units=features",
            "num_examples=16",
            "verify=3",
            "ci=0",
            f"out_dir={tmp_path}",
        ]
    )
    out = capsys.readouterr().out
    assert "units=features: the" in out and "each node is a feature of the SAE" in out
    saved = json.loads((tmp_path / "circuit.json").read_text())
    names = [n["name"] if isinstance(n, dict) else n for n in saved["nodes"]]
    assert f"{HOOK}.sae.error" in names and any(f"{HOOK}.sae.feature." in n for n in names)
    assert saved["level"] == "node" and saved["verified"] == 3
    assert (tmp_path / "circuit.png").is_file()
    for argv, message in (
        (
            ["analysis=circuit", "units=features", f"ckpt_path={SOURCE}"],
            "units=features reads an SAE's features",
        ),
        ([f"sae={sae_run}", "analysis=circuit"], "add units=features"),
        ([f"sae={sae_run}", "analysis=circuit", "units=neurons"], "units=neurons is unknown"),
        (["analysis=heads", "units=features", f"ckpt_path={SOURCE}"], "units= is for analysis=circuit"),
    ):
        with pytest.raises(ConfigError, match=message):
            interpret.main([*argv, f"out_dir={tmp_path}"])
